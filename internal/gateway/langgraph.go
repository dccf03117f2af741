package gateway

import (
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
	NamespacePrefix []string `json:"namespace_prefix"`
	// Filter is an object of fields (see langgraph_filter.go); raw, so that numbers
	// keep their exact value.
	Filter     json.RawMessage `json:"filter,omitempty"`
	Limit      *int            `json:"limit,omitempty"`
	Offset     int             `json:"offset,omitempty"`
	Query      *string         `json:"query,omitempty"`
	RefreshTTL *bool           `json:"refresh_ttl,omitempty"`
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
	if err := lgCheckLabels("namespace", ns); err != nil {
		return langgraphns.Slot{}, err
	}
	if err := memory.CheckText(key); err != nil {
		return langgraphns.Slot{}, errf(http.StatusUnprocessableEntity, CodeInvalidRequest, "key %v", err)
	}
	sl, err := s.ns.Slot(ns, key)
	if err != nil {
		return langgraphns.Slot{}, errf(http.StatusUnprocessableEntity, CodeInvalidScope, "%v", err)
	}
	if err := checkScope(k, &sl.Scope); err != nil {
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
	if req.TTL != nil {
		// The native door's rule (memory.TTL): more than 0 and at most MaxTTL, so no
		// TTL overflows into a memory expired on arrival. No ttl (or null): no expiry.
		d, err := memory.TTL(*req.TTL * 60)
		if err != nil {
			return errf(http.StatusUnprocessableEntity, CodeInvalidRequest, "ttl (minutes) %v", err)
		}
		t := now.Add(d)
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

// maxNamespaceScan bounds the (scope, key) pairs a namespace listing reads.
const maxNamespaceScan = 200_000

// check refuses a listing's bad paging and labels, and returns its limit.
func (req lgListNamespaces) check() (int, error) {
	limit := 100
	if req.Limit != nil {
		limit = *req.Limit
	}
	if limit < 1 || limit > 10_000 || req.Offset < 0 || req.Offset > MaxLGOffset || (req.MaxDepth != nil && *req.MaxDepth < 1) {
		return 0, errf(http.StatusUnprocessableEntity, CodeInvalidRequest, "limit must be in [1, 10000], offset in [0, %d], max_depth >= 1", MaxLGOffset)
	}
	if err := lgCheckLabels("prefix", req.Prefix); err != nil {
		return 0, err
	}
	return limit, lgCheckLabels("suffix", req.Suffix)
}

// page is out[offset:offset+limit], never nil.
func page(out [][]string, offset, limit int) [][]string {
	if offset >= len(out) {
		return [][]string{}
	}
	out = out[offset:]
	return out[:min(limit, len(out))]
}

func (s *Server) lgListNamespaces(w http.ResponseWriter, r *http.Request, k *Key) error {
	var req lgListNamespaces
	if err := decode(r, &req); err != nil {
		return err
	}
	limit, err := req.check()
	if err != nil {
		return err
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
	return writeJSON(w, http.StatusOK, lgNamespacesResponse{Namespaces: page(out, req.Offset, limit)})
}

// matches applies the listing's prefix and suffix, "*" matching any one label.
func (req lgListNamespaces) matches(ns []string) bool {
	return langgraphns.MatchPrefix(ns, req.Prefix) && langgraphns.MatchSuffix(ns, req.Suffix)
}

// lgCheckLabels applies the text rule every door applies (memory.CheckText: valid
// UTF-8, no NUL) to namespace labels, before any of them reaches a query.
func lgCheckLabels(what string, labels []string) error {
	for _, l := range labels {
		if err := memory.CheckText(l); err != nil {
			return errf(http.StatusUnprocessableEntity, CodeInvalidRequest, "%s label %q %v", what, l, err)
		}
	}
	return nil
}
