package gateway

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/amemory/memory-operator/internal/memory"
)

// TestNamespaceRoundTrip: every namespace a rule maps comes back exactly, extra
// labels and awkward keys included, and what no rule maps is refused.
func TestNamespaceRoundTrip(t *testing.T) {
	ns, err := newNamespaces([]NamespaceRule{
		{Namespace: []string{"memories", "{user}", "*"}, Scope: "user:{user}"},
		{Namespace: []string{"tenant", "{t}", "agents", "{a}"}, Scope: "agent:{t}-{a}"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ns         []string
		key, scope string
	}{
		{[]string{"memories", "u1"}, "coffee", "user:u1"},
		{[]string{"memories", "u1"}, `["looks","like","json"]`, "user:u1"},
		{[]string{"memories", "u1", "prefs"}, "coffee", "user:u1"},
		{[]string{"memories", "u1", "prefs", "drinks", "hot"}, "k/with/slashes and spaces", "user:u1"},
		{[]string{"memories", "a@b-c_d:e"}, "ключ", "user:a@b-c_d:e"},
		{[]string{"tenant", "acme", "agents", "support"}, "refunds", "agent:acme-support"},
	} {
		sl, err := ns.toSlot(c.ns, c.key)
		if err != nil {
			t.Fatalf("%v: %v", c.ns, err)
		}
		if sl.scope != c.scope {
			t.Fatalf("%v -> scope %q, want %q", c.ns, sl.scope, c.scope)
		}
		back, key, ok := ns.toNamespace(sl.scope, sl.key, "id")
		if !ok || !reflect.DeepEqual(back, c.ns) || key != c.key {
			t.Fatalf("%v %q -> (%s, %q) -> %v %q", c.ns, c.key, sl.scope, sl.key, back, key)
		}
	}
	for _, bad := range [][]string{
		{"other", "u1"},                  // no rule
		{"memories"},                     // too short
		{"memories", "has space"},        // not a valid scope id
		{"memories", "u.1"},              // '.' is not a LangGraph label
		{"memories", ""},                 // empty label
		{"tenant", "a", "agents", "b-c"}, // ambiguous: agent:a-b-c maps back as (a-b, c)
		{"tenant", "a", "agents", "b", "extra"},
	} {
		if _, err := ns.toSlot(bad, "k"); err == nil {
			t.Errorf("%v was mapped", bad)
		}
	}
	// A prefix shorter than a rule spans scopes: refused for search.
	if _, _, err := ns.scopeOf([]string{"memories"}); err == nil || !strings.Contains(err.Error(), "one scope") {
		t.Errorf("scopeOf(memories) = %v", err)
	}
	if sl, rest, err := ns.scopeOf([]string{"memories", "u1", "prefs"}); err != nil || sl.scope != "user:u1" || !reflect.DeepEqual(rest, []string{"prefs"}) {
		t.Errorf("scopeOf(memories, u1, prefs) = %v %v %v", sl.scope, rest, err)
	}
}

func TestNamespaceRuleValidation(t *testing.T) {
	// Rules whose scopes could coincide are refused together.
	for _, rules := range [][]NamespaceRule{
		{{Namespace: []string{"memories", "{u}"}, Scope: "user:{u}"}, {Namespace: []string{"users", "{u}"}, Scope: "user:{u}"}},
		{{Namespace: []string{"a", "{u}"}, Scope: "user:vip-{u}"}, {Namespace: []string{"b", "{u}"}, Scope: "user:{u}"}},
		{{Namespace: []string{"a"}, Scope: "agent:support"}, {Namespace: []string{"b", "{u}"}, Scope: "agent:{u}"}},
	} {
		if _, err := newNamespaces(rules); err == nil {
			t.Errorf("overlapping rules %+v accepted", rules)
		}
	}
	if _, err := newNamespaces(DefaultNamespaceRules()); err != nil {
		t.Errorf("default rules: %v", err)
	}
	for _, r := range []NamespaceRule{
		{Namespace: []string{"*"}, Scope: "user:x"},
		{Namespace: []string{"m", "{u}"}, Scope: "user:{v}"},
		{Namespace: []string{"m", "{u}", "{v}"}, Scope: "user:{u}"},
		{Namespace: []string{"m", "{u}", "{u}"}, Scope: "user:{u}"},
		{Namespace: []string{"m", "x{u}"}, Scope: "user:{u}"},
		{Namespace: []string{"m", "{u}"}, Scope: "tenant:{u}"},
		{Namespace: []string{"m", "a.b", "{u}"}, Scope: "user:{u}"},
	} {
		if _, err := compileRule(r); err == nil {
			t.Errorf("rule %+v accepted", r)
		}
	}
}

// TestFilter: LangGraph's filter semantics, exact match and the comparison operators.
func TestFilter(t *testing.T) {
	doc := json.RawMessage(`{"kind":"pref","n":3,"tags":["a"],"nested":{"x":1}}`)
	for filter, want := range map[string]bool{
		`{}`:                       true,
		`{"kind":"pref"}`:          true,
		`{"kind":"fact"}`:          false,
		`{"n":3}`:                  true,
		`{"n":{"$gt":2,"$lte":3}}`: true,
		`{"n":{"$lt":3}}`:          false,
		`{"n":{"$ne":4}}`:          true,
		`{"kind":{"$gte":"p"}}`:    true,
		`{"missing":1}`:            false,
		`{"tags":["a"]}`:           true,
		`{"nested":{"x":1}}`:       true,
		`{"nested":{"x":2}}`:       false,
		`{"n":{"$gt":"a string"}}`: false,
	} {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(filter), &m); err != nil {
			t.Fatal(err)
		}
		f, err := compileFilter(m)
		if err != nil {
			t.Fatalf("%s: %v", filter, err)
		}
		if got := f(doc); got != want {
			t.Errorf("filter %s = %v, want %v", filter, got, want)
		}
	}
}

// TestRanking: relevance leads, importance and age adjust. With similarities as
// compressed as multilingual-e5's, one reinforcement of a wrong memory must not
// outrank the right one; a strong match that has decayed away ranks below a fresh,
// slightly weaker one.
func TestRanking(t *testing.T) {
	res := func(id string, sim float32, eff float64) SearchResult {
		return SearchResult{Memory: memory.Item{MemoryID: id}, Similarity: sim, EffectiveScore: eff}
	}
	order := func(rs ...SearchResult) string {
		rankResults(rs)
		var ids []string
		for _, r := range rs {
			ids = append(ids, r.Memory.MemoryID)
		}
		return strings.Join(ids, ",")
	}
	if got := order(res("reinforced-wrong", 0.862, 0.6), res("right", 0.915, 0.5), res("other", 0.83, 0.5)); got != "right,reinforced-wrong,other" {
		t.Errorf("e5-like similarities: %s", got)
	}
	if got := order(res("decayed", 0.90, 0.02), res("fresh", 0.85, 0.5), res("unrelated", 0.10, 0.9)); got != "fresh,decayed,unrelated" {
		t.Errorf("decay: %s", got)
	}
	if got := order(res("only", 0.4, 0.3)); got != "only" {
		t.Errorf("one result: %s", got)
	}
}
