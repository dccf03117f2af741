package langgraphns

import (
	"reflect"
	"strings"
	"testing"
)

// TestNamespaceRoundTrip: every namespace a rule maps comes back exactly, extra
// labels and awkward keys included, and what no rule maps is refused.
func TestNamespaceRoundTrip(t *testing.T) {
	ns, err := New([]Rule{
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
		sl, err := ns.Slot(c.ns, c.key)
		if err != nil {
			t.Fatalf("%v: %v", c.ns, err)
		}
		if sl.Scope != c.scope {
			t.Fatalf("%v -> scope %q, want %q", c.ns, sl.Scope, c.scope)
		}
		back, key, ok := ns.Namespace(sl.Scope, sl.Key, "id")
		if !ok || !reflect.DeepEqual(back, c.ns) || key != c.key {
			t.Fatalf("%v %q -> (%s, %q) -> %v %q", c.ns, c.key, sl.Scope, sl.Key, back, key)
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
		if _, err := ns.Slot(bad, "k"); err == nil {
			t.Errorf("%v was mapped", bad)
		}
	}
	// A prefix shorter than a rule spans scopes: refused for search.
	if _, _, err := ns.Prefix([]string{"memories"}); err == nil || !strings.Contains(err.Error(), "one scope") {
		t.Errorf("scopeOf(memories) = %v", err)
	}
	if sl, rest, err := ns.Prefix([]string{"memories", "u1", "prefs"}); err != nil || sl.Scope != "user:u1" || !reflect.DeepEqual(rest, []string{"prefs"}) {
		t.Errorf("scopeOf(memories, u1, prefs) = %v %v %v", sl.Scope, rest, err)
	}
}

func TestNamespaceRuleValidation(t *testing.T) {
	// Rules whose scopes could coincide are refused together.
	for _, rules := range [][]Rule{
		{{Namespace: []string{"memories", "{u}"}, Scope: "user:{u}"}, {Namespace: []string{"users", "{u}"}, Scope: "user:{u}"}},
		{{Namespace: []string{"a", "{u}"}, Scope: "user:vip-{u}"}, {Namespace: []string{"b", "{u}"}, Scope: "user:{u}"}},
		{{Namespace: []string{"a"}, Scope: "agent:support"}, {Namespace: []string{"b", "{u}"}, Scope: "agent:{u}"}},
	} {
		if _, err := New(rules); err == nil {
			t.Errorf("overlapping rules %+v accepted", rules)
		}
	}
	if _, err := New(DefaultRules()); err != nil {
		t.Errorf("default rules: %v", err)
	}
	for _, r := range []Rule{
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
