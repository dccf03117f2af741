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
		for i, r := range []struct{ role, password string }{{names.Role, pw.Agent}, {names.WorkerRole, pw.Worker}} {
			ix := pgvector.New(rolePool(t, admin, r.role, r.password), names.Schema, spec, p)
			var entries []vector.Entry
			for j := range 1100 { // the COPY path too
				entries = append(entries, vector.Entry{ID: fmt.Sprintf("m%d-%d-%04d", round, i, j), Scope: "user:ü", Type: "semantic",
					Vector: []float32{1, float32(j), float32(i), 0, 0, 0, 0, 1}})
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
			if _, err := pool.Exec(ctx, `DROP INDEX `+pgx.Identifier{names.Schema, "embeddings_hnsw_idx"}.Sanitize()); err == nil {
				t.Fatalf("%s may drop the HNSW index", r.role)
			}
			if _, err := pool.Exec(ctx, `TRUNCATE `+pgx.Identifier{names.Schema, "embeddings"}.Sanitize()); err == nil {
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
