package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/amemory/memory-operator/internal/memory"
)

func forEachEngine(t *testing.T, fn func(t *testing.T, engine string)) {
	for _, engine := range []string{"Postgres", "Milvus"} {
		t.Run(engine, func(t *testing.T) { fn(t, engine) })
	}
}

// TestNativeAPI drives every /v1 route through a gateway connected as the store's
// agent role, on both vector engines; every request and response is checked against
// the OpenAPI document (see validator).
func TestNativeAPI(t *testing.T) {
	forEachEngine(t, func(t *testing.T, engine string) {
		admin := newTestKey(t, "admin", false, "*")
		e := newEnv(t, envOptions{engine: engine, keys: []testKey{admin}, dedup: 0.95})
		k := admin.plain

		var who WhoAmI
		e.must(200, k, "GET", "/v1/whoami", nil, &who)
		if who.Key != "admin" || who.ReadOnly || len(who.Scopes) != 1 {
			t.Fatalf("whoami = %+v", who)
		}

		// Remember: 201 when new, 200 unchanged for the exact same content.
		var w1, w2 WriteResponse
		coffee := NewMemory{Scope: "user:1024", MemoryType: memory.Semantic, Key: "preference.coffee", Content: json.RawMessage(`{"likes":"flat white"}`)}
		e.must(201, k, "POST", "/v1/memories", coffee, &w1)
		e.must(200, k, "POST", "/v1/memories", coffee, &w2)
		if w1.Outcome != "inserted" || !w1.Indexed || w2.Outcome != "unchanged" || w2.MemoryID != w1.MemoryID {
			t.Fatalf("remember twice: %+v then %+v", w1, w2)
		}
		event := NewMemory{Scope: "user:1024", MemoryType: memory.Episodic, Content: json.RawMessage(`{"event":"asked for a refund of order 77"}`), TTLSeconds: 3600}
		var w3 WriteResponse
		e.must(201, k, "POST", "/v1/memories", event, &w3)

		// Get, then update with history kept.
		var got memory.Item
		e.must(200, k, "GET", "/v1/memories/"+w1.MemoryID, nil, &got)
		if got.Scope != "user:1024" || got.Key != "preference.coffee" || string(got.Content) != `{"likes": "flat white"}` && string(got.Content) != `{"likes":"flat white"}` {
			t.Fatalf("get = %+v (%s)", got, got.Content)
		}
		var upd memory.Item
		e.must(200, k, "PATCH", "/v1/memories/"+w1.MemoryID, UpdateRequest{Content: json.RawMessage(`{"likes":"hot americano"}`)}, &upd)
		if len(upd.History) != 1 || !strings.Contains(string(upd.History[0].Content), "flat white") || !strings.Contains(string(upd.Content), "americano") {
			t.Fatalf("update: %+v", upd)
		}

		// Batch: in order, one result each; a repeated item is unchanged.
		var batch BatchResponse
		e.must(200, k, "POST", "/v1/memories/batch", BatchRequest{Memories: []NewMemory{
			{Scope: "user:1024", MemoryType: memory.Procedural, Key: "refund", Content: json.RawMessage(`{"steps":["verify address","refund"]}`)},
			{Scope: "user:2048", MemoryType: memory.Semantic, Key: "address.city", Content: json.RawMessage(`{"city":"Lisbon"}`)},
			event,
		}}, &batch)
		if len(batch.Results) != 3 || batch.Results[0].Outcome != "inserted" || batch.Results[2].Outcome != "unchanged" || batch.Results[2].MemoryID != w3.MemoryID {
			t.Fatalf("batch = %+v", batch.Results)
		}

		// List a scope, a page at a time.
		var p1, p2 ListResponse
		e.must(200, k, "GET", "/v1/scopes/user:1024/memories?limit=2", nil, &p1)
		e.must(200, k, "GET", "/v1/scopes/user:1024/memories?limit=2&after="+url.QueryEscape(p1.NextAfter), nil, &p2)
		if len(p1.Memories) != 2 || p1.NextAfter == "" || len(p2.Memories) != 1 {
			t.Fatalf("pages: %d (next %q), %d", len(p1.Memories), p1.NextAfter, len(p2.Memories))
		}
		var typed ListResponse
		e.must(200, k, "GET", "/v1/scopes/user:1024/memories?type=episodic", nil, &typed)
		if len(typed.Memories) != 1 || typed.Memories[0].MemoryID != w3.MemoryID {
			t.Fatalf("typed list: %+v", typed.Memories)
		}

		// Search: within the scope, with why each result came back.
		var sr SearchResponse
		e.must(200, k, "POST", "/v1/search", SearchRequest{Scope: "user:1024", Query: "refund of order", TopK: 5}, &sr)
		if len(sr.Results) == 0 || sr.Results[0].Memory.MemoryID != w3.MemoryID {
			t.Fatalf("search for the refund did not find it: %+v", sr.Results)
		}
		for i, r := range sr.Results {
			if r.Memory.Scope != "user:1024" || r.EffectiveScore <= 0 || r.AgeSeconds < 0 {
				t.Fatalf("result %d: %+v", i, r)
			}
			if prev := sr.Results[max(i-1, 0)]; r.Relevance > prev.Relevance {
				t.Fatalf("results not ranked by relevance: %+v", sr.Results)
			}
		}
		minSim := 0.999
		e.must(200, k, "POST", "/v1/search", SearchRequest{Scope: "user:1024", Query: "refund of order", MinSimilarity: &minSim}, &sr)
		if len(sr.Results) != 0 {
			t.Fatalf("min_similarity 0.999 kept %+v", sr.Results)
		}
		e.must(200, k, "POST", "/v1/search", SearchRequest{Scope: "user:1024", Query: "refund", Types: []memory.Type{memory.Procedural}}, &sr)
		if len(sr.Results) != 1 || sr.Results[0].Memory.MemoryType != memory.Procedural {
			t.Fatalf("type filter: %+v", sr.Results)
		}

		// Recall: structured, by key.
		var rr RecallResponse
		e.must(200, k, "POST", "/v1/recall", RecallRequest{Scope: "user:1024", Key: "preference.coffee"}, &rr)
		if len(rr.Results) != 1 || rr.Results[0].Memory.MemoryID != w1.MemoryID || rr.Results[0].EffectiveScore <= 0 {
			t.Fatalf("recall by key: %+v", rr.Results)
		}

		// Delete one, then forget the scope.
		e.must(204, k, "DELETE", "/v1/memories/"+w3.MemoryID, nil, nil)
		e.wantError(404, CodeNotFound, k, "GET", "/v1/memories/"+w3.MemoryID, nil)
		var fr ForgetResponse
		e.must(200, k, "POST", "/v1/forget", ForgetRequest{Scope: "user:1024", Reason: "user asked"}, &fr)
		if fr.Deleted != 2 || fr.ForgottenAt.IsZero() {
			t.Fatalf("forget = %+v", fr)
		}
		e.must(200, k, "POST", "/v1/search", SearchRequest{Scope: "user:1024", Query: "coffee"}, &sr)
		e.must(200, k, "GET", "/v1/scopes/user:1024/memories", nil, &p1)
		if len(sr.Results) != 0 || len(p1.Memories) != 0 {
			t.Fatalf("after forget: search %d, list %d", len(sr.Results), len(p1.Memories))
		}
		// A returning user is new consent: what is written after the forget is kept.
		e.must(201, k, "POST", "/v1/memories", coffee, nil)
		e.must(200, k, "GET", "/openapi.json", nil, nil)
	})
}

// TestIsolation: a key for user:a never sees user:b, through any of the three APIs,
// and a read-only key cannot write.
func TestIsolation(t *testing.T) {
	ka := newTestKey(t, "a", false, "user:a")
	kb := newTestKey(t, "b", false, "user:b", "session:b-*")
	ro := newTestKey(t, "reader", true, "user:*")
	e := newEnv(t, envOptions{keys: []testKey{ka, kb, ro}})

	var wa WriteResponse
	e.must(201, ka.plain, "POST", "/v1/memories", NewMemory{Scope: "user:a", MemoryType: memory.Semantic, Content: json.RawMessage(`{"secret":"a's diary"}`)}, &wa)
	e.must(201, kb.plain, "POST", "/v1/memories", NewMemory{Scope: "session:b-1", MemoryType: memory.Working, Content: json.RawMessage(`{"turn":"hello"}`)}, nil)

	// Native: b can neither read a's memory (404: nothing leaks) nor name a's scope (403).
	e.wantError(404, CodeNotFound, kb.plain, "GET", "/v1/memories/"+wa.MemoryID, nil)
	e.wantError(404, CodeNotFound, kb.plain, "PATCH", "/v1/memories/"+wa.MemoryID, UpdateRequest{Content: json.RawMessage(`{"x":1}`)})
	e.wantError(404, CodeNotFound, kb.plain, "DELETE", "/v1/memories/"+wa.MemoryID, nil)
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/search", SearchRequest{Scope: "user:a", Query: "diary"}},
		{"POST", "/v1/recall", RecallRequest{Scope: "user:a"}},
		{"GET", "/v1/scopes/user:a/memories", nil},
		{"POST", "/v1/forget", ForgetRequest{Scope: "user:a"}},
		{"POST", "/v1/memories", NewMemory{Scope: "user:a", MemoryType: memory.Semantic, Content: json.RawMessage(`{"x":1}`)}},
		{"POST", "/v1/memories/batch", BatchRequest{Memories: []NewMemory{{Scope: "user:b", MemoryType: memory.Semantic, Content: json.RawMessage(`{"x":1}`)}, {Scope: "user:a", MemoryType: memory.Semantic, Content: json.RawMessage(`{"x":2}`)}}}},
		{"PUT", "/store/items", map[string]any{"namespace": []string{"memories", "a"}, "key": "k", "value": map[string]any{"x": 1}}},
		{"GET", "/store/items?namespace=memories.a&key=k", nil},
		{"POST", "/store/items/search", map[string]any{"namespace_prefix": []string{"memories", "a"}}},
	} {
		e.wantError(403, CodeScopeForbidden, kb.plain, c.method, c.path, c.body)
	}
	// The refused batch stored nothing (its allowed first item included).
	var lb ListResponse
	e.must(200, kb.plain, "GET", "/v1/scopes/user:b/memories", nil, &lb)
	if len(lb.Memories) != 0 {
		t.Fatalf("a refused batch stored %d memories", len(lb.Memories))
	}
	// Prefix patterns: session:b-* allows session:b-1, not session:c.
	e.wantError(403, CodeScopeForbidden, kb.plain, "GET", "/v1/scopes/session:c/memories", nil)

	// Read-only: reads everything its patterns allow, writes nothing.
	var ra ListResponse
	e.must(200, ro.plain, "GET", "/v1/scopes/user:a/memories", nil, &ra)
	if len(ra.Memories) != 1 {
		t.Fatalf("reader sees %d memories of user:a", len(ra.Memories))
	}
	e.wantError(403, CodeReadOnly, ro.plain, "POST", "/v1/memories", NewMemory{Scope: "user:a", MemoryType: memory.Semantic, Content: json.RawMessage(`{"x":1}`)})
	e.wantError(403, CodeReadOnly, ro.plain, "POST", "/v1/forget", ForgetRequest{Scope: "user:a"})
	e.wantError(403, CodeReadOnly, ro.plain, "PUT", "/store/items", map[string]any{"namespace": []string{"memories", "a"}, "key": "k", "value": map[string]any{}})
	e.wantError(403, CodeScopeForbidden, ro.plain, "GET", "/v1/scopes/session:b-1/memories", nil)

	// LangGraph namespaces: b lists only its own.
	e.must(204, ka.plain, "PUT", "/store/items", map[string]any{"namespace": []string{"memories", "a", "prefs"}, "key": "coffee", "value": map[string]any{"hot": true}}, nil)
	var ns lgNamespacesResponse
	e.must(200, kb.plain, "POST", "/store/namespaces", map[string]any{}, &ns)
	for _, n := range ns.Namespaces {
		if strings.Contains(strings.Join(n, "/"), "a") && n[1] == "a" {
			t.Fatalf("b lists a's namespace %v", n)
		}
	}
	e.must(200, ka.plain, "POST", "/store/namespaces", map[string]any{}, &ns)
	if mustJSON(t, ns.Namespaces) != `[["memories","a","prefs"],["user","a"]]` && mustJSON(t, ns.Namespaces) != `[["memories","a"],["memories","a","prefs"]]` {
		t.Logf("a's namespaces: %v", ns.Namespaces)
	}

	// MCP: b's tools refuse a's scope and never return a's memory.
	sess := mcpSession(t, e, kb.plain)
	res := callTool(t, sess, "search_memories", map[string]any{"scope": "user:a", "query": "diary"})
	if !res.IsError || !strings.Contains(toolText(res), CodeScopeForbidden) {
		t.Fatalf("MCP search of another scope: %+v", toolText(res))
	}
	res = callTool(t, sess, "get_memory", map[string]any{"memory_id": wa.MemoryID})
	if !res.IsError || !strings.Contains(toolText(res), CodeNotFound) {
		t.Fatalf("MCP get of another scope's memory: %s", toolText(res))
	}
	// The reader's MCP server has no write tools at all.
	tools, err := mcpSession(t, e, ro.plain).ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if strings.Join(names, ",") != "get_memories,get_memory,get_session,recall_context,search_memories" {
		t.Fatalf("read-only key's tools: %v", names)
	}
}

func mcpSession(t *testing.T, e *env, key string) *mcp.ClientSession {
	t.Helper()
	hc := &http.Client{Transport: headerTransport{key: key}}
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	s, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: e.url + "/mcp", HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

type headerTransport struct{ key string }

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+h.key)
	return http.DefaultTransport.RoundTrip(r)
}

func callTool(t *testing.T, s *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

// structuredOut decodes a tool result's structured content into out.
func structuredOut(t *testing.T, r *mcp.CallToolResult, out any) {
	t.Helper()
	if r.IsError {
		t.Fatalf("tool error: %s", toolText(r))
	}
	b, _ := json.Marshal(r.StructuredContent)
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
}

func toolText(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestBadInput: every kind of bad request gets a 4xx with its machine-readable code,
// and nothing is stored.
func TestBadInput(t *testing.T) {
	k := newTestKey(t, "k", false, "user:*", "agent:*")
	e := newEnv(t, envOptions{keys: []testKey{k}, maxBody: 64 << 10, logs: &syncBuffer{}})
	defer checkLogs(t, e.logs, k.plain, "I like tea", "xxxxxxxx")
	ok := func(content string) string {
		return `{"scope":"user:1","memory_type":"semantic","content":` + content + `}`
	}
	e.wantError(401, CodeUnauthenticated, "", "GET", "/v1/whoami", nil)
	e.wantError(401, CodeUnauthenticated, "mgw_not-a-key", "GET", "/v1/whoami", nil)
	for _, c := range []struct {
		name, body, code string
		status           int
	}{
		{"no scope", `{"memory_type":"semantic","content":{"a":1}}`, CodeInvalidScope, 400},
		{"bad scope", `{"scope":"tenant:1","memory_type":"semantic","content":{"a":1}}`, CodeInvalidScope, 400},
		{"scope with quote", `{"scope":"user:a'b","memory_type":"semantic","content":{"a":1}}`, CodeInvalidScope, 400},
		{"bad type", `{"scope":"user:1","memory_type":"opinion","content":{"a":1}}`, CodeInvalidType, 400},
		{"content string", ok(`"I like tea"`), CodeInvalidContent, 400},
		{"content array", ok(`[1,2]`), CodeInvalidContent, 400},
		{"content NUL", ok(`{"a":"x\u0000y"}`), CodeInvalidContent, 400},
		{"unknown field", `{"scope":"user:1","memory_type":"semantic","content":{"a":1},"user_id":"1"}`, CodeUnknownField, 400},
		{"not JSON", `{"scope":`, CodeInvalidJSON, 400},
		{"two values", ok(`{"a":1}`) + ` {}`, CodeInvalidJSON, 400},
		{"empty", ``, CodeInvalidRequest, 400},
		{"too large", ok(`{"a":"` + strings.Repeat("x", 70<<10) + `"}`), CodeBodyTooLarge, 413},
		{"out of key", `{"scope":"session:1","memory_type":"semantic","content":{"a":1}}`, CodeScopeForbidden, 403},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			e.wantError(c.status, c.code, k.plain, "POST", "/v1/memories", c.body)
		})
	}
	e.t = t
	var big BatchRequest
	for i := range MaxBatch + 1 {
		big.Memories = append(big.Memories, NewMemory{Scope: "user:1", MemoryType: memory.Semantic, Content: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
	}
	e.cfg.MaxBodyBytes = 1 << 20
	e.wantError(413, CodeBatchTooLarge, k.plain, "POST", "/v1/memories/batch", big)
	e.wantError(400, CodeInvalidRequest, k.plain, "POST", "/v1/search", SearchRequest{Scope: "user:1"})
	e.wantError(400, CodeInvalidScope, k.plain, "POST", "/v1/search", SearchRequest{Query: "x"})
	e.wantError(400, CodeInvalidRequest, k.plain, "POST", "/v1/search", SearchRequest{Scope: "user:1", Query: "x", TopK: 1000})
	e.wantError(404, CodeNotFound, k.plain, "GET", "/v2/anything", nil)
	var l ListResponse
	e.must(200, k.plain, "GET", "/v1/scopes/user:1/memories", nil, &l)
	if len(l.Memories) != 0 {
		t.Fatalf("bad input stored %d memories", len(l.Memories))
	}
}

// TestRateLimit: past its burst a key gets 429 with Retry-After; other keys are not
// affected.
func TestRateLimit(t *testing.T) {
	k1 := newTestKey(t, "k1", false, "*")
	k2 := newTestKey(t, "k2", false, "*")
	e := newEnv(t, envOptions{keys: []testKey{k1, k2}, rate: 0.5, burst: 3})
	for range 3 {
		e.must(200, k1.plain, "GET", "/v1/whoami", nil, nil)
	}
	req, _ := http.NewRequest("GET", e.url+"/v1/whoami", nil)
	req.Header.Set("X-Api-Key", k1.plain)
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || resp.Header.Get("Retry-After") == "0" {
		t.Fatalf("4th request: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	e.must(200, k2.plain, "GET", "/v1/whoami", nil, nil)
}

// TestKeyRotation: keys are re-read while the gateway runs; several are valid at
// once, a removed key stops working, and a broken file keeps the keys in use.
func TestKeyRotation(t *testing.T) {
	old := newTestKey(t, "old", false, "*")
	e := newEnv(t, envOptions{keys: []testKey{old}})
	e.must(200, old.plain, "GET", "/v1/whoami", nil, nil)
	next := newTestKey(t, "new", false, "*")
	writeKeys(t, e.keysFile, old, next)
	waitFor(t, 10*time.Second, func() bool { c, _ := e.call(next.plain, "GET", "/v1/whoami", nil, nil); return c == 200 })
	e.must(200, old.plain, "GET", "/v1/whoami", nil, nil)
	writeKeys(t, e.keysFile, next)
	waitFor(t, 10*time.Second, func() bool { c, _ := e.call(old.plain, "GET", "/v1/whoami", nil, nil); return c == 401 })
	// A file that does not parse is refused: the keys in use stay valid. (The reload
	// is called here rather than waited for: the refusal is its result.)
	if err := writeFileAtomic(e.keysFile, []byte(`{"keys": [`)); err != nil {
		t.Fatal(err)
	}
	if err := e.gw.Server.ReloadKeys(); err == nil {
		t.Fatal("a keys file that does not parse was accepted")
	}
	e.must(200, next.plain, "GET", "/v1/whoami", nil, nil)
	// A rotation that keeps the file's size is seen too (content, not size, tells).
	same := newTestKey(t, "new", false, "*")
	writeKeys(t, e.keysFile, same)
	if err := e.gw.Server.ReloadKeys(); err != nil {
		t.Fatal(err)
	}
	e.must(200, same.plain, "GET", "/v1/whoami", nil, nil)
	e.wantError(401, CodeUnauthenticated, next.plain, "GET", "/v1/whoami", nil)
}

// TestNearDuplicates: a near-duplicate reinforces the existing memory (base score up,
// updated_at now) instead of adding a copy, also when many writers in several
// gateways send near-duplicates of one memory at once; exact duplicates stay
// unchanged.
func TestNearDuplicates(t *testing.T) {
	k := newTestKey(t, "k", false, "*")
	e := newEnv(t, envOptions{keys: []testKey{k}, dedup: 0.9})
	// A second gateway over the same store (another replica).
	e2 := &env{t: t, cfg: e.cfg, keysFile: e.keysFile, client: e.client, names: e.names}
	e2.start(e.gw.pool.Config().ConnString())

	base := NewMemory{Scope: "user:7", MemoryType: memory.Semantic, Content: json.RawMessage(`{"fact":"allergic to peanuts and shellfish, carries an epipen"}`)}
	var first WriteResponse
	e.must(201, k.plain, "POST", "/v1/memories", base, &first)
	var again WriteResponse
	e.must(200, k.plain, "POST", "/v1/memories", base, &again)
	if again.Outcome != "unchanged" {
		t.Fatalf("exact duplicate: %+v", again)
	}
	near := base
	near.Content = json.RawMessage(`{"fact":"allergic to peanuts and shellfish, carries an epipen!"}`)
	var r WriteResponse
	e.must(200, k.plain, "POST", "/v1/memories", near, &r)
	if r.Outcome != "reinforced" || r.MemoryID != first.MemoryID || r.Similarity == nil || *r.Similarity < 0.9 {
		t.Fatalf("near duplicate: %+v", r)
	}
	var got memory.Item
	e.must(200, k.plain, "GET", "/v1/memories/"+first.MemoryID, nil, &got)
	if got.BaseScore < DefaultBaseScore+0.09 {
		t.Fatalf("base score after reinforcement = %v", got.BaseScore)
	}

	// Concurrent writers, two replicas, a new fact's near-duplicates all at once:
	// exactly one memory results.
	var wg sync.WaitGroup
	const writers = 16
	outcomes := make([]string, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := e
			if i%2 == 1 {
				g = e2
			}
			m := NewMemory{Scope: "user:8", MemoryType: memory.Semantic,
				Content: json.RawMessage(fmt.Sprintf(`{"fact":"prefers window seats on long haul flights%s"}`, strings.Repeat("!", i%3)))}
			var w WriteResponse
			code, raw := g.call(k.plain, "POST", "/v1/memories", m, &w)
			if code >= 300 {
				t.Errorf("writer %d: %d %s", i, code, raw)
			}
			outcomes[i] = w.Outcome
		}()
	}
	wg.Wait()
	var l ListResponse
	e.must(200, k.plain, "GET", "/v1/scopes/user:8/memories", nil, &l)
	if len(l.Memories) != 1 {
		t.Fatalf("%d concurrent near-duplicate writers left %d memories (outcomes %v)", writers, len(l.Memories), outcomes)
	}
}

func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s", d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMCPTools: every tool works end to end with structured content (the schemas the
// tools advertise accept a JSON object and the memories they return).
func TestMCPTools(t *testing.T) {
	k := newTestKey(t, "k", false, "user:m")
	e := newEnv(t, envOptions{keys: []testKey{k}})
	s := mcpSession(t, e, k.plain)
	structured := func(r *mcp.CallToolResult, out any) { t.Helper(); structuredOut(t, r, out) }
	var w WriteResponse
	structured(callTool(t, s, "add_memory", map[string]any{"content": map[string]any{"tool_call": map[string]any{"name": "refund", "args": []any{77}}}, "memory_type": "episodic"}), &w)
	var w2 WriteResponse
	structured(callTool(t, s, "add_memory", map[string]any{"text": "prefers hot coffee"}), &w2) // scope from the key's only scope
	var it memory.Item
	structured(callTool(t, s, "get_memory", map[string]any{"memory_id": w.MemoryID}), &it)
	if it.Scope != "user:m" || !jsonEq(it.Content, `{"tool_call":{"name":"refund","args":[77]}}`) {
		t.Fatalf("get_memory: %+v %s", it, it.Content)
	}
	var sr SearchResponse
	structured(callTool(t, s, "search_memories", map[string]any{"query": "hot coffee"}), &sr)
	if len(sr.Results) == 0 || sr.Results[0].Memory.MemoryID != w2.MemoryID {
		t.Fatalf("search_memories: %+v", sr.Results)
	}
	var ms mcpMemories
	structured(callTool(t, s, "get_memories", map[string]any{}), &ms)
	if len(ms.Memories) != 2 {
		t.Fatalf("get_memories: %d", len(ms.Memories))
	}
	var up memory.Item
	structured(callTool(t, s, "update_memory", map[string]any{"memory_id": w2.MemoryID, "text": "prefers iced coffee"}), &up)
	if len(up.History) != 1 {
		t.Fatalf("update_memory kept no history: %+v", up)
	}
	var del mcpDeleted
	structured(callTool(t, s, "delete_memory", map[string]any{"memory_id": w.MemoryID}), &del)
	var fr ForgetResponse
	structured(callTool(t, s, "delete_all_memories", map[string]any{"reason": "asked"}), &fr)
	if fr.Deleted != 1 || fr.Scope != "user:m" {
		t.Fatalf("delete_all_memories: %+v", fr)
	}
}
