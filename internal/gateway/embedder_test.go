package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
)

// bigText is a legal memory text far over the tests' embedder input limit, with
// words that search finds at its start.
func bigText(n int) string {
	return "the customer prefers green tea in the afternoon. " + strings.Repeat("x", n)
}

// TestEmbedderInputLimit: a store's limit on the text sent to the embedder holds on
// every door. With overflow Refuse a text over it is refused with 413 text_too_long
// (no Retry-After) before anything is stored; with Truncate the memory is stored
// whole and only the first MaxInputBytes bytes are embedded. Either way the embedder
// never receives a text over the limit (the 900 KB text that held a real model for
// minutes never reaches it).
func TestEmbedderInputLimit(t *testing.T) {
	const limit = 4096
	text := bigText(900 << 10)
	k := newTestKey(t, "k", false, "user:*")

	t.Run("Refuse", func(t *testing.T) {
		f := newFaultEmbedder(t)
		e := newEnv(t, envOptions{keys: []testKey{k}, maxBody: 2 << 20, config: func(c *Config) {
			f.use(c)
			c.MaxInputBytes, c.InputOverflow = limit, embed.Refuse
		}})
		content := json.RawMessage(mustJSON(t, map[string]string{"text": text}))
		e.wantPermanent(413, CodeTextTooLong, k.plain, "POST", "/v1/memories", NewMemory{Scope: "user:1", MemoryType: memory.Semantic, Content: content})
		e.wantPermanent(413, CodeTextTooLong, k.plain, "POST", "/v1/memories/batch", BatchRequest{Memories: []NewMemory{
			{Scope: "user:1", MemoryType: memory.Semantic, Content: json.RawMessage(`{"text":"short"}`)},
			{Scope: "user:1", MemoryType: memory.Semantic, Content: content}}})
		e.wantPermanent(413, CodeTextTooLong, k.plain, "PUT", "/store/items", map[string]any{"namespace": []string{"memories", "1"}, "key": "k", "value": map[string]string{"text": text}})
		e.wantPermanent(413, CodeTextTooLong, k.plain, "POST", "/v1/search", SearchRequest{Scope: "user:1", Query: text})
		res := callTool(t, mcpSession(t, e, k.plain), "add_memory", map[string]any{"scope": "user:1", "text": text})
		if !res.IsError || !strings.HasPrefix(toolText(res), CodeTextTooLong+":") {
			t.Errorf("MCP add_memory of the big text: %v %q", res.IsError, short([]byte(toolText(res))))
		}
		var l ListResponse
		e.must(200, k.plain, "GET", "/v1/scopes/user:1/memories", nil, &l)
		if len(l.Memories) != 0 {
			t.Fatalf("refused writes stored %d memories", len(l.Memories))
		}
		if longest, _, _ := f.stats(); longest > limit {
			t.Fatalf("the embedder received a %d-byte input, over the limit of %d", longest, limit)
		}
	})

	t.Run("Truncate", func(t *testing.T) {
		f := newFaultEmbedder(t)
		e := newEnv(t, envOptions{keys: []testKey{k}, maxBody: 2 << 20, config: func(c *Config) {
			f.use(c)
			c.MaxInputBytes, c.InputOverflow = limit, embed.Truncate
		}})
		var w WriteResponse
		e.must(201, k.plain, "POST", "/v1/memories", NewMemory{Scope: "user:1", MemoryType: memory.Semantic,
			Content: json.RawMessage(mustJSON(t, map[string]string{"text": text}))}, &w)
		if !w.Indexed {
			t.Fatalf("the truncated memory was not indexed: %+v", w)
		}
		var it memory.Item
		e.must(200, k.plain, "GET", "/v1/memories/"+w.MemoryID, nil, &it)
		var got map[string]string
		if err := json.Unmarshal(it.Content, &got); err != nil || got["text"] != text {
			t.Fatalf("the memory was not stored whole (%d bytes back)", len(got["text"]))
		}
		var sr SearchResponse
		e.must(200, k.plain, "POST", "/v1/search", SearchRequest{Scope: "user:1", Query: "green tea in the afternoon"}, &sr)
		if len(sr.Results) == 0 || sr.Results[0].Memory.MemoryID != w.MemoryID {
			t.Fatalf("the truncated memory is not found by its first words: %+v", sr.Results)
		}
		// A query over the limit is truncated too.
		e.must(200, k.plain, "POST", "/v1/search", SearchRequest{Scope: "user:1", Query: text}, &sr)
		if longest, _, _ := f.stats(); longest > limit {
			t.Fatalf("the embedder received a %d-byte input, over the limit of %d", longest, limit)
		}
	})
}

// TestGuaranteeEmbedderSharePerKey: one key cannot hold the embedder for the others. While
// an embedder holds key a's searches, a has exactly its share (2) of calls at the
// embedder (the rest wait for a's own calls, not anyone else's), and key b's searches
// and writes go through. With a short embedder timeout, each of a's held calls fails
// in time with a 503 or 429 and Retry-After, and a's write is acknowledged (stored,
// indexed later) rather than refused as a database failure.
func TestGuaranteeEmbedderSharePerKey(t *testing.T) {
	ka := newTestKey(t, "a", false, "user:a")
	kb := newTestKey(t, "b", false, "user:b")
	searches := func(e *env, n int) chan response {
		results := make(chan response, n)
		for i := range n {
			go func() {
				results <- e.do(ka.plain, "POST", "/v1/search", SearchRequest{Scope: "user:a", Query: fmt.Sprintf("SLOW %d", i)})
			}()
		}
		return results
	}

	t.Run("share", func(t *testing.T) {
		f := newFaultEmbedder(t)
		e := newEnv(t, envOptions{keys: []testKey{ka, kb}, config: func(c *Config) {
			f.use(c)
			c.EmbedderConcurrency, c.EmbedderTimeout = 2, time.Minute
		}})
		e.must(201, kb.plain, "POST", "/v1/memories", NewMemory{Scope: "user:b", MemoryType: memory.Semantic, Content: json.RawMessage(`{"text":"prefers green tea"}`)}, nil)
		results := searches(e, 6)
		<-f.held
		<-f.held // a's share is taken: b must not wait behind it
		var sr SearchResponse
		e.must(200, kb.plain, "POST", "/v1/search", SearchRequest{Scope: "user:b", Query: "green tea"}, &sr)
		if len(sr.Results) != 1 {
			t.Fatalf("b's search: %+v", sr.Results)
		}
		var w WriteResponse
		e.must(201, kb.plain, "POST", "/v1/memories", NewMemory{Scope: "user:b", MemoryType: memory.Semantic, Content: json.RawMessage(`{"text":"lives in Porto"}`)}, &w)
		if !w.Indexed {
			t.Fatalf("b's write was not indexed while a held the embedder: %+v", w)
		}
		if _, most, _ := f.stats(); most != 2 {
			t.Fatalf("the embedder holds %d of a's calls; a's share is 2", most)
		}
		f.releaseAll()
		for range 6 {
			if r := <-results; r.status != 200 {
				t.Errorf("a's search, once the embedder answers: %d %s", r.status, short(r.body))
			}
		}
		if _, most, _ := f.stats(); most != 2 {
			t.Fatalf("the embedder held %d of a's calls at once; a's share is 2", most)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		f := newFaultEmbedder(t)
		e := newEnv(t, envOptions{keys: []testKey{ka, kb}, config: func(c *Config) {
			f.use(c)
			c.EmbedderConcurrency, c.EmbedderTimeout, c.RequestTimeout = 2, time.Second, 20*time.Second
		}})
		results := searches(e, 6)
		for range 6 {
			r := <-results
			if (r.status != 503 || r.err.Error.Code != CodeEmbedderDown) && (r.status != 429 || r.err.Error.Code != CodeRateLimited) || r.header.Get("Retry-After") == "" {
				t.Errorf("a's held search: %d %s (want 503 embedder_unavailable or 429 rate_limited, with Retry-After)", r.status, short(r.body))
			}
		}
		// A write whose embedding never comes is still acknowledged: stored, indexed later.
		var w WriteResponse
		e.must(201, ka.plain, "POST", "/v1/memories", NewMemory{Scope: "user:a", MemoryType: memory.Semantic, Content: json.RawMessage(`{"text":"SLOW to embed"}`)}, &w)
		if w.Indexed {
			t.Fatalf("a write whose embedding timed out says indexed: %+v", w)
		}
	})
}

// withDrainRetry shortens the drainer's retry policy for one test.
func withDrainRetry(t *testing.T, maxAttempts int) {
	b, p, m := drainBackoff, drainPause, drainMaxAttempts
	drainBackoff = func(int) time.Duration { return 10 * time.Millisecond }
	drainPause = func(int) time.Duration { return 100 * time.Millisecond }
	drainMaxAttempts = maxAttempts
	t.Cleanup(func() { drainBackoff, drainPause, drainMaxAttempts = b, p, m })
}

// TestGuaranteeDrainerParksWhatKeepsFailing: a memory the embedder cannot embed never holds
// up the others' background indexing. Written in one batch with two good memories
// (the write's embedding fails, so all three are left to the drainer), the good ones
// become searchable, and the bad one is retried with backoff and then parked: listed
// with its error through the API, counted by a metric, retried by hand on request,
// and indexed once it is rewritten. An embedder outage meanwhile charges no memory an
// attempt.
func TestGuaranteeDrainerParksWhatKeepsFailing(t *testing.T) {
	withDrainRetry(t, 3)
	f := newFaultEmbedder(t)
	k := newTestKey(t, "k", false, "*")
	other := newTestKey(t, "other", false, "user:2")
	e := newEnv(t, envOptions{keys: []testKey{k, other}, config: f.use})
	ctx := context.Background()

	var batch BatchResponse
	e.must(200, k.plain, "POST", "/v1/memories/batch", BatchRequest{Memories: []NewMemory{
		{Scope: "user:1", MemoryType: memory.Semantic, Content: json.RawMessage(`{"text":"alpha likes oolong"}`)},
		{Scope: "user:1", MemoryType: memory.Semantic, Content: json.RawMessage(`{"text":"POISON pill"}`)},
		{Scope: "user:1", MemoryType: memory.Semantic, Content: json.RawMessage(`{"text":"beta lives in Lisbon"}`)},
	}}, &batch)
	for _, r := range batch.Results {
		if r.Indexed {
			t.Fatalf("a batch whose embedding failed says indexed: %+v", batch.Results)
		}
	}
	poison := batch.Results[1].MemoryID
	waitFor(t, 60*time.Second, func() bool {
		st, err := e.gw.Memory.Pending(ctx)
		return err == nil && st.Count == 0 && st.Parked == 1
	})
	for i, q := range map[int]string{0: "alpha oolong", 2: "beta Lisbon"} {
		var sr SearchResponse
		e.must(200, k.plain, "POST", "/v1/search", SearchRequest{Scope: "user:1", Query: q}, &sr)
		if len(sr.Results) == 0 || sr.Results[0].Memory.MemoryID != batch.Results[i].MemoryID {
			t.Fatalf("memory %d is not searchable beside the poisoned one: %+v", i, sr.Results)
		}
	}
	// The dead letter, through the API: the store's view and the scope's.
	var pr PendingResponse
	e.must(200, k.plain, "GET", "/v1/index/pending?parked=true", nil, &pr)
	if len(pr.Pending) != 1 || pr.Pending[0].MemoryID != poison || !pr.Pending[0].Parked || pr.Pending[0].Attempts != 3 ||
		pr.Pending[0].Scope != "user:1" || !strings.Contains(pr.Pending[0].LastError, "400") || pr.Pending[0].NextAttemptAt != nil {
		t.Fatalf("parked work: %+v", pr.Pending)
	}
	e.must(200, k.plain, "GET", "/v1/index/pending?scope=user:1", nil, &pr)
	if len(pr.Pending) != 1 {
		t.Fatalf("user:1's pending work: %+v", pr.Pending)
	}
	e.wantError(403, CodeScopeForbidden, other.plain, "GET", "/v1/index/pending?scope=user:1", nil)
	e.wantError(400, CodeInvalidScope, other.plain, "GET", "/v1/index/pending", nil) // the store's view needs "*"
	e.must(200, other.plain, "GET", "/v1/index/pending?scope=user:2", nil, &pr)
	if len(pr.Pending) != 0 {
		t.Fatalf("user:2 sees pending work: %+v", pr.Pending)
	}
	e.gw.pendingMetrics(ctx)
	rec := httptest.NewRecorder()
	e.gw.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), "\nmemory_gateway_pending_index_parked 1\n") {
		t.Fatalf("/metrics does not count the parked work:\n%s", rec.Body.String())
	}
	// Parked work is never due again by itself.
	if due, err := e.gw.Memory.Store().DuePending(ctx, 0, 100); err != nil || len(due) != 0 {
		t.Fatalf("parked work is due: %+v %v", due, err)
	}

	// An embedder outage: the drainer waits, no memory is charged an attempt.
	var rr RetryResponse
	e.must(200, k.plain, "POST", "/v1/index/retry", RetryRequest{Scope: "user:1"}, &rr)
	if rr.Requeued != 1 {
		t.Fatalf("retry requeued %d", rr.Requeued)
	}
	f.down.Store(true)
	e.must(201, k.plain, "POST", "/v1/memories", NewMemory{Scope: "user:1", MemoryType: memory.Semantic, Content: json.RawMessage(`{"text":"gamma during the outage"}`)}, nil)
	seen := f.requestCount()
	waitFor(t, 60*time.Second, func() bool { return f.requestCount() >= seen+8 }) // several drain rounds
	e.must(200, k.plain, "GET", "/v1/index/pending", nil, &pr)
	for _, w := range pr.Pending {
		if w.Attempts != 0 || w.Parked {
			t.Fatalf("an embedder outage charged %s: %+v", w.MemoryID, w)
		}
	}
	f.down.Store(false)
	waitFor(t, 60*time.Second, func() bool {
		st, err := e.gw.Memory.Pending(ctx)
		return err == nil && st.Count == 0 && st.Parked == 1
	})

	// Rewritten, the memory leaves the dead letters and is indexed.
	e.must(200, k.plain, "PATCH", "/v1/memories/"+poison, UpdateRequest{Content: json.RawMessage(`{"text":"an antidote"}`)}, nil)
	waitFor(t, 60*time.Second, func() bool {
		st, err := e.gw.Memory.Pending(ctx)
		return err == nil && st.Count == 0 && st.Parked == 0
	})
	var sr SearchResponse
	e.must(200, k.plain, "POST", "/v1/search", SearchRequest{Scope: "user:1", Query: "antidote"}, &sr)
	if len(sr.Results) == 0 || sr.Results[0].Memory.MemoryID != poison {
		t.Fatalf("the rewritten memory is not searchable: %+v", sr.Results)
	}
}

// TestGuaranteeMCPAnswersEveryCall: ping is answered on either protocol generation the clients
// speak, an empty query is refused as on the native API, and a call the embedder
// holds past the request deadline gets a JSON-RPC answer in time, never an empty body.
func TestGuaranteeMCPAnswersEveryCall(t *testing.T) {
	f := newFaultEmbedder(t)
	k := newTestKey(t, "k", false, "user:m")
	e := newEnv(t, envOptions{keys: []testKey{k}, config: func(c *Config) {
		f.use(c)
		c.RequestTimeout, c.EmbedderTimeout = 3*time.Second, time.Minute
	}})
	post := func(body string, header map[string]string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest("POST", e.url+"/mcp", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+k.plain)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for h, v := range header {
			req.Header.Set(h, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		raw, _ := io.ReadAll(resp.Body)
		var msg map[string]any
		if err := json.Unmarshal(raw, &msg); err != nil {
			t.Fatalf("%s: %d %q is not a JSON-RPC message", body, resp.StatusCode, raw)
		}
		return resp.StatusCode, msg
	}
	// ping: legacy (after initialize, as the Go SDK client) and sessionless
	// (2026-07-28, as the Python mcp client 2.x sends it).
	if err := mcpSession(t, e, k.plain).Ping(context.Background(), nil); err != nil {
		t.Fatalf("Go SDK ping: %v", err)
	}
	for _, c := range []struct {
		body   string
		header map[string]string
	}{
		{`{"jsonrpc":"2.0","id":7,"method":"ping"}`, map[string]string{"Mcp-Protocol-Version": "2025-11-25"}},
		{`{"jsonrpc":"2.0","id":7,"method":"ping","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
			`"io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}}}`,
			map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "ping"}},
	} {
		code, msg := post(c.body, c.header)
		if res, ok := msg["result"].(map[string]any); code != 200 || !ok || len(res) != 0 || msg["id"] != float64(7) {
			t.Errorf("ping %s: %d %v", c.body, code, msg)
		}
	}
	res := callTool(t, mcpSession(t, e, k.plain), "search_memories", map[string]any{"query": ""})
	if !res.IsError || !strings.HasPrefix(toolText(res), CodeInvalidRequest+":") {
		t.Errorf("search_memories with an empty query: %v %q", res.IsError, toolText(res))
	}
	// Held past the deadline: an answer, in time.
	start := time.Now()
	for _, call := range []string{
		`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"search_memories","arguments":{"query":"SLOW"}}}`,
		`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"add_memory","arguments":{"text":"SLOW"}}}`,
	} {
		_, msg := post(call, map[string]string{"Mcp-Protocol-Version": "2025-11-25"})
		result, _ := msg["result"].(map[string]any)
		if msg["id"] != float64(9) || (msg["error"] == nil && result == nil) {
			t.Errorf("%s: %v, want a JSON-RPC answer", call, msg)
		}
		if strings.Contains(call, "search") && (result == nil || result["isError"] != true || !strings.Contains(fmt.Sprint(result["content"]), CodeEmbedderDown)) {
			t.Errorf("search held by the embedder: %v, want an embedder_unavailable tool error", msg)
		}
	}
	t.Logf("two calls held by the embedder answered in %s (request timeout 3s each)", time.Since(start).Round(time.Millisecond))
}

// TestGuaranteeMCPNeverAnswersEmpty: a call the MCP handler leaves without a body (as the SDK
// does when the request's context ends first) is answered with a JSON-RPC error.
func TestGuaranteeMCPNeverAnswersEmpty(t *testing.T) {
	s := &Server{cfg: Config{}.WithDefaults(), metrics: newMetrics(nil)}
	silent := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", "0")
		w.WriteHeader(http.StatusOK)
	})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":"x1","method":"tools/call","params":{}}`))
	if err := s.serveMCP(rec, req, silent); err != nil {
		t.Fatal(err)
	}
	var msg struct {
		ID    string `json:"id"`
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &msg); err != nil || msg.ID != "x1" || msg.Error.Code != mcpCodeTimeout {
		t.Fatalf("%d %q: %v", rec.Code, rec.Body.String(), err)
	}
	// A notification (no id) keeps the handler's empty answer.
	rec = httptest.NewRecorder()
	req = httptest.NewRequest("POST", "/mcp", strings.NewReader(`{"jsonrpc":"2.0","method":"notifications/initialized"}`))
	_ = s.serveMCP(rec, req, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) }))
	if rec.Code != http.StatusAccepted || rec.Body.Len() != 0 {
		t.Fatalf("notification: %d %q", rec.Code, rec.Body.String())
	}
}
