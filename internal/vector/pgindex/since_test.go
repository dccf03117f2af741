package pgindex_test

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
)

// TestSearchSinceFindsEveryRowWrittenAfterTheMark: on the tables the store's
// migrations and EnsureTable make, SearchSince returns exactly the rows of the
// searched scope written after the mark: inserted, updated (a vector rewritten), and
// written by a transaction that was under way when the mark was taken and committed
// after it. A row rewritten with the values it holds, a row of another scope and
// the rows before the mark are left out; scores are Search's.
func TestSearchSinceFindsEveryRowWrittenAfterTheMark(t *testing.T) {
	ctx := t.Context()
	pool := connect(t)
	schema := testutil.UniqueName("since_")
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	})
	if _, err := pgstore.Migrate(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	spec := vector.Spec{Dimension: 4, Metric: vector.Cosine}
	if err := pgindex.Ensure(ctx, pool, schema, spec); err != nil {
		t.Fatal(err)
	}
	if err := pgindex.EnsureTable(ctx, pool, schema, "vectors_g2", spec); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{pgindex.Table, "vectors_g2"} {
		t.Run(table, func(t *testing.T) {
			ix := pgindex.NewTable(pool, schema, table, spec)
			entry := func(id, scope string, v ...float32) vector.Entry {
				return vector.Entry{ID: id, Scope: scope, Type: "semantic", Vector: v}
			}
			upsert := func(es ...vector.Entry) {
				t.Helper()
				if err := ix.Upsert(ctx, es); err != nil {
					t.Fatal(err)
				}
			}
			upsert(entry("a", "s", 1, 0, 0, 0), entry("b", "s", 0, 1, 0, 0), entry("old", "s", 0, 0, 1, 0), entry("x", "other", 1, 0, 0, 0))

			// A writer under way when the mark is taken.
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(context.Background()) }()
			if err := ix.UpsertTx(ctx, tx, []vector.Entry{entry("d", "s", 1, 1, 0, 0)}); err != nil {
				t.Fatal(err)
			}
			mark, err := ix.Mark(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			upsert(entry("c", "s", 1, 0, 1, 0))     // inserted
			upsert(entry("b", "s", 1, 1, 1, 0))     // rewritten
			upsert(entry("a", "s", 1, 0, 0, 0))     // the same values: not rewritten
			upsert(entry("y", "other", 1, 1, 1, 1)) // another scope

			q := vector.Query{Scope: "s", Types: []string{"semantic"}, Vector: []float32{1, 0.5, 0.2, 0}, K: 10}
			hits, changed, err := ix.SearchSince(ctx, mark, []vector.Query{q})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := slices.Sorted(maps.Keys(changed)), []string{"b", "c", "d"}; !slices.Equal(got, want) {
				t.Fatalf("changed since the mark: %v, want %v", got, want)
			}
			// The same hits as Search, among the rows written since.
			all, err := ix.Search(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			want := slices.DeleteFunc(all, func(h vector.Hit) bool { return !changed[h.ID] })
			if !slices.Equal(hits[0], want) {
				t.Fatalf("hits since the mark: %v, want %v", hits[0], want)
			}

			// A later mark sees none of it.
			later, err := ix.Mark(ctx)
			if err != nil {
				t.Fatal(err)
			}
			hits, changed, err = ix.SearchSince(ctx, later, []vector.Query{q})
			if err != nil {
				t.Fatal(err)
			}
			if len(hits[0]) != 0 || len(changed) != 0 {
				t.Fatalf("since a mark after every write: %v %v, want nothing", hits[0], changed)
			}
		})
	}
}
