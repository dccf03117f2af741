package memory

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/amemory/memory-operator/internal/jsonscan"
)

// Item is one memory in the neutral format. The JSON field names are the format's
// field names and must not change.
type Item struct {
	// MemoryID is globally unique and stable across snapshot and restore.
	MemoryID string `json:"memory_id"`
	// MemoryType decides the half-life of the score.
	MemoryType Type `json:"memory_type"`
	// Scope is who the memory belongs to: "user:<id>", "session:<id>", "agent:<type>".
	Scope string `json:"scope"`
	// Key optionally names a slot inside the scope ("address", "preference.coffee"):
	// a later write to the same (scope, key) supersedes the earlier one.
	Key string `json:"key,omitempty"`
	// Content is a JSON object, never a string.
	Content json.RawMessage `json:"content"`
	// Source is provenance only ("langgraph@0.2"), never ownership.
	Source string `json:"source"`
	// BaseScore is the importance before decay.
	BaseScore float64 `json:"base_score"`

	// CreatedAt and UpdatedAt are the memory's own time (a client or importer may
	// back-date them; never more than MaxFutureSkew into the future). They rank and
	// display; they decide nothing about forgetting.
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// RecordedAt is when the store took the memory's current value in, by the
	// database's clock: set by PostgreSQL on every write, carried by snapshots and
	// restores, never writable by agents. A tombstone covers the memories of its scope
	// recorded at or before it. Zero on items that were never stored.
	RecordedAt time.Time  `json:"recorded_at,omitzero"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	ArchivedAt *time.Time `json:"archived_at,omitempty"`

	// History holds the previous values of a keyed slot, oldest first.
	History []Revision `json:"history,omitempty"`
	// Embedding is bound to the model that produced it; it is exported only on request.
	Embedding []float32 `json:"embedding,omitempty"`
}

// Revision is a superseded value of a (scope, key) slot.
type Revision struct {
	Content      json.RawMessage `json:"content"`
	Source       string          `json:"source"`
	BaseScore    float64         `json:"base_score"`
	UpdatedAt    time.Time       `json:"updated_at"`
	SupersededAt time.Time       `json:"superseded_at"`
}

// Tombstone records that a scope was forgotten. Tombstones travel in snapshots and
// are enforced on restore, so a restore never brings a forgotten scope back.
type Tombstone struct {
	Scope       string    `json:"scope"`
	ForgottenAt time.Time `json:"forgotten_at"`
	Reason      string    `json:"reason,omitempty"`
}

// Limits on the free-text fields. MaxIDLen is the vector indexes' limit (Milvus keys
// memory_id as VarChar(128)): a memory whose ID is longer could be stored but never
// indexed, so it is refused up front.
const (
	MaxIDLen     = 128
	MaxKeyLen    = 200
	MaxSourceLen = 512
)

// FieldError is a validation error that names the offending field by its JSON name
// (for history entries "history[2].content").
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// SetDefaults fills what a writer may leave out: a new MemoryID, CreatedAt = now and
// UpdatedAt = CreatedAt. Fields already set are kept.
func (it *Item) SetDefaults(now time.Time) {
	if it.MemoryID == "" {
		it.MemoryID = NewID()
	}
	if it.CreatedAt.IsZero() {
		it.CreatedAt = now
	}
	if it.UpdatedAt.IsZero() {
		it.UpdatedAt = it.CreatedAt
	}
}

// Validate checks every field and returns the first problem as a *FieldError.
func (it Item) Validate() error {
	for _, check := range []func() error{it.validateIdentity, it.validateValue, it.validateTimes, it.validateHistory, it.validateEmbedding} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

func (it Item) validateIdentity() error {
	if err := ValidateID(it.MemoryID); err != nil {
		return fieldErr("memory_id", "%v", err)
	}
	if err := it.MemoryType.Validate(); err != nil {
		return fieldErr("memory_type", "%v", err)
	}
	if err := ValidateScope(it.Scope); err != nil {
		return fieldErr("scope", "%v", err)
	}
	if it.Key != "" {
		if err := ValidateKey(it.Key); err != nil {
			return fieldErr("key", "%v", err)
		}
	}
	return nil
}

func (it Item) validateValue() error {
	if err := ValidateContent(it.Content); err != nil {
		return fieldErr("content", "%v", err)
	}
	return it.validateScalars()
}

func (it Item) validateScalars() error {
	if err := validateText(it.Source, MaxSourceLen); err != nil {
		return fieldErr("source", "%v", err)
	}
	if err := validateScore(it.BaseScore); err != nil {
		return fieldErr("base_score", "%v", err)
	}
	return nil
}

// MaxFutureSkew is how far a memory's created_at or updated_at may lie ahead of the
// server's clock: the clock skew between a client and the server that is tolerated.
// Anything later is refused (CheckNotFuture), so no one can date a memory into the
// future to rank it above everything, or win every "newer value" conflict.
const MaxFutureSkew = 5 * time.Minute

// CheckNotFuture refuses an item whose created_at or updated_at lies more than
// MaxFutureSkew after now (the server's clock, or a package's cut), as a *FieldError.
func (it Item) CheckNotFuture(now time.Time) error {
	limit := now.Add(MaxFutureSkew)
	for _, f := range []struct {
		name string
		t    time.Time
	}{{"created_at", it.CreatedAt}, {"updated_at", it.UpdatedAt}} {
		if f.t.After(limit) {
			return fieldErr(f.name, "%s is more than %s after the server's clock (%s): a memory's time cannot lie in the future (check the writer's clock)",
				f.t.UTC().Format(time.RFC3339Nano), MaxFutureSkew, now.UTC().Format(time.RFC3339))
		}
	}
	return nil
}

func (it Item) validateTimes() error {
	if it.CreatedAt.IsZero() {
		return fieldErr("created_at", "is not set")
	}
	if it.UpdatedAt.IsZero() {
		return fieldErr("updated_at", "is not set")
	}
	if it.UpdatedAt.Before(it.CreatedAt) {
		return fieldErr("updated_at", "%s is before created_at %s",
			it.UpdatedAt.UTC().Format(time.RFC3339Nano), it.CreatedAt.UTC().Format(time.RFC3339Nano))
	}
	if it.ExpiresAt != nil && it.ExpiresAt.IsZero() {
		return fieldErr("expires_at", "is the zero time (leave it unset for no expiry)")
	}
	if it.ArchivedAt != nil && it.ArchivedAt.IsZero() {
		return fieldErr("archived_at", "is the zero time (leave it unset when not archived)")
	}
	return nil
}

func (it Item) validateHistory() error {
	for i, r := range it.History {
		f := fmt.Sprintf("history[%d]", i)
		if err := ValidateContent(r.Content); err != nil {
			return fieldErr(f+".content", "%v", err)
		}
		if err := validateText(r.Source, MaxSourceLen); err != nil {
			return fieldErr(f+".source", "%v", err)
		}
		if err := validateScore(r.BaseScore); err != nil {
			return fieldErr(f+".base_score", "%v", err)
		}
		if r.UpdatedAt.IsZero() {
			return fieldErr(f+".updated_at", "is not set")
		}
		if r.SupersededAt.IsZero() {
			return fieldErr(f+".superseded_at", "is not set")
		}
	}
	return nil
}

func (it Item) validateEmbedding() error {
	for i, x := range it.Embedding {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return fieldErr("embedding", "element %d is %v (must be finite)", i, x)
		}
	}
	return nil
}

// ValidateID checks a memory ID: 1..MaxIDLen characters from [A-Za-z0-9-_.@:]. IDs
// stay ASCII (they are UUIDs, ULIDs or digests in practice): they end up in filter
// expressions and keys as they are.
func ValidateID(id string) error {
	if id == "" {
		return errors.New("is empty")
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("is %d characters long (at most %d)", len(id), MaxIDLen)
	}
	for i, r := range id {
		if r >= utf8.RuneSelf || r == '/' || !scopeIDASCII(byte(r)) {
			return fmt.Errorf("has a disallowed character %q at offset %d (allowed: letters, digits and -_.@:)", r, i)
		}
	}
	return nil
}

// ValidateContent checks that raw is a single JSON object that PostgreSQL's jsonb can
// store (no NUL characters in strings or keys, numbers within range).
func ValidateContent(raw json.RawMessage) error {
	if validContentFast(raw) {
		return nil
	}
	_, err := decodeContent(raw)
	return err
}

// validContentFast reports that raw is surely a storable JSON object, checking its
// syntax, text and numbers in one scan without building anything (a restore validates
// every memory of a package before writing any). false means "ask the slow path",
// which decides and words the error. FuzzValidContentFast holds it to the slow path.
func validContentFast(raw []byte) bool {
	if checkStorableText(raw) != nil || bytes.Contains(raw, []byte(`\u0000`)) {
		return false // the slow path tells lone surrogates and NUL characters apart
	}
	sc := jsonscan.Scanner{Data: raw, Numbers: storableNumber}
	if sc.Next() != '{' {
		return false
	}
	_, ok := sc.Value()
	return ok && sc.AtEnd()
}

// storableNumber reports whether a number literal fits PostgreSQL's numeric.
func storableNumber(lit []byte, plain bool) bool {
	if plain && len(lit) <= 21 {
		return true
	}
	_, err := canonicalNumber(string(lit))
	return err == nil
}

// canonBufs recycles the buffers canonical content is built in before hashing.
var canonBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// decodeContent parses content and checks it is a storable JSON object.
func decodeContent(raw json.RawMessage) (any, error) {
	if len(raw) == 0 {
		return nil, errors.New("is empty (must be a JSON object)")
	}
	v, err := decodeJSON(raw)
	if err != nil {
		return nil, err
	}
	return v, checkContentValue(v)
}

func checkContentValue(v any) error {
	if _, ok := v.(map[string]any); !ok {
		return fmt.Errorf("must be a JSON object, got %s", jsonKind(v))
	}
	return checkStorable(v)
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	}
	return fmt.Sprintf("%T", v)
}

func checkStorable(v any) error {
	switch x := v.(type) {
	case string:
		if strings.IndexByte(x, 0) >= 0 {
			return errors.New("contains a NUL character (\\u0000), which PostgreSQL jsonb cannot store")
		}
	case json.Number:
		if _, err := canonicalNumber(string(x)); err != nil {
			return err
		}
	case []any:
		for _, e := range x {
			if err := checkStorable(e); err != nil {
				return err
			}
		}
	case map[string]any:
		for k, e := range x {
			if err := checkStorable(k); err != nil {
				return err
			}
			if err := checkStorable(e); err != nil {
				return err
			}
		}
	}
	return nil
}

func validateText(s string, maxLen int) error {
	if len(s) > maxLen {
		return fmt.Errorf("is %d bytes long (at most %d)", len(s), maxLen)
	}
	if !utf8.ValidString(s) {
		return errors.New("is not valid UTF-8")
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("has a control character %q at offset %d", r, i)
		}
	}
	return nil
}

func validateScore(f float64) error {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("is %v (must be a finite number)", f)
	}
	if f < 0 {
		return fmt.Errorf("is %v (must not be negative)", f)
	}
	return nil
}

// hashVersion is mixed into content hashes, so a change of scheme cannot collide.
const hashVersion = "memory-content-hash/v1"

// ContentHash returns the SHA-256 of the item's canonical content, type and key. Two
// writes of the same memory hash the same whatever their key order, whitespace or
// number spelling, so re-sending a memory is idempotent. Scope, ID, score, source and
// timestamps are not part of the hash.
func (it Item) ContentHash() ([]byte, error) {
	canon, err := CanonicalJSON(it.Content)
	if err != nil {
		return nil, fieldErr("content", "%v", err)
	}
	return it.hashCanonical(canon), nil
}

// ValidatedHash is Validate followed by ContentHash, parsing the content once instead
// of twice: bulk paths (restore merges) call it for every item.
func (it Item) ValidatedHash() ([]byte, error) {
	if err := it.validateIdentity(); err != nil {
		return nil, err
	}
	buf := canonBufs.Get().(*[]byte)
	defer canonBufs.Put(buf)
	canon, first, err := appendCanonicalFast((*buf)[:0], it.Content)
	if err != nil || first != '{' {
		// The slow path decides, and words the error.
		v, err := decodeContent(it.Content)
		if err != nil {
			return nil, fieldErr("content", "%v", err)
		}
		var b bytes.Buffer
		if err := writeCanonical(&b, v); err != nil {
			return nil, fieldErr("content", "%v", err)
		}
		canon = b.Bytes()
	}
	*buf = canon[:0]
	for _, check := range []func() error{it.validateScalars, it.validateTimes, it.validateHistory, it.validateEmbedding} {
		if err := check(); err != nil {
			return nil, err
		}
	}
	return it.hashCanonical(canon), nil
}

// hashCanonical hashes the item's identity fields and its canonical content.
func (it Item) hashCanonical(canon []byte) []byte {
	h := sha256.New()
	writeField := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	writeField([]byte(hashVersion))
	writeField([]byte(it.MemoryType))
	writeField([]byte(it.Key))
	writeField(canon)
	return h.Sum(nil)
}
