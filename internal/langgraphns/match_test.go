package langgraphns

import "testing"

// TestMatch: LangGraph's list_namespaces conditions, "*" matching any one label.
func TestMatch(t *testing.T) {
	ns := []string{"memories", "u1", "prefs", "food"}
	for _, tc := range []struct {
		pattern        []string
		prefix, suffix bool
	}{
		{nil, true, true},
		{[]string{"memories"}, true, false},
		{[]string{"*"}, true, true},
		{[]string{"memories", "*", "prefs"}, true, false},
		{[]string{"*", "*", "*", "*"}, true, true},
		{[]string{"*", "*", "*", "*", "*"}, false, false},
		{[]string{"prefs", "*"}, false, true},
		{[]string{"*", "food"}, false, true},
		{[]string{"u1", "*"}, false, false},
		{[]string{"memories", "u2"}, false, false},
	} {
		if got := MatchPrefix(ns, tc.pattern); got != tc.prefix {
			t.Errorf("MatchPrefix(%v, %v) = %v", ns, tc.pattern, got)
		}
		if got := MatchSuffix(ns, tc.pattern); got != tc.suffix {
			t.Errorf("MatchSuffix(%v, %v) = %v", ns, tc.pattern, got)
		}
	}
}
