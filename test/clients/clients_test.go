package clients

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/amemory/memory-operator/internal/gateway"
	"github.com/amemory/memory-operator/internal/memory"
)

// TestLangGraphSDK runs langgraph_sdk's store client (from PyPI, unchanged) against
// the gateway: put, get, search (with and without a query, with filters), list
// namespaces, delete, and isolation between two users' keys. The script checks what
// the SDK returns; this side checks where the items landed, through the native API.
func TestLangGraphSDK(t *testing.T) {
	integration(t)
	venvBin(t, "python")
	u1 := newKey(t, "u1", false, "user:u1")
	u2 := newKey(t, "u2", false, "user:u2")
	admin := newKey(t, "admin", false, "user:*")
	g := startGateway(t, gatewayOptions{keys: []apiKey{u1, u2, admin}})

	rep := runScript(t, "langgraph_store.py", map[string]string{"url": g.url, "u1": u1.plain, "u2": u2.plain, "admin": admin.plain})

	// The namespaces mapped to scopes by the default rules: ("memories", "u1", ...) is
	// user:u1, and what is left there after the script's delete is its two items.
	var list gateway.ListResponse
	g.must(http.StatusOK, admin.plain, "GET", "/v1/scopes/user:u1/memories", nil, &list)
	keys := map[string]memory.Item{}
	for _, m := range list.Memories {
		keys[m.Key] = m
	}
	if len(list.Memories) != 2 || keys["profile"].Source != gateway.LGSource || keys["order-a1024"].ExpiresAt == nil {
		t.Errorf("user:u1 through the native API: %s", mustJSON(t, list.Memories))
	}
	if p := keys["profile"]; p.MemoryType != memory.Semantic || !jsonEqual(t, p.Content, `{"name":"Ada","city":"Lisbon","kind":"profile"}`) {
		t.Errorf("the profile item as a memory: %s", mustJSON(t, p))
	}
	g.must(http.StatusOK, admin.plain, "GET", "/v1/scopes/user:u2/memories", nil, &list)
	if len(list.Memories) != 1 || list.Memories[0].Key != "profile" {
		t.Errorf("user:u2 through the native API: %s", mustJSON(t, list.Memories))
	}
	// The u2 key's refused put left nothing in user:u1.
	for _, m := range keys {
		if strings.Contains(string(m.Content), `"a"`) {
			t.Errorf("a refused put was stored: %s", mustJSON(t, m))
		}
	}
	var prof map[string]any
	rep.data(t, "u1_profile", &prof)
	if prof["key"] != "profile" {
		t.Errorf("the script's profile item: %v", prof)
	}
}

// TestMCPClient runs the official Python MCP client (streamable HTTP, from PyPI)
// against /mcp: the tool list, every tool, isolation between keys and a read-only
// key. Between the script's two phases this side checks the memories it made through
// the native API (update history kept, delete done), and after the second phase that
// delete_all_memories forgot user:a and only it.
func TestMCPClient(t *testing.T) {
	integration(t)
	venvBin(t, "python")
	a := newKey(t, "a", false, "user:a")
	b := newKey(t, "b", false, "user:b")
	ro := newKey(t, "a-reader", true, "user:a")
	admin := newKey(t, "admin", false, "*")
	sk := newKey(t, "s", false, "user:s", "session:*")
	g := startGateway(t, gatewayOptions{keys: []apiKey{a, b, ro, admin, sk}})
	in := map[string]any{"url": g.url, "phase": "main", "a": a.plain, "b": b.plain, "ro": ro.plain, "s": sk.plain}

	rep := runScript(t, "mcp_client.py", in)
	var ids struct{ Updated, Episodic, Deleted, B string }
	rep.data(t, "ids", &ids)
	if ids.Updated == "" || ids.Deleted == "" || ids.B == "" {
		t.Fatalf("the script made no memories: %+v", ids)
	}
	var upd memory.Item
	g.must(http.StatusOK, a.plain, "GET", "/v1/memories/"+ids.Updated, nil, &upd)
	if !jsonEqual(t, upd.Content, `{"text":"Now prefers oolong in the afternoon"}`) || upd.Key != "drink" || upd.Source != "mcp" ||
		len(upd.History) != 1 || !jsonEqual(t, upd.History[0].Content, `{"text":"Prefers green tea in the afternoon"}`) {
		t.Errorf("the updated memory through the native API: %s", mustJSON(t, upd))
	}
	g.must(http.StatusNotFound, a.plain, "GET", "/v1/memories/"+ids.Deleted, nil, nil)
	// b's memory is invisible to a's key.
	g.must(http.StatusNotFound, a.plain, "GET", "/v1/memories/"+ids.B, nil, nil)

	live := 1 // the updated memory, and the episodic one if it was written
	if ids.Episodic != "" {
		var ep memory.Item
		g.must(http.StatusOK, a.plain, "GET", "/v1/memories/"+ids.Episodic, nil, &ep)
		if ep.MemoryType != memory.Episodic || !jsonEqual(t, ep.Content, `{"event":"order A1024 not shipped yet","order":"A1024"}`) {
			t.Errorf("the episodic memory through the native API: %s", mustJSON(t, ep))
		}
		live++
	}

	in["phase"], in["live"] = "forget", live
	runScript(t, "mcp_client.py", in)
	var list gateway.ListResponse
	g.must(http.StatusOK, admin.plain, "GET", "/v1/scopes/user:a/memories", nil, &list)
	if len(list.Memories) != 0 {
		t.Errorf("user:a after delete_all_memories: %s", mustJSON(t, list.Memories))
	}
	g.must(http.StatusOK, admin.plain, "GET", "/v1/scopes/user:b/memories", nil, &list)
	if len(list.Memories) != 1 || list.Memories[0].MemoryID != ids.B {
		t.Errorf("user:b after user:a was forgotten: %s", mustJSON(t, list.Memories))
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// jsonEqual reports whether the JSON documents are equal as values.
func jsonEqual(t *testing.T, got json.RawMessage, want string) bool {
	t.Helper()
	var a, b any
	if err := json.Unmarshal(got, &a); err != nil {
		return false
	}
	if err := json.Unmarshal([]byte(want), &b); err != nil {
		t.Fatal(err)
	}
	return mustJSON(t, a) == mustJSON(t, b)
}

// TestGuaranteeFastMCPClient runs a second MCP client, fastmcp's (PyPI), against /mcp: ping, the
// tool lists of a writing and a read-only key, a memory written, found and read back,
// and the refusals (an empty query, a NUL in an id, another key's memory and scope)
// with the codes of the native API.
func TestGuaranteeFastMCPClient(t *testing.T) {
	integration(t)
	venvBin(t, "python")
	a := newKey(t, "a", false, "user:a")
	b := newKey(t, "b", false, "user:b")
	ro := newKey(t, "a-reader", true, "user:a")
	g := startGateway(t, gatewayOptions{keys: []apiKey{a, b, ro}})
	rep := runScript(t, "fastmcp_client.py", map[string]any{"url": g.url, "a": a.plain, "b": b.plain, "ro": ro.plain})
	var id string
	rep.data(t, "id", &id)
	var it memory.Item
	g.must(http.StatusOK, a.plain, "GET", "/v1/memories/"+id, nil, &it)
	if it.Scope != "user:a" || it.Key != "spare-key" || it.Source != "mcp" {
		t.Errorf("fastmcp's memory through the native API: %s", mustJSON(t, it))
	}
}
