package gateway

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestQueryCacheInTheGateway: with the cache on, a repeated search is served from it
// (GET /v1/stats and the metrics count it), and a forget, an update and a new write
// are each seen by the next search, never a cached answer from before them; on
// both backends (the gateway's memory, and the store's Redis).
func TestQueryCacheInTheGateway(t *testing.T) {
	for _, backend := range []string{"in-process", "Redis"} {
		t.Run(backend, func(t *testing.T) {
			k := newTestKey(t, "agent", false, "user:*")
			e := newEnv(t, envOptions{keys: []testKey{k}, redis: backend == "Redis", config: func(c *Config) { c.QueryCacheTTL = 5 * time.Minute }})
			a := k.plain
			var w WriteResponse
			e.must(201, a, "POST", "/v1/memories", NewMemory{Scope: "user:1", MemoryType: "semantic", Key: "city", Content: []byte(`{"text":"I live in Lisbon"}`)}, &w)
			search := func() []string {
				var res SearchResponse
				e.must(200, a, "POST", "/v1/search", SearchRequest{Scope: "user:1", Query: "where do I live", TopK: 5}, &res)
				var texts []string
				for _, r := range res.Results {
					texts = append(texts, string(r.Memory.Content))
				}
				return texts
			}
			stats := func() QueryCacheStats {
				var st StatsResponse
				e.must(200, a, "GET", "/v1/stats", nil, &st)
				if st.QueryCache == nil || st.QueryCache.Backend != backend {
					t.Fatalf("stats = %+v", st)
				}
				return *st.QueryCache
			}
			first, second := search(), search()
			if len(first) != 1 || strings.Join(first, "") != strings.Join(second, "") {
				t.Fatalf("searches = %v, %v", first, second)
			}
			if st := stats(); st.Hits != 1 || st.Misses != 1 || st.HitRate != 0.5 {
				t.Fatalf("after a repeated search: %+v", st)
			}
			// An update supersedes: the next search has the new value.
			e.must(200, a, "PATCH", "/v1/memories/"+w.MemoryID, UpdateRequest{Content: []byte(`{"text":"I live in Porto now"}`)}, nil)
			if got := search(); len(got) != 1 || !strings.Contains(got[0], "Porto") {
				t.Fatalf("after the update: %v", got)
			}
			// A forget: nothing of the scope comes back.
			e.must(200, a, "POST", "/v1/forget", ForgetRequest{Scope: "user:1"}, nil)
			if got := search(); len(got) != 0 {
				t.Fatalf("after the forget: %v", got)
			}
			// A new write is found at once.
			e.must(201, a, "POST", "/v1/memories", NewMemory{Scope: "user:1", MemoryType: "semantic", Content: []byte(`{"text":"I live in Berlin"}`)}, nil)
			if got := search(); len(got) != 1 || !strings.Contains(got[0], "Berlin") {
				t.Fatalf("after a new write: %v", got)
			}
			st := stats()
			if st.Invalidations < 1 || st.Hits != 1 || st.Misses != 4 {
				t.Fatalf("at the end: %+v", st)
			}
			rec := httptest.NewRecorder()
			e.gw.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			if !strings.Contains(rec.Body.String(), "memory_gateway_query_cache_hits_total 1") {
				t.Fatalf("metrics:\n%s", rec.Body.String())
			}
		})
	}
}
