package service

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/amemory/memory-operator/internal/embed"
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
// Every score is the index's exact score (vector.Scorer) and every ranking
// vector.RankHits', so both paths give one order:
//   - Without narrowing, the admitted memories are the scope's live memories of the
//     types, which is what the index searches: the index's top Offset+Limit (and
//     rankSlack more), loaded in one query, asked again deeper while stale vectors
//     (of memories archived, expired or deleted since) leave too few or a tie may
//     straddle the cut, then scored exactly. One index search, one load and one
//     scoring in the common case. Exact when the index's own search is exhaustive
//     (the embedded index); over an HNSW graph (Milvus), as complete as the graph's
//     recall at that K.
//   - With narrowing, or deeper than the index's K allows, the candidates are
//     selected in PostgreSQL (one streamed query), scored by the index (one query on
//     the embedded index; Milvus reads their vectors), and the page loaded (one
//     query). The cost grows with the number of candidates, not with Offset.
//
// The index must implement vector.Scorer.
func (m *Memory) SearchRanked(ctx context.Context, q RankedQuery) ([]Result, error) {
	p, err := q.plan()
	if err != nil {
		return nil, fmt.Errorf("memory service: search: %w", err)
	}
	r := &rankedSearch{m: m, q: q, p: p, need: q.Offset + q.Limit}
	if q.Offset > math.MaxInt-q.Limit {
		r.need = math.MaxInt // past the end of any scope, never an overflow
	}
	if q.KeyPrefix == "" && q.Admit == nil && r.need <= vector.MaxK-rankSlack {
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
		vecs, err := r.m.embed(ctx, embed.Query, []string{r.q.Text})
		if err != nil {
			return nil, fmt.Errorf("memory service: search: %w", err)
		}
		r.vec = vecs[0]
	}
	return r.vec, nil
}

func (q RankedQuery) plan() (searchPlan, error) {
	// The caller's input: FieldErrors, as every refusal of a query.
	if q.Limit < 1 || q.Limit > MaxRankedLimit {
		return searchPlan{}, &memory.FieldError{Field: "limit", Reason: fmt.Sprintf("must be in [1, %d], got %d", MaxRankedLimit, q.Limit)}
	}
	if q.Offset < 0 {
		return searchPlan{}, &memory.FieldError{Field: "offset", Reason: fmt.Sprintf("must not be negative, got %d", q.Offset)}
	}
	// K is not used by the ranked paths; plan validates scope, text and types.
	return SearchQuery{Scope: q.Scope, Text: q.Text, Types: q.Types, K: 1, Now: q.Now}.plan()
}

// rankSlack is how many hits past the page fromIndex asks the index for, so that the
// last hit it sees usually scores clearly below the page's last (see tieEps).
const rankSlack = 16

// tieEps is how close two scores of one memory can be when one is the index's own
// (Milvus scores in float32) and the other exact.
const tieEps = 1e-5

// fromIndex pages the index's ranking of the scope, rescored exactly: the index's top
// need+rankSlack, asked again deeper while stale vectors leave fewer than need
// admitted, or while the index's last hit could still tie with the page's last (a
// memory it put past the cut would then belong in the page, ties going by ID); then
// the admitted hits are scored by the index's exact scorer and ranked. False when even
// the index's largest K is not enough (the caller then ranks the candidates).
func (r *rankedSearch) fromIndex(ctx context.Context) ([]Result, bool, error) {
	vec, err := r.queryVector(ctx)
	if err != nil {
		return nil, false, err
	}
	sc, ok := r.m.index.(vector.Scorer)
	if !ok {
		return nil, false, errNoScorer(r.m.index)
	}
	loaded := map[string]*memory.Item{} // nil: not a live memory of this search
	for fetch := min(r.need+rankSlack, vector.MaxK); ; fetch = min(2*fetch, vector.MaxK) {
		hits, err := r.m.index.Search(ctx, vector.Query{Scope: r.p.scope, Types: r.p.types, Vector: vec, K: fetch})
		if err != nil {
			return nil, false, fmt.Errorf("memory service: search: %w: %w", ErrIndexUnavailable, err)
		}
		if err := r.m.loadMany(ctx, r.p, hits, loaded); err != nil {
			return nil, false, fmt.Errorf("memory service: search: %w", err)
		}
		var admitted []string
		for _, h := range hits {
			if loaded[h.ID] != nil {
				admitted = append(admitted, h.ID)
			}
		}
		exhausted := len(hits) < fetch
		if len(admitted) >= r.need || exhausted {
			if len(admitted) <= r.q.Offset {
				return []Result{}, true, nil
			}
			exact, err := sc.ScoreIDs(ctx, vector.Query{Scope: r.p.scope, Types: r.p.types, Vector: vec, K: r.need}, admitted)
			if err != nil {
				return nil, false, fmt.Errorf("memory service: search: %w: %w", ErrIndexUnavailable, err)
			}
			if exhausted || len(exact) < r.need || hits[len(hits)-1].Score < exact[len(exact)-1].Score-tieEps {
				return page(exact, r.q.Offset, loaded), true, nil
			}
		}
		if fetch == vector.MaxK {
			return nil, false, nil
		}
	}
}

func errNoScorer(ix vector.Index) error {
	return fmt.Errorf("memory service: search: the vector index (%T) cannot score chosen memories (vector.Scorer)", ix)
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
		return nil, errNoScorer(r.m.index)
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
