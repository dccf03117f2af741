package pgstore

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/amemory/memory-operator/internal/memory"
)

// unicodeScopes makes n distinct valid scopes over an alphabet chosen to trip SQL and
// patterns: '_' and '.' (LIKE and regex wildcards), ':' and '/', and Unicode letters
// from several planes, composed and with marks; prefixes of one another included.
func unicodeScopes(n int) []string {
	parts := []string{"a", "_", ".", ":", "/", "@", "-", "0", "ë", "ユーザー", "用户", "𠮷", "ஷ", "हि", "Ω", "ß", "가", "q\u0301"}
	rng := rand.New(rand.NewPCG(7, 11))
	seen := map[string]bool{}
	var out []string
	for len(out) < n {
		var b strings.Builder
		b.WriteString([]string{"user:x", "session:x", "agent:x"}[rng.IntN(3)])
		for range rng.IntN(6) {
			b.WriteString(parts[rng.IntN(len(parts))])
		}
		s := memory.NormalizeScope(b.String())
		if memory.ValidateScope(s) != nil || seen[s] {
			continue
		}
		seen[s] = true
		out = append(out, s)
	}
	return out
}

// TestGuaranteeUnicodeScopesAsSQLParameters: scopes in any language are parameters everywhere
// the store takes them: each memory stays in its scope for list, export (in byte
// order, as packages need), prefix export and scope listing (prefixes, not
// patterns) and forget, which removes its scope alone.
func TestGuaranteeUnicodeScopesAsSQLParameters(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	scopes := unicodeScopes(300)
	owner := map[string]string{}
	for i, scope := range scopes {
		id := fmt.Sprintf("u%04d", i)
		mustPut(t, s, item(id, scope, memory.Semantic, "", fmt.Sprintf(`{"n": %d}`, i), 0.5, day), Inserted)
		owner[id] = scope
	}
	for i, scope := range scopes {
		items, err := s.List(ctx, ListQuery{Scope: scope, Limit: 10, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if len(items) != 1 || items[0].MemoryID != fmt.Sprintf("u%04d", i) || items[0].Scope != scope {
			t.Fatalf("List(%q) = %+v", scope, items)
		}
	}
	exported := func(f ExportFilter) []string {
		t.Helper()
		var got []string
		if err := s.Export(ctx, f, func(it memory.Item) error {
			if owner[it.MemoryID] != it.Scope {
				t.Fatalf("memory %s exported in %q, written in %q", it.MemoryID, it.Scope, owner[it.MemoryID])
			}
			got = append(got, it.Scope)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	sorted := slices.Clone(scopes)
	slices.Sort(sorted) // Go compares strings bytewise: the order a package needs
	if got := exported(ExportFilter{}); !slices.Equal(got, sorted) {
		t.Fatalf("export order differs from byte order:\n%q\nwant\n%q", got[:min(10, len(got))], sorted[:10])
	}
	for _, prefix := range []string{"user:x_", "user:x.", "session:x/", "agent:x𠮷", "user:xë", "user:x%"} {
		var want []string
		for _, sc := range sorted {
			if strings.HasPrefix(sc, prefix) {
				want = append(want, sc)
			}
		}
		if got := exported(ExportFilter{ScopePrefixes: []string{prefix}}); !slices.Equal(got, want) {
			t.Fatalf("export of prefix %q = %q, want %q", prefix, got, want)
		}
		keys, err := s.ScopeKeys(ctx, prefix, "[", 1000)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, k := range keys {
			got = append(got, k.Scope)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("ScopeKeys(%q) = %q, want %q", prefix, got, want)
		}
	}
	// Forget a scope that is a prefix of others: it goes alone.
	victim := sorted[0]
	for _, sc := range sorted {
		if strings.HasPrefix(sc, "user:x") && slices.ContainsFunc(sorted, func(o string) bool { return o != sc && strings.HasPrefix(o, sc) }) {
			victim = sc
			break
		}
	}
	if _, err := s.Forget(ctx, victim, "erasure", "test"); err != nil {
		t.Fatal(err)
	}
	want := slices.DeleteFunc(slices.Clone(sorted), func(sc string) bool { return sc == victim })
	if got := exported(ExportFilter{}); !slices.Equal(got, want) {
		t.Fatalf("after forgetting %q: %d scopes exported, want %d", victim, len(got), len(want))
	}
	ts, err := s.Tombstones(ctx)
	if err != nil || len(ts) != 1 || ts[0].Scope != victim {
		t.Fatalf("tombstones %+v, %v; want one of %q", ts, err, victim)
	}
}
