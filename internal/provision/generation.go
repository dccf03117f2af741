package provision

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/milvus-io/milvus-sdk-go/v2/entity"

	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/milvus"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
	"github.com/amemory/memory-operator/internal/vector/pgvector"
)

// An index generation (pgstore's generations.go) of a store on the Postgres or the
// PGVector engine keeps its vectors in a table of its own beside the engine's table,
// shaped like it: vectors_g2, vectors_g3, ... (Postgres), embeddings_g2, ...
// (PGVector, each with its own HNSW index and the functions that drop and build it).
// The store's roles hold on it what they hold on the engine's table, granted with
// the store's other privileges (grantRoles), so a store's reconcile never takes them
// away mid-switch.

// generationTables matches the name of every generation table of either engine.
const generationTables = "^(" + pgindex.Table + "|" + pgvector.Table + ")_g[0-9]+$"

// GenerationTable is the table of index generation n (2 or more) of a store on
// engine (EnginePostgres or EnginePGVector).
func GenerationTable(engine string, n int) string {
	if engine == EnginePGVector {
		return fmt.Sprintf("%s_g%d", pgvector.Table, n)
	}
	return fmt.Sprintf("%s_g%d", pgindex.Table, n)
}

// EnsureGenerationTable creates generation n's table in the store's schema, unless
// it exists, and grants the store's roles their vectors privileges on it. A table
// holding vectors of another dimension is refused with DimensionMismatch. On the
// PGVector engine a new table's HNSW index (with p's m and ef_construction) is held
// back until whoever fills it builds it (pgvector.EnsureTable).
func EnsureGenerationTable(ctx context.Context, admin PostgresConn, names Names, engine string, n int, spec vector.Spec, p pgvector.Params) error {
	if n < 2 {
		return fail(ReasonBackendError, "index generation %d: generations beyond the first start at 2", n)
	}
	pool, err := OpenPool(ctx, admin)
	if err != nil {
		return err
	}
	defer pool.Close()
	table := GenerationTable(engine, n)
	what := "PostgreSQL " + admin.Endpoint() + ": generation table " + names.Schema + "." + table
	switch engine {
	case EnginePostgres:
		err = pgindex.EnsureTable(ctx, pool, names.Schema, table, spec)
	case EnginePGVector:
		err = pgvector.EnsureTable(ctx, pool, names.Schema, table, spec, p)
	default:
		return fail(ReasonBackendError, "index generations on the %s engine are not tables", engine)
	}
	if err != nil {
		return classifyPGVector(what, err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := lockRoles(ctx, tx); err != nil {
			return err
		}
		for kind, role := range map[string]string{"agent": names.Role, "worker": names.WorkerRole} {
			if err := grantGenerationTables(ctx, tx, names.Schema, kind, role); err != nil {
				return err
			}
		}
		return nil
	})
	return classify(what+": granting "+names.Role+" and "+names.WorkerRole, err)
}

// DropGenerationTable drops generation n's table, if it exists; generation 1's is
// the engine's own table, which is emptied instead (its migrations, indexes and
// grants stay).
func DropGenerationTable(ctx context.Context, admin PostgresConn, names Names, engine string, n int) error {
	pool, err := OpenPool(ctx, admin)
	if err != nil {
		return err
	}
	defer pool.Close()
	what := "PostgreSQL " + admin.Endpoint()
	switch {
	case n < 2 && engine == EnginePGVector:
		_, err = pool.Exec(ctx, `TRUNCATE `+pgx.Identifier{names.Schema, pgvector.Table}.Sanitize())
	case n < 2:
		_, err = pool.Exec(ctx, `TRUNCATE `+pgx.Identifier{names.Schema, pgindex.Table}.Sanitize())
	case engine == EnginePGVector:
		err = pgvector.DropTable(ctx, pool, names.Schema, GenerationTable(engine, n))
	default:
		err = pgindex.DropTable(ctx, pool, names.Schema, GenerationTable(engine, n))
	}
	return classify(what, err)
}

// grantGenerationTables grants role, on every generation table of schema, what its
// kind holds on its engine's table; the worker may also drop and build a PGVector
// generation's HNSW index (it builds it once the table is filled).
func grantGenerationTables(ctx context.Context, tx pgx.Tx, schema, kind, role string) error {
	rows, err := tx.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind = 'r' AND c.relname ~ $2 ORDER BY c.relname`, schema, generationTables)
	if err != nil {
		return err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, table := range tables {
		privs := Privileges[kind][pgindex.Table]
		pgv := strings.HasPrefix(table, pgvector.Table+"_g")
		if pgv {
			privs = EngineTablePrivileges[pgvector.Table][kind]
		}
		// The privilege names are constants of this package, never input.
		if err := execFormattedTx(ctx, tx, `GRANT `+strings.Join(privs, ", ")+` ON %I.%I TO %I`, schema, table, role); err != nil {
			return err
		}
		if !pgv || kind != "worker" {
			continue
		}
		drop, build := pgvector.TableFunctions(table)
		for _, fn := range []string{drop, build} {
			if err := execFormattedTx(ctx, tx, `GRANT EXECUTE ON FUNCTION %I.%I() TO %I`, schema, fn, role); err != nil {
				return err
			}
		}
	}
	return nil
}

// On Milvus an index generation is a collection of its own, <collection>_g<n>
// (MilvusGenerationCollection), marked as the store's like its first one. The
// store's role holds MilvusPrivileges on it from its creation until it is dropped;
// which collection serves is the operator's to say (Names.Collection, with the
// others in Names.Generations).

// MilvusGenerationCollection is the collection of index generation n (2 or more)
// of a store whose first collection is base.
func MilvusGenerationCollection(base string, n int) string { return fmt.Sprintf("%s_g%d", base, n) }

// EnsureMilvusGeneration creates collection, a generation's, for spec and marked as
// owner's, unless it exists (one marked as another's gives TenantConflict; one of
// another shape DimensionMismatch or MetricMismatch), and on a server with
// authentication grants the store's role MilvusPrivileges on it. Milvus applies
// grants a few seconds late: MilvusGenerationWorks says when they are in effect.
func EnsureMilvusGeneration(ctx context.Context, m MilvusConn, names Names, collection, owner string, spec vector.Spec) error {
	what := fmt.Sprintf("Milvus %s: collection %s", m.Address, collection)
	if err := spec.Validate(); err != nil {
		return fail(ReasonBackendError, "vector spec: %v", err)
	}
	c, err := ConnectMilvus(ctx, m)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	if _, err := milvus.EnsureCollection(ctx, c, collection, spec, milvus.Owner{ID: owner}); err != nil {
		return classify(what, err)
	}
	if m.Username == "" {
		return nil // a server without authentication has no roles
	}
	for _, p := range MilvusPrivileges {
		if err := c.Grant(ctx, names.MilvusRole, entity.PriviledegeObjectTypeCollection, collection, p); err != nil {
			return classify(fmt.Sprintf("%s: granting %s to role %s", what, p, names.MilvusRole), err)
		}
	}
	return nil
}

// MilvusGenerationWorks checks, as the store's Milvus user (login), that its
// privileges on a generation's collection are in effect; while they are not, the
// error wraps ErrMilvusTenantPending.
func MilvusGenerationWorks(ctx context.Context, login MilvusConn, names Names, collection string) error {
	return milvusCollectionWorks(ctx, login, names.MilvusRole, collection)
}

// DropMilvusGeneration drops a generation's collection if it is owner's (one that
// is not gives TenantConflict and stays; a missing one is fine), and revokes the
// store's role's privileges on it.
func DropMilvusGeneration(ctx context.Context, m MilvusConn, names Names, collection, owner string) error {
	what := fmt.Sprintf("Milvus %s: collection %s", m.Address, collection)
	if collection == names.Collection {
		return fail(ReasonBackendError, "%s serves the store; it is not dropped as a generation", what)
	}
	c, err := ConnectMilvus(ctx, m)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	if err := milvus.DropCollection(ctx, c, collection, milvus.Owner{ID: owner}); err != nil {
		return classify(what, err)
	}
	if m.Username == "" {
		return nil
	}
	exists, err := milvusRoleExists(ctx, c, names.MilvusRole)
	if err != nil || !exists {
		return classify(what+": role "+names.MilvusRole, err)
	}
	err = revokeMilvusGrants(ctx, c, names.MilvusRole, func(g entity.RoleGrants) bool {
		return g.Object != "Collection" || g.ObjectName != collection
	})
	return classify(what+": revoking role "+names.MilvusRole+"'s privileges", err)
}
