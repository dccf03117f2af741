// Package vector defines the vector index a memory store searches for recall, and the
// pieces every implementation shares: the metric, the index spec, scope validation and
// vector normalisation.
//
// Three implementations exist: package milvus (one Milvus collection per store),
// package pgindex (embeddings kept in the store's PostgreSQL schema as float32 bytes, exact,
// the embedded default) and package pgvector (the vector extension's HNSW index in the
// store's schema). Package vectortest holds the conformance suite all are held to.
package vector

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Metric is the similarity measure of an index.
type Metric string

const (
	// Cosine similarity. Vectors are L2-normalised on write and on query, so the score
	// is the dot product of unit vectors, in [-1, 1].
	Cosine Metric = "COSINE"
	// L2 is Euclidean distance. The score is the NEGATED distance, so that higher is
	// more similar (an exact match scores 0, everything else below 0).
	L2 Metric = "L2"
	// IP is the inner product of the vectors as given (no normalisation).
	IP Metric = "IP"
)

// ParseMetric accepts a metric name in any case ("cosine", "L2", "ip").
func ParseMetric(s string) (Metric, error) {
	switch m := Metric(strings.ToUpper(strings.TrimSpace(s))); m {
	case Cosine, L2, IP:
		return m, nil
	}
	return "", fmt.Errorf("unknown vector metric %q (want COSINE, L2 or IP)", s)
}

// Valid reports whether m is one of the known metrics.
func (m Metric) Valid() bool { return m == Cosine || m == L2 || m == IP }

// Dimension limits shared by both implementations (Milvus allows 2..32768).
const (
	MinDimension = 2
	MaxDimension = 32768
)

// Spec fixes the shape of an index: every vector it holds has Dimension components and
// is compared with Metric. An index's spec never changes once created.
type Spec struct {
	Dimension int
	Metric    Metric
}

// Validate checks the dimension range and the metric.
func (s Spec) Validate() error {
	if s.Dimension < MinDimension || s.Dimension > MaxDimension {
		return fmt.Errorf("vector dimension %d out of range [%d, %d]", s.Dimension, MinDimension, MaxDimension)
	}
	if !s.Metric.Valid() {
		return fmt.Errorf("unknown vector metric %q (want COSINE, L2 or IP)", s.Metric)
	}
	return nil
}

// Entry is one vector in an index. ID is the memory_id; Scope and Type are copied from
// the memory so that searches can be filtered without a join.
type Entry struct {
	ID     string
	Scope  string
	Type   string
	Vector []float32
	// New marks the vector of a memory created by the write it belongs to and not yet
	// visible to any other writer (a restore's inserted row, before its transaction
	// commits): nobody else can have written a vector under its ID meanwhile. An
	// engine may then insert it without looking for an older one (Milvus during a
	// fresh load); the others ignore it.
	New bool
}

// Query is a k-nearest-neighbour search restricted to one scope and, when Types is not
// empty, to those memory types.
type Query struct {
	Scope  string // required: every search is confined to one scope (tenant isolation)
	Types  []string
	Vector []float32
	K      int
}

// Hit is one search result. Score is "higher is more similar" for every metric:
// the cosine similarity for COSINE, the inner product for IP and the negated
// Euclidean distance for L2. Hits are returned best first.
type Hit struct {
	ID    string
	Score float32
}

// Index is a vector index holding the embeddings of one memory store.
type Index interface {
	// Upsert inserts or replaces entries by ID. Writing the same entries twice
	// leaves the index as after the first write. A vector of the wrong dimension is
	// rejected (wrapping ErrDimensionMismatch) and nothing of the batch is written.
	Upsert(ctx context.Context, entries []Entry) error
	// Delete removes entries by ID; IDs that are not present are ignored.
	Delete(ctx context.Context, ids []string) error
	// DeleteScope removes every entry of the scope.
	DeleteScope(ctx context.Context, scope string) error
	// Search returns up to K hits of q.Scope (and q.Types if set), best first.
	// An empty scope is an error, never "all scopes".
	Search(ctx context.Context, q Query) ([]Hit, error)
	// Spec reports the index's dimension and metric.
	Spec() Spec
}

// ErrDimensionMismatch is returned, wrapped with both dimensions in the message, when
// an existing collection or store holds vectors of another dimension than requested
// (nothing is changed then), or when a vector of the wrong dimension is written or
// searched.
var ErrDimensionMismatch = errors.New("vector dimension mismatch")

// DimensionError wraps ErrDimensionMismatch with what was expected and what was found.
func DimensionError(what string, want, got int) error {
	return fmt.Errorf("%w: %s has dimension %d, expected %d", ErrDimensionMismatch, what, got, want)
}

// MaxScopeLen is the longest scope accepted (the Milvus scope field's max_length).
const MaxScopeLen = 256

// ValidateScope checks that a scope is non-empty, at most MaxScopeLen bytes of valid
// UTF-8, and made only of Unicode letters, digits and combining marks and the ASCII
// characters : . _ @ - / (memory.Scope's alphabet, without its structure: an index
// compares scopes as opaque strings). No quote, backslash, space, control or format
// character passes. Implementations still escape or encode a scope for where it
// goes (a SQL parameter, a Milvus expression literal), never relying on this alone.
func ValidateScope(scope string) error {
	if scope == "" {
		return errors.New("scope is required")
	}
	if len(scope) > MaxScopeLen {
		return fmt.Errorf("scope is %d bytes, longer than %d", len(scope), MaxScopeLen)
	}
	for i := 0; i < len(scope); {
		r, size := utf8.DecodeRuneInString(scope[i:])
		if r == utf8.RuneError && size == 1 {
			return fmt.Errorf("scope %q is not valid UTF-8 (byte %#x at offset %d)", scope, scope[i], i)
		}
		if !scopeRune(r) {
			return fmt.Errorf("scope %q contains %q: only letters, digits, combining marks and : . _ @ - / are allowed", scope, r)
		}
		i += size
	}
	return nil
}

func scopeRune(r rune) bool {
	switch {
	case r >= utf8.RuneSelf:
		return unicode.In(r, unicode.L, unicode.N, unicode.M)
	case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		return true
	case r == ':' || r == '.' || r == '_' || r == '@' || r == '-' || r == '/':
		return true
	}
	return false
}

// MaxTypeLen is the longest memory type accepted (the Milvus memory_type field's max_length).
const MaxTypeLen = 16

// ValidateType checks a memory type: 1..MaxTypeLen bytes of [a-z0-9_]. The set of
// memory types is small and fixed (working, episodic, semantic, procedural), and this
// package does not enforce which ones exist.
func ValidateType(t string) error {
	if t == "" {
		return errors.New("memory type is required")
	}
	if len(t) > MaxTypeLen {
		return fmt.Errorf("memory type %q is longer than %d bytes", t, MaxTypeLen)
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if allowed := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_'; !allowed {
			return fmt.Errorf("memory type %q contains %q: only a-z, 0-9 and _ are allowed", t, c)
		}
	}
	return nil
}

// MaxIDLen is the longest memory ID accepted (the Milvus memory_id field's max_length).
const MaxIDLen = 128

// ValidateID checks a memory ID: 1..MaxIDLen bytes, printable ASCII without quotes or
// backslashes (IDs are UUIDs or ULIDs in practice).
func ValidateID(id string) error {
	if id == "" {
		return errors.New("memory id is required")
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("memory id is %d bytes, longer than %d", len(id), MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c <= ' ' || c >= 0x7f || c == '"' || c == '\'' || c == '\\' || c == '`' {
			return fmt.Errorf("memory id %q contains %q: only printable ASCII without quotes, backslashes or spaces is allowed", id, c)
		}
	}
	return nil
}

// ValidateEntries checks every entry of a batch against spec: ID, scope, type, a
// vector of exactly spec.Dimension finite components, and no ID twice in the batch.
func ValidateEntries(spec Spec, entries []Entry) error {
	seen := make(map[string]struct{}, len(entries))
	for i, e := range entries {
		if err := ValidateID(e.ID); err != nil {
			return fmt.Errorf("entry %d: %w", i, err)
		}
		if _, dup := seen[e.ID]; dup {
			return fmt.Errorf("entry %d: memory id %q appears twice in one batch", i, e.ID)
		}
		seen[e.ID] = struct{}{}
		if err := ValidateScope(e.Scope); err != nil {
			return fmt.Errorf("entry %d (%s): %w", i, e.ID, err)
		}
		if err := ValidateType(e.Type); err != nil {
			return fmt.Errorf("entry %d (%s): %w", i, e.ID, err)
		}
		if err := checkVector(spec, e.Vector, "vector of "+e.ID); err != nil {
			return err
		}
	}
	return nil
}

// ValidateQuery checks a query against spec: scope, types, K > 0 and the vector.
func ValidateQuery(spec Spec, q Query) error {
	if err := ValidateScope(q.Scope); err != nil {
		return fmt.Errorf("search: %w", err)
	}
	for _, t := range q.Types {
		if err := ValidateType(t); err != nil {
			return fmt.Errorf("search: %w", err)
		}
	}
	if q.K <= 0 || q.K > MaxK {
		return fmt.Errorf("search: k must be in [1, %d], got %d", MaxK, q.K)
	}
	return checkVector(spec, q.Vector, "query vector")
}

func checkVector(spec Spec, v []float32, what string) error {
	if len(v) != spec.Dimension {
		return DimensionError(what, spec.Dimension, len(v))
	}
	for _, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return fmt.Errorf("%s contains a NaN or infinite component", what)
		}
	}
	if spec.Metric == Cosine && Norm(v) == 0 {
		return fmt.Errorf("%s is the zero vector, which has no cosine similarity", what)
	}
	return nil
}

// Norm returns the Euclidean length of v, accumulated in float64.
func Norm(v []float32) float64 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return math.Sqrt(s)
}

// Normalize returns a unit-length copy of v (the zero vector is returned as a copy
// unchanged). v itself is never modified.
func Normalize(v []float32) []float32 {
	out := make([]float32, len(v))
	n := Norm(v)
	if n == 0 {
		copy(out, v)
		return out
	}
	for i, x := range v {
		out[i] = float32(float64(x) / n)
	}
	return out
}

// Prepare returns the vector as an index stores and compares it under metric m:
// normalised for COSINE, a copy of v otherwise. Both implementations apply it on
// write and on query, so COSINE scores are dot products of unit vectors.
func Prepare(m Metric, v []float32) []float32 {
	if m == Cosine {
		return Normalize(v)
	}
	out := make([]float32, len(v))
	copy(out, v)
	return out
}

// Dot returns the inner product of a and b (which must have equal length).
func Dot(a, b []float32) float32 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return float32(s)
}

// Score computes the score Search reports for a stored vector and a query vector,
// both already passed through Prepare: dot product for COSINE and IP, negated
// Euclidean distance for L2. It is the reference the implementations are tested against.
func Score(m Metric, stored, query []float32) float32 {
	if m == L2 {
		var s float64
		for i := range stored {
			d := float64(stored[i]) - float64(query[i])
			s += d * d
		}
		return float32(-math.Sqrt(s))
	}
	return Dot(stored, query)
}

// ErrMetricMismatch is returned, wrapped with both metrics in the message, when an
// existing collection or store was created with another metric than requested. Like
// ErrDimensionMismatch it means the existing data cannot be used as asked; nothing is
// changed.
var ErrMetricMismatch = errors.New("vector metric mismatch")

// MaxK is the largest K a search accepts (Milvus's topK limit).
const MaxK = 16384
