// Package querycache caches serialized search results per scope, so that a repeated
// query costs a version read and a lookup instead of an embedding call and a search.
//
// Never stale: every entry is stamped with the version of its scope (see
// pgstore.Store.ScopeVersion) read before its result was computed, and is served
// only to a lookup that read the same version. Any commit that changes what a search
// of the scope returns raises that version first, so an entry is never served once
// a write, update, delete, archival or forget in its scope was acknowledged. An
// entry of an older version met by a lookup is dropped and counted as an
// invalidation; entries of versions no one reads any more go by LRU (in-process) or
// their TTL (Redis).
//
// Entries also carry an absolute expiry: the cache's TTL, and never later than the
// caller says (the earliest expiry of the memories in the result).
//
// Two backends keep the entries, behind Backend: Memory, in-process, bounded by
// bytes; and Redis, shared by a store's gateway replicas, under the store's key
// prefix mem:<tenant>:qc:, where a Redis that does not answer is a miss, never an
// error. Cache adds what is the same for both: the TTL, the counters (Stats), and
// optional semantic reuse (a query close enough in meaning to a cached one of the
// same scope, version and parameters takes its result), whose query vectors are
// kept in-process (semantic.go).
package querycache

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// DefaultTTL is how long an entry lives at most when Options.TTL is not set.
const DefaultTTL = 300 * time.Second

// Lookup is what a backend found for a key.
type Lookup int

// Lookups.
const (
	// Missing: no entry, an expired one, or one of a newer version than asked for
	// (filed by a reader that read the version after this one did; it stays).
	Missing Lookup = iota
	// Found: an entry of exactly the version asked for, not expired.
	Found
	// Stale: an entry of an older version; it was dropped (an invalidation).
	Stale
	// Unavailable: the backend did not answer in time (a miss).
	Unavailable
)

// Backend keeps entries: a scope, a key, the scope's version the entry was computed
// at, its data and an absolute expiry. Callers must not modify the data they pass or
// get back.
type Backend interface {
	// Get returns the data of (scope, key) when its entry has exactly version and
	// has not expired (Found); an entry of an older version is dropped (Stale).
	Get(ctx context.Context, scope, key string, version int64) ([]byte, Lookup)
	// Set files data under (scope, key) at version until expiresAt, replacing an
	// entry of the same or an older version, never one of a newer version. It is
	// best effort: an entry that does not fit, or a backend that does not answer,
	// stores nothing.
	Set(ctx context.Context, scope, key string, version int64, data []byte, expiresAt time.Time)
}

// Options configure a Cache.
type Options struct {
	// TTL bounds how long an entry lives; 0 means DefaultTTL.
	TTL time.Duration
	// SemanticThreshold, above 0, turns on semantic reuse: on an exact miss, a
	// cached query of the same scope, version and group whose vector's cosine
	// similarity to the query's is at least this gives its result. 0 (the default)
	// is off.
	SemanticThreshold float64
	// SemanticVectors bounds the query vectors kept for semantic reuse; 0 means
	// DefaultSemanticVectors.
	SemanticVectors int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Outcome is what a lookup gave a search.
type Outcome string

// Outcomes.
const (
	// Hit: the result of the same query (same normalised text and parameters).
	Hit Outcome = "hit"
	// SemanticHit: the result of a query close enough in meaning.
	SemanticHit Outcome = "semantic_hit"
	// Miss: nothing usable; the caller searches and Puts the result.
	Miss Outcome = "miss"
)

// Stats are the cache's counters since it was made.
type Stats struct {
	// Hits, SemanticHits and Misses count lookups by outcome.
	Hits, SemanticHits, Misses int64
	// Invalidations counts entries dropped because their scope changed since.
	Invalidations int64
	// Unavailable counts lookups the backend did not answer (Redis down or slow);
	// they are counted as Misses too.
	Unavailable int64
}

// HitRate is (Hits + SemanticHits) over all lookups, 0 when there were none.
func (s Stats) HitRate() float64 {
	n := s.Hits + s.SemanticHits + s.Misses
	if n == 0 {
		return 0
	}
	return float64(s.Hits+s.SemanticHits) / float64(n)
}

// Cache is a query cache over a backend. It is safe for concurrent use.
type Cache struct {
	b   Backend
	ttl time.Duration
	now func() time.Time
	sem *semantic // nil: semantic reuse off

	hits, semanticHits, misses, invalidations, unavailable atomic.Int64
}

// New returns a cache over b.
func New(b Backend, o Options) *Cache {
	c := &Cache{b: b, ttl: o.TTL, now: o.Now}
	if c.ttl <= 0 {
		c.ttl = DefaultTTL
	}
	if c.now == nil {
		c.now = time.Now
	}
	if o.SemanticThreshold > 0 {
		c.sem = newSemantic(o.SemanticThreshold, o.SemanticVectors, c.now)
	}
	return c
}

// TTL is the longest an entry lives.
func (c *Cache) TTL() time.Duration { return c.ttl }

// Semantic reports whether semantic reuse is on.
func (c *Cache) Semantic() bool { return c.sem != nil }

// Stats returns a snapshot of the counters.
func (c *Cache) Stats() Stats {
	return Stats{Hits: c.hits.Load(), SemanticHits: c.semanticHits.Load(), Misses: c.misses.Load(),
		Invalidations: c.invalidations.Load(), Unavailable: c.unavailable.Load()}
}

// Query names a lookup.
type Query struct {
	Scope string
	// Key is the query's key (Key: its normalised text and parameters).
	Key string
	// Group is the key of its parameters without the text (GroupKey): semantic
	// reuse only takes results of the same group.
	Group string
	// Version is the scope's version, read before the lookup (and before the search
	// whose result a miss will Put).
	Version int64
	// Vector embeds the query. Lookup calls it at most once, and only on an exact
	// miss with semantic reuse on.
	Vector func(ctx context.Context) ([]float32, error)
}

// Result is what Lookup found.
type Result struct {
	// Data is the cached result (nil on a miss).
	Data    []byte
	Outcome Outcome
	// Vector is the query's vector when Lookup computed it (semantic reuse), for
	// the search and Put to reuse.
	Vector []float32
}

// Lookup returns the entry of q's key at q.Version; on an exact miss with semantic
// reuse on, it embeds the query (q.Vector) and returns the entry of the most
// similar cached query of the same scope, version and group, when that one is at
// least the threshold similar. The outcome is counted. An error is the embedder's:
// the outcome is then a Miss, without a vector.
func (c *Cache) Lookup(ctx context.Context, q Query) (Result, error) {
	data, l := c.b.Get(ctx, q.Scope, q.Key, q.Version)
	c.count(l)
	if l == Found {
		c.hits.Add(1)
		return Result{Data: data, Outcome: Hit}, nil
	}
	if c.sem == nil || q.Vector == nil || l == Unavailable {
		c.misses.Add(1)
		return Result{Outcome: Miss}, nil
	}
	vec, err := q.Vector(ctx)
	if err != nil {
		c.misses.Add(1)
		return Result{Outcome: Miss}, err
	}
	// The nearest few, in order: an entry the backend evicted or expired meanwhile
	// leaves the next one its chance.
	for _, key := range c.sem.nearest(q.Scope, q.Group, q.Version, vec, 3) {
		data, l := c.b.Get(ctx, q.Scope, key, q.Version)
		c.count(l)
		if l == Found {
			c.semanticHits.Add(1)
			return Result{Data: data, Outcome: SemanticHit, Vector: vec}, nil
		}
		c.sem.forget(q.Scope, q.Group, key)
		if l == Unavailable {
			break
		}
	}
	c.misses.Add(1)
	return Result{Outcome: Miss, Vector: vec}, nil
}

func (c *Cache) count(l Lookup) {
	switch l {
	case Stale:
		c.invalidations.Add(1)
	case Unavailable:
		c.unavailable.Add(1)
	}
}

// Put files data as q's result at q.Version, until the TTL from now or expiresAt
// (zero: no bound), whichever comes first; vec, when given, is the query's vector
// for semantic reuse. Nothing is stored when that time has passed.
func (c *Cache) Put(ctx context.Context, q Query, vec []float32, data []byte, expiresAt time.Time) {
	now := c.now()
	until := now.Add(c.ttl)
	if !expiresAt.IsZero() && expiresAt.Before(until) {
		until = expiresAt
	}
	if !now.Before(until) {
		return
	}
	c.b.Set(ctx, q.Scope, q.Key, q.Version, data, until)
	if c.sem != nil && vec != nil {
		c.sem.add(q.Scope, q.Group, q.Key, q.Version, vec, until)
	}
}

// Params are a search's parameters besides its text. Two searches of one scope with
// the same normalised text and equal Params return the same result at one version.
type Params struct {
	// Mode is the search mode, its default spelled out ("hybrid", not "").
	Mode string
	// Types are the memory types searched (any order; empty: all).
	Types []string
	// TopK is the number of results, its default spelled out.
	TopK int
	// MinSimilarity is the similarity floor, nil for none.
	MinSimilarity *float64
	// Extra is anything else the result depends on (the service's result format,
	// its ranking settings), in the caller's own encoding.
	Extra string
}

// NormalizeQuery is the query text as keys see it: NFC, without leading and
// trailing white space, every run of white space one space.
func NormalizeQuery(text string) string {
	return strings.Join(strings.FieldsFunc(norm.NFC.String(text), unicode.IsSpace), " ")
}

// Key is the cache key of a query: a hash of its normalised text and of p.
func Key(text string, p Params) string {
	return hashParts(append([]string{"query", NormalizeQuery(text)}, p.parts()...))
}

// GroupKey is the key of p alone: the queries among which semantic reuse may pick.
func GroupKey(p Params) string {
	return hashParts(append([]string{"group"}, p.parts()...))
}

func (p Params) parts() []string {
	types := slices.Compact(slices.Sorted(slices.Values(p.Types)))
	minSim := "none"
	if p.MinSimilarity != nil {
		minSim = strconv.FormatUint(math.Float64bits(*p.MinSimilarity), 16)
	}
	return []string{"mode", p.Mode, "types", strings.Join(types, ","), "k", strconv.Itoa(p.TopK),
		"min", minSim, "extra", p.Extra}
}

// hashParts hashes parts, each length-prefixed so that no two lists collide.
func hashParts(parts []string) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
