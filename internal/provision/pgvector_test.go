package provision

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
	"github.com/amemory/memory-operator/internal/vector/pgvector"
)

// pgvectorStore is a store provisioned on the pgvector server (schema, roles), removed
// afterwards.
func pgvectorStore(t *testing.T) (PostgresConn, Names, Passwords) {
	t.Helper()
	return provisionedOn(t, testutil.PGVectorParts(t), "pgv-")
}

// rolePool is a pool as the gateway (agent) or a Job (worker) opens it: the role's
// login, its search_path (its own schema) from ALTER ROLE.
func rolePool(t *testing.T, admin PostgresConn, role, password string) *pgxpool.Pool {
	t.Helper()
	c := admin
	c.User, c.Password = role, password
	pool, err := pgxpool.New(context.Background(), c.URL(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestEnsurePGVector provisions a PGVector store and uses it as both store roles,
// re-provisions it (EnsurePostgres, which revokes and re-grants, then
// EnsurePGVector) without the roles losing the index, and refuses another spec.
func TestEnsurePGVector(t *testing.T) {
	admin, names, pw := pgvectorStore(t)
	ctx := context.Background()
	spec := vector.Spec{Dimension: 8, Metric: vector.Cosine}
	p := pgvector.Params{ExactBelow: 20}
	res, err := EnsurePGVector(ctx, admin, names, spec, p)
	if err != nil {
		t.Fatal(err)
	}
	if res.Engine != EnginePGVector || res.Collection != names.Schema+".embeddings" || !res.Created {
		t.Fatalf("result = %+v", res)
	}
	use := func(t *testing.T, round int) {
		t.Helper()
		usePGVectorTable(t, admin, names, pw, pgvector.Table, spec, p, round)
	}
	use(t, 0)

	// Re-provisioning: the schema's grants are redone (revoke all, grant), then the
	// engine's. Between the two, and after, the roles keep the index.
	if _, err := EnsurePostgres(ctx, admin, names, "team-a/bot", pw); err != nil {
		t.Fatal(err)
	}
	use(t, 1)
	res, err = EnsurePGVector(ctx, admin, names, spec, p)
	if err != nil || res.Created {
		t.Fatalf("second EnsurePGVector: %+v, %v", res, err)
	}
	use(t, 2)

	_, err = EnsurePGVector(ctx, admin, names, vector.Spec{Dimension: 16, Metric: vector.Cosine}, p)
	if ReasonOf(err) != ReasonDimensionMismatch || !isPermanent(err) {
		t.Fatalf("another dimension: %v (%s)", err, ReasonOf(err))
	}
	_, err = EnsurePGVector(ctx, admin, names, vector.Spec{Dimension: 8, Metric: vector.L2}, p)
	if ReasonOf(err) != ReasonMetricMismatch {
		t.Fatalf("another metric: %v (%s)", err, ReasonOf(err))
	}
	_, err = EnsurePGVector(ctx, admin, names, vector.Spec{Dimension: 3000, Metric: vector.Cosine}, p)
	if err == nil {
		t.Fatal("3000 dimensions accepted")
	}
}

// usePGVectorTable uses table (the embeddings table or a generation's) as both store
// roles: upserts (the COPY path too), search, fetch, deletes; no DDL; only the worker
// may drop and build its HNSW index.
func usePGVectorTable(t *testing.T, admin PostgresConn, names Names, pw Passwords, table string, spec vector.Spec, p pgvector.Params, round int) {
	t.Helper()
	ctx := context.Background()
	t.Helper()
	for i, r := range []struct{ role, password string }{{names.Role, pw.Agent}, {names.WorkerRole, pw.Worker}} {
		ix := pgvector.NewTable(rolePool(t, admin, r.role, r.password), names.Schema, table, spec, p)
		var entries []vector.Entry
		for j := range 1100 { // the COPY path too
			entries = append(entries, vector.Entry{ID: fmt.Sprintf("m%d-%d-%04d", round, i, j), Scope: "user:ü", Type: "semantic",
				Vector: testVector(spec.Dimension, i, j)})
		}
		if err := ix.Upsert(ctx, entries); err != nil {
			t.Fatalf("%s: upsert: %v", r.role, err)
		}
		if err := ix.Upsert(ctx, entries[:10]); err != nil {
			t.Fatalf("%s: small upsert: %v", r.role, err)
		}
		hits, err := ix.Search(ctx, vector.Query{Scope: "user:ü", Vector: entries[7].Vector, K: 3})
		if err != nil || len(hits) != 3 {
			t.Fatalf("%s: search: %v, %v", r.role, hits, err)
		}
		if _, err := ix.Fetch(ctx, []string{entries[0].ID}); err != nil {
			t.Fatalf("%s: fetch: %v", r.role, err)
		}
		if err := ix.Delete(ctx, []string{entries[0].ID}); err != nil {
			t.Fatalf("%s: delete: %v", r.role, err)
		}
		if err := ix.DeleteScope(ctx, "user:nobody"); err != nil {
			t.Fatalf("%s: delete scope: %v", r.role, err)
		}
		// Exactly the privileges granted: no DDL on the table.
		pool := rolePool(t, admin, r.role, r.password)
		if _, err := pool.Exec(ctx, `DROP INDEX `+pgx.Identifier{names.Schema, table + "_hnsw_idx"}.Sanitize()); err == nil {
			t.Fatalf("%s may drop the HNSW index", r.role)
		}
		if _, err := pool.Exec(ctx, `TRUNCATE `+pgx.Identifier{names.Schema, table}.Sanitize()); err == nil {
			t.Fatalf("%s may truncate the embeddings", r.role)
		}
		// Only the worker may take the HNSW index away for a bulk load.
		err = ix.DropSearchIndex(ctx)
		if worker := r.role == names.WorkerRole; worker != (err == nil) {
			t.Fatalf("%s: DropSearchIndex: %v", r.role, err)
		}
		if err := ix.BuildSearchIndex(ctx, "64MB"); (r.role == names.WorkerRole) != (err == nil) {
			t.Fatalf("%s: BuildSearchIndex: %v", r.role, err)
		}
	}
}

// testVector is a vector of dim components distinct for (i, j).
func testVector(dim, i, j int) []float32 {
	v := make([]float32, dim)
	v[0], v[1], v[2], v[dim-1] = 1, float32(j), float32(i), 1
	return v
}

// TestPGVectorGenerationTable: an embedding switch's generation table on the
// PGVector engine starts without its HNSW index, which the worker alone builds; both
// roles use it and keep it through a re-provisioning; once it serves, provisioning
// ensures it (and no longer the embeddings table of the old dimension); dropping
// generations empties the embeddings table and takes a generation's table, functions
// and mark away.
func TestPGVectorGenerationTable(t *testing.T) {
	admin, names, pw := pgvectorStore(t)
	ctx := context.Background()
	spec8, spec16 := vector.Spec{Dimension: 8, Metric: vector.Cosine}, vector.Spec{Dimension: 16, Metric: vector.Cosine}
	p := pgvector.Params{ExactBelow: 20}
	if _, err := EnsurePGVector(ctx, admin, names, spec8, p); err != nil {
		t.Fatal(err)
	}
	table := GenerationTable(EnginePGVector, 2)
	if table != "embeddings_g2" {
		t.Fatalf("generation 2's table is %q", table)
	}
	if err := EnsureGenerationTable(ctx, admin, names, EnginePGVector, 2, spec16, p); err != nil {
		t.Fatal(err)
	}
	adminPool := rolePool(t, admin, admin.User, admin.Password)
	indexed := func() bool {
		var ok bool
		if err := adminPool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, pgx.Identifier{names.Schema, table + "_hnsw_idx"}.Sanitize()).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if since, err := pgvector.TableSearchIndexDeferred(ctx, adminPool, names.Schema, table); err != nil || since == "" || indexed() {
		t.Fatalf("a new generation table: HNSW index held back since %q (%v), built %v; want held back", since, err, indexed())
	}
	// Ensuring it again (a later reconcile of the switch) builds nothing under the fill.
	if err := EnsureGenerationTable(ctx, admin, names, EnginePGVector, 2, spec16, p); err != nil || indexed() {
		t.Fatalf("second EnsureGenerationTable: %v, built %v", err, indexed())
	}
	if err := EnsureGenerationTable(ctx, admin, names, EnginePGVector, 2, spec8, p); ReasonOf(err) != ReasonDimensionMismatch {
		t.Fatalf("the table for another dimension: %v (%s)", err, ReasonOf(err))
	}
	worker := pgvector.NewTable(rolePool(t, admin, names.WorkerRole, pw.Worker), names.Schema, table, spec16, p)
	if err := worker.BuildSearchIndex(ctx, "64MB"); err != nil || !indexed() {
		t.Fatalf("the worker builds the generation's index: %v, built %v", err, indexed())
	}
	usePGVectorTable(t, admin, names, pw, table, spec16, p, 0)

	// A reconcile redoes the schema's grants, then the engine's: the generation's stay.
	if _, err := EnsurePostgres(ctx, admin, names, "team-a/bot", pw); err != nil {
		t.Fatal(err)
	}
	usePGVectorTable(t, admin, names, pw, table, spec16, p, 1)
	if _, err := EnsurePGVector(ctx, admin, names, spec8, p); err != nil {
		t.Fatal(err)
	}
	usePGVectorTable(t, admin, names, pw, table, spec16, p, 2)

	// The cutover records the new shape; provisioning then ensures the serving table.
	if err := pgindex.ReplaceSpec(ctx, adminPool, names.Schema, spec16); err != nil {
		t.Fatal(err)
	}
	res, err := EnsurePGVectorServing(ctx, admin, names, table, spec16, p)
	if err != nil || res.Created || res.Collection != names.Schema+"."+table || res.SearchIndexDeferredSince != "" {
		t.Fatalf("EnsurePGVectorServing(%s): %+v, %v", table, res, err)
	}
	if _, err := EnsurePGVector(ctx, admin, names, spec8, p); ReasonOf(err) != ReasonDimensionMismatch {
		t.Fatalf("the old embeddings table after the cutover: %v (%s), want DimensionMismatch", err, ReasonOf(err))
	}

	if err := DropGenerationTable(ctx, admin, names, EnginePGVector, 1); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := adminPool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{names.Schema, pgvector.Table}.Sanitize()).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("generation 1 dropped: the embeddings table holds %d rows (%v)", rows, err)
	}
	if err := DropGenerationTable(ctx, admin, names, EnginePGVector, 2); err != nil {
		t.Fatal(err)
	}
	drop, build := pgvector.TableFunctions(table)
	var left int
	if err := adminPool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = $1 AND p.proname IN ($2, $3)) + (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $4)`, names.Schema, drop, build, table).Scan(&left); err != nil || left != 0 {
		t.Fatalf("after dropping generation 2, %d of its table and functions are left (%v)", left, err)
	}
}

func isPermanent(err error) bool {
	var pe *Error
	return errors.As(err, &pe) && pe.Permanent()
}

// TestEnsurePGVectorExtensionMissing: a server without pgvector (the Debian
// PostgreSQL 15) gives ExtensionMissing, permanent, saying what to install.
func TestEnsurePGVectorExtensionMissing(t *testing.T) {
	admin, names, _ := provisioned(t)
	_, err := EnsurePGVector(context.Background(), admin, names, vector.Spec{Dimension: 8, Metric: vector.Cosine}, pgvector.Params{})
	if ReasonOf(err) != ReasonExtensionMissing || !isPermanent(err) || !errors.Is(err, pgvector.ErrExtensionMissing) {
		t.Fatalf("err = %v (%s), want a permanent ExtensionMissing", err, ReasonOf(err))
	}
	t.Log(err)
}
