package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/langgraphns"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/vector"
)

// lgFixture is a scope written as LangGraph items (through the native batch API, with
// the keys the namespace rules give them, so thousands are written quickly), and the
// oracle that says what a LangGraph search over it must return.
type lgFixture struct {
	t    *testing.T
	e    *env
	key  string
	ns   *langgraphns.Mapper
	mems []memory.Item // every memory of the scope, as stored
}

// lgValue is the value of a fixture item.
type lgValue struct {
	Text string `json:"text"`
	Tag  string `json:"tag"`
	N    int    `json:"n"`
}

func newLGFixture(t *testing.T, engine string) *lgFixture {
	k := newTestKey(t, "k", false, "*")
	e := newEnv(t, envOptions{keys: []testKey{k}, engine: engine})
	ns, err := langgraphns.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &lgFixture{t: t, e: e, key: k.plain, ns: ns}
}

// put writes items (namespace, key, value) in batches, as semantic memories: what a
// LangGraph put of them stores.
func (f *lgFixture) put(items []lgPutItem) {
	f.t.Helper()
	for start := 0; start < len(items); start += 500 {
		var batch BatchRequest
		for _, it := range items[start:min(start+500, len(items))] {
			sl, err := f.ns.Slot(it.ns, it.key)
			if err != nil {
				f.t.Fatal(err)
			}
			batch.Memories = append(batch.Memories, NewMemory{Scope: sl.Scope, MemoryType: memory.Semantic, Key: sl.Key,
				Content: json.RawMessage(mustJSON(f.t, it.value)), Source: LGSource})
		}
		f.e.must(200, f.key, "POST", "/v1/memories/batch", batch, nil)
	}
}

type lgPutItem struct {
	ns    []string
	key   string
	value any
}

// load reads back every memory of scope (all types), for the oracle.
func (f *lgFixture) load(scope string) {
	f.t.Helper()
	f.mems = nil
	after := ""
	for {
		var l ListResponse
		f.e.must(200, f.key, "GET", "/v1/scopes/"+scope+"/memories?limit=1000&after="+url.QueryEscape(after), nil, &l)
		f.mems = append(f.mems, l.Memories...)
		if l.NextAfter == "" {
			return
		}
		after = l.NextAfter
	}
}

// lgHit is a search result as the tests compare it.
type lgHit struct {
	NS    string
	Key   string
	Score float32
}

// exact is what LangGraph's semantics give: the scope's semantic memories whose
// namespace starts with prefix and whose value passes admit, scored against query
// with the store's embedder (cosine), best first (ties by memory_id), then paged.
// Without a query: the same memories in memory_id order, unscored.
func (f *lgFixture) exact(prefix []string, query string, admit func(lgValue) bool, offset, limit int) []lgHit {
	f.t.Helper()
	type cand struct {
		id  string
		hit lgHit
	}
	var cands []cand
	var texts []string
	for _, m := range f.mems {
		if m.MemoryType != memory.Semantic {
			continue
		}
		ns, key, ok := f.ns.Namespace(m.Scope, m.Key, m.MemoryID)
		if !ok || len(ns) < len(prefix) || !slices.Equal(ns[:len(prefix)], prefix) {
			continue
		}
		var v lgValue
		if err := json.Unmarshal(m.Content, &v); err != nil {
			f.t.Fatal(err)
		}
		if admit != nil && !admit(v) {
			continue
		}
		cands = append(cands, cand{id: m.MemoryID, hit: lgHit{NS: strings.Join(ns, "/"), Key: key}})
		texts = append(texts, m.EmbeddingText())
	}
	if query != "" && len(cands) > 0 {
		h := embed.NewHashing(testDim)
		vecs, err := h.Embed(context.Background(), embed.Passage, append(texts, query))
		if err != nil {
			f.t.Fatal(err)
		}
		q := vector.Prepare(vector.Cosine, vecs[len(vecs)-1])
		for i := range cands {
			cands[i].hit.Score = vector.Score(vector.Cosine, vector.Prepare(vector.Cosine, vecs[i]), q)
		}
	}
	slices.SortFunc(cands, func(a, b cand) int {
		return cmp.Or(cmp.Compare(b.hit.Score, a.hit.Score), strings.Compare(a.id, b.id))
	})
	out := []lgHit{}
	for i := offset; i < len(cands) && i < offset+limit; i++ {
		out = append(out, cands[i].hit)
	}
	return out
}

// search runs a LangGraph search through the gateway.
func (f *lgFixture) search(body map[string]any) []lgHit {
	f.t.Helper()
	var sr lgSearchResponse
	f.e.must(200, f.key, "POST", "/store/items/search", body, &sr)
	out := []lgHit{}
	for _, it := range sr.Items {
		h := lgHit{NS: strings.Join(it.Namespace, "/"), Key: it.Key}
		if it.Score != nil {
			h.Score = *it.Score
		}
		out = append(out, h)
	}
	return out
}

// same reports the first difference between two result lists ("" when they agree;
// scores within float32 rounding).
func same(got, want []lgHit) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d results, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.NS != w.NS || g.Key != w.Key || math.Abs(float64(g.Score-w.Score)) > 1e-5 {
			return fmt.Sprintf("result %d is %+v, want %+v", i, g, w)
		}
	}
	return ""
}

// TestGuaranteeLangGraphSearchNarrowsBeforeRanking: a search in a sub-namespace ranks the
// items of that sub-namespace (and of the filter), not the top hits of the whole
// scope narrowed afterwards. The case of issue 20: 150 items elsewhere in the scope
// are more similar to the query than any family item, and the family search must
// still return its 3 best.
func TestGuaranteeLangGraphSearchNarrowsBeforeRanking(t *testing.T) {
	forEachEngine(t, testLangGraphSearchNarrowsBeforeRanking)
}

func testLangGraphSearchNarrowsBeforeRanking(t *testing.T, engine string) {
	f := newLGFixture(t, engine)
	var items []lgPutItem
	for i := range 150 {
		items = append(items, lgPutItem{[]string{"memories", "u1", "work"}, fmt.Sprintf("w%d", i),
			lgValue{Text: fmt.Sprintf("family members meeting agenda %d", i), Tag: "work", N: i}})
	}
	for i, text := range []string{"family: sister Ann", "family: brother Tom plays chess", "the family dinner on Sunday", "our family dog Rex", "grandmother visits the family"} {
		items = append(items, lgPutItem{[]string{"memories", "u1", "family"}, fmt.Sprintf("f%d", i), lgValue{Text: text, Tag: "family", N: i}})
	}
	f.put(items)
	f.load("user:u1")

	family := []string{"memories", "u1", "family"}
	for _, tc := range []struct {
		name          string
		prefix        []string
		filter        map[string]any
		admit         func(lgValue) bool
		offset, limit int
	}{
		{name: "family, limit 3", prefix: family, limit: 3},
		{name: "family, fewer than limit", prefix: family, limit: 10},
		{name: "family, exactly limit", prefix: family, limit: 5},
		{name: "family, offset 3", prefix: family, offset: 3, limit: 5},
		{name: "family, offset at the end", prefix: family, offset: 5, limit: 5},
		{name: "filter tag=family over the scope", prefix: []string{"memories", "u1"}, filter: map[string]any{"tag": "family"},
			admit: func(v lgValue) bool { return v.Tag == "family" }, limit: 4},
		{name: "a sub-namespace with no items", prefix: []string{"memories", "u1", "nobody"}, limit: 10},
		{name: "a filter nothing passes", prefix: family, filter: map[string]any{"tag": "work"}, admit: func(v lgValue) bool { return v.Tag == "work" }, limit: 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := map[string]any{"namespace_prefix": tc.prefix, "query": "family members", "limit": tc.limit, "offset": tc.offset}
			if tc.filter != nil {
				body["filter"] = tc.filter
			}
			want := f.exact(tc.prefix, "family members", tc.admit, tc.offset, tc.limit)
			if d := same(f.search(body), want); d != "" {
				t.Errorf("%s (want %v)", d, want)
			}
		})
	}
}

// TestGuaranteeLangGraphSearchPagingExact: in a scope of thousands, paging is exact at any
// depth (with and without a query, with a selective filter), limit is honoured above
// 100, and the bounds are refused with 422, never answered short or with a 5xx.
func TestGuaranteeLangGraphSearchPagingExact(t *testing.T) {
	if testing.Short() {
		t.Skip("writes thousands of memories")
	}
	forEachEngine(t, testLangGraphSearchPagingExact)
}

func testLangGraphSearchPagingExact(t *testing.T, engine string) {
	f := newLGFixture(t, engine)
	words := []string{"coffee", "garden", "train", "piano", "river", "invoice", "mountain", "recipe", "lamp", "harbor", "violin", "tulip", "bicycle"}
	var items []lgPutItem
	const n = 3000
	for i := range n {
		tag := "common"
		if i%431 == 0 {
			tag = "rare" // 7 of 3000
		}
		ns := []string{"memories", "u1", "bulk"}
		if i%3 == 0 {
			ns = append(ns, "deep")
		}
		items = append(items, lgPutItem{ns, fmt.Sprintf("b%04d", i),
			lgValue{Text: fmt.Sprintf("%s %s %s note %d", words[i%13], words[(i*7)%13], words[(i/13)%13], i), Tag: tag, N: i}})
	}
	for i := range 20 {
		items = append(items, lgPutItem{[]string{"memories", "u1"}, fmt.Sprintf("top%d", i), lgValue{Text: "coffee garden top " + fmt.Sprint(i), Tag: "top", N: i}})
	}
	f.put(items)
	// Memories of other types in the scope are not LangGraph items.
	var batch BatchRequest
	for i := range 30 {
		batch.Memories = append(batch.Memories, NewMemory{Scope: "user:u1", MemoryType: memory.Episodic,
			Content: json.RawMessage(fmt.Sprintf(`{"text":"coffee garden episode %d"}`, i))})
	}
	f.e.must(200, f.key, "POST", "/v1/memories/batch", batch, nil)
	f.load("user:u1")

	rare := func(v lgValue) bool { return v.Tag == "rare" }
	scope, bulk, deep := []string{"memories", "u1"}, []string{"memories", "u1", "bulk"}, []string{"memories", "u1", "bulk", "deep"}
	for _, tc := range []struct {
		name          string
		prefix        []string
		query         string
		filter        map[string]any
		admit         func(lgValue) bool
		offset, limit int
	}{
		{name: "whole scope, limit 150", prefix: scope, query: "coffee garden", limit: 150},
		{name: "whole scope, offset 100", prefix: scope, query: "coffee garden", offset: 100, limit: 10},
		{name: "whole scope, offset deep", prefix: scope, query: "piano river", offset: 2950, limit: 100},
		{name: "whole scope, last page of 1000", prefix: scope, query: "piano river", offset: 2500, limit: 1000},
		{name: "sub-namespace, offset deep", prefix: bulk, query: "violin harbor", offset: 1990, limit: 20},
		{name: "sub-sub-namespace, offset deep", prefix: deep, query: "violin harbor", offset: 950, limit: 100},
		{name: "selective filter", prefix: scope, query: "lamp tulip", filter: map[string]any{"tag": "rare"}, admit: rare, limit: 10},
		{name: "selective filter, exactly limit", prefix: bulk, query: "lamp tulip", filter: map[string]any{"tag": "rare"}, admit: rare, limit: 7},
		{name: "selective filter, offset", prefix: bulk, query: "lamp tulip", filter: map[string]any{"tag": "rare"}, admit: rare, offset: 5, limit: 7},
		{name: "no query, filter, deep offset", prefix: scope, filter: map[string]any{"tag": "common"},
			admit: func(v lgValue) bool { return v.Tag == "common" }, offset: 2500, limit: 600},
		{name: "no query, sub-namespace, deep offset", prefix: deep, offset: 900, limit: 200},
		{name: "no query, selective filter", prefix: scope, filter: map[string]any{"tag": "rare"}, admit: rare, limit: 10},
		{name: "past the end", prefix: scope, query: "coffee", offset: 5000, limit: 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := map[string]any{"namespace_prefix": tc.prefix, "limit": tc.limit, "offset": tc.offset}
			if tc.query != "" {
				body["query"] = tc.query
			}
			if tc.filter != nil {
				body["filter"] = tc.filter
			}
			want := f.exact(tc.prefix, tc.query, tc.admit, tc.offset, tc.limit)
			if d := same(f.search(body), want); d != "" {
				t.Errorf("%s", d)
			}
		})
	}

	// Pages put together are the whole ranking: nothing twice, nothing missing.
	var pages []lgHit
	for off := 0; off < 1100; off += 100 {
		pages = append(pages, f.search(map[string]any{"namespace_prefix": bulk, "query": "train recipe", "limit": 100, "offset": off})...)
	}
	if d := same(pages, f.exact(bulk, "train recipe", nil, 0, 1100)); d != "" {
		t.Errorf("pages of 100: %s", d)
	}

	// The bounds: limit at most 1000, offset at most MaxLGOffset; past them 422, and
	// offset + limit never overflows into a 5xx.
	for _, body := range []map[string]any{
		{"namespace_prefix": scope, "query": "coffee", "limit": 1001},
		{"namespace_prefix": scope, "limit": 0},
		{"namespace_prefix": scope, "query": "coffee", "offset": -1},
		{"namespace_prefix": scope, "query": "coffee", "offset": int64(math.MaxInt64)},
		{"namespace_prefix": scope, "offset": int64(math.MaxInt64), "limit": 10},
		{"namespace_prefix": scope, "query": "coffee", "offset": MaxLGOffset + 1},
	} {
		f.e.wantError(422, CodeInvalidRequest, f.key, "POST", "/store/items/search", body)
	}
	if got := f.search(map[string]any{"namespace_prefix": scope, "query": "coffee", "offset": MaxLGOffset, "limit": 1000}); len(got) != 0 {
		t.Errorf("offset %d: %d results", MaxLGOffset, len(got))
	}
}
