package service

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/vector"
)

// How Search finds and ranks (docs/gateway.md, "How search ranks"):
//
//   - Two channels find candidates inside the scope. The dense channel is the vector
//     index searched with the query's embedding: it finds what means the same in
//     other words. The lexical channel is BM25 over the memories' terms in
//     PostgreSQL (pgstore.LexicalSearch): it finds the names, numbers, dates and rare
//     words a model blurs. Each ranks its live candidates 1, 2, 3, ...
//   - Reciprocal-rank fusion: a candidate's relevance is the sum over the channels
//     that found it of 1/(RRFK + rank) (RRFK = 60, Cormack, Clarke and Buettcher,
//     SIGIR 2009). Ranks need no calibration between a cosine and a BM25 score, so
//     the fusion holds for any model; a memory both channels find outranks one only
//     one of them finds at the same rank.
//   - Relevance decides. A memory's effective score (base score decayed by age, in
//     [0, 1]) adjusts it by at most RecencyWeight: score = relevance × (1 +
//     RecencyWeight × effective). That orders near-ties (the same ranks, or a rank
//     apart deep in a channel) by importance and freshness, and never buries a
//     memory that is clearly more relevant: at the top of a channel one rank is
//     worth 1.6% of relevance, more than the whole boost. An old memory that says
//     what was asked is still found.
//   - Ties go by relevance, then similarity, then memory_id: the order is fully
//     determined by the data.

// SearchMode picks the channels of a search.
type SearchMode string

// The search modes.
const (
	// Hybrid (the default) fuses the dense and the lexical channel.
	Hybrid SearchMode = "hybrid"
	// Dense searches the vector index only: the K most similar live memories.
	Dense SearchMode = "dense"
	// Lexical searches the lexical index only (BM25); the query is not embedded
	// unless MinSimilarity asks for similarities.
	Lexical SearchMode = "lexical"
)

// ParseSearchMode accepts "", "hybrid", "dense" and "lexical" ("" is Hybrid).
func ParseSearchMode(s string) (SearchMode, error) {
	switch m := SearchMode(s); m {
	case "":
		return Hybrid, nil
	case Hybrid, Dense, Lexical:
		return m, nil
	}
	return "", fmt.Errorf("unknown search mode %q (want hybrid, dense or lexical)", s)
}

// Ranking constants (see the top of this file).
const (
	// RRFK is reciprocal-rank fusion's k: a candidate at rank r of a channel adds
	// 1/(RRFK + r) to its relevance.
	RRFK = 60
	// RecencyWeight bounds how much a memory's effective score (in [0, 1]) can raise
	// its relevance: by at most this fraction.
	RecencyWeight = 0.01
)

// SearchQuery is a search inside one scope.
type SearchQuery struct {
	// Scope is required: a search never crosses scopes.
	Scope string
	// Text is what to look for.
	Text string
	// Types restricts the memory types; empty means all.
	Types []memory.Type
	// K is the maximum number of results, 1..MaxSearchK; 0 means DefaultSearchK.
	K int
	// Mode picks the channels; "" is Hybrid.
	Mode SearchMode
	// MinSimilarity, when set, leaves out every result less similar than it to the
	// query (the index's score: cosine for COSINE), whichever channel found it.
	MinSimilarity *float64
	// HalfLives decay the effective score that orders near-ties; nil means
	// memory.DefaultHalfLives().
	HalfLives memory.HalfLives
	// Now is the time expiry and decay are judged at; zero means time.Now().
	Now time.Time
	// Vector, when set, is Text's embedding, already computed (QueryVector; the
	// query cache embeds a query to compare it with cached ones): the search uses it
	// instead of embedding Text again.
	Vector []float32
}

// Result is one search result.
type Result struct {
	Item memory.Item
	// Similarity is the index's score of the memory against the query, higher is
	// more similar (for COSINE, the cosine similarity; see vector.Hit). It is known
	// when Why.HasSimilarity is set (always, except in Lexical mode without
	// MinSimilarity).
	Similarity float32
	// Why says how the result was found and ranked.
	Why Why
}

// Why is why a memory was returned: which channels found it, at which ranks, and the
// scores that ranked it.
type Why struct {
	// DenseRank and LexicalRank are the memory's 1-based ranks in the channels that
	// found it; 0 where a channel did not.
	DenseRank, LexicalRank int
	// LexicalScore is its BM25 score, MatchedTerms how many distinct query terms it
	// holds (both 0 when the lexical channel did not find it).
	LexicalScore float64
	MatchedTerms int
	// HasSimilarity reports whether Result.Similarity is known.
	HasSimilarity bool
	// Relevance is the fused relevance, Σ 1/(RRFK + rank) over the channels.
	Relevance float64
	// EffectiveScore is the memory's base score decayed by age at the search's Now.
	EffectiveScore float64
	// Score is the ranking key: Relevance × (1 + RecencyWeight × EffectiveScore).
	Score float64
}

// Channels names the channels that found the memory ("dense", "lexical").
func (w Why) Channels() []string {
	var out []string
	if w.DenseRank > 0 {
		out = append(out, "dense")
	}
	if w.LexicalRank > 0 {
		out = append(out, "lexical")
	}
	return out
}

// searchPlan is a validated SearchQuery with its defaults applied.
type searchPlan struct {
	scope    string
	k        int
	types    []string
	wantType map[memory.Type]bool
	now      time.Time
	mode     SearchMode
}

func (q SearchQuery) plan() (searchPlan, error) {
	p := searchPlan{scope: q.Scope, k: q.K, now: q.Now, wantType: map[memory.Type]bool{}}
	// Every refusal is a *memory.FieldError: it is the caller's input, never a
	// failure of the store.
	bad := func(field, format string, args ...any) error {
		return &memory.FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	if q.Scope == "" {
		return p, bad("scope", "is required")
	}
	if err := memory.ValidateScope(q.Scope); err != nil {
		return p, bad("scope", "%v", err)
	}
	if err := memory.CheckText(q.Text); err != nil {
		return p, bad("query", "%v", err)
	}
	if strings.TrimSpace(q.Text) == "" {
		return p, bad("query", "is empty (use Recall to rank without a query)")
	}
	if p.k == 0 {
		p.k = DefaultSearchK
	}
	if p.k < 0 || p.k > MaxSearchK {
		return p, bad("top_k", "must be in [1, %d], got %d", MaxSearchK, q.K)
	}
	for _, t := range q.Types {
		if err := t.Validate(); err != nil {
			return p, bad("types", "%v", err)
		}
		p.types = append(p.types, string(t))
		p.wantType[t] = true
	}
	mode, err := ParseSearchMode(string(q.Mode))
	if err != nil {
		return p, bad("mode", "%v", err)
	}
	p.mode = mode
	if ms := q.MinSimilarity; ms != nil && (math.IsNaN(*ms) || math.IsInf(*ms, 0)) {
		return p, bad("min_similarity", "must be a finite number")
	}
	if p.now.IsZero() {
		p.now = time.Now()
	}
	return p, nil
}

// admits repeats the index's scope and type filter (a result never crosses a tenant
// boundary, whatever the index returns) and drops archived and expired memories.
func (p searchPlan) admits(it *memory.Item) bool {
	switch {
	case it.Scope != p.scope, len(p.wantType) > 0 && !p.wantType[it.MemoryType]:
		return false
	case it.ArchivedAt != nil, it.ExpiresAt != nil && !it.ExpiresAt.After(p.now):
		return false
	}
	return true
}

// channelDepth is how many candidates each channel contributes to a search for k
// results: fusion needs more than k from each, or a memory ranked k+1 by both
// channels (often the right one) never meets the other channel's vote.
func channelDepth(k int) int { return max(4*k+16, 64) }

// candidate is one memory found by a search, with what the channels said.
type candidate struct {
	id  string
	sim float32
	why Why
}

// Search returns up to K live memories of q.Scope for q.Text, best first, ranked as
// described at the top of this file. Memories that are archived, expired at q.Now
// (expires_at <= Now) or no longer stored are left out: every candidate is loaded
// from PostgreSQL (one query for all of them) and judged there, so a stale vector
// can hide a result but never surface a forgotten or archived one. When stale
// vectors leave the dense channel fewer than K live memories, the index is asked
// again for more (up to 4 times the depth), so they do not crowd out live ones.
func (m *Memory) Search(ctx context.Context, q SearchQuery) ([]Result, error) {
	p, err := q.plan()
	if err != nil {
		return nil, fmt.Errorf("memory service: search: %w", err)
	}
	if d := m.index.Spec().Dimension; q.Vector != nil && len(q.Vector) != d {
		return nil, fmt.Errorf("memory service: search: %w", vector.DimensionError("the query vector", d, len(q.Vector)))
	}
	s := newSearch(m, q, p)
	if err := s.run(ctx); err != nil {
		return nil, fmt.Errorf("memory service: search: %w", err)
	}
	res, err := s.results(ctx)
	if err != nil {
		return nil, fmt.Errorf("memory service: search: %w", err)
	}
	return res, nil
}

// search is one Search call.
type search struct {
	m      *Memory
	q      SearchQuery
	p      searchPlan
	vec    []float32               // the query's embedding, once computed
	loaded map[string]*memory.Item // nil: not a live memory of this search
	found  map[string]*candidate
}

func newSearch(m *Memory, q SearchQuery, p searchPlan) *search {
	return &search{m: m, q: q, p: p, loaded: map[string]*memory.Item{}, found: map[string]*candidate{}}
}

// run asks both channels at once (the lexical query runs while the query is
// embedded and the index searched), loads every candidate in one query, and ranks
// each channel's live ones.
func (s *search) run(ctx context.Context) error {
	depth := channelDepth(s.p.k)
	// A query the embedder's input limit refuses is refused before anything runs.
	var text string
	needVec := s.p.mode != Lexical || s.q.MinSimilarity != nil
	if needVec && s.q.Vector == nil {
		var err error
		if text, _, err = s.m.limit.Prepare("the query", s.q.Text); err != nil {
			return err
		}
	}
	var lexical []pgstore.LexicalHit
	var dense []vector.Hit
	g, gctx := errgroup.WithContext(ctx)
	if s.p.mode != Dense {
		g.Go(func() error {
			var err error
			lexical, err = s.m.store.LexicalSearch(gctx, pgstore.LexicalQuery{Scope: s.p.scope, Types: s.q.Types, Text: s.q.Text, K: depth, Now: s.p.now})
			return err
		})
	}
	if needVec {
		g.Go(func() error {
			if s.vec = s.q.Vector; s.vec == nil {
				vecs, err := s.m.embed(gctx, embed.Query, []string{text})
				if err != nil {
					return err
				}
				s.vec = vecs[0]
			}
			if s.p.mode == Lexical {
				return nil
			}
			var err error
			dense, err = s.m.index.Search(gctx, vector.Query{Scope: s.p.scope, Types: s.p.types, Vector: s.vec, K: depth})
			if err != nil {
				return fmt.Errorf("%w: %w", ErrIndexUnavailable, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	ids := make([]string, 0, len(lexical)+len(dense))
	for _, h := range lexical {
		ids = append(ids, h.MemoryID)
	}
	for _, h := range dense {
		ids = append(ids, h.ID)
	}
	if err := s.load(ctx, ids); err != nil {
		return err
	}
	rank := 0
	for _, h := range lexical {
		if s.loaded[h.MemoryID] == nil {
			continue // changed since the lexical query: judged by its row
		}
		rank++
		c := s.candidate(h.MemoryID)
		c.why.LexicalRank, c.why.LexicalScore, c.why.MatchedTerms = rank, h.Score, h.Matched
	}
	if s.p.mode != Lexical {
		return s.rankDense(ctx, dense, depth)
	}
	return nil
}

func (s *search) candidate(id string) *candidate {
	c := s.found[id]
	if c == nil {
		c = &candidate{id: id}
		s.found[id] = c
	}
	return c
}

// rankDense ranks the index's hits (the first depth of them in hits, loaded) that
// are live memories of the search, asking the index for more while stale vectors
// leave fewer than K of them.
func (s *search) rankDense(ctx context.Context, hits []vector.Hit, depth int) error {
	limit := min(4*depth, vector.MaxK)
	for fetch := depth; ; {
		var live []vector.Hit
		seen := map[string]bool{}
		for _, h := range hits {
			if s.loaded[h.ID] != nil && !seen[h.ID] {
				seen[h.ID] = true
				live = append(live, h)
			}
		}
		if len(live) >= min(s.p.k, depth) || len(hits) < fetch || fetch >= limit {
			for i, h := range live[:min(len(live), depth)] {
				c := s.candidate(h.ID)
				c.why.DenseRank, c.sim, c.why.HasSimilarity = i+1, h.Score, true
			}
			return nil
		}
		fetch = min(2*fetch, limit)
		var err error
		if hits, err = s.m.index.Search(ctx, vector.Query{Scope: s.p.scope, Types: s.p.types, Vector: s.vec, K: fetch}); err != nil {
			return fmt.Errorf("%w: %w", ErrIndexUnavailable, err)
		}
		ids := make([]string, len(hits))
		for i, h := range hits {
			ids[i] = h.ID
		}
		if err := s.load(ctx, ids); err != nil {
			return err
		}
	}
}

// load loads the memories of ids not loaded yet, in one query, keeping those the
// search admits.
func (s *search) load(ctx context.Context, ids []string) error {
	var missing []string
	for _, id := range ids {
		if _, ok := s.loaded[id]; !ok {
			missing = append(missing, id)
			s.loaded[id] = nil
		}
	}
	if len(missing) == 0 {
		return nil
	}
	items, err := s.m.store.GetMany(ctx, missing)
	if err != nil {
		return err
	}
	for i := range items {
		if s.p.admits(&items[i]) {
			s.loaded[items[i].MemoryID] = &items[i]
		}
	}
	return nil
}

// results ranks the candidates and returns the first K, with the similarity of
// every result when the query was embedded.
func (s *search) results(ctx context.Context) ([]Result, error) {
	halfLives := s.q.HalfLives
	if halfLives == nil {
		halfLives = memory.DefaultHalfLives()
	}
	cands := make([]*candidate, 0, len(s.found))
	for _, c := range s.found {
		w := &c.why
		if w.DenseRank > 0 {
			w.Relevance += 1 / float64(RRFK+w.DenseRank)
		}
		if w.LexicalRank > 0 {
			w.Relevance += 1 / float64(RRFK+w.LexicalRank)
		}
		w.EffectiveScore = max(0, min(1, halfLives.Score(*s.loaded[c.id], s.p.now)))
		w.Score = w.Relevance * (1 + RecencyWeight*w.EffectiveScore)
		cands = append(cands, c)
	}
	// Every candidate needs its similarity when the caller filters by it; otherwise
	// only those on the page (found by the lexical channel alone) do.
	if s.q.MinSimilarity != nil {
		if err := s.similarities(ctx, cands); err != nil {
			return nil, err
		}
		floor := float32(*s.q.MinSimilarity)
		cands = slices.DeleteFunc(cands, func(c *candidate) bool { return !c.why.HasSimilarity || c.sim < floor })
	}
	slices.SortFunc(cands, func(a, b *candidate) int {
		return cmp.Or(cmp.Compare(b.why.Score, a.why.Score), cmp.Compare(b.why.Relevance, a.why.Relevance),
			cmp.Compare(b.sim, a.sim), strings.Compare(a.id, b.id))
	})
	cands = cands[:min(len(cands), s.p.k)]
	if s.vec != nil {
		if err := s.similarities(ctx, cands); err != nil {
			return nil, err
		}
	}
	out := make([]Result, len(cands))
	for i, c := range cands {
		out[i] = Result{Item: *s.loaded[c.id], Why: c.why}
		if c.why.HasSimilarity {
			out[i].Similarity = c.sim
		}
	}
	return out, nil
}

// similarities scores the candidates without a similarity against the query, in one
// call of the index's exact scorer. A candidate the index has no vector for yet
// (its index work still pending) keeps an unknown similarity: MinSimilarity leaves
// it out, and it sorts after known ones among exact ties.
func (s *search) similarities(ctx context.Context, cands []*candidate) error {
	var ids []string
	for _, c := range cands {
		if !c.why.HasSimilarity {
			ids = append(ids, c.id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	sc, ok := s.m.index.(vector.Scorer)
	if !ok {
		return errNoScorer(s.m.index)
	}
	hits, err := sc.ScoreIDs(ctx, vector.Query{Scope: s.p.scope, Types: s.p.types, Vector: s.vec}, ids)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrIndexUnavailable, err)
	}
	score := make(map[string]float32, len(hits))
	for _, h := range hits {
		score[h.ID] = h.Score
	}
	for _, c := range cands {
		if c.why.HasSimilarity {
			continue
		}
		if sim, ok := score[c.id]; ok {
			c.sim, c.why.HasSimilarity = sim, true
		} else {
			c.sim = float32(math.Inf(-1))
		}
	}
	return nil
}

// WindowQuery is a recall window: a session's latest turns, raw, plus what a search
// finds for the query (seed 000, 4.4: "the last 5 turns raw, then recall from the
// store").
type WindowQuery struct {
	// Session is the scope whose latest turns are returned; empty means
	// Search.Scope.
	Session string
	// Turns is how many (1..pgstore.MaxRecentTurns); its memories are the working
	// and episodic ones, or TurnTypes when set.
	Turns     int
	TurnTypes []memory.Type
	// Search is the search; its results never repeat a turn.
	Search SearchQuery
}

// Window returns the session's latest turns (oldest first) and up to Search.K search
// results that are not among them, best first. One snapshot of neither is promised:
// the two are read one after the other.
func (m *Memory) Window(ctx context.Context, q WindowQuery) (turns []memory.Item, results []Result, err error) {
	session := cmp.Or(q.Session, q.Search.Scope)
	if err := memory.ValidateScope(session); err != nil {
		return nil, nil, fmt.Errorf("memory service: recall window: %w", &memory.FieldError{Field: "session_scope", Reason: err.Error()})
	}
	if q.Turns < 1 || q.Turns > pgstore.MaxRecentTurns {
		return nil, nil, fmt.Errorf("memory service: recall window: %w", &memory.FieldError{Field: "recent_turns", Reason: fmt.Sprintf("must be in [1, %d], got %d", pgstore.MaxRecentTurns, q.Turns)})
	}
	sq := q.Search
	p, err := sq.plan()
	if err != nil {
		return nil, nil, fmt.Errorf("memory service: recall window: %w", err)
	}
	turns, err = m.store.Recent(ctx, pgstore.RecentQuery{Scope: session, Types: q.TurnTypes, Limit: q.Turns, Now: p.now})
	if err != nil {
		return nil, nil, fmt.Errorf("memory service: recall window: %w", err)
	}
	// Search deeper by as many turns as came back, so dropping them still leaves K.
	shown := make(map[string]bool, len(turns))
	for _, t := range turns {
		shown[t.MemoryID] = true
	}
	sq.K, sq.Now = p.k+len(turns), p.now
	deeper := p
	deeper.k = sq.K
	s := newSearch(m, sq, deeper)
	if err := s.run(ctx); err != nil {
		return nil, nil, fmt.Errorf("memory service: recall window: %w", err)
	}
	all, err := s.results(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("memory service: recall window: %w", err)
	}
	results = make([]Result, 0, p.k)
	for _, r := range all {
		if !shown[r.Item.MemoryID] && len(results) < p.k {
			results = append(results, r)
		}
	}
	return turns, results, nil
}
