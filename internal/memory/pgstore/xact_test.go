package pgstore

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
)

// TestMigrationTo15TracksWritesOnEveryVectorsTable: migration 15 gives the vectors
// table and a generation table made before it (a store that switched models serves
// from one) the transaction column, its trigger and index, in a schema whose name
// needs quoting. Afterwards a search since a mark finds the rows written after it on
// both, inserted or updated, and none of the rows written before the migration.
func TestMigrationTo15TracksWritesOnEveryVectorsTable(t *testing.T) {
	pool := testPool(t)
	ctx := t.Context()
	schema := testutil.UniqueName(`t'\_`)
	dropSchemaOnCleanup(t, pool, schema)
	if _, err := migrateTo(ctx, pool, schema, 14); err != nil {
		t.Fatal(err)
	}
	spec := vector.Spec{Dimension: 2, Metric: vector.Cosine}
	if err := pgindex.Ensure(ctx, pool, schema, spec); err != nil {
		t.Fatal(err)
	}
	q := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	// A generation table as version 14's EnsureTable made it.
	if _, err := pool.Exec(ctx, `CREATE TABLE `+q("vectors_g2")+` (LIKE `+q("vectors")+` INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES INCLUDING STORAGE)`); err != nil {
		t.Fatal(err)
	}
	tables := []string{pgindex.Table, "vectors_g2"}
	entry := func(id string, v ...float32) vector.Entry {
		return vector.Entry{ID: id, Scope: "user:a", Type: "semantic", Vector: v}
	}
	for _, table := range tables {
		if err := pgindex.NewTable(pool, schema, table, spec).Upsert(ctx, []vector.Entry{entry("before", 1, 0), entry("rewritten", 0, 1)}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := Migrate(ctx, pool, schema); err != nil || n != LatestVersion-14 {
		t.Fatalf("Migrate = %d, %v", n, err)
	}
	for _, table := range tables {
		var idx []string
		rows, err := pool.Query(ctx, `SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND tablename = $2 AND indexname NOT LIKE '%pkey'`, schema, table)
		if err != nil {
			t.Fatal(err)
		}
		if idx, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			t.Fatal(err)
		}
		if len(idx) != 1 || !strings.HasSuffix(idx[0], "(scope, memory_type, xact)") {
			t.Fatalf("%s: indexes %q, want only (scope, memory_type, xact)", table, idx)
		}

		ix := pgindex.NewTable(pool, schema, table, spec)
		mark, err := ix.Mark(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := ix.Upsert(ctx, []vector.Entry{entry("rewritten", 1, 1), entry("after", 1, 0.5)}); err != nil {
			t.Fatal(err)
		}
		_, changed, err := ix.SearchSince(ctx, mark, []vector.Query{{Scope: "user:a", Vector: []float32{1, 0}, K: 10}})
		if err != nil {
			t.Fatalf("%s: %v", table, err)
		}
		if got := slices.Sorted(maps.Keys(changed)); !slices.Equal(got, []string{"after", "rewritten"}) {
			t.Fatalf("%s: written since the mark %v, want [after rewritten]", table, got)
		}
	}
}
