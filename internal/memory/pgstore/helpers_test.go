package pgstore

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/testutil"
)

// now is the fixed clock of these tests.
var now = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

const day = 24 * time.Hour

func testPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	dsn := testutil.PostgresDSN(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 20
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// dropSchemaOnCleanup drops schema when the test ends (before the pool closes).
func dropSchemaOnCleanup(t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("dropping schema %q: %v", schema, err)
		}
	})
}

// newStore returns a migrated store in a schema of its own.
func newStore(t *testing.T) (*Store, *pgxpool.Pool) {
	t.Helper()
	pool := testPool(t)
	schema := testutil.UniqueName("t_")
	dropSchemaOnCleanup(t, pool, schema)
	if _, err := Migrate(t.Context(), pool, schema); err != nil {
		t.Fatal(err)
	}
	return New(pool, schema), pool
}

// item builds a valid item updated `age` before now.
func item(id, scope string, typ memory.Type, key, content string, base float64, age time.Duration) memory.Item {
	at := now.Add(-age)
	return memory.Item{
		MemoryID:   id,
		MemoryType: typ,
		Scope:      scope,
		Key:        key,
		Content:    json.RawMessage(content),
		Source:     "test@1",
		BaseScore:  base,
		CreatedAt:  at,
		UpdatedAt:  at,
	}
}

func ptr[T any](v T) *T { return &v }

func mustPut(t *testing.T, s *Store, it memory.Item, want Outcome) PutResult {
	t.Helper()
	res, err := s.Put(t.Context(), it)
	if err != nil {
		t.Fatalf("Put(%s): %v", it.MemoryID, err)
	}
	if res.Outcome != want {
		t.Fatalf("Put(%s) outcome = %s, want %s", it.MemoryID, res.Outcome, want)
	}
	return res
}

// sameJSON reports whether two JSON documents are equal as values.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	ca, err := memory.CanonicalJSON(a)
	if err != nil {
		t.Fatalf("canonical %s: %v", a, err)
	}
	cb, err := memory.CanonicalJSON(b)
	if err != nil {
		t.Fatalf("canonical %s: %v", b, err)
	}
	return string(ca) == string(cb)
}

// canonItem returns it with canonical content (and history content), for comparisons.
func canonItem(t *testing.T, it memory.Item) memory.Item {
	t.Helper()
	c, err := memory.CanonicalJSON(it.Content)
	if err != nil {
		t.Fatal(err)
	}
	it.Content = c
	if len(it.History) > 0 {
		h := make([]memory.Revision, len(it.History))
		for i, r := range it.History {
			rc, err := memory.CanonicalJSON(r.Content)
			if err != nil {
				t.Fatal(err)
			}
			r.Content = rc
			r.UpdatedAt, r.SupersededAt = r.UpdatedAt.UTC(), r.SupersededAt.UTC()
			h[i] = r
		}
		it.History = h
	}
	it.CreatedAt, it.UpdatedAt, it.RecordedAt = it.CreatedAt.UTC(), it.UpdatedAt.UTC(), it.RecordedAt.UTC()
	if it.ExpiresAt != nil {
		it.ExpiresAt = ptr(it.ExpiresAt.UTC())
	}
	if it.ArchivedAt != nil {
		it.ArchivedAt = ptr(it.ArchivedAt.UTC())
	}
	return it
}

func assertItemsEqual(t *testing.T, got, want []memory.Item) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d items %v, want %d %v", len(got), ids(got), len(want), ids(want))
	}
	for i := range got {
		g, w := canonItem(t, got[i]), canonItem(t, want[i])
		// A stored memory always has its recorded_at; where the test does not say
		// which (items built in memory), any is accepted.
		if w.RecordedAt.IsZero() {
			if g.RecordedAt.IsZero() {
				t.Fatalf("item %d (%s) has no recorded_at", i, g.MemoryID)
			}
			g.RecordedAt = time.Time{}
		}
		if !reflect.DeepEqual(g, w) {
			gj, _ := json.Marshal(g)
			wj, _ := json.Marshal(w)
			t.Fatalf("item %d:\n got %s\nwant %s", i, gj, wj)
		}
	}
}

func ids(items []memory.Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.MemoryID
	}
	return out
}

func exportAll(t *testing.T, s *Store, f ExportFilter) []memory.Item {
	t.Helper()
	var out []memory.Item
	if err := s.Export(t.Context(), f, func(it memory.Item) error {
		out = append(out, it)
		return nil
	}); err != nil {
		t.Fatalf("Export: %v", err)
	}
	return out
}

func importSlice(t *testing.T, s *Store, items []memory.Item) ImportResult {
	t.Helper()
	res, err := s.Import(t.Context(), sliceSource(items))
	if err != nil {
		t.Fatalf("Import: %v", err)
	}
	return res
}

func sliceSource(items []memory.Item) func() (memory.Item, bool, error) {
	i := 0
	return func() (memory.Item, bool, error) {
		if i >= len(items) {
			return memory.Item{}, false, nil
		}
		i++
		return items[i-1], true, nil
	}
}

func countRows(t *testing.T, pool *pgxpool.Pool, table string, where string, args ...any) int64 {
	t.Helper()
	q := `SELECT count(*) FROM ` + table
	if where != "" {
		q += ` WHERE ` + where
	}
	var n int64
	if err := pool.QueryRow(t.Context(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}
