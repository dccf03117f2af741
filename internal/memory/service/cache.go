package service

import (
	"bytes"
	"cmp"
	"context"
	"encoding/gob"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/querycache"
)

// SearchCache is Search behind a query cache (package querycache) that never serves
// a result older than the scope's last acknowledged change:
//
//  1. The scope's version is read from PostgreSQL (pgstore.Store.ScopeVersion).
//  2. The cache is asked for the query's entry at that version (its normalised text
//     and parameters; then, with semantic reuse on, a similar query's).
//  3. On a miss the search runs and its result is filed under the version read in
//     step 1, until the cache's TTL or the earliest expiry among its memories.
//
// The order of 1 and 3 is the guarantee. Every commit that changes what a search of
// the scope returns raises its version in the same transaction, so whatever a
// reader sees at version v, every commit it has seen up to v is also seen by a
// search that started after v was read: an entry filed under v was computed from
// data at least as new as v. Another reader that reads v later has therefore seen
// no change the entry misses (one would have raised the version past v), and a
// search that starts after a forget, write or update was acknowledged reads a
// version at or past that commit's, and never gets an entry computed before it.
// Reading the version after the search would file a result computed before a
// commit under the version that commit made (TestSearchCacheNeverServesForgotten
// fails then).
//
// Searches with a caller's Now (the gateway sets it to the request's time) are
// cached all the same: an entry serves a later Now only while every memory in it
// is still unexpired then, and its effective scores (the near-tie ordering by age)
// are those of when it was computed, at most the TTL ago.
type SearchCache struct {
	m     *Memory
	cache *querycache.Cache
}

// NewSearchCache returns m's searches behind cache. With semantic reuse on
// (querycache.Options.SemanticThreshold), a query that misses exactly is embedded
// once, compared with the cached queries of its scope, version and parameters, and
// searched with that embedding when none is close enough. Semantic reuse applies
// to the searches that embed their query anyway (every mode but Lexical without
// MinSimilarity).
func NewSearchCache(m *Memory, cache *querycache.Cache) *SearchCache {
	return &SearchCache{m: m, cache: cache}
}

// Stats returns the cache's counters.
func (c *SearchCache) Stats() querycache.Stats { return c.cache.Stats() }

// resultFormat names the encoding of cached results (part of every key): a change
// of encoding or of Result starts from fresh entries.
const resultFormat = "results/gob/1"

// Search is Memory.Search through the cache; the outcome says whether it was served
// from the cache (Hit, SemanticHit) or searched (Miss). A query Search refuses is
// refused the same way, and nothing about the cache fails a search: a version that
// cannot be read or a cache that does not answer is a search without it.
func (c *SearchCache) Search(ctx context.Context, q SearchQuery) ([]Result, querycache.Outcome, error) {
	p, err := q.plan()
	if err != nil {
		return nil, querycache.Miss, fmt.Errorf("memory service: search: %w", err)
	}
	// The search runs with the text as its key sees it, so a hit and a miss of one
	// key return the same thing.
	q.Text = querycache.NormalizeQuery(q.Text)
	// First, before anything of the search (see the type's comment).
	version, err := c.m.store.ScopeVersion(ctx, q.Scope)
	if err != nil {
		res, err := c.m.Search(ctx, q)
		return res, querycache.Miss, err
	}
	params := querycache.Params{Mode: string(p.mode), Types: p.types, TopK: p.k, MinSimilarity: q.MinSimilarity,
		Extra: resultFormat + ";" + halfLivesKey(q.HalfLives)}
	key := querycache.Query{Scope: q.Scope, Key: querycache.Key(q.Text, params), Group: querycache.GroupKey(params), Version: version}
	if q.Vector == nil && (p.mode != Lexical || q.MinSimilarity != nil) {
		key.Vector = func(ctx context.Context) ([]float32, error) { return c.m.QueryVector(ctx, q.Text) }
	}
	found, lerr := c.cache.Lookup(ctx, key)
	if found.Data != nil {
		if res, ok := decodeResults(found.Data, p.now); ok {
			return res, found.Outcome, nil
		}
	}
	if lerr == nil && found.Vector != nil {
		q.Vector = found.Vector // embedded for the lookup: not again
	}
	res, err := c.m.Search(ctx, q)
	if err != nil {
		return nil, querycache.Miss, err
	}
	if data, err := encodeResults(res); err == nil {
		c.cache.Put(ctx, key, found.Vector, data, earliestExpiry(res))
	}
	return res, querycache.Miss, nil
}

// QueryVector embeds a query as Search does (within the store's input limit), for
// SearchQuery.Vector.
func (m *Memory) QueryVector(ctx context.Context, text string) ([]float32, error) {
	t, _, err := m.limit.Prepare("the query", text)
	if err != nil {
		return nil, err
	}
	vecs, err := m.embed(ctx, embed.Query, []string{t})
	if err != nil {
		return nil, err
	}
	return vecs[0], nil
}

// earliestExpiry is the first time one of the results' memories expires (zero:
// none does): the entry must not outlive it.
func earliestExpiry(res []Result) time.Time {
	var first time.Time
	for _, r := range res {
		if e := r.Item.ExpiresAt; e != nil && (first.IsZero() || e.Before(first)) {
			first = *e
		}
	}
	return first
}

// halfLivesKey encodes the half-lives a search ranks with (nil: the defaults).
func halfLivesKey(hl memory.HalfLives) string {
	if hl == nil {
		hl = memory.DefaultHalfLives()
	}
	types := make([]memory.Type, 0, len(hl))
	for t := range hl {
		types = append(types, t)
	}
	slices.SortFunc(types, func(a, b memory.Type) int { return cmp.Compare(a, b) })
	var b strings.Builder
	for _, t := range types {
		b.WriteString(string(t))
		b.WriteByte('=')
		b.WriteString(strconv.FormatInt(int64(hl[t]), 10))
		b.WriteByte(',')
	}
	return b.String()
}

// encodeResults serializes results exactly (gob keeps the content's bytes as they
// are, where JSON would re-encode them).
func encodeResults(res []Result) ([]byte, error) {
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(res); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// decodeResults reads a cached result; ok is false when it cannot be read or one of
// its memories is expired at now (a caller's Now past the entry's expiry).
func decodeResults(data []byte, now time.Time) ([]Result, bool) {
	var res []Result
	if err := gob.NewDecoder(bytes.NewReader(data)).Decode(&res); err != nil {
		return nil, false
	}
	for _, r := range res {
		if e := r.Item.ExpiresAt; e != nil && !e.After(now) {
			return nil, false
		}
	}
	if res == nil {
		res = []Result{}
	}
	return res, true
}
