package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/memory/service"
)

// The native API (/v1). Memories travel in the neutral format's field names
// (memory.Item); docs/gateway-openapi.json is the contract.

// NewMemory is one memory to remember.
type NewMemory struct {
	Scope      string          `json:"scope"`
	MemoryType memory.Type     `json:"memory_type"`
	Key        string          `json:"key,omitempty"`
	Content    json.RawMessage `json:"content"`
	// MemoryID is optional: a client-chosen ID makes a retried write idempotent. It is
	// made unique to the scope (see storedID): the response's memory_id is the one to
	// use afterwards.
	MemoryID string `json:"memory_id,omitempty"`
	Source   string `json:"source,omitempty"`
	// BaseScore is the importance, 0..memory.MaxBaseScore (default DefaultBaseScore).
	BaseScore *float64 `json:"base_score,omitempty" openapi:"minimum=0,maximum=1"`
	// ExpiresAt must be in the future.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// TTLSeconds sets expires_at relative to now: 1 up to memory.MaxTTL (100 years).
	TTLSeconds int64 `json:"ttl_seconds,omitempty" openapi:"minimum=1,maximum=3153600000"`
	// CreatedAt is the memory's own time, when it was said (default now): it may be
	// back-dated, never more than memory.MaxFutureSkew ahead of the server's clock. It
	// ranks and displays; what a forget covers is decided by recorded_at, the
	// server's clock.
	CreatedAt *time.Time `json:"created_at,omitempty"`
}

// DefaultBaseScore is a remembered memory's importance when the client gives none.
const DefaultBaseScore = 0.5

// item is the memory n asks for, or the field that makes it impossible: a TTL beyond
// memory.MaxTTL (which would overflow into an expiry in the past), an expiry already
// past, a base score outside [0, memory.MaxBaseScore], a client ID too long to carry
// the scope's tag. Every one of them would otherwise be an acknowledged write that is
// lost or wrong.
func (n NewMemory) item(now time.Time) (memory.Item, error) {
	bad := func(field, format string, args ...any) error {
		return &memory.FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	it := memory.Item{MemoryType: n.MemoryType, Scope: n.Scope, Key: n.Key,
		Content: n.Content, Source: cmp.Or(n.Source, "gateway"), BaseScore: DefaultBaseScore, ExpiresAt: n.ExpiresAt}
	if n.CreatedAt != nil {
		if n.CreatedAt.IsZero() {
			return it, bad("created_at", "is the zero time (leave it out for now)")
		}
		it.CreatedAt = *n.CreatedAt // pgstore refuses one too far ahead
	}
	if n.MemoryID != "" {
		id, err := storedID(n.Scope, n.MemoryID)
		if err != nil {
			return it, bad("memory_id", "%v", err)
		}
		it.MemoryID = id
	}
	if n.BaseScore != nil {
		if err := memory.ValidateBaseScore(*n.BaseScore); err != nil {
			return it, bad("base_score", "%v", err)
		}
		it.BaseScore = *n.BaseScore
	}
	if n.TTLSeconds != 0 {
		if n.ExpiresAt != nil {
			return it, bad("ttl_seconds", "give ttl_seconds or expires_at, not both")
		}
		d, err := memory.TTL(float64(n.TTLSeconds))
		if err != nil {
			return it, bad("ttl_seconds", "%v", err)
		}
		t := now.Add(d)
		it.ExpiresAt = &t
	}
	if it.ExpiresAt != nil && !it.ExpiresAt.After(now) {
		return it, bad("expires_at", "%s is not in the future: the memory would be expired on arrival", it.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return it, nil
}

// WriteResponse is one remembered memory's outcome.
type WriteResponse struct {
	MemoryID string `json:"memory_id"`
	// Outcome: inserted, superseded, unchanged (exact duplicate) or reinforced (a
	// near-duplicate raised the existing memory's score instead).
	Outcome string `json:"outcome"`
	// Indexed is false when the write is stored but its vector is still pending; it
	// becomes searchable once the gateway's background indexing catches up.
	Indexed    bool     `json:"indexed"`
	Similarity *float32 `json:"similarity,omitempty"`
}

// BatchRequest remembers up to MaxBatch memories.
type BatchRequest struct {
	Memories []NewMemory `json:"memories"`
}

// BatchResponse has one result per memory, in order.
type BatchResponse struct {
	Results []WriteResponse `json:"results"`
}

// UpdateRequest changes a memory; the previous value goes to its history.
type UpdateRequest struct {
	Content   json.RawMessage `json:"content,omitempty"`
	BaseScore *float64        `json:"base_score,omitempty" openapi:"minimum=0,maximum=1"`
	ExpiresAt *time.Time      `json:"expires_at,omitempty"`
	Source    string          `json:"source,omitempty"`
}

// ListResponse is a page of a scope's memories.
type ListResponse struct {
	Memories []memory.Item `json:"memories"`
	// NextAfter is the cursor of the next page ("" when this is the last).
	NextAfter string `json:"next_after"`
}

// SearchRequest is a search within one scope.
type SearchRequest struct {
	Scope string        `json:"scope"`
	Query string        `json:"query"`
	Types []memory.Type `json:"types,omitempty"`
	TopK  int           `json:"top_k,omitempty"`
	// Mode: hybrid (default: meaning and words, fused), dense (meaning only) or
	// lexical (words only, BM25).
	Mode string `json:"mode,omitempty" openapi:"enum=hybrid|dense|lexical"`
	// MinSimilarity leaves out results less similar than this to the query, whichever
	// channel found them (default: the store's --min-similarity, if any).
	MinSimilarity *float64 `json:"min_similarity,omitempty"`
}

// SearchResult is a memory with why it was returned.
type SearchResult struct {
	Memory memory.Item `json:"memory"`
	// Similarity to the query (cosine for COSINE stores); left out when unknown (a
	// lexical search without min_similarity does not embed the query).
	Similarity *float32 `json:"similarity,omitempty"`
	// EffectiveScore is base_score decayed by age with the type's half-life.
	EffectiveScore float64 `json:"effective_score"`
	// AgeSeconds is the time since updated_at.
	AgeSeconds float64 `json:"age_seconds"`
	// Relevance is the fused relevance: the sum over the channels that found the
	// memory of 1/(60 + its rank there).
	Relevance float64 `json:"relevance"`
	// Score is the ranking key: relevance × (1 + 0.01 × effective_score), so
	// importance and freshness order near-ties and never bury a more relevant memory.
	Score float64 `json:"score"`
	// Why names the channels that found the memory and its ranks there.
	Why SearchWhy `json:"why"`
}

// SearchWhy is how a search result was found.
type SearchWhy struct {
	// Channels: "dense" (the vector index), "lexical" (BM25 over its words), or both.
	Channels []string `json:"channels"`
	// DenseRank and LexicalRank are its 1-based ranks in those channels.
	DenseRank   int `json:"dense_rank,omitempty"`
	LexicalRank int `json:"lexical_rank,omitempty"`
	// LexicalScore is its BM25 score; MatchedTerms how many distinct query terms it has.
	LexicalScore float64 `json:"lexical_score,omitempty"`
	MatchedTerms int     `json:"matched_terms,omitempty"`
}

// SearchResponse lists results, best first (by score).
type SearchResponse struct {
	Results []SearchResult `json:"results"`
}

// RecallRequest ranks a scope's memories by effective score, or, with a query, is a
// search; either may come with the latest turns of a session (a recall window).
type RecallRequest struct {
	Scope    string        `json:"scope"`
	Types    []memory.Type `json:"types,omitempty"`
	Key      string        `json:"key,omitempty"`
	Limit    int           `json:"limit,omitempty"`
	MinScore float64       `json:"min_score,omitempty"`
	// Query, when set, makes the results a search (as /v1/search: top_k, mode and
	// min_similarity apply; key, limit and min_score do not).
	Query         string   `json:"query,omitempty"`
	TopK          int      `json:"top_k,omitempty"`
	Mode          string   `json:"mode,omitempty" openapi:"enum=hybrid|dense|lexical"`
	MinSimilarity *float64 `json:"min_similarity,omitempty"`
	// RecentTurns, when set, also returns the session's latest working and episodic
	// memories, raw, oldest first (recent); results then never repeat them.
	RecentTurns int `json:"recent_turns,omitempty" openapi:"minimum=0,maximum=100"`
	// SessionScope is the scope of those turns (default: scope).
	SessionScope string `json:"session_scope,omitempty"`
}

// RecallResult is a recalled memory; a recall with a query says why, as a search.
type RecallResult struct {
	Memory         memory.Item `json:"memory"`
	EffectiveScore float64     `json:"effective_score"`
	AgeSeconds     float64     `json:"age_seconds"`
	Similarity     *float32    `json:"similarity,omitempty"`
	Relevance      float64     `json:"relevance,omitempty"`
	Score          float64     `json:"score,omitempty"`
	Why            *SearchWhy  `json:"why,omitempty"`
}

// RecallResponse lists results, best first, and the recent turns asked for.
type RecallResponse struct {
	Recent  []memory.Item  `json:"recent,omitempty"`
	Results []RecallResult `json:"results"`
}

// ForgetRequest forgets a scope.
type ForgetRequest struct {
	Scope  string `json:"scope"`
	Reason string `json:"reason,omitempty"`
}

// ForgetResponse says what was forgotten.
type ForgetResponse struct {
	Scope       string    `json:"scope"`
	Deleted     int64     `json:"deleted"`
	ForgottenAt time.Time `json:"forgotten_at"`
}

// WhoAmI describes the caller's key.
type WhoAmI struct {
	Key      string   `json:"key"`
	Scopes   []string `json:"scopes"`
	ReadOnly bool     `json:"read_only"`
}

func (s *Server) nativeRoutes() {
	s.route("GET /v1/whoami", false, func(w http.ResponseWriter, _ *http.Request, k *Key) error {
		return writeJSON(w, http.StatusOK, WhoAmI{Key: k.Name, Scopes: k.Patterns(), ReadOnly: k.ReadOnly})
	})
	s.route("GET /v1/stats", false, s.stats)
	s.route("POST /v1/memories", true, s.remember)
	s.route("POST /v1/memories/batch", true, s.rememberBatch)
	s.route("GET /v1/memories/{id}", false, s.getMemory)
	s.route("PATCH /v1/memories/{id}", true, s.updateMemory)
	s.route("DELETE /v1/memories/{id}", true, s.deleteMemory)
	s.route("GET /v1/scopes/{scope}/memories", false, s.listScope)
	s.route("POST /v1/search", false, s.search)
	s.route("POST /v1/recall", false, s.recall)
	s.route("POST /v1/forget", true, s.forget)
	s.route("GET /v1/index/pending", false, s.listPending)
	s.route("POST /v1/index/retry", true, s.retryPending)
}

// write stores items already checked against the key and returns their outcomes.
func (s *Server) write(ctx context.Context, items []memory.Item) ([]WriteResponse, error) {
	res, err := s.mem.Write(ctx, items, service.WriteOptions{DedupThreshold: s.cfg.DedupThreshold})
	out := make([]WriteResponse, len(res))
	for i, wr := range res {
		out[i] = WriteResponse{MemoryID: wr.MemoryID, Outcome: string(wr.Outcome), Indexed: wr.Indexed}
		if wr.Outcome == service.Reinforced {
			sim := wr.Similarity
			out[i].Similarity = &sim
		}
		s.metrics.writes.WithLabelValues(string(wr.Outcome)).Inc()
		if !wr.Indexed {
			s.metrics.notIndexed.Inc()
		}
	}
	if err != nil {
		return out, err
	}
	return out, nil
}

func (s *Server) newItems(k *Key, in []NewMemory) ([]memory.Item, error) {
	now := time.Now()
	items := make([]memory.Item, len(in))
	at := func(i int, e *apiError) error {
		if len(in) > 1 {
			e.msg = "memories[" + strconv.Itoa(i) + "]: " + e.msg
		}
		return e
	}
	for i, n := range in {
		if err := checkScope(k, &n.Scope); err != nil {
			return nil, at(i, err.(*apiError))
		}
		it, err := n.item(now)
		if err == nil {
			items[i] = it
			items[i].SetDefaults(now)
			if err = items[i].Validate(); err == nil {
				// The store refuses it too; here, a batch is refused whole.
				err = items[i].CheckNotFuture(now)
			}
		}
		if err != nil {
			return nil, at(i, classify(err))
		}
	}
	return items, nil
}

func (s *Server) remember(w http.ResponseWriter, r *http.Request, k *Key) error {
	var req NewMemory
	if err := decode(r, &req); err != nil {
		return err
	}
	res, err := s.rememberOne(r.Context(), k, req)
	if err != nil {
		return err
	}
	code := http.StatusOK
	if res.Outcome == string(pgstore.Inserted) {
		code = http.StatusCreated
	}
	return writeJSON(w, code, res)
}

// rememberOne stores one memory for any door.
func (s *Server) rememberOne(ctx context.Context, k *Key, req NewMemory) (WriteResponse, error) {
	items, err := s.newItems(k, []NewMemory{req})
	if err != nil {
		return WriteResponse{}, err
	}
	res, err := s.write(ctx, items)
	if err != nil {
		return WriteResponse{}, err
	}
	return res[0], nil
}

func (s *Server) rememberBatch(w http.ResponseWriter, r *http.Request, k *Key) error {
	var req BatchRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	res, err := s.rememberMany(r.Context(), k, req.Memories)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, res)
}

// rememberMany stores a batch for any door.
func (s *Server) rememberMany(ctx context.Context, k *Key, memories []NewMemory) (BatchResponse, error) {
	switch {
	case len(memories) == 0:
		return BatchResponse{}, errf(http.StatusBadRequest, CodeInvalidRequest, "memories is empty")
	case len(memories) > MaxBatch:
		return BatchResponse{}, errf(http.StatusRequestEntityTooLarge, CodeBatchTooLarge, "a batch holds at most %d memories, got %d", MaxBatch, len(memories))
	}
	items, err := s.newItems(k, memories)
	if err != nil {
		return BatchResponse{}, err
	}
	res, err := s.write(ctx, items)
	if err != nil {
		// Part of the batch may be stored: say which, with the error.
		e := classify(inTime(ctx, err))
		e.msg += " (stored " + strconv.Itoa(len(res)) + " of " + strconv.Itoa(len(items)) + "; a retry of the whole batch is safe: stored memories come back unchanged)"
		return BatchResponse{}, e
	}
	return BatchResponse{Results: res}, nil
}

// memoryOf loads a memory the key may see; one outside its scopes is "not found", so
// a key learns nothing about other scopes.
func (s *Server) visible(ctx context.Context, k *Key, id string) (memory.Item, error) {
	if err := checkID("memory_id", id); err != nil {
		return memory.Item{}, err
	}
	it, err := s.mem.Store().Get(ctx, id)
	if err != nil {
		return memory.Item{}, err
	}
	if !k.Allows(it.Scope) {
		return memory.Item{}, pgstore.ErrNotFound
	}
	return it, nil
}

func (s *Server) getMemory(w http.ResponseWriter, r *http.Request, k *Key) error {
	it, err := s.visible(r.Context(), k, r.PathValue("id"))
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, it)
}

func (s *Server) updateMemory(w http.ResponseWriter, r *http.Request, k *Key) error {
	var req UpdateRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	it, err := s.update(r.Context(), k, r.PathValue("id"), req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, it)
}

// update changes a memory the key may see; the store keeps the previous value in its
// history (the same memory_id, or the same (scope, key) slot, supersedes).
func (s *Server) update(ctx context.Context, k *Key, id string, req UpdateRequest) (memory.Item, error) {
	if req.Content == nil && req.BaseScore == nil && req.ExpiresAt == nil && req.Source == "" {
		return memory.Item{}, errf(http.StatusBadRequest, CodeInvalidRequest, "nothing to update: give content, base_score, expires_at or source")
	}
	it, err := s.visible(ctx, k, id)
	if err != nil {
		return memory.Item{}, err
	}
	if req.Content != nil {
		it.Content = req.Content
	}
	if req.BaseScore != nil {
		if err := memory.ValidateBaseScore(*req.BaseScore); err != nil {
			return memory.Item{}, classify(&memory.FieldError{Field: "base_score", Reason: err.Error()})
		}
		it.BaseScore = *req.BaseScore
	}
	if req.ExpiresAt != nil {
		it.ExpiresAt = req.ExpiresAt
	}
	if req.Source != "" {
		it.Source = req.Source
	}
	it.UpdatedAt = time.Now()
	it.History = nil // the store appends the previous value
	if err := it.Validate(); err != nil {
		return memory.Item{}, classify(err)
	}
	if _, err := s.mem.Write(ctx, []memory.Item{it}, service.WriteOptions{}); err != nil {
		return memory.Item{}, err
	}
	return s.mem.Store().Get(ctx, it.MemoryID)
}

func (s *Server) deleteMemory(w http.ResponseWriter, r *http.Request, k *Key) error {
	if err := s.deleteOne(r.Context(), k, r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// deleteOne deletes a memory the key may see.
func (s *Server) deleteOne(ctx context.Context, k *Key, id string) error {
	if _, err := s.visible(ctx, k, id); err != nil {
		return err
	}
	_, err := s.mem.Delete(ctx, id, "gateway key "+k.Name)
	return err
}

func (s *Server) listScope(w http.ResponseWriter, r *http.Request, k *Key) error {
	q := r.URL.Query()
	limit, after, err := pageQuery(q)
	if err != nil {
		return err
	}
	resp, err := s.listPage(r.Context(), k, r.PathValue("scope"), q["type"], limit, after)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, resp)
}

// pageQuery reads a page's limit (default 100, at most pgstore.MaxListLimit) and its
// cursor (a memory_id, checked before it reaches the database).
func pageQuery(q url.Values) (limit int, after string, err error) {
	limit = 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > pgstore.MaxListLimit {
			return 0, "", errf(http.StatusBadRequest, CodeInvalidRequest, "limit must be an integer in [1, %d]", pgstore.MaxListLimit)
		}
		limit = n
	}
	if after = q.Get("after"); after != "" {
		if err := checkID("after", after); err != nil {
			return 0, "", err
		}
	}
	return limit, after, nil
}

// listPage is a page of a scope's memories for any door: limit 0 is the default
// (100), at most pgstore.MaxListLimit; after, the previous page's cursor, is checked
// before it reaches the database.
func (s *Server) listPage(ctx context.Context, k *Key, scope string, typeNames []string, limit int, after string) (ListResponse, error) {
	if err := checkScope(k, &scope); err != nil {
		return ListResponse{}, err
	}
	if limit == 0 {
		limit = 100
	}
	if limit < 1 || limit > pgstore.MaxListLimit {
		return ListResponse{}, errf(http.StatusBadRequest, CodeInvalidRequest, "limit must be an integer in [1, %d]", pgstore.MaxListLimit)
	}
	if after != "" {
		if err := checkID("after", after); err != nil {
			return ListResponse{}, err
		}
	}
	types, err := parseTypes(typeNames)
	if err != nil {
		return ListResponse{}, err
	}
	items, err := s.mem.Store().List(ctx, pgstore.ListQuery{Scope: scope, Types: types, After: after, Limit: limit})
	if err != nil {
		return ListResponse{}, err
	}
	resp := ListResponse{Memories: items}
	if resp.Memories == nil {
		resp.Memories = []memory.Item{}
	}
	if len(items) == limit {
		resp.NextAfter = items[len(items)-1].MemoryID
	}
	return resp, nil
}

func parseTypes(in []string) ([]memory.Type, error) {
	var out []memory.Type
	for _, v := range in {
		t := memory.Type(v)
		if err := t.Validate(); err != nil {
			return nil, errf(http.StatusBadRequest, CodeInvalidType, "%v", err)
		}
		out = append(out, t)
	}
	return out, nil
}

func validTypes(ts []memory.Type) error {
	for _, t := range ts {
		if err := t.Validate(); err != nil {
			return errf(http.StatusBadRequest, CodeInvalidType, "%v", err)
		}
	}
	return nil
}

// searchScope runs a semantic search as the seeds do: the top_k most similar (at least
// minSim) are loaded with their scores, then ranked by relevance (see SearchResult).
// searchQuery is a search's parameters, as every door takes them.
type searchQuery struct {
	scope, query, mode string
	types              []memory.Type
	topK               int
	minSimilarity      *float64
}

// check validates what the service does not: the mode's name and top_k's range
// (with the door's message).
func (q searchQuery) check() error {
	if _, err := service.ParseSearchMode(q.mode); err != nil {
		return errf(http.StatusBadRequest, CodeInvalidRequest, "mode: %v", err)
	}
	if q.topK < 0 || q.topK > service.MaxSearchK {
		return errf(http.StatusBadRequest, CodeInvalidRequest, "top_k must be in [1, %d]", service.MaxSearchK)
	}
	if ms := q.minSimilarity; ms != nil && (math.IsNaN(*ms) || math.IsInf(*ms, 0)) {
		return errf(http.StatusBadRequest, CodeInvalidRequest, "min_similarity must be a finite number")
	}
	return nil
}

// serviceQuery is q as the memory service takes it, the store's defaults applied.
func (s *Server) serviceQuery(q searchQuery, now time.Time) service.SearchQuery {
	minSim := q.minSimilarity
	if minSim == nil {
		minSim = s.cfg.MinSimilarity
	}
	return service.SearchQuery{Scope: q.scope, Text: q.query, Types: q.types, K: q.topK,
		Mode: service.SearchMode(q.mode), MinSimilarity: minSim, HalfLives: s.halfLives, Now: now}
}

// searchScope runs a search for any door and says why each result was returned.
func (s *Server) searchScope(ctx context.Context, q searchQuery) ([]SearchResult, error) {
	now := time.Now()
	var hits []service.Result
	var err error
	if s.cache != nil {
		hits, _, err = s.cache.Search(ctx, s.serviceQuery(q, now))
	} else {
		hits, err = s.mem.Search(ctx, s.serviceQuery(q, now))
	}
	if err != nil {
		return nil, err
	}
	return searchResults(hits, now), nil
}

// window is a search with the session's latest turns (see service.Memory.Window).
func (s *Server) window(ctx context.Context, q searchQuery, session string, turns int) ([]memory.Item, []SearchResult, error) {
	now := time.Now()
	recent, hits, err := s.mem.Window(ctx, service.WindowQuery{Session: session, Turns: turns, Search: s.serviceQuery(q, now)})
	if err != nil {
		return nil, nil, err
	}
	return recent, searchResults(hits, now), nil
}

// searchResults says why each result was returned.
func searchResults(hits []service.Result, now time.Time) []SearchResult {
	out := make([]SearchResult, len(hits))
	for i, h := range hits {
		out[i] = SearchResult{Memory: h.Item, EffectiveScore: h.Why.EffectiveScore, AgeSeconds: max(0, now.Sub(h.Item.UpdatedAt).Seconds()),
			Relevance: h.Why.Relevance, Score: h.Why.Score,
			Why: SearchWhy{Channels: h.Why.Channels(), DenseRank: h.Why.DenseRank, LexicalRank: h.Why.LexicalRank,
				LexicalScore: h.Why.LexicalScore, MatchedTerms: h.Why.MatchedTerms}}
		if h.Why.HasSimilarity {
			sim := h.Similarity
			out[i].Similarity = &sim
		}
	}
	return out
}

func (s *Server) search(w http.ResponseWriter, r *http.Request, k *Key) error {
	var req SearchRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	res, err := s.searchReq(r.Context(), k, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, res)
}

// searchReq is a search as the native API and gRPC take it.
func (s *Server) searchReq(ctx context.Context, k *Key, req SearchRequest) (SearchResponse, error) {
	if err := checkScope(k, &req.Scope); err != nil {
		return SearchResponse{}, err
	}
	if err := validTypes(req.Types); err != nil {
		return SearchResponse{}, err
	}
	if err := checkQuery(req.Query); err != nil {
		return SearchResponse{}, err
	}
	q := searchQuery{scope: req.Scope, query: req.Query, mode: req.Mode, types: req.Types, topK: req.TopK, minSimilarity: req.MinSimilarity}
	if err := q.check(); err != nil {
		return SearchResponse{}, err
	}
	res, err := s.searchScope(ctx, q)
	if err != nil {
		return SearchResponse{}, err
	}
	return SearchResponse{Results: res}, nil
}

func (s *Server) recall(w http.ResponseWriter, r *http.Request, k *Key) error {
	var req RecallRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	out, err := s.recallReq(r.Context(), k, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, out)
}

// recallReq is a recall as the native API and gRPC take it.
func (s *Server) recallReq(ctx context.Context, k *Key, req RecallRequest) (RecallResponse, error) {
	if err := checkScope(k, &req.Scope); err != nil {
		return RecallResponse{}, err
	}
	if err := validTypes(req.Types); err != nil {
		return RecallResponse{}, err
	}
	if req.RecentTurns < 0 || req.RecentTurns > pgstore.MaxRecentTurns {
		return RecallResponse{}, errf(http.StatusBadRequest, CodeInvalidRequest, "recent_turns must be in [0, %d]", pgstore.MaxRecentTurns)
	}
	session := cmp.Or(req.SessionScope, req.Scope)
	if req.SessionScope != "" {
		if req.RecentTurns == 0 {
			return RecallResponse{}, errf(http.StatusBadRequest, CodeInvalidRequest, "session_scope needs recent_turns")
		}
		if err := checkScope(k, &session); err != nil {
			return RecallResponse{}, err
		}
	}
	if req.Query != "" {
		return s.recallSearch(ctx, req, session)
	}
	return s.recallRanked(ctx, req, session)
}

// recallRanked is a recall without a query: the scope's memories by effective score,
// with the session's latest turns when asked for.
func (s *Server) recallRanked(ctx context.Context, req RecallRequest, session string) (RecallResponse, error) {
	if req.TopK != 0 || req.Mode != "" || req.MinSimilarity != nil {
		return RecallResponse{}, errf(http.StatusBadRequest, CodeInvalidRequest, "top_k, mode and min_similarity need a query")
	}
	if req.Limit < 0 || req.Limit > pgstore.MaxListLimit {
		return RecallResponse{}, errf(http.StatusBadRequest, CodeInvalidRequest, "limit must be in [1, %d]", pgstore.MaxListLimit)
	}
	if err := memory.ValidateKey(req.Key); err != nil {
		return RecallResponse{}, errf(http.StatusBadRequest, CodeInvalidRequest, "key: %v", err)
	}
	now := time.Now()
	var out RecallResponse
	shown := map[string]bool{}
	if req.RecentTurns > 0 {
		turns, err := s.mem.Store().Recent(ctx, pgstore.RecentQuery{Scope: session, Limit: req.RecentTurns, Now: now})
		if err != nil {
			return RecallResponse{}, err
		}
		out.Recent = turns
		for _, t := range turns {
			shown[t.MemoryID] = true
		}
	}
	limit := cmp.Or(req.Limit, pgstore.DefaultRecallLimit)
	res, err := s.mem.Recall(ctx, pgstore.RecallQuery{Scope: req.Scope, Types: req.Types, Key: req.Key,
		Limit: limit + len(shown), MinScore: req.MinScore, Now: now, HalfLives: s.halfLives})
	if err != nil {
		return RecallResponse{}, err
	}
	out.Results = make([]RecallResult, 0, min(len(res), limit))
	for _, sc := range res {
		if !shown[sc.MemoryID] && len(out.Results) < limit {
			out.Results = append(out.Results, RecallResult{Memory: sc.Item, EffectiveScore: sc.Score, AgeSeconds: max(0, now.Sub(sc.UpdatedAt).Seconds())})
		}
	}
	return out, nil
}

// recallSearch is a recall with a query: a search, with the session's latest turns
// when asked for.
func (s *Server) recallSearch(ctx context.Context, req RecallRequest, session string) (RecallResponse, error) {
	if req.Key != "" || req.Limit != 0 || req.MinScore != 0 {
		return RecallResponse{}, errf(http.StatusBadRequest, CodeInvalidRequest, "key, limit and min_score rank without a query; with a query use top_k (and min_similarity)")
	}
	if err := checkQuery(req.Query); err != nil {
		return RecallResponse{}, err
	}
	q := searchQuery{scope: req.Scope, query: req.Query, mode: req.Mode, types: req.Types, topK: req.TopK, minSimilarity: req.MinSimilarity}
	if err := q.check(); err != nil {
		return RecallResponse{}, err
	}
	var out RecallResponse
	var found []SearchResult
	var err error
	if req.RecentTurns > 0 {
		out.Recent, found, err = s.window(ctx, q, session, req.RecentTurns)
	} else {
		found, err = s.searchScope(ctx, q)
	}
	if err != nil {
		return RecallResponse{}, err
	}
	out.Results = make([]RecallResult, len(found))
	for i, f := range found {
		out.Results[i] = RecallResult{Memory: f.Memory, EffectiveScore: f.EffectiveScore, AgeSeconds: f.AgeSeconds,
			Similarity: f.Similarity, Relevance: f.Relevance, Score: f.Score, Why: &found[i].Why}
	}
	return out, nil
}

func (s *Server) forget(w http.ResponseWriter, r *http.Request, k *Key) error {
	var req ForgetRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	res, err := s.forgetReq(r.Context(), k, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, res)
}

// forgetReq is a forget as the native API and gRPC take it.
func (s *Server) forgetReq(ctx context.Context, k *Key, req ForgetRequest) (ForgetResponse, error) {
	if err := checkScope(k, &req.Scope); err != nil {
		return ForgetResponse{}, err
	}
	if err := checkReason(req.Reason); err != nil {
		return ForgetResponse{}, err
	}
	res, err := s.forgetScope(ctx, k, req.Scope, req.Reason)
	if err != nil {
		return ForgetResponse{}, err
	}
	return ForgetResponse{Scope: req.Scope, Deleted: res.Deleted, ForgottenAt: res.ForgottenAt}, nil
}

// forgetScope forgets a scope. The forget is in the system of record once
// pgstore.Forget commits; vectors left behind (the index down) are only a cost, as
// search never returns forgotten memories, and the next forget of the scope or the
// drainer's pass removes them.
//
// The scope's sessions go first (service.Sessions): a short-term tier that does not
// answer refuses the forget (503 short_term_unavailable) before anything is
// forgotten, so no turn of a forgotten user outlives the forget or is promoted after it.
func (s *Server) forgetScope(ctx context.Context, k *Key, scope, reason string) (pgstore.ForgetResult, error) {
	if _, err := s.sessions.ClearScope(ctx, scope); err != nil {
		return pgstore.ForgetResult{}, err
	}
	res, err := s.mem.Forget(ctx, scope, reason, "gateway key "+k.Name)
	if err != nil && errors.Is(err, service.ErrVectorsNotDeleted) {
		s.log.Warn("forget: scope forgotten, its vectors not yet deleted", "scope", scope, "error", err.Error())
		return res, nil
	}
	return res, err
}
