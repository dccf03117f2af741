// Integration tests against a real PostgreSQL (testutil.PostgresDSN). Every test works
// in its own schema, created with the DDL of the store migrations and dropped at the end.
package pgindex_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
	"github.com/amemory/memory-operator/internal/vector/vectortest"
)

// connect opens a pool on the test server.
func connect(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), testutil.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// newSchema creates a schema holding the two tables the store migrations create,
// with exactly their DDL, and drops it when the test ends.
func newSchema(t testing.TB, pool *pgxpool.Pool, name string) string {
	t.Helper()
	ctx := context.Background()
	s := pgx.Identifier{name}.Sanitize()
	ddl := `CREATE SCHEMA ` + s + `;
		CREATE TABLE ` + s + `.vectors (memory_id text primary key, scope text not null, memory_type text not null, embedding bytea not null,
			xact xid8 DEFAULT pg_current_xact_id());
		CREATE INDEX ON ` + s + `.vectors (scope, memory_type, xact);
		CREATE FUNCTION ` + s + `.vectors_xact() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.xact := pg_current_xact_id(); RETURN NEW; END $$;
		CREATE TRIGGER vectors_xact BEFORE UPDATE ON ` + s + `.vectors FOR EACH ROW EXECUTE FUNCTION ` + s + `.vectors_xact();
		CREATE TABLE ` + s + `.store_meta (key text primary key, value text not null);`
	if _, err := pool.Exec(ctx, ddl); err != nil {
		t.Fatalf("create schema %s: %v", name, err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), `DROP SCHEMA `+s+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	return name
}

func newIndex(t *testing.T, pool *pgxpool.Pool, spec vector.Spec) *pgindex.Index {
	t.Helper()
	schema := newSchema(t, pool, testutil.UniqueName("t_"))
	if err := pgindex.Ensure(context.Background(), pool, schema, spec); err != nil {
		t.Fatalf("ensure: %v", err)
	}
	return pgindex.New(pool, schema, spec)
}

func TestConformance(t *testing.T) {
	pool := connect(t)
	vectortest.Run(t, vectortest.Harness{
		New: func(t *testing.T, spec vector.Spec) vector.Index { return newIndex(t, pool, spec) },
		Reopen: func(_ *testing.T, idx vector.Index, spec vector.Spec) (vector.Index, error) {
			schema := idx.(*pgindex.Index).Schema()
			if err := pgindex.Ensure(context.Background(), pool, schema, spec); err != nil {
				return nil, err
			}
			return pgindex.New(pool, schema, spec), nil
		},
		Restart: func(t *testing.T, idx vector.Index) vector.Index {
			return pgindex.New(connect(t), idx.(*pgindex.Index).Schema(), idx.Spec())
		},
	})
}

func meta(t *testing.T, pool *pgxpool.Pool, schema string) map[string]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT key, value FROM `+pgx.Identifier{schema, "store_meta"}.Sanitize())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var k, v string
	if _, err := pgx.ForEachRow(rows, []any{&k, &v}, func() error { out[k] = v; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestEnsureRecordsAndChecksSpec(t *testing.T) {
	pool := connect(t)
	ctx := context.Background()
	// A schema name that needs quoting.
	schema := newSchema(t, pool, testutil.UniqueName(`Mixed "q" `))
	spec := vector.Spec{Dimension: 384, Metric: vector.Cosine}
	for i := range 2 {
		if err := pgindex.Ensure(ctx, pool, schema, spec); err != nil {
			t.Fatalf("ensure #%d: %v", i+1, err)
		}
	}
	want := map[string]string{"vector.dimension": "384", "vector.metric": "COSINE"}
	if got := meta(t, pool, schema); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("store_meta = %v, want %v", got, want)
	}

	err := pgindex.Ensure(ctx, pool, schema, vector.Spec{Dimension: 768, Metric: vector.Cosine})
	if !errors.Is(err, vector.ErrDimensionMismatch) || !strings.Contains(err.Error(), "384") || !strings.Contains(err.Error(), "768") {
		t.Fatalf("ensure with 768: err = %v, want ErrDimensionMismatch naming 384 and 768", err)
	}
	err = pgindex.Ensure(ctx, pool, schema, vector.Spec{Dimension: 384, Metric: vector.IP})
	if !errors.Is(err, vector.ErrMetricMismatch) {
		t.Fatalf("ensure with IP: err = %v, want ErrMetricMismatch", err)
	}
	if got := meta(t, pool, schema); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("store_meta changed by a rejected Ensure: %v", got)
	}
	if err := pgindex.Ensure(ctx, pool, schema, vector.Spec{Dimension: 1, Metric: vector.L2}); err == nil {
		t.Fatal("ensure with dimension 1: no error")
	}
}

func TestEnsureRefusesVectorsOfAnotherDimension(t *testing.T) {
	pool := connect(t)
	ctx := context.Background()
	schema := newSchema(t, pool, testutil.UniqueName("t_"))
	// Vectors written before any spec was recorded.
	if _, err := pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "vectors"}.Sanitize()+` VALUES ('old', 'user:1', 'semantic', $1)`, pgindex.EncodeVector([]float32{1, 2, 3})); err != nil {
		t.Fatal(err)
	}
	err := pgindex.Ensure(ctx, pool, schema, vector.Spec{Dimension: 4, Metric: vector.L2})
	if !errors.Is(err, vector.ErrDimensionMismatch) {
		t.Fatalf("ensure over 3-dim vectors with dimension 4: err = %v, want ErrDimensionMismatch", err)
	}
	if got := meta(t, pool, schema); len(got) != 0 {
		t.Fatalf("store_meta written by a rejected Ensure: %v", got)
	}
	if err := pgindex.Ensure(ctx, pool, schema, vector.Spec{Dimension: 3, Metric: vector.L2}); err != nil {
		t.Fatalf("ensure with the matching dimension: %v", err)
	}
}

func TestUpsertPathsStoreTheSameRows(t *testing.T) {
	pool := connect(t)
	ctx := context.Background()
	spec := vector.Spec{Dimension: 3, Metric: vector.Cosine}
	idx := newIndex(t, pool, spec)
	table := pgx.Identifier{idx.Schema(), "vectors"}.Sanitize()

	batch := func(n int, scope string, y float32) []vector.Entry {
		out := make([]vector.Entry, n)
		for i := range out {
			out[i] = vector.Entry{ID: fmt.Sprintf("m%04d", i), Scope: scope, Type: "semantic", Vector: []float32{3, y, 0}}
		}
		return out
	}
	// 999 entries go through INSERT, then 1200 (overlapping) through COPY, updating
	// the first 999 in place.
	if err := idx.Upsert(ctx, batch(999, "user:a", 4)); err != nil {
		t.Fatal(err)
	}
	if err := idx.Upsert(ctx, batch(1200, "user:b", -4)); err != nil {
		t.Fatal(err)
	}
	var total, inB int
	err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE scope = 'user:b') FROM `+table).Scan(&total, &inB)
	if err != nil {
		t.Fatal(err)
	}
	if total != 1200 || inB != 1200 {
		t.Fatalf("rows = %d, in user:b = %d; want 1200, 1200", total, inB)
	}
	// The COPY of new entries met the 999 and fell back to the upsert.
	if !pgindex.InsertsMet(idx) {
		t.Fatal("a COPY straight into the table over existing rows was not refused")
	}
	// Into an empty table the same entries are copied straight in, with the same rows.
	fresh := newIndex(t, pool, spec)
	if err := fresh.Upsert(ctx, batch(1200, "user:b", -4)); err != nil {
		t.Fatal(err)
	}
	if pgindex.InsertsMet(fresh) {
		t.Fatal("new entries were not copied straight in")
	}
	dump := func(ix *pgindex.Index) string {
		var s string
		// Every column but xact, which names the transaction that wrote the row.
		if err := pool.QueryRow(ctx, `SELECT string_agg(row(v.memory_id, v.scope, v.memory_type, v.embedding)::text, ';' ORDER BY memory_id) FROM `+
			pgx.Identifier{ix.Schema(), "vectors"}.Sanitize()+` v`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if a, b := dump(fresh), dump(idx); a != b {
		t.Fatalf("copied straight in:\n%.300s\nupserted:\n%.300s", a, b)
	}
	// Stored normalised for COSINE, (3,-4,0)/5, as each component's float4send bytes.
	var raw, sent []byte
	if err := pool.QueryRow(ctx, `SELECT embedding, float4send(0.6) || float4send(-0.8) || float4send(0) FROM `+table+` WHERE memory_id = 'm0001'`).Scan(&raw, &sent); err != nil {
		t.Fatal(err)
	}
	e0, err := pgindex.DecodeVector(raw)
	if err != nil || !bytes.Equal(raw, sent) || !bytes.Equal(pgindex.EncodeVector(e0), raw) {
		t.Fatalf("stored bytes %x (%v, %v), float4send's %x", raw, e0, err, sent)
	}
	if fmt.Sprint(e0) != fmt.Sprint([]float32{0.6, -0.8, 0}) {
		t.Fatalf("stored embedding = %v, want [0.6 -0.8 0]", e0)
	}
	// An upsert batch is all or nothing, through both paths.
	for _, n := range []int{10, 1500} {
		b := batch(n, "user:c", 1)
		b[n-1].Vector = []float32{1, 2}
		if err := idx.Upsert(ctx, b); !errors.Is(err, vector.ErrDimensionMismatch) {
			t.Fatalf("batch of %d with a bad vector: err = %v", n, err)
		}
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table+` WHERE scope = 'user:c'`).Scan(&total); err != nil || total != 0 {
		t.Fatalf("rows of a rejected batch: %d, %v", total, err)
	}
}

func TestSearchUsesScopeIndex(t *testing.T) {
	pool := connect(t)
	ctx := context.Background()
	idx := newIndex(t, pool, vector.Spec{Dimension: 2, Metric: vector.L2})
	entries := make([]vector.Entry, 3000)
	for i := range entries {
		entries[i] = vector.Entry{ID: fmt.Sprintf("m%d", i), Scope: fmt.Sprintf("user:%d", i%300), Type: "semantic", Vector: []float32{float32(i), 1}}
	}
	if err := idx.Upsert(ctx, entries); err != nil {
		t.Fatal(err)
	}
	table := pgx.Identifier{idx.Schema(), "vectors"}.Sanitize()
	if _, err := pool.Exec(ctx, `ANALYZE `+table); err != nil {
		t.Fatal(err)
	}
	// The candidate scan of Search, as the planner sees it.
	var plan strings.Builder
	rows, err := pool.Query(ctx, `EXPLAIN SELECT memory_id FROM `+table+` v WHERE v.scope = $1 AND octet_length(v.embedding) = $2`, "user:7", 8)
	if err != nil {
		t.Fatal(err)
	}
	var line string
	if _, err := pgx.ForEachRow(rows, []any{&line}, func() error { plan.WriteString(line + "\n"); return nil }); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan.String(), "vectors_scope_memory_type_xact_idx") {
		t.Fatalf("scope filter does not use the (scope, memory_type, xact) index:\n%s", plan.String())
	}
	hits, err := idx.Search(ctx, vector.Query{Scope: "user:7", Vector: []float32{1500, 1}, K: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(hits); got != "[{m1507 -7} {m1207 -293} {m1807 -307}]" {
		t.Fatalf("hits = %v", got)
	}
}

// TestLargeUpsertWithoutTempPrivilege runs the COPY-sized path as a store role in a
// database where PUBLIC lost the TEMPORARY privilege (a common hardening): Upsert must
// fall back to INSERTs instead of failing.
func TestLargeUpsertWithoutTempPrivilege(t *testing.T) {
	admin := connect(t)
	ctx := context.Background()
	db, role := testutil.UniqueName("t_db_"), testutil.UniqueName("t_role_")
	for _, stmt := range []string{
		`CREATE DATABASE ` + db,
		`REVOKE TEMPORARY ON DATABASE ` + db + ` FROM PUBLIC`,
		`CREATE ROLE ` + role + ` LOGIN PASSWORD 'pw-` + role + `'`,
	} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		for _, stmt := range []string{`DROP DATABASE IF EXISTS ` + db + ` WITH (FORCE)`, `DROP ROLE IF EXISTS ` + role} {
			if _, err := admin.Exec(context.Background(), stmt); err != nil {
				t.Errorf("%s: %v", stmt, err)
			}
		}
	})
	open := func(user, password string) *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(testutil.PostgresDSN(t))
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.Database = db
		if user != "" {
			cfg.ConnConfig.User, cfg.ConnConfig.Password = user, password
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return pool
	}
	if _, err := open("", "").Exec(ctx, `CREATE SCHEMA store AUTHORIZATION `+role); err != nil {
		t.Fatal(err)
	}
	pool := open(role, "pw-"+role)
	if _, err := pool.Exec(ctx, `CREATE TEMPORARY TABLE probe (x int)`); err == nil {
		t.Fatal("the role can still create temporary tables; the test would prove nothing")
	}
	schema := "store"
	if _, err := pool.Exec(ctx, `CREATE TABLE store.vectors (memory_id text primary key, scope text not null, memory_type text not null, embedding bytea not null);
		CREATE INDEX ON store.vectors (scope, memory_type);
		CREATE TABLE store.store_meta (key text primary key, value text not null)`); err != nil {
		t.Fatal(err)
	}
	spec := vector.Spec{Dimension: 2, Metric: vector.L2}
	if err := pgindex.Ensure(ctx, pool, schema, spec); err != nil {
		t.Fatal(err)
	}
	idx := pgindex.New(pool, schema, spec)
	entries := make([]vector.Entry, 1500)
	for i := range entries {
		entries[i] = vector.Entry{ID: fmt.Sprintf("m%d", i), Scope: "user:1", Type: "semantic", Vector: []float32{float32(i), 0}}
	}
	if err := idx.Upsert(ctx, entries); err != nil {
		t.Fatalf("upsert of 1500 without TEMPORARY: %v", err)
	}
	hits, err := idx.Search(ctx, vector.Query{Scope: "user:1", Vector: []float32{1499, 0}, K: 2})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(hits) != "[{m1499 0} {m1498 -1}]" {
		t.Fatalf("hits = %v", hits)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM store.vectors`).Scan(&n); err != nil || n != 1500 {
		t.Fatalf("rows = %d, %v", n, err)
	}
}
