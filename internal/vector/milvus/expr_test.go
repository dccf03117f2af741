package milvus

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"
)

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func TestScopeFilter(t *testing.T) {
	for _, tc := range []struct {
		scope string
		types []string
		want  string
	}{
		{"user:1024", nil, `scope == "user:1024"`},
		{"user:a.b_c@d-e", []string{"semantic"}, `scope == "user:a.b_c@d-e" && memory_type in ["semantic"]`},
		{"session:1", []string{"working", "episodic"}, `scope == "session:1" && memory_type in ["working","episodic"]`},
		{"session:org/thread:42", nil, `scope == "session:org/thread:42"`},
		// Any other scope is filtered by its digest (see scopeValue).
		{"user:zoë-ユーザー", nil, `scope == "~` + digest("user:zoë-ユーザー") + `"`},
		{"user:𠮷", []string{"semantic"}, `scope == "~` + digest("user:𠮷") + `" && memory_type in ["semantic"]`},
	} {
		got, err := ScopeFilter(tc.scope, tc.types)
		if err != nil || got != tc.want {
			t.Errorf("ScopeFilter(%q, %q) = %q, %v; want %q", tc.scope, tc.types, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		scope string
		types []string
	}{
		{"", nil},
		{`user:1" || scope != "`, nil},
		{`user:1\`, nil},
		{"user:1 ", nil},
		{"user:\xff", nil},
		{"user:a\u200d", nil},
		{"user:1\n", nil},
		{strings.Repeat("a", 257), nil},
		{"user:1", []string{`semantic"]`}},
		{"user:1", []string{""}},
		{"user:1", []string{"Semantic"}},
	} {
		if got, err := ScopeFilter(tc.scope, tc.types); err == nil {
			t.Errorf("ScopeFilter(%q, %q) = %q, want an error", tc.scope, tc.types, got)
		}
	}
}

func TestValidCollectionName(t *testing.T) {
	for _, ok := range []string{"a", "_x", "mem_store_01", "A1_b2", strings.Repeat("a", 255)} {
		if err := ValidCollectionName(ok); err != nil {
			t.Errorf("ValidCollectionName(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "1abc", "a-b", "a.b", "a b", "ä", strings.Repeat("a", 256)} {
		if err := ValidCollectionName(bad); err == nil {
			t.Errorf("ValidCollectionName(%q) = nil, want an error", bad)
		}
	}
}
