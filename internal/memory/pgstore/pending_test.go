package pgstore

import (
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/amemory/memory-operator/internal/memory"
)

// TestPendingInGroupsEitherWay: PendingInGroups answers the same whether few memories
// owe index work (it starts from them) or more than pendingDriveLimit do (it walks the
// groups): live, unarchived memories of the asked groups only, at most 1000 a group,
// in memory_id order.
func TestPendingInGroupsEitherWay(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	tbl := func(name string) string { return pgx.Identifier{s.schema, name}.Sanitize() }
	// user:a semantic: 1200 owing work (1000 come back) and 5 indexed; user:a episodic:
	// 3 owing, not asked for; user:b semantic: 2 owing, one archived.
	if _, err := pool.Exec(ctx, `INSERT INTO `+tbl("memories")+` (memory_id, memory_type, scope, content, content_hash, base_score, created_at, updated_at, archived_at)
		SELECT id, typ, scope, '{}', sha256(id::bytea), 1, now(), now(), CASE WHEN id = 'b-1' THEN now() END FROM (
			SELECT format('a-%s', lpad(i::text, 5, '0')) AS id, 'semantic' AS typ, 'user:a' AS scope FROM generate_series(1, 1205) i
			UNION ALL SELECT format('ae-%s', i), 'episodic', 'user:a' FROM generate_series(1, 3) i
			UNION ALL SELECT format('b-%s', i), 'semantic', 'user:b' FROM generate_series(0, 1) i) x;
		INSERT INTO `+tbl("index_pending")+` (memory_id) SELECT memory_id FROM `+tbl("memories")+` WHERE memory_id NOT BETWEEN 'a-01201' AND 'a-01205'`); err != nil {
		t.Fatal(err)
	}
	groups := []ScopeType{{"user:a", memory.Semantic}, {"user:b", memory.Semantic}, {"user:c", memory.Semantic}}
	ask := func() map[ScopeType][]string {
		t.Helper()
		lock, err := s.LockScopes(ctx, groups)
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Unlock()
		got, err := lock.PendingInGroups(ctx, groups)
		if err != nil {
			t.Fatal(err)
		}
		ids := map[ScopeType][]string{}
		for g, items := range got {
			for _, it := range items {
				ids[g] = append(ids[g], it.MemoryID)
			}
		}
		return ids
	}
	check := func(way string, got map[ScopeType][]string) {
		t.Helper()
		a := got[ScopeType{"user:a", memory.Semantic}]
		if len(a) != 1000 || a[0] != "a-00001" || a[999] != "a-01000" || !slices.IsSorted(a) {
			t.Errorf("%s: user:a semantic: %d memories %.40v", way, len(a), a)
		}
		if b := got[ScopeType{"user:b", memory.Semantic}]; fmt.Sprint(b) != "[b-0]" {
			t.Errorf("%s: user:b semantic: %v, want [b-0] (b-1 is archived)", way, b)
		}
		if len(got) != 2 {
			t.Errorf("%s: groups %v, want user:a and user:b semantic only", way, len(got))
		}
	}
	check("from the pending rows", ask())
	if _, err := pool.Exec(ctx, `INSERT INTO `+tbl("index_pending")+` (memory_id) SELECT 'gone-' || i FROM generate_series(1, `+pendingDriveLimit+`) i`); err != nil {
		t.Fatal(err)
	}
	check("walking the groups", ask())
}
