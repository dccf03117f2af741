// Package milvus implements vector.Index on a Milvus collection (milvus-sdk-go/v2),
// one collection per memory store.
//
// Collection layout (see EnsureCollection):
//
//	memory_id   VarChar(128), primary key, not auto-id
//	scope       VarChar(256), the scope as scopeValue encodes it
//	memory_type VarChar(16)
//	embedding   FloatVector(dim), HNSW index (M=16, efConstruction=200) with the spec's metric
//
// A collection carries the identity of the store it belongs to in its properties
// (OwnerProperty); EnsureCollection and DropCollection touch no collection of another
// store's (see Owner). Connect authenticates with a Conn's user and password, for a
// server with authentication on.
//
// The collection is created with Strong consistency. An Index's first search asks for
// Strong consistency, so it sees every vector written (by any process) before it, and
// so does the first search after each of its deletes (Milvus 2.3 returns no usable
// timestamp for a delete by expression, which Session consistency would wait for);
// the others ask for Session consistency: every Upsert of this client is visible to
// its next search, and another process's writes within Milvus's time tick
// (proxy.timeTickInterval, 200 ms by default). A Strong search
// waits for that tick on every call (the engines benchmark measured 200 ms p50 and
// 400 ms p99 on an idle server), which no search budget affords; the memories, which
// PostgreSQL holds, are read there and judged live by every search, so a vector seen
// a tick late can hide a memory for that long but never surface a forgotten one.
//
// Writes use the SDK's Upsert (Milvus Lite 3.x supports it; plain Insert would keep
// duplicate primary keys on a real Milvus), except the new entries of a load into an
// empty collection (fresh.go). Search scores follow vector.Hit: Milvus
// reports squared Euclidean distance for L2, which this package turns into the negated
// Euclidean distance; COSINE and IP scores are passed through.
package milvus

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/milvus-io/milvus-sdk-go/v2/client"
	"github.com/milvus-io/milvus-sdk-go/v2/entity"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/amemory/memory-operator/internal/vector"
)

// Field names of a memory collection.
const (
	FieldID        = "memory_id"
	FieldScope     = "scope"
	FieldType      = "memory_type"
	FieldEmbedding = "embedding"
)

const (
	hnswM              = 16
	hnswEfConstruction = 200
	minSearchEf        = 64
	// maxRequestBytes bounds the vector payload of one Upsert request, well below
	// the gRPC message limits of Milvus.
	maxRequestBytes = 8 << 20
	// maxExprIDs bounds the number of IDs in one delete expression.
	maxExprIDs = 1000
)

// Index is a vector.Index on one Milvus collection. It is safe for concurrent use
// (the SDK client is).
type Index struct {
	c          client.Client
	collection string
	spec       vector.Spec
	// strong makes the next search ask for Strong consistency: set until a search
	// succeeded and after every delete (see the package documentation).
	strong atomic.Bool
	// fresh is set during a fresh load (fresh.go).
	fresh atomic.Pointer[freshLoad]
}

var _ vector.Index = (*Index)(nil)

// New returns an index on an existing collection (see EnsureCollection). It does not
// talk to Milvus.
func New(c client.Client, collection string, spec vector.Spec) *Index {
	ix := &Index{c: c, collection: collection, spec: spec}
	ix.strong.Store(true)
	return ix
}

// Conn is how to reach a Milvus server: its address (host:port) and, for a server
// with authentication on, a user's login. A zero Username connects without
// credentials (Milvus Lite, or a server with authentication off).
type Conn struct {
	Address  string
	Username string
	Password string
}

// Connect dials a Milvus server with conn's credentials. A refused login says
// "authentication failed" and names the user, never the password.
func Connect(ctx context.Context, conn Conn) (client.Client, error) {
	c, err := client.NewClient(ctx, client.Config{Address: conn.Address, Username: conn.Username, Password: conn.Password})
	if err != nil {
		if status.Code(err) == codes.Unauthenticated {
			if conn.Username == "" {
				return nil, fmt.Errorf("connect to milvus at %s: authentication failed: the server wants a user and password and none were given: %w", conn.Address, err)
			}
			return nil, fmt.Errorf("connect to milvus at %s as %s: authentication failed: %w", conn.Address, conn.Username, err)
		}
		return nil, fmt.Errorf("connect to milvus at %s: %w", conn.Address, err)
	}
	return c, nil
}

// Spec reports the index's dimension and metric.
func (ix *Index) Spec() vector.Spec { return ix.spec }

// Collection is the name of the collection the index writes to.
func (ix *Index) Collection() string { return ix.collection }

// Upsert writes entries by primary key. Entries are validated first (so a bad entry
// writes nothing), then sent in requests of at most ~8 MiB of vectors; a failure in a
// later request leaves the earlier ones written (the write is idempotent, retry it).
// During a fresh load (fresh.go) the entries new to the load are inserted, first.
func (ix *Index) Upsert(ctx context.Context, entries []vector.Entry) error {
	if err := vector.ValidateEntries(ix.spec, entries); err != nil {
		return fmt.Errorf("milvus upsert into %s: %w", ix.collection, err)
	}
	f := ix.fresh.Load()
	if f == nil {
		return ix.write(ctx, entries, false)
	}
	insert, upsert := f.split(entries)
	if err := ix.write(ctx, insert, true); err != nil {
		if status.Code(err) != codes.PermissionDenied {
			return err
		}
		// A store provisioned before its role could insert, and not reconciled
		// since: upserts do the same, only with the compaction afterwards.
		ix.fresh.Store(nil)
		return ix.write(ctx, entries, false)
	}
	return ix.write(ctx, upsert, false)
}

// write sends entries in requests of at most maxRequestBytes of vectors, as inserts
// or upserts.
func (ix *Index) write(ctx context.Context, entries []vector.Entry, insert bool) error {
	per := max(1, maxRequestBytes/(4*ix.spec.Dimension))
	for start := 0; start < len(entries); start += per {
		chunk := entries[start:min(start+per, len(entries))]
		ids := make([]string, len(chunk))
		scopes := make([]string, len(chunk))
		types := make([]string, len(chunk))
		vecs := make([][]float32, len(chunk))
		for i, e := range chunk {
			ids[i], scopes[i], types[i] = e.ID, scopeValue(e.Scope), e.Type
			vecs[i] = vector.Prepare(ix.spec.Metric, e.Vector)
		}
		cols := []entity.Column{
			entity.NewColumnVarChar(FieldID, ids),
			entity.NewColumnVarChar(FieldScope, scopes),
			entity.NewColumnVarChar(FieldType, types),
			entity.NewColumnFloatVector(FieldEmbedding, ix.spec.Dimension, vecs),
		}
		var err error
		if insert {
			_, err = ix.c.Insert(ctx, ix.collection, "", cols...)
		} else {
			_, err = ix.c.Upsert(ctx, ix.collection, "", cols...)
		}
		if err != nil {
			return fmt.Errorf("milvus upsert into %s: %w", ix.collection, err)
		}
	}
	return nil
}

// Delete removes entries by ID; missing IDs are ignored.
func (ix *Index) Delete(ctx context.Context, ids []string) error {
	for _, id := range ids {
		if err := vector.ValidateID(id); err != nil {
			return fmt.Errorf("milvus delete from %s: %w", ix.collection, err)
		}
	}
	for start := 0; start < len(ids); start += maxExprIDs {
		list, err := stringList(ids[start:min(start+maxExprIDs, len(ids))])
		if err != nil {
			return fmt.Errorf("milvus delete from %s: %w", ix.collection, err)
		}
		// Set before the call returns: a search that starts once it has must see it.
		ix.strong.Store(true)
		if err := ix.c.Delete(ctx, ix.collection, "", FieldID+" in "+list); err != nil {
			return fmt.Errorf("milvus delete from %s: %w", ix.collection, err)
		}
		ix.strong.Store(true)
	}
	return nil
}

// Fetch returns the stored vectors of the given IDs (missing IDs are absent from the
// map). With COSINE the vectors come back normalised, as they were stored. Snapshots
// use it to export embeddings kept in Milvus.
func (ix *Index) Fetch(ctx context.Context, ids []string) (map[string][]float32, error) {
	for _, id := range ids {
		if err := vector.ValidateID(id); err != nil {
			return nil, fmt.Errorf("milvus fetch from %s: %w", ix.collection, err)
		}
	}
	out := make(map[string][]float32, len(ids))
	for start := 0; start < len(ids); start += maxExprIDs {
		list, err := stringList(ids[start:min(start+maxExprIDs, len(ids))])
		if err != nil {
			return nil, fmt.Errorf("milvus fetch from %s: %w", ix.collection, err)
		}
		rs, err := ix.c.Query(ctx, ix.collection, nil, FieldID+" in "+list, []string{FieldID, FieldEmbedding})
		if err != nil {
			return nil, fmt.Errorf("milvus fetch from %s: %w", ix.collection, err)
		}
		idCol, okID := rs.GetColumn(FieldID).(*entity.ColumnVarChar)
		vecCol, okVec := rs.GetColumn(FieldEmbedding).(*entity.ColumnFloatVector)
		if !okID || !okVec {
			return nil, fmt.Errorf("milvus fetch from %s: unexpected result columns", ix.collection)
		}
		vecs := vecCol.Data()
		for i, id := range idCol.Data() {
			out[id] = vecs[i]
		}
	}
	return out, nil
}

// DeleteScope removes every entry of the scope.
func (ix *Index) DeleteScope(ctx context.Context, scope string) error {
	expr, err := ScopeFilter(scope, nil)
	if err != nil {
		return fmt.Errorf("milvus delete scope from %s: %w", ix.collection, err)
	}
	ix.strong.Store(true)
	if err := ix.c.Delete(ctx, ix.collection, "", expr); err != nil {
		return fmt.Errorf("milvus delete scope %s from %s: %w", scope, ix.collection, err)
	}
	ix.strong.Store(true)
	return nil
}

// Search returns the K entries of q.Scope (and q.Types) nearest to q.Vector, best first.
func (ix *Index) Search(ctx context.Context, q vector.Query) ([]vector.Hit, error) {
	if err := vector.ValidateQuery(ix.spec, q); err != nil {
		return nil, fmt.Errorf("milvus search in %s: %w", ix.collection, err)
	}
	expr, err := ScopeFilter(q.Scope, q.Types)
	if err != nil {
		return nil, fmt.Errorf("milvus search in %s: %w", ix.collection, err)
	}
	sp, err := entity.NewIndexHNSWSearchParam(max(minSearchEf, q.K))
	if err != nil {
		return nil, err
	}
	level := entity.ClSession
	strong := ix.strong.Swap(false)
	if strong {
		level = entity.ClStrong
	}
	search := func() (client.SearchResult, error) {
		res, err := ix.c.Search(ctx, ix.collection, nil, expr, nil,
			[]entity.Vector{entity.FloatVector(vector.Prepare(ix.spec.Metric, q.Vector))},
			FieldEmbedding, entity.MetricType(ix.spec.Metric), q.K, sp,
			client.WithSearchQueryConsistencyLevel(level))
		if err != nil || len(res) == 0 {
			return client.SearchResult{}, err
		}
		return res[0], nil
	}
	var r client.SearchResult
	err = ix.loaded(ctx, func() (err error) {
		r, err = search()
		return err
	})
	if err == nil {
		err = r.Err
	}
	if err != nil {
		if strong {
			ix.strong.Store(true)
		}
		return nil, fmt.Errorf("milvus search in %s: %w", ix.collection, err)
	}
	if r.ResultCount == 0 || r.IDs == nil {
		return []vector.Hit{}, nil
	}
	hits := make([]vector.Hit, 0, r.ResultCount)
	for i := 0; i < r.ResultCount; i++ {
		id, err := r.IDs.GetAsString(i)
		if err != nil {
			return nil, fmt.Errorf("milvus search in %s: read id: %w", ix.collection, err)
		}
		hits = append(hits, vector.Hit{ID: id, Score: ix.score(r.Scores[i])})
	}
	return hits, nil
}

// loaded runs call, and once more after loading the collection when it failed because
// the collection is not loaded: a restarted server may come back with it released
// (Milvus Lite always does).
func (ix *Index) loaded(ctx context.Context, call func() error) error {
	err := call()
	if err != nil && notLoaded(err) {
		if lerr := ix.c.LoadCollection(ctx, ix.collection, false); lerr == nil {
			err = call()
		}
	}
	return err
}

// score converts a Milvus score to a vector.Hit score: Milvus reports the squared
// Euclidean distance for L2.
func (ix *Index) score(s float32) float32 {
	if ix.spec.Metric == vector.L2 {
		if s <= 0 {
			return 0 // not -0
		}
		return float32(-math.Sqrt(float64(s)))
	}
	return s
}

// ScopeFilter builds the boolean expression every search and scope delete is filtered
// by: scope == "<scopeValue(scope)>", and memory_type in [...] when types are given.
// The scope and types are validated (package vector) and every string is written
// as an escaped literal (literal), so nothing can break out of it.
func ScopeFilter(scope string, types []string) (string, error) {
	if err := vector.ValidateScope(scope); err != nil {
		return "", err
	}
	lit, err := literal(scopeValue(scope))
	if err != nil {
		return "", err
	}
	expr := FieldScope + " == " + lit
	if len(types) > 0 {
		for _, t := range types {
			if err := vector.ValidateType(t); err != nil {
				return "", err
			}
		}
		list, err := stringList(types)
		if err != nil {
			return "", err
		}
		expr += " && " + FieldType + " in " + list
	}
	return expr, nil
}

// scopeValue is what the collection's scope field holds for a scope, and what
// filters compare with: an ASCII scope is itself (every collection written before
// Unicode scopes holds only those, and keeps its meaning); any other is "~" and the
// unpadded base64url SHA-256 of its UTF-8 (44 bytes). A Milvus server does not read
// every Unicode literal back as written: the expression parser of some versions first
// spells each Han character as a \u escape of four hex digits (planparserv2's
// convertHanToASCII), so one beyond the BMP turns into another character (U+20BB7 𠮷
// reads as U+0BB7 ஷ), and a filter on user:𠮷 would match user:ஷ's vectors (Milvus
// 2.3.5's does not: TestLiteralAgainstMilvusServer). An ASCII value means the same to
// every server version and to Milvus Lite. '~' is in no scope, so the two forms never
// meet; the field is only ever compared, never read back as a scope.
func scopeValue(scope string) string {
	for i := 0; i < len(scope); i++ {
		if scope[i] >= utf8.RuneSelf {
			sum := sha256.Sum256([]byte(scope))
			return "~" + base64.RawURLEncoding.EncodeToString(sum[:])
		}
	}
	return scope
}

// literal writes s as a double-quoted string literal of Milvus's boolean expression
// grammar. It escapes what both grammars in use (a Milvus server's, and Milvus
// Lite's, which knows only \" \' \\ \n \r \t) read the same way: the quote, the
// backslash, newline, carriage return and tab. Other characters go as they are;
// other control characters and invalid UTF-8 (which no gRPC string can carry) are
// refused. Scopes, ids and types are validated before they get here, so this is the
// second line, not the only one: FuzzLiteral holds it to both decoders.
func literal(s string) (string, error) {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return "", fmt.Errorf("milvus literal: %q is not valid UTF-8 (byte %#x at offset %d)", s, s[i], i)
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < ' ' || r == 0x7f:
			return "", fmt.Errorf("milvus literal: %q holds the control character %U", s, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	b.WriteByte('"')
	return b.String(), nil
}

// stringList renders strings as a Milvus list literal.
func stringList(ss []string) (string, error) {
	var b strings.Builder
	b.WriteByte('[')
	for i, s := range ss {
		if i > 0 {
			b.WriteByte(',')
		}
		lit, err := literal(s)
		if err != nil {
			return "", err
		}
		b.WriteString(lit)
	}
	b.WriteByte(']')
	return b.String(), nil
}

// ValidCollectionName checks Milvus's collection name rules: 1..255 characters, the
// first a letter or underscore, the rest letters, digits or underscores.
func ValidCollectionName(name string) error {
	if name == "" {
		return errors.New("milvus collection name is empty")
	}
	if len(name) > 255 {
		return fmt.Errorf("milvus collection name %q is %d characters, longer than 255", name, len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
		if i == 0 && !letter {
			return fmt.Errorf("milvus collection name %q must start with a letter or an underscore", name)
		}
		if digit := c >= '0' && c <= '9'; !letter && !digit {
			return fmt.Errorf("milvus collection name %q contains %q: only letters, digits and underscores are allowed", name, c)
		}
	}
	return nil
}

// EnsureCollection creates the collection for spec, marked as owner's (OwnerProperty),
// with its index, and loads it. When the collection already exists it is checked,
// never altered or dropped: one that is not owner's gives a wrapped ErrNotOwner (and
// nothing is touched); a vector field of another dimension a wrapped
// vector.ErrDimensionMismatch, an index with another metric a wrapped
// vector.ErrMetricMismatch, other schema differences a plain error. An unmarked
// collection that owner may adopt (Owner.AdoptUnmarked) is checked like the others,
// then marked. A missing index (a crash between create and index) is created.
// created reports whether this call created the collection.
func EnsureCollection(ctx context.Context, c client.Client, name string, spec vector.Spec, owner Owner) (created bool, err error) {
	if err := ValidCollectionName(name); err != nil {
		return false, err
	}
	if err := spec.Validate(); err != nil {
		return false, err
	}
	if owner.ID == "" {
		return false, errors.New("milvus: no owner given for collection " + name)
	}
	has, err := c.HasCollection(ctx, name)
	if err != nil {
		return false, fmt.Errorf("milvus: check collection %s: %w", name, err)
	}
	if !has {
		err := c.CreateCollection(ctx, collectionSchema(name, spec), 1, client.WithConsistencyLevel(entity.ClStrong),
			client.WithCollectionProperty(OwnerProperty, owner.ID))
		switch {
		case err == nil:
			created = true
		case strings.Contains(err.Error(), "already exist"):
			// Created concurrently: check it like any existing collection.
		default:
			return false, fmt.Errorf("milvus: create collection %s: %w", name, err)
		}
	}
	if !created {
		coll, err := c.DescribeCollection(ctx, name)
		if err != nil {
			return false, fmt.Errorf("milvus: describe collection %s: %w", name, err)
		}
		// Whose it is comes first: another store's collection is reported as such,
		// whatever its shape, and not looked at further.
		marked, err := ownership(coll, owner)
		if err != nil {
			return false, err
		}
		if err := checkSchema(coll, name, spec); err != nil {
			return false, err
		}
		if !marked {
			if err := adopt(ctx, c, name, owner); err != nil {
				return false, err
			}
		}
	}
	if err := ensureIndex(ctx, c, name, spec); err != nil {
		return created, err
	}
	if err := c.LoadCollection(ctx, name, false); err != nil {
		return created, fmt.Errorf("milvus: load collection %s: %w", name, err)
	}
	return created, nil
}

func collectionSchema(name string, spec vector.Spec) *entity.Schema {
	return entity.NewSchema().WithName(name).WithAutoID(false).
		WithDescription("memory-operator vectors").
		WithField(entity.NewField().WithName(FieldID).WithDataType(entity.FieldTypeVarChar).
			WithIsPrimaryKey(true).WithIsAutoID(false).WithMaxLength(vector.MaxIDLen)).
		WithField(entity.NewField().WithName(FieldScope).WithDataType(entity.FieldTypeVarChar).WithMaxLength(vector.MaxScopeLen)).
		WithField(entity.NewField().WithName(FieldType).WithDataType(entity.FieldTypeVarChar).WithMaxLength(vector.MaxTypeLen)).
		WithField(entity.NewField().WithName(FieldEmbedding).WithDataType(entity.FieldTypeFloatVector).WithDim(int64(spec.Dimension)))
}

// checkSchema compares an existing collection with the layout this package writes.
func checkSchema(coll *entity.Collection, name string, spec vector.Spec) error {
	fields := map[string]*entity.Field{}
	for _, f := range coll.Schema.Fields {
		fields[f.Name] = f
	}
	emb := fields[FieldEmbedding]
	if emb == nil || emb.DataType != entity.FieldTypeFloatVector {
		return fmt.Errorf("milvus: collection %s exists but has no float vector field %q; it was not created by memory-operator", name, FieldEmbedding)
	}
	dim, err := strconv.Atoi(emb.TypeParams[entity.TypeParamDim])
	if err != nil {
		return fmt.Errorf("milvus: collection %s: cannot read the dimension of %q (%q)", name, FieldEmbedding, emb.TypeParams[entity.TypeParamDim])
	}
	if dim != spec.Dimension {
		return vector.DimensionError("milvus collection "+name, spec.Dimension, dim)
	}
	if f := fields[FieldID]; f == nil || !f.PrimaryKey || f.DataType != entity.FieldTypeVarChar || f.AutoID {
		return fmt.Errorf("milvus: collection %s exists but %q is not a VarChar primary key without auto-id", name, FieldID)
	}
	for _, n := range []string{FieldScope, FieldType} {
		if f := fields[n]; f == nil || f.DataType != entity.FieldTypeVarChar {
			return fmt.Errorf("milvus: collection %s exists but has no VarChar field %q", name, n)
		}
	}
	return nil
}

// ensureIndex creates the vector index unless one exists; an existing index must use
// the spec's metric.
func ensureIndex(ctx context.Context, c client.Client, name string, spec vector.Spec) error {
	idxs, descErr := c.DescribeIndex(ctx, name, FieldEmbedding)
	if descErr == nil && len(idxs) > 0 {
		for _, idx := range idxs {
			got := idx.Params()["metric_type"]
			if got != "" && !strings.EqualFold(got, string(spec.Metric)) {
				return fmt.Errorf("%w: milvus collection %s is indexed with metric %s, expected %s",
					vector.ErrMetricMismatch, name, strings.ToUpper(got), spec.Metric)
			}
		}
		return nil
	}
	// No index, or an error that (depending on the server) means "no index".
	idx, err := entity.NewIndexHNSW(entity.MetricType(spec.Metric), hnswM, hnswEfConstruction)
	if err != nil {
		return err
	}
	if err := c.CreateIndex(ctx, name, FieldEmbedding, idx, false); err != nil {
		if descErr != nil {
			return fmt.Errorf("milvus: collection %s: describe index: %v; create index: %w", name, descErr, err)
		}
		return fmt.Errorf("milvus: collection %s: create index: %w", name, err)
	}
	return nil
}

// DropCollection drops the collection if it is owner's (see CheckOwner); a missing
// collection is not an error, one that is not owner's gives a wrapped ErrNotOwner and
// stays.
func DropCollection(ctx context.Context, c client.Client, name string, owner Owner) error {
	exists, err := CheckOwner(ctx, c, name, owner)
	if err != nil || !exists {
		return err
	}
	if err := c.DropCollection(ctx, name); err != nil {
		return fmt.Errorf("milvus: drop collection %s: %w", name, err)
	}
	return nil
}

// notLoaded reports whether err says the collection is not loaded into memory.
func notLoaded(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "not loaded") || strings.Contains(msg, "released") || strings.Contains(msg, "load() before")
}
