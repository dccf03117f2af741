package pgvector_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/pgvector"
)

// dump renders a table's rows with their row versions (xmin), ordered by ID.
func dump(t *testing.T, pool *pgxpool.Pool, schema string) (rows, versions string) {
	t.Helper()
	err := pool.QueryRow(context.Background(), `SELECT coalesce(string_agg(row(memory_id, scope, memory_type, embedding::text)::text, ';' ORDER BY memory_id), ''),
		coalesce(string_agg(xmin::text, ',' ORDER BY memory_id), '') FROM `+pgx.Identifier{schema, "embeddings"}.Sanitize()).Scan(&rows, &versions)
	if err != nil {
		t.Fatal(err)
	}
	return rows, versions
}

// TestUpsertPathsStoreTheSameRows: INSERT (small batches), COPY straight in (new
// entries) and COPY through a temporary table (existing ones) store the same rows;
// rewriting the same values leaves rows untouched; a batch is all or nothing.
func TestUpsertPathsStoreTheSameRows(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	spec := vector.Spec{Dimension: 3, Metric: vector.Cosine}
	newIdx := func() *pgvector.Index {
		return pgvector.New(e.rolePool, e.newSchema(t, spec, testParams), spec, testParams)
	}
	batch := func(n int, scope string, y float32) []vector.Entry {
		out := make([]vector.Entry, n)
		for i := range out {
			out[i] = vector.Entry{ID: fmt.Sprintf("m%04d", i), Scope: scope, Type: "semantic", Vector: []float32{3, y, float32(i)}}
		}
		return out
	}
	idx := newIdx()
	if err := idx.Upsert(ctx, batch(999, "user:a", 4)); err != nil { // INSERT
		t.Fatal(err)
	}
	if err := idx.Upsert(ctx, batch(1200, "user:b", -4)); err != nil { // COPY over existing rows
		t.Fatal(err)
	}
	fresh := newIdx()
	if err := fresh.Upsert(ctx, batch(1200, "user:b", -4)); err != nil { // COPY straight in
		t.Fatal(err)
	}
	small := newIdx()
	for start := 0; start < 1200; start += 400 {
		if err := small.Upsert(ctx, batch(1200, "user:b", -4)[start:start+400]); err != nil {
			t.Fatal(err)
		}
	}
	if !pgvector.InsertsMet(idx) || pgvector.InsertsMet(fresh) {
		t.Fatalf("COPY straight in met rows: over existing %v, into the empty table %v; want true, false",
			pgvector.InsertsMet(idx), pgvector.InsertsMet(fresh))
	}
	want, _ := dump(t, e.admin, fresh.Schema())
	for name, ix := range map[string]*pgvector.Index{"upserted": idx, "inserted": small} {
		if got, _ := dump(t, e.admin, ix.Schema()); got != want {
			t.Fatalf("%s:\n%.300s\ncopied straight in:\n%.300s", name, got, want)
		}
	}
	// Stored normalised for COSINE: (3,-4,0)/5.
	vecs, err := idx.Fetch(ctx, []string{"m0000"})
	if err != nil || !slices.Equal(vecs["m0000"], vector.Normalize([]float32{3, -4, 0})) {
		t.Fatalf("m0000 = %v (%v), want %v", vecs["m0000"], err, vector.Normalize([]float32{3, -4, 0}))
	}
	// The same values again, through each path: no row is rewritten.
	for _, ix := range []*pgvector.Index{idx, fresh} {
		rows0, versions0 := dump(t, e.admin, ix.Schema())
		for _, n := range []int{1200, 10} {
			if err := ix.Upsert(ctx, batch(1200, "user:b", -4)[:n]); err != nil {
				t.Fatal(err)
			}
		}
		if rows1, versions1 := dump(t, e.admin, ix.Schema()); rows1 != rows0 || versions1 != versions0 {
			t.Fatalf("rewriting the same values changed rows or their versions")
		}
	}
	// All or nothing, through both paths.
	for _, n := range []int{10, 1500} {
		b := batch(n, "user:c", 1)
		b[n-1].Vector = []float32{1, 2}
		if err := idx.Upsert(ctx, b); !errors.Is(err, vector.ErrDimensionMismatch) {
			t.Fatalf("batch of %d with a bad vector: err = %v", n, err)
		}
		b[n-1].Vector = []float32{1, 2, 3}
		b[0].ID = b[1].ID
		if err := idx.Upsert(ctx, b); err == nil {
			t.Fatalf("batch of %d with a duplicate ID: no error", n)
		}
	}
	var inC int
	if err := e.admin.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{idx.Schema(), "embeddings"}.Sanitize()+` WHERE scope = 'user:c'`).Scan(&inC); err != nil || inC != 0 {
		t.Fatalf("rows of rejected batches: %d, %v", inC, err)
	}
}

// TestFetch returns exactly the stored (for COSINE normalised) float32 components of
// the IDs asked for, in chunks beyond one statement's.
func TestFetch(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, metric := range []vector.Metric{vector.Cosine, vector.L2} {
		spec := vector.Spec{Dimension: 16, Metric: metric}
		ix := pgvector.New(e.rolePool, e.newSchema(t, spec, testParams), spec, testParams)
		rng := rand.New(rand.NewPCG(11, 12))
		entries := fill(rng, spec.Dimension, "user:f", 6000, semantic)
		for i := range entries {
			entries[i].Vector[0] *= 1e6 // not unit length
		}
		if err := ix.Upsert(ctx, entries); err != nil {
			t.Fatal(err)
		}
		ids := []string{"missing"}
		for _, en := range entries {
			ids = append(ids, en.ID)
		}
		got, err := ix.Fetch(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(entries) {
			t.Fatalf("%s: fetched %d, want %d", metric, len(got), len(entries))
		}
		for _, en := range entries {
			if want := vector.Prepare(metric, en.Vector); !slices.Equal(got[en.ID], want) {
				t.Fatalf("%s: %s = %v, stored %v", metric, en.ID, got[en.ID], want)
			}
		}
		if got, err := ix.Fetch(ctx, nil); err != nil || len(got) != 0 {
			t.Fatalf("fetch of nothing: %v, %v", got, err)
		}
		if _, err := ix.Fetch(ctx, []string{`a"b`}); err == nil {
			t.Fatal("fetch of a quoted ID: no error")
		}
	}
}

// TestLargeUpsertWithoutTempPrivilege: in a database where PUBLIC lost TEMPORARY (a
// common hardening) large upserts over existing rows fall back to INSERTs.
func TestLargeUpsertWithoutTempPrivilege(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	db := testutil.UniqueName("pgv_db_")
	for _, stmt := range []string{`CREATE DATABASE ` + db, `REVOKE TEMPORARY ON DATABASE ` + db + ` FROM PUBLIC`} {
		if _, err := e.admin.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		if _, err := e.admin.Exec(context.Background(), `DROP DATABASE IF EXISTS `+db+` WITH (FORCE)`); err != nil {
			t.Errorf("drop database: %v", err)
		}
	})
	open := func(user, password string) *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(testutil.PGVectorDSN(t))
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
	admin := open("", "")
	ext, err := pgvector.EnsureExtension(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	spec := vector.Spec{Dimension: 2, Metric: vector.L2}
	for _, stmt := range []string{
		`CREATE SCHEMA store`, `CREATE TABLE store.store_meta (key text primary key, value text not null)`,
	} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	if err := pgvector.Ensure(ctx, admin, "store", spec, testParams); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`GRANT CONNECT ON DATABASE ` + db + ` TO ` + e.role, `GRANT USAGE ON SCHEMA store, ` + pgx.Identifier{ext.Schema}.Sanitize() + ` TO ` + e.role,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON store.embeddings TO ` + e.role,
	} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), `DROP OWNED BY `+e.role) })
	pool := open(e.role, e.pw)
	if _, err := pool.Exec(ctx, `CREATE TEMPORARY TABLE probe (x int)`); err == nil {
		t.Fatal("the role can still create temporary tables; the test would prove nothing")
	}
	idx := pgvector.New(pool, "store", spec, testParams)
	entries := make([]vector.Entry, 1500)
	for i := range entries {
		entries[i] = vector.Entry{ID: fmt.Sprintf("m%d", i), Scope: "user:1", Type: "semantic", Vector: []float32{float32(i), 0}}
	}
	for round := range 2 {
		for i := range entries {
			entries[i].Vector[1] = float32(round)
		}
		if err := idx.Upsert(ctx, entries); err != nil {
			t.Fatalf("upsert #%d of 1500 without TEMPORARY: %v", round+1, err)
		}
	}
	hits, err := idx.Search(ctx, vector.Query{Scope: "user:1", Vector: []float32{1499, 1}, K: 2})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(hits) != "[{m1499 0} {m1498 -1}]" {
		t.Fatalf("hits = %v", hits)
	}
}

// TestBulkLoadWithoutIndex: a role granted the index functions (the worker's) drops
// the HNSW index, loads, and builds it again with the recorded parameters; searches
// are exact meanwhile; nobody else may call the functions.
func TestBulkLoadWithoutIndex(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	spec := vector.Spec{Dimension: 8, Metric: vector.L2}
	p := pgvector.Params{M: 8, EfConstruction: 40, ExactBelow: 50}
	schema := e.newSchema(t, spec, p)
	ix := pgvector.New(e.rolePool, schema, spec, p)
	before := indexDefs(t, e.admin, schema)
	if err := ix.DropSearchIndex(ctx); err != nil {
		t.Fatal(err)
	}
	if got := indexDefs(t, e.admin, schema); len(got) != 2 {
		t.Fatalf("indexes after DropSearchIndex: %v", got)
	}
	if err := ix.DropSearchIndex(ctx); err != nil { // again: nothing to drop
		t.Fatal(err)
	}
	// While the load holds the index back, a reconcile's Ensure builds none under it.
	if since, err := pgvector.SearchIndexDeferred(ctx, e.admin, schema); err != nil || since == "" {
		t.Fatalf("SearchIndexDeferred after DropSearchIndex = %q, %v", since, err)
	}
	if err := pgvector.Ensure(ctx, e.admin, schema, spec, p); err != nil {
		t.Fatal(err)
	}
	if got := indexDefs(t, e.admin, schema); len(got) != 2 {
		t.Fatalf("indexes after Ensure under a bulk load: %v", got)
	}
	rng := rand.New(rand.NewPCG(3, 3))
	entries := fill(rng, spec.Dimension, "user:bulk", 3000, semantic)
	if err := ix.Upsert(ctx, entries); err != nil {
		t.Fatal(err)
	}
	qv := randomVector(rng, spec.Dimension)
	exact := pgvector.New(e.rolePool, schema, spec, pgvector.Params{ExactBelow: 1_000_000})
	want, err := exact.Search(ctx, vector.Query{Scope: "user:bulk", Vector: qv, K: 10})
	if err != nil {
		t.Fatal(err)
	}
	got, err := ix.Search(ctx, vector.Query{Scope: "user:bulk", Vector: qv, K: 10})
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("search without the index: %v (%v), want %v", got, err, want)
	}
	if err := ix.BuildSearchIndex(ctx, "128MB"); err != nil {
		t.Fatal(err)
	}
	if got := indexDefs(t, e.admin, schema); !slices.Equal(got, before) {
		t.Fatalf("indexes after BuildSearchIndex:\n%v\nwant\n%v", got, before)
	}
	if since, err := pgvector.SearchIndexDeferred(ctx, e.admin, schema); err != nil || since != "" {
		t.Fatalf("SearchIndexDeferred after BuildSearchIndex = %q, %v", since, err)
	}
	if err := ix.BuildSearchIndex(ctx, ""); err != nil { // again: it exists
		t.Fatal(err)
	}
	// Without the grant (as PUBLIC has it): refused.
	s := pgx.Identifier{schema}.Sanitize()
	if _, err := e.admin.Exec(ctx, `REVOKE EXECUTE ON FUNCTION `+s+`.`+pgvector.DropIndexFunction+`() FROM `+e.role); err != nil {
		t.Fatal(err)
	}
	if err := ix.DropSearchIndex(ctx); err == nil {
		t.Fatal("DropSearchIndex without EXECUTE: no error")
	}
	// Ensure on a table without its index (a bulk load that stopped half way) builds it.
	if _, err := e.admin.Exec(ctx, `DROP INDEX `+s+`.embeddings_hnsw_idx`); err != nil {
		t.Fatal(err)
	}
	if err := pgvector.Ensure(ctx, e.admin, schema, spec, p); err != nil {
		t.Fatal(err)
	}
	if got := indexDefs(t, e.admin, schema); !slices.Equal(got, before) {
		t.Fatalf("indexes after Ensure:\n%v\nwant\n%v", got, before)
	}
}
