package gateway

import (
	"net/http"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
)

// TestGuaranteeLangGraphListNamespacesWildcards: "*" in a list_namespaces prefix or suffix
// matches any one label, as LangGraph's MatchCondition does, with max_depth, offset and
// limit applied after matching; the listing never shows a scope the key does not
// allow.
func TestGuaranteeLangGraphListNamespacesWildcards(t *testing.T) {
	all := newTestKey(t, "all", false, "*")
	u1 := newTestKey(t, "u1", false, "user:u1")
	e := newEnv(t, envOptions{keys: []testKey{all, u1}})
	for _, ns := range [][]string{
		{"memories", "u1"}, {"memories", "u1", "family"}, {"memories", "u1", "prefs", "food"},
		{"memories", "u2", "family"}, {"memories", "u2", "work", "food"}, {"memories", "u3", "prefs"},
		{"sessions", "s1", "family"},
	} {
		e.must(204, all.plain, "PUT", "/store/items", map[string]any{"namespace": ns, "key": "k", "value": map[string]any{"a": 1}}, nil)
	}
	list := func(key string, body map[string]any) string {
		t.Helper()
		var out lgNamespacesResponse
		e.must(200, key, "POST", "/store/namespaces", body, &out)
		return mustJSON(t, out.Namespaces)
	}
	for _, tc := range []struct {
		key  string
		body map[string]any
		want string
	}{
		{all.plain, map[string]any{"prefix": []string{"memories", "*", "family"}},
			`[["memories","u1","family"],["memories","u2","family"]]`},
		{all.plain, map[string]any{"prefix": []string{"*", "*", "family"}},
			`[["memories","u1","family"],["memories","u2","family"],["sessions","s1","family"]]`},
		{all.plain, map[string]any{"suffix": []string{"*", "food"}},
			`[["memories","u1","prefs","food"],["memories","u2","work","food"]]`},
		{all.plain, map[string]any{"prefix": []string{"memories"}, "suffix": []string{"prefs", "*"}},
			`[["memories","u1","prefs","food"]]`},
		{all.plain, map[string]any{"prefix": []string{"memories", "*"}, "max_depth": 2},
			`[["memories","u1"],["memories","u2"],["memories","u3"]]`},
		{all.plain, map[string]any{"prefix": []string{"*", "*", "*", "*"}},
			`[["memories","u1","prefs","food"],["memories","u2","work","food"]]`},
		{all.plain, map[string]any{"prefix": []string{"*", "*", "*", "*", "*"}}, `[]`},
		{all.plain, map[string]any{"suffix": []string{"*"}, "offset": 5, "limit": 1}, `[["memories","u3","prefs"]]`},
		// The u1 key sees only user:u1.
		{u1.plain, map[string]any{"prefix": []string{"memories", "*", "family"}}, `[["memories","u1","family"]]`},
		{u1.plain, map[string]any{"suffix": []string{"*"}}, `[["memories","u1"],["memories","u1","family"],["memories","u1","prefs","food"]]`},
	} {
		if got := list(tc.key, tc.body); got != tc.want {
			t.Errorf("list_namespaces %v: %s, want %s", tc.body, got, tc.want)
		}
	}
}

// TestGuaranteeLangGraphRefusesWhatCannotBeStored: NUL (and invalid UTF-8) in a namespace
// label, a key, a query or a filter is the 4xx every door gives it (memory.CheckText),
// never a 503 from the database; a TTL that would overflow into a memory expired on
// arrival is refused as the native door refuses it (memory.TTL), and the longest TTL
// allowed is stored with an expiry in the future.
func TestGuaranteeLangGraphRefusesWhatCannotBeStored(t *testing.T) {
	k := newTestKey(t, "k", false, "*")
	e := newEnv(t, envOptions{keys: []testKey{k}})
	ns := []string{"memories", "u1"}
	e.must(204, k.plain, "PUT", "/store/items", map[string]any{"namespace": ns, "key": "ok", "value": map[string]any{"a": 1}}, nil)
	for _, tc := range []struct {
		name, method, path string
		body               any
	}{
		{"get NUL key", "GET", "/store/items?namespace=memories.u1&key=a%00b", nil},
		{"get invalid UTF-8 key", "GET", "/store/items?namespace=memories.u1&key=a%FFb", nil},
		{"get NUL label", "GET", "/store/items?namespace=memories.u1.a%00b&key=k", nil},
		{"get NUL user", "GET", "/store/items?namespace=memories.u%001&key=k", nil},
		{"delete NUL key", "DELETE", "/store/items", map[string]any{"namespace": ns, "key": "a\x00b"}},
		{"delete NUL label", "DELETE", "/store/items", map[string]any{"namespace": []string{"memories", "u1", "a\x00"}, "key": "k"}},
		{"put NUL key", "PUT", "/store/items", map[string]any{"namespace": ns, "key": "a\x00b", "value": map[string]any{"a": 1}}},
		{"put NUL key under a label", "PUT", "/store/items", map[string]any{"namespace": []string{"memories", "u1", "x"}, "key": "a\x00b", "value": map[string]any{"a": 1}}},
		{"put NUL label", "PUT", "/store/items", map[string]any{"namespace": []string{"memories", "u1", "a\x00b"}, "key": "k", "value": map[string]any{"a": 1}}},
		{"search NUL label", "POST", "/store/items/search", map[string]any{"namespace_prefix": []string{"memories", "u1", "a\x00"}}},
		{"search NUL label, query", "POST", "/store/items/search", map[string]any{"namespace_prefix": []string{"memories", "u1", "a\x00"}, "query": "x"}},
		{"search NUL query", "POST", "/store/items/search", map[string]any{"namespace_prefix": ns, "query": "a\x00b"}},
		{"search NUL filter", "POST", "/store/items/search", map[string]any{"namespace_prefix": ns, "filter": map[string]any{"a": "\x00"}}},
		{"list NUL prefix", "POST", "/store/namespaces", map[string]any{"prefix": []string{"memories", "\x00"}}},
		{"list NUL suffix", "POST", "/store/namespaces", map[string]any{"suffix": []string{"\x00"}}},
		{"list offset too deep", "POST", "/store/namespaces", map[string]any{"offset": int64(1) << 62}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, raw := e.call(k.plain, tc.method, tc.path, tc.body, nil)
			if code != http.StatusUnprocessableEntity {
				t.Errorf("%s %s: %d %s, want 422", tc.method, tc.path, code, raw)
			}
		})
	}

	// TTL in minutes: the same bounds as the native door's ttl_seconds.
	for _, ttl := range []float64{1e300, memory.MaxTTL.Minutes() + 1, 0, -1} {
		body := map[string]any{"namespace": ns, "key": "ttl", "value": map[string]any{"ttl": ttl}, "ttl": ttl}
		if code, raw := e.call(k.plain, "PUT", "/store/items", body, nil); code != http.StatusUnprocessableEntity {
			t.Errorf("ttl %v: %d %s, want 422", ttl, code, raw)
		}
	}
	e.wantError(404, CodeNotFound, k.plain, "GET", "/store/items?namespace=memories.u1&key=ttl", nil)
	e.must(204, k.plain, "PUT", "/store/items", map[string]any{"namespace": ns, "key": "ttl", "value": map[string]any{"a": 1}, "ttl": memory.MaxTTL.Minutes()}, nil)
	var l ListResponse
	e.must(200, k.plain, "GET", "/v1/scopes/user:u1/memories", nil, &l)
	found := false
	for _, m := range l.Memories {
		if m.Key == "ttl" {
			found = true
			if m.ExpiresAt == nil || !m.ExpiresAt.After(time.Now().Add(memory.MaxTTL-time.Hour)) {
				t.Errorf("the longest TTL: expires_at %v", m.ExpiresAt)
			}
		}
	}
	if !found {
		t.Errorf("the item with the longest TTL is not stored: %s", mustJSON(t, l.Memories))
	}
	var it lgItem
	e.must(200, k.plain, "GET", "/store/items?namespace=memories.u1&key=ttl", nil, &it)
	if !jsonEq(it.Value, `{"a":1}`) {
		t.Errorf("the item with the longest TTL: %s", mustJSON(t, it))
	}
}
