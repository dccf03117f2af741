package service

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/vector"
)

// MaxRankedLimit is the largest page SearchRanked returns.
const MaxRankedLimit = 1000

// RankedQuery is a similarity search ranked exactly over the memories it admits, and
// paged: what LangGraph's store search promises. Narrowing (KeyPrefix, Admit) selects
// the candidates before anything is ranked, so a narrow search is never the top hits
// of the whole scope filtered afterwards.
type RankedQuery struct {
	// Scope is required: a search never crosses scopes.
	Scope string
	// Types restricts the memory types; empty means all.
	Types []memory.Type
	// KeyPrefix, when set, admits only keyed memories whose key starts with it.
	KeyPrefix string
	// Admit, when set, has the last word on each candidate (its key, and its content
	// when Content is set).
	Admit func(pgstore.Candidate) bool
	// Content hands Admit the candidates' content.
	Content bool
	// Text is what to look for; it is embedded with the store's embedder.
	Text string
	// Offset skips that many of the ranked memories; Limit, 1..MaxRankedLimit, is the
	// page size.
	Offset, Limit int
	// Now is the time expiry is judged against; zero means time.Now().
	Now time.Time
}

// SearchRanked returns the page [Offset, Offset+Limit) of the live memories q admits,
// ranked by similarity to q.Text, most similar first, ties by memory_id: exactly what
// scoring every admitted memory and sorting would give, at any depth. Memories whose
// vector is not written yet (pending index work) are not ranked, as in Search.
//
// Two paths, one order:
//   - Without narrowing, the admitted memories are the scope's live memories of the
//     types, which is what the index searches: the index's top Offset+Limit, loaded
//     in one query, asked again for more while stale vectors (of memories archived,
//     expired or deleted since) leave the page short. One index query and one load
//     in the common case.
//   - With narrowing, or deeper than the index's K allows, the candidates are
//     selected in PostgreSQL (one streamed query), scored by the index
//     (vector.Scorer: one query on the embedded index), and the page loaded (one
//     query). The cost grows with the number of candidates, not with Offset.
//
// The index must implement vector.Scorer for the second path.
func (m *Memory) SearchRanked(ctx context.Context, q RankedQuery) ([]Result, error) {
	p, err := q.plan()
	if err != nil {
		return nil, fmt.Errorf("memory service: search: %w", err)
	}
	r := &rankedSearch{m: m, q: q, p: p, need: q.Offset + q.Limit}
	if q.Offset > math.MaxInt-q.Limit {
		r.need = math.MaxInt // past the end of any scope, never an overflow
	}
	if q.KeyPrefix == "" && q.Admit == nil && r.need <= vector.MaxK {
		out, ok, err := r.fromIndex(ctx)
		if err != nil || ok {
			return out, err
		}
	}
	return r.fromCandidates(ctx)
}

// rankedSearch is one SearchRanked call.
type rankedSearch struct {
	m    *Memory
	q    RankedQuery
	p    searchPlan
	need int       // Offset + Limit, saturated
	vec  []float32 // the query's embedding, once computed
}

// queryVector embeds the query text once.
func (r *rankedSearch) queryVector(ctx context.Context) ([]float32, error) {
	if r.vec == nil {
		vecs, err := r.m.embed(ctx, []string{r.q.Text})
		if err != nil {
			return nil, fmt.Errorf("memory service: search: %w", err)
		}
		r.vec = vecs[0]
	}
	return r.vec, nil
}

func (q RankedQuery) plan() (searchPlan, error) {
	if q.Limit < 1 || q.Limit > MaxRankedLimit {
		return searchPlan{}, fmt.Errorf("limit must be in [1, %d], got %d", MaxRankedLimit, q.Limit)
	}
	if q.Offset < 0 {
		return searchPlan{}, fmt.Errorf("offset must not be negative, got %d", q.Offset)
	}
	// K is not used by the ranked paths; plan validates scope, text and types.
	return SearchQuery{Scope: q.Scope, Text: q.Text, Types: q.Types, K: 1, Now: q.Now}.plan()
}

// fromIndex pages the index's own ranking of the scope; false when even the index's
// largest K leaves the page short (the caller then ranks the candidates).
func (r *rankedSearch) fromIndex(ctx context.Context) ([]Result, bool, error) {
	vec, err := r.queryVector(ctx)
	if err != nil {
		return nil, false, err
	}
	loaded := map[string]*memory.Item{} // nil: not a live memory of this search
	for fetch := r.need; ; fetch = min(2*fetch, vector.MaxK) {
		hits, err := r.m.index.Search(ctx, vector.Query{Scope: r.p.scope, Types: r.p.types, Vector: vec, K: fetch})
		if err != nil {
			return nil, false, fmt.Errorf("memory service: search: %w: %w", ErrIndexUnavailable, err)
		}
		if err := r.m.loadMany(ctx, r.p, hits, loaded); err != nil {
			return nil, false, fmt.Errorf("memory service: search: %w", err)
		}
		var admitted []vector.Hit
		for _, h := range hits {
			if loaded[h.ID] != nil {
				admitted = append(admitted, h)
			}
		}
		if len(admitted) >= r.need || len(hits) < fetch {
			return page(vector.RankHits(admitted, r.need), r.q.Offset, loaded), true, nil
		}
		if fetch == vector.MaxK {
			return nil, false, nil
		}
	}
}

// loadMany loads the hits not loaded yet, in one query, keeping those p admits.
func (m *Memory) loadMany(ctx context.Context, p searchPlan, hits []vector.Hit, loaded map[string]*memory.Item) error {
	var ids []string
	for _, h := range hits {
		if _, ok := loaded[h.ID]; !ok {
			ids = append(ids, h.ID)
			loaded[h.ID] = nil
		}
	}
	items, err := m.store.GetMany(ctx, ids)
	if err != nil {
		return err
	}
	for i := range items {
		if p.admits(&items[i]) {
			loaded[items[i].MemoryID] = &items[i]
		}
	}
	return nil
}

// page is ranked[offset:] as results, over the loaded memories.
func page(ranked []vector.Hit, offset int, loaded map[string]*memory.Item) []Result {
	out := []Result{}
	for i := offset; i < len(ranked); i++ {
		if it := loaded[ranked[i].ID]; it != nil {
			out = append(out, Result{Item: *it, Similarity: ranked[i].Score})
		}
	}
	return out
}

// fromCandidates selects the admitted memories in PostgreSQL and ranks them with the
// index's exact scores.
func (r *rankedSearch) fromCandidates(ctx context.Context) ([]Result, error) {
	q, p := r.q, r.p
	sc, ok := r.m.index.(vector.Scorer)
	if !ok {
		return nil, fmt.Errorf("memory service: search: the vector index (%T) cannot score chosen memories (vector.Scorer)", r.m.index)
	}
	var ids []string
	err := r.m.store.EachCandidate(ctx, pgstore.CandidateQuery{Scope: p.scope, Types: q.Types, KeyPrefix: q.KeyPrefix, Now: p.now, Content: q.Content},
		func(c pgstore.Candidate) error {
			if q.Admit == nil || q.Admit(c) {
				ids = append(ids, c.MemoryID)
			}
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("memory service: search: %w", err)
	}
	if len(ids) <= q.Offset {
		return []Result{}, nil // nothing on this page: not even an embedding call
	}
	vec, err := r.queryVector(ctx)
	if err != nil {
		return nil, err
	}
	k := r.need
	if k >= len(ids) {
		k = 0 // all
	}
	hits, err := sc.ScoreIDs(ctx, vector.Query{Scope: p.scope, Types: p.types, Vector: vec, K: k}, ids)
	if err != nil {
		return nil, fmt.Errorf("memory service: search: %w: %w", ErrIndexUnavailable, err)
	}
	hits = vector.RankHits(hits, k) // whatever the engine, one order
	if len(hits) <= q.Offset {
		return []Result{}, nil
	}
	hits = hits[q.Offset:]
	// Load the page. A memory written since it was selected is judged again: it
	// drops out rather than appear where it no longer belongs.
	loaded := map[string]*memory.Item{}
	if err := r.m.loadMany(ctx, p, hits, loaded); err != nil {
		return nil, fmt.Errorf("memory service: search: %w", err)
	}
	for id, it := range loaded {
		if it == nil {
			continue
		}
		c := pgstore.Candidate{MemoryID: it.MemoryID, Key: it.Key, Content: it.Content}
		if !strings.HasPrefix(it.Key, q.KeyPrefix) || (q.Admit != nil && !q.Admit(c)) {
			loaded[id] = nil
		}
	}
	return page(hits, 0, loaded), nil
}
