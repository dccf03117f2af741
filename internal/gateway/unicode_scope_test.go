package gateway

import (
	"bytes"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/amemory/memory-operator/internal/memory"
)

// TestGuaranteeUnicodeScopes: scopes in any language work through every door as they are
// written: remember, list (the scope in the path, '/' escaped as %2F), search,
// recall, forget, a key's prefix pattern, and LangGraph namespaces whose user label
// is Unicode; on both vector engines. A refused scope is logged escaped: the
// gateway's log stays one JSON object per line.
func TestGuaranteeUnicodeScopes(t *testing.T) {
	forEachEngine(t, func(t *testing.T, engine string) {
		admin := newTestKey(t, "admin", false, "*")
		zoe := newTestKey(t, "zoe", false, "user:zoë*")
		logs := &syncBuffer{}
		e := newEnv(t, envOptions{engine: engine, keys: []testKey{admin, zoe}, logs: logs})
		k := admin.plain

		scopes := []string{"user:zoë-ユーザー", "user:用户123", "user:𠮷野家", "user:ஷ", "session:tenant:acme/thread/42"}
		ids := map[string]string{}
		for _, scope := range scopes {
			var w WriteResponse
			e.must(201, k, "POST", "/v1/memories", NewMemory{Scope: scope, MemoryType: memory.Semantic,
				Content: json.RawMessage(`{"note":"favourite drink of ` + scope + `"}`)}, &w)
			ids[scope] = w.MemoryID
		}
		for _, scope := range scopes {
			var list ListResponse
			e.must(200, k, "GET", "/v1/scopes/"+url.PathEscape(scope)+"/memories", nil, &list)
			if len(list.Memories) != 1 || list.Memories[0].Scope != scope || list.Memories[0].MemoryID != ids[scope] {
				t.Fatalf("list %q: %+v", scope, list.Memories)
			}
			var sr SearchResponse
			e.must(200, k, "POST", "/v1/search", SearchRequest{Scope: scope, Query: "favourite drink"}, &sr)
			if len(sr.Results) != 1 || sr.Results[0].Memory.MemoryID != ids[scope] {
				t.Fatalf("search %q: %+v", scope, sr.Results)
			}
			var rr RecallResponse
			e.must(200, k, "POST", "/v1/recall", RecallRequest{Scope: scope}, &rr)
			if len(rr.Results) != 1 {
				t.Fatalf("recall %q: %+v", scope, rr.Results)
			}
		}
		// A key's prefix pattern in Unicode: its own user, not a look-alike.
		e.must(200, zoe.plain, "POST", "/v1/recall", RecallRequest{Scope: "user:zoë-ユーザー"}, nil)
		e.wantError(403, CodeScopeForbidden, zoe.plain, "POST", "/v1/recall", RecallRequest{Scope: "user:zoe-ユーザー"})

		// Forget one: the others stay.
		e.must(200, k, "POST", "/v1/forget", ForgetRequest{Scope: "user:𠮷野家"}, nil)
		var sr SearchResponse
		e.must(200, k, "POST", "/v1/search", SearchRequest{Scope: "user:ஷ", Query: "favourite drink"}, &sr)
		if len(sr.Results) != 1 {
			t.Fatalf("user:ஷ after forgetting user:𠮷野家: %+v", sr.Results)
		}

		// LangGraph: a Unicode user label (issue 20 item 14).
		e.must(204, k, "PUT", "/store/items", map[string]any{"namespace": []string{"memories", "zoë-ユーザー", "prefs"}, "key": "飲み物",
			"value": map[string]any{"drink": "抹茶"}}, nil)
		var it struct {
			Namespace []string       `json:"namespace"`
			Key       string         `json:"key"`
			Value     map[string]any `json:"value"`
		}
		e.must(200, k, "GET", "/store/items?namespace="+url.QueryEscape("memories.zoë-ユーザー.prefs")+"&key="+url.QueryEscape("飲み物"), nil, &it)
		if it.Value["drink"] != "抹茶" || strings.Join(it.Namespace, "|") != "memories|zoë-ユーザー|prefs" {
			t.Fatalf("get item: %+v", it)
		}
		var lg ListResponse
		e.must(200, k, "GET", "/v1/scopes/"+url.PathEscape("user:zoë-ユーザー")+"/memories", nil, &lg)
		if len(lg.Memories) != 2 {
			t.Fatalf("user:zoë-ユーザー holds %d memories, want the native one and the LangGraph item", len(lg.Memories))
		}

		// Refused scopes: what no scope holds, said clearly, and logged escaped.
		for _, bad := range []string{"user:a\nlevel=ERROR msg=forged", "user:a\u2028b", "user:😀", "user:\u0301"} {
			e.wantError(400, CodeInvalidScope, k, "POST", "/v1/recall", RecallRequest{Scope: bad})
			e.wantError(400, CodeInvalidScope, k, "GET", "/v1/scopes/"+url.PathEscape(bad)+"/memories", nil)
		}
		for _, line := range bytes.Split(bytes.TrimSpace([]byte(logs.String())), []byte("\n")) {
			if !json.Valid(line) {
				t.Fatalf("a log line is not one JSON object: %q", line)
			}
		}
	})
}

// TestGuaranteeGatewayNormalisesScopes: a scope spelled decomposed (as macOS and some input
// methods write "zoë": e and U+0308) is the same scope as its composed spelling on
// every door, as the importers and restore mappings treat it: the gateway
// NFC-normalises the scope it receives (memory.NormalizeScope) before it checks and
// uses it, so one user never becomes two and no client is refused for its
// keyboard. This needs the gateway change described in the branch's report
// (checkScope normalising, and the handlers using the normalised scope): until
// then the native doors answer 400 invalid_scope "not in Unicode normalization form
// NFC". The LangGraph door already normalises (internal/langgraphns).
func TestGuaranteeGatewayNormalisesScopes(t *testing.T) {
	admin := newTestKey(t, "admin", false, "*")
	e := newEnv(t, envOptions{keys: []testKey{admin}})
	k := admin.plain
	const nfc, nfd = "user:zo\u00eb-ユーザー", "user:zoe\u0308-ユーザー"

	// LangGraph: the decomposed label lands in the composed scope.
	e.must(204, k, "PUT", "/store/items", map[string]any{"namespace": []string{"memories", "zoe\u0308-ユーザー"}, "key": "k1",
		"value": map[string]any{"v": 1}}, nil)

	// Native: written and read in either spelling, one scope.
	var w WriteResponse
	e.must(201, k, "POST", "/v1/memories", NewMemory{Scope: nfd, MemoryType: memory.Semantic, Content: json.RawMessage(`{"v":2}`)}, &w)
	var got memory.Item
	e.must(200, k, "GET", "/v1/memories/"+w.MemoryID, nil, &got)
	if got.Scope != nfc {
		t.Fatalf("stored in %q, want the NFC scope %q", got.Scope, nfc)
	}
	for _, spelling := range []string{nfc, nfd} {
		var list ListResponse
		e.must(200, k, "GET", "/v1/scopes/"+url.PathEscape(spelling)+"/memories", nil, &list)
		if len(list.Memories) != 2 {
			t.Fatalf("list %q: %d memories, want 2 (one scope)", spelling, len(list.Memories))
		}
		var rr RecallResponse
		e.must(200, k, "POST", "/v1/recall", RecallRequest{Scope: spelling}, &rr)
		if len(rr.Results) != 2 {
			t.Fatalf("recall %q: %d, want 2", spelling, len(rr.Results))
		}
	}
	e.must(200, k, "POST", "/v1/forget", ForgetRequest{Scope: nfd}, nil)
	var list ListResponse
	e.must(200, k, "GET", "/v1/scopes/"+url.PathEscape(nfc)+"/memories", nil, &list)
	if len(list.Memories) != 0 {
		t.Fatalf("after forgetting %q, %q holds %d memories", nfd, nfc, len(list.Memories))
	}
}
