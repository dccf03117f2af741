package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/amemory/memory-operator/internal/langgraphns"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/memory/service"
	"github.com/amemory/memory-operator/internal/vector"
)

// POST /store/items/search, as LangGraph defines it: the namespace prefix and the
// filter choose the items, then they are ranked (by similarity to the query, or in
// memory_id order without one) and paged. Paging is exact at any depth: the page
// [offset, offset+limit) of the ranking of every admitted item.

// MaxLGOffset is the largest offset a LangGraph search or namespace listing takes:
// deeper than any scope, and far from overflowing offset + limit.
const MaxLGOffset = 1_000_000_000

// lgDefaultLimit is LangGraph's default page (SearchOp.limit).
const lgDefaultLimit = 10

func (s *Server) lgSearchItems(w http.ResponseWriter, r *http.Request, k *Key) error {
	var req lgSearch
	if err := decode(r, &req); err != nil {
		return err
	}
	limit := lgDefaultLimit
	if req.Limit != nil {
		limit = *req.Limit
	}
	if limit < 1 || limit > service.MaxRankedLimit || req.Offset < 0 || req.Offset > MaxLGOffset {
		return errf(http.StatusUnprocessableEntity, CodeInvalidRequest, "limit must be in [1, %d] and offset in [0, %d]", service.MaxRankedLimit, MaxLGOffset)
	}
	if err := lgCheckLabels("namespace_prefix", req.NamespacePrefix); err != nil {
		return err
	}
	query := ""
	if req.Query != nil {
		if err := memory.CheckText(*req.Query); err != nil {
			return errf(http.StatusUnprocessableEntity, CodeInvalidRequest, "query %v", err)
		}
		query = strings.TrimSpace(*req.Query)
	}
	filter, err := compileFilter(req.Filter)
	if err != nil {
		return err
	}
	sl, rest, err := s.ns.Prefix(req.NamespacePrefix)
	if err != nil {
		return errf(http.StatusUnprocessableEntity, CodeInvalidScope, "%v", err)
	}
	if err := checkScope(k, &sl.Scope); err != nil {
		return err
	}
	sel := lgSelection{scope: sl.Scope, filter: filter, offset: req.Offset, limit: limit, now: time.Now()}
	if len(rest) > 0 {
		// Items under the prefix have keys encoding its labels (langgraphns): the key
		// prefix narrows in SQL, the decoded labels decide.
		b, _ := json.Marshal(rest) // strings: cannot fail
		sel.keyPrefix = string(b[:len(b)-1]) + ","
		sel.under = func(key string) bool {
			got, _ := langgraphns.DecodeKey(sl.Wildcard(), key)
			return len(got) >= len(rest) && langgraphns.EqualLabels(got[:len(rest)], rest)
		}
	}
	var items []lgItem
	if query != "" {
		items, err = s.lgRanked(r.Context(), sel, query)
	} else {
		items, err = s.lgListed(r.Context(), sel)
	}
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, lgSearchResponse{Items: items})
}

// lgSelection is what a search admits, and the page it asks for.
type lgSelection struct {
	scope     string
	keyPrefix string            // "" for the whole scope
	under     func(string) bool // nil for the whole scope
	filter    lgFilter
	offset    int
	limit     int
	now       time.Time
}

// admit is the selection's judgement of one memory, or nil when it admits every
// semantic memory of the scope.
func (sel lgSelection) admit() func(pgstore.Candidate) bool {
	if sel.under == nil && sel.filter == nil {
		return nil
	}
	return func(c pgstore.Candidate) bool {
		return (sel.under == nil || sel.under(c.Key)) && sel.filter.matches(c.Content)
	}
}

// lgRanked is a search with a query: the admitted items ranked exactly by similarity
// (LangGraph's score, what InMemoryStore ranks by), most similar first.
func (s *Server) lgRanked(ctx context.Context, sel lgSelection, query string) ([]lgItem, error) {
	res, err := s.mem.SearchRanked(ctx, service.RankedQuery{Scope: sel.scope, Types: []memory.Type{memory.Semantic},
		KeyPrefix: sel.keyPrefix, Admit: sel.admit(), Content: sel.filter != nil, Text: query,
		Offset: sel.offset, Limit: sel.limit, Now: sel.now})
	if err != nil {
		return nil, err
	}
	items := make([]lgItem, 0, len(res))
	for _, h := range res {
		sim := h.Similarity
		if it, ok := s.lgItemOf(h.Item, &sim); ok {
			items = append(items, it)
		}
	}
	return items, nil
}

// lgListed is a search without a query: the admitted items in memory_id order (the
// order they were first written), paged. The whole scope is one paged query; a
// narrowed one streams the candidates' IDs (and content, for a filter) in one query
// and loads the page in another.
func (s *Server) lgListed(ctx context.Context, sel lgSelection) ([]lgItem, error) {
	admit := sel.admit()
	var page []memory.Item
	if admit == nil {
		var err error
		page, err = s.mem.Store().List(ctx, pgstore.ListQuery{Scope: sel.scope, Types: []memory.Type{memory.Semantic},
			Limit: sel.limit, Offset: sel.offset, Now: sel.now})
		if err != nil {
			return nil, err
		}
	} else {
		var ids []string
		skipped := 0
		err := s.mem.Store().EachCandidate(ctx, pgstore.CandidateQuery{Scope: sel.scope, Types: []memory.Type{memory.Semantic},
			KeyPrefix: sel.keyPrefix, Now: sel.now, Content: sel.filter != nil}, func(c pgstore.Candidate) error {
			if !admit(c) {
				return nil
			}
			if skipped < sel.offset {
				skipped++
				return nil
			}
			ids = append(ids, c.MemoryID)
			if len(ids) == sel.limit {
				return pgstore.ErrStop
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		loaded, err := s.mem.Store().GetMany(ctx, ids)
		if err != nil {
			return nil, err
		}
		// A memory changed since it was selected is judged again.
		for _, it := range loaded {
			if it.ArchivedAt == nil && (it.ExpiresAt == nil || it.ExpiresAt.After(sel.now)) &&
				admit(pgstore.Candidate{MemoryID: it.MemoryID, Key: it.Key, Content: it.Content}) {
				page = append(page, it)
			}
		}
	}
	items := make([]lgItem, 0, len(page))
	for _, m := range page {
		if it, ok := s.lgItemOf(m, nil); ok {
			items = append(items, it)
		}
	}
	return items, nil
}

// ScoreIDs lets the gateway's index wrapper serve narrowed searches (vector.Scorer),
// with the same bounds and outage memory as its other calls.
func (l *lazyIndex) ScoreIDs(ctx context.Context, q vector.Query, ids []string) (hits []vector.Hit, err error) {
	err = l.do(ctx, func(ctx context.Context, ix vector.Index) error {
		sc, ok := ix.(vector.Scorer)
		if !ok {
			return fmt.Errorf("the %T index cannot score chosen memories", ix)
		}
		hits, err = sc.ScoreIDs(ctx, q, ids)
		return err
	})
	return hits, err
}
