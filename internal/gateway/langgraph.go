package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/amemory/memory-operator/internal/langgraphns"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
)

// The LangGraph Store API, as LangGraph Platform serves it and langgraph_sdk's
// client.store calls it (research/gateway.md, 1a): items are (namespace, key, value)
// and map onto memories through the namespace rules (namespace.go). LangGraph items
// are semantic memories whose content is the item's value.

// LGSource is the source recorded on memories written through this API.
const LGSource = "langgraph-store-api"

// lgPut is PUT /store/items.
type lgPut struct {
	Namespace []string        `json:"namespace"`
	Key       string          `json:"key"`
	Value     json.RawMessage `json:"value"`
	// Index false (or a list of paths) is accepted; the gateway always indexes the
	// whole value (its embedding text covers every field).
	Index json.RawMessage `json:"index,omitempty"`
	// TTL in minutes.
	TTL *float64 `json:"ttl,omitempty"`
}

type lgDelete struct {
	Namespace []string `json:"namespace"`
	Key       string   `json:"key"`
}

type lgSearch struct {
	NamespacePrefix []string                   `json:"namespace_prefix"`
	Filter          map[string]json.RawMessage `json:"filter,omitempty"`
	Limit           *int                       `json:"limit,omitempty"`
	Offset          int                        `json:"offset,omitempty"`
	Query           *string                    `json:"query,omitempty"`
	RefreshTTL      *bool                      `json:"refresh_ttl,omitempty"`
}

type lgListNamespaces struct {
	Prefix   []string `json:"prefix,omitempty"`
	Suffix   []string `json:"suffix,omitempty"`
	MaxDepth *int     `json:"max_depth,omitempty"`
	Limit    *int     `json:"limit,omitempty"`
	Offset   int      `json:"offset,omitempty"`
}

// lgItem is LangGraph's Item (SearchItem with Score).
type lgItem struct {
	Namespace []string        `json:"namespace"`
	Key       string          `json:"key"`
	Value     json.RawMessage `json:"value"`
	CreatedAt string          `json:"created_at"`
	UpdatedAt string          `json:"updated_at"`
	Score     *float32        `json:"score,omitempty"`
}

func (s *Server) langgraphRoutes() {
	s.route("PUT /store/items", true, s.lgPutItem)
	s.route("GET /store/items", false, s.lgGetItem)
	s.route("DELETE /store/items", true, s.lgDeleteItem)
	s.route("POST /store/items/search", false, s.lgSearchItems)
	s.route("POST /store/namespaces", false, s.lgListNamespaces)
}

// lgSlot maps (namespace, key) to the memory slot, checked against the key.
func (s *Server) lgSlot(k *Key, ns []string, key string) (langgraphns.Slot, error) {
	if len(ns) == 0 {
		return langgraphns.Slot{}, errf(http.StatusUnprocessableEntity, CodeInvalidRequest, "namespace must not be empty")
	}
	if ns[0] == "langgraph" {
		return langgraphns.Slot{}, errf(http.StatusUnprocessableEntity, CodeInvalidRequest, `namespace may not start with "langgraph"`)
	}
	if key == "" {
		return langgraphns.Slot{}, errf(http.StatusUnprocessableEntity, CodeInvalidRequest, "key is required")
	}
	sl, err := s.ns.Slot(ns, key)
	if err != nil {
		return langgraphns.Slot{}, errf(http.StatusUnprocessableEntity, CodeInvalidScope, "%v", err)
	}
	if err := checkScope(k, sl.Scope); err != nil {
		return langgraphns.Slot{}, err
	}
	return sl, nil
}

func (s *Server) lgPutItem(w http.ResponseWriter, r *http.Request, k *Key) error {
	var req lgPut
	if err := decode(r, &req); err != nil {
		return err
	}
	sl, err := s.lgSlot(k, req.Namespace, req.Key)
	if err != nil {
		return err
	}
	now := time.Now()
	it := memory.Item{MemoryType: memory.Semantic, Scope: sl.Scope, Key: sl.Key, Content: req.Value,
		Source: LGSource, BaseScore: DefaultBaseScore, CreatedAt: now, UpdatedAt: now}
	if req.TTL != nil && *req.TTL > 0 {
		t := now.Add(time.Duration(*req.TTL * float64(time.Minute)))
		it.ExpiresAt = &t
	}
	it.SetDefaults(now)
	if err := it.Validate(); err != nil {
		return classify(err)
	}
	// A put to an existing item keeps its created_at (and memory_id): the store
	// supersedes the slot.
	if _, err := s.write(r.Context(), []memory.Item{it}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// namespaceParam reads GET's namespace: langgraph_sdk sends one dot-joined string,
// the agent-protocol spec a repeated parameter.
func namespaceParam(r *http.Request) []string {
	vals := r.URL.Query()["namespace"]
	if len(vals) == 1 {
		return strings.Split(vals[0], ".")
	}
	return vals
}

func (s *Server) lgGetItem(w http.ResponseWriter, r *http.Request, k *Key) error {
	ns := namespaceParam(r)
	sl, err := s.lgSlot(k, ns, r.URL.Query().Get("key"))
	if err != nil {
		return err
	}
	it, err := s.mem.Store().GetSlot(r.Context(), sl.Scope, sl.Key)
	if err != nil {
		return err
	}
	if it.ArchivedAt != nil || (it.ExpiresAt != nil && !it.ExpiresAt.After(time.Now())) {
		return pgstore.ErrNotFound
	}
	item, ok := s.lgItemOf(it, nil)
	if !ok {
		return pgstore.ErrNotFound
	}
	return writeJSON(w, http.StatusOK, item)
}

func (s *Server) lgDeleteItem(w http.ResponseWriter, r *http.Request, k *Key) error {
	var req lgDelete
	if err := decode(r, &req); err != nil {
		return err
	}
	sl, err := s.lgSlot(k, req.Namespace, req.Key)
	if err != nil {
		return err
	}
	it, err := s.mem.Store().GetSlot(r.Context(), sl.Scope, sl.Key)
	if errors.Is(err, pgstore.ErrNotFound) {
		w.WriteHeader(http.StatusNoContent) // LangGraph's delete is idempotent
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := s.mem.Delete(r.Context(), it.MemoryID, "gateway key "+k.Name); err != nil && !errors.Is(err, pgstore.ErrNotFound) {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// lgItemOf renders a memory as a LangGraph item; false when it has no namespace
// under the rules.
func (s *Server) lgItemOf(it memory.Item, score *float32) (lgItem, bool) {
	ns, key, ok := s.ns.Namespace(it.Scope, it.Key, it.MemoryID)
	if !ok {
		return lgItem{}, false
	}
	return lgItem{Namespace: ns, Key: key, Value: it.Content, Score: score,
		CreatedAt: it.CreatedAt.UTC().Format(time.RFC3339Nano), UpdatedAt: it.UpdatedAt.UTC().Format(time.RFC3339Nano)}, true
}

// maxFilterScan bounds how many memories a filtered listing reads.
const maxFilterScan = 100_000

func (s *Server) lgSearchItems(w http.ResponseWriter, r *http.Request, k *Key) error {
	var req lgSearch
	if err := decode(r, &req); err != nil {
		return err
	}
	limit := 10
	if req.Limit != nil {
		limit = *req.Limit
	}
	if limit < 1 || limit > pgstore.MaxListLimit || req.Offset < 0 {
		return errf(http.StatusUnprocessableEntity, CodeInvalidRequest, "limit must be in [1, %d] and offset >= 0", pgstore.MaxListLimit)
	}
	filter, err := compileFilter(req.Filter)
	if err != nil {
		return err
	}
	sl, rest, err := s.ns.Prefix(req.NamespacePrefix)
	if err != nil {
		return errf(http.StatusUnprocessableEntity, CodeInvalidScope, "%v", err)
	}
	if err := checkScope(k, sl.Scope); err != nil {
		return err
	}
	// Items must lie under the prefix: with labels past the rule's pattern, only keys
	// encoding those labels.
	under := func(it memory.Item) bool {
		got, _ := langgraphns.DecodeKey(sl.Wildcard(), it.Key)
		return len(got) >= len(rest) && langgraphns.EqualLabels(got[:len(rest)], rest)
	}
	var items []lgItem
	if req.Query != nil && strings.TrimSpace(*req.Query) != "" {
		items, err = s.lgSemantic(r.Context(), sl.Scope, *req.Query, under, filter, req.Offset, limit)
	} else {
		items, err = s.lgScan(r.Context(), sl.Scope, rest, under, filter, req.Offset, limit)
	}
	if err != nil {
		return err
	}
	if items == nil {
		items = []lgItem{}
	}
	return writeJSON(w, http.StatusOK, lgSearchResponse{Items: items})
}

// lgSemantic is a search with a query: the scope's semantic memories ranked as
// /v1/search ranks them, then narrowed to the prefix and filter.
func (s *Server) lgSemantic(ctx context.Context, scope, query string, under func(memory.Item) bool, filter func(json.RawMessage) bool, offset, limit int) ([]lgItem, error) {
	res, err := s.searchScope(ctx, scope, query, []memory.Type{memory.Semantic}, min(offset+limit, 100), -1e9)
	if err != nil {
		return nil, err
	}
	var items []lgItem
	skipped := 0
	for _, h := range res {
		if len(items) == limit {
			break
		}
		if !under(h.Memory) || !filter(h.Memory.Content) {
			continue
		}
		if skipped < offset {
			skipped++
			continue
		}
		sim := h.Similarity
		if it, ok := s.lgItemOf(h.Memory, &sim); ok {
			items = append(items, it)
		}
	}
	return items, nil
}

// lgScan lists the scope's semantic memories under the prefix in memory_id order,
// page by page, applying the filter.
func (s *Server) lgScan(ctx context.Context, scope string, rest []string, under func(memory.Item) bool, filter func(json.RawMessage) bool, offset, limit int) ([]lgItem, error) {
	keyPrefix := ""
	if len(rest) > 0 {
		b, _ := json.Marshal(rest)
		keyPrefix = string(b[:len(b)-1]) + ","
	}
	var items []lgItem
	after, skipped := "", 0
	for scanned := 0; len(items) < limit && scanned < maxFilterScan; {
		page, err := s.mem.Store().List(ctx, pgstore.ListQuery{Scope: scope, Types: []memory.Type{memory.Semantic},
			KeyPrefix: keyPrefix, After: after, Limit: pgstore.MaxListLimit})
		if err != nil {
			return nil, err
		}
		for _, m := range page {
			if len(items) == limit {
				break
			}
			if !under(m) || !filter(m.Content) {
				continue
			}
			if skipped < offset {
				skipped++
				continue
			}
			if it, ok := s.lgItemOf(m, nil); ok {
				items = append(items, it)
			}
		}
		scanned += len(page)
		if len(page) < pgstore.MaxListLimit {
			break
		}
		after = page[len(page)-1].MemoryID
	}
	return items, nil
}

// maxNamespaceScan bounds the (scope, key) pairs a namespace listing reads.
const maxNamespaceScan = 200_000

func (s *Server) lgListNamespaces(w http.ResponseWriter, r *http.Request, k *Key) error {
	var req lgListNamespaces
	if err := decode(r, &req); err != nil {
		return err
	}
	limit := 100
	if req.Limit != nil {
		limit = *req.Limit
	}
	if limit < 1 || limit > 10_000 || req.Offset < 0 || (req.MaxDepth != nil && *req.MaxDepth < 1) {
		return errf(http.StatusUnprocessableEntity, CodeInvalidRequest, "limit must be in [1, 10000], offset >= 0, max_depth >= 1")
	}
	pairs, err := s.mem.Store().ScopeKeys(r.Context(), "", "[", maxNamespaceScan)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	var out [][]string
	for _, p := range pairs {
		if !k.Allows(p.Scope) {
			continue
		}
		ns, _, ok := s.ns.Namespace(p.Scope, p.Key, "x")
		if !ok || !req.matches(ns) {
			continue
		}
		if req.MaxDepth != nil && len(ns) > *req.MaxDepth {
			ns = ns[:*req.MaxDepth]
		}
		if id := strings.Join(ns, "\x00"); !seen[id] {
			seen[id] = true
			out = append(out, ns)
		}
	}
	slices.SortFunc(out, func(a, b []string) int { return slices.Compare(a, b) })
	if req.Offset >= len(out) {
		out = nil
	} else {
		out = out[req.Offset:]
	}
	if len(out) > limit {
		out = out[:limit]
	}
	if out == nil {
		out = [][]string{}
	}
	return writeJSON(w, http.StatusOK, lgNamespacesResponse{Namespaces: out})
}

// matches applies the listing's prefix and suffix.
func (req lgListNamespaces) matches(ns []string) bool {
	if len(req.Prefix) > 0 && (len(ns) < len(req.Prefix) || !langgraphns.EqualLabels(ns[:len(req.Prefix)], req.Prefix)) {
		return false
	}
	return len(req.Suffix) == 0 || (len(ns) >= len(req.Suffix) && langgraphns.EqualLabels(ns[len(ns)-len(req.Suffix):], req.Suffix))
}

// compileFilter builds LangGraph's filter: each key of the value must equal the
// given JSON value, or satisfy {"$eq"|"$ne"|"$gt"|"$gte"|"$lt"|"$lte": v}.
func compileFilter(f map[string]json.RawMessage) (func(json.RawMessage) bool, error) {
	type cond struct {
		field, op string
		want      any
	}
	var conds []cond
	for field, raw := range f {
		var ops map[string]any
		if bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) && json.Unmarshal(raw, &ops) == nil && len(ops) > 0 && allOps(ops) {
			for op, v := range ops {
				conds = append(conds, cond{field, op, v})
			}
			continue
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, errf(http.StatusUnprocessableEntity, CodeInvalidRequest, "filter %q: %v", field, err)
		}
		conds = append(conds, cond{field, "$eq", v})
	}
	return func(content json.RawMessage) bool {
		if len(conds) == 0 {
			return true
		}
		var doc map[string]any
		if json.Unmarshal(content, &doc) != nil {
			return false
		}
		for _, c := range conds {
			got, ok := doc[c.field]
			if !ok || !compare(got, c.op, c.want) {
				return false
			}
		}
		return true
	}, nil
}

func allOps(m map[string]any) bool {
	for k := range m {
		switch k {
		case "$eq", "$ne", "$gt", "$gte", "$lt", "$lte":
		default:
			return false
		}
	}
	return true
}

func compare(got any, op string, want any) bool {
	switch op {
	case "$eq":
		return jsonEqual(got, want)
	case "$ne":
		return !jsonEqual(got, want)
	}
	var c int
	switch g := got.(type) {
	case float64:
		w, ok := want.(float64)
		if !ok {
			return false
		}
		c = cmpFloat(g, w)
	case string:
		w, ok := want.(string)
		if !ok {
			return false
		}
		c = strings.Compare(g, w)
	default:
		return false
	}
	switch op {
	case "$gt":
		return c > 0
	case "$gte":
		return c >= 0
	case "$lt":
		return c < 0
	case "$lte":
		return c <= 0
	}
	return false
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func jsonEqual(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}
