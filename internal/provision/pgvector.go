package provision

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/pgvector"
)

// EngineTablePrivileges are the privileges on tables a vector engine adds to a
// store's schema, per role kind as in Privileges. grantRoles grants them wherever the
// table exists, inside the transaction that first revokes everything, so
// re-provisioning the schema never takes away (even for a moment) what the engine's
// provisioning granted. The PGVector engine's embeddings table is read and written by
// both roles, as the embedded engine's vectors table is.
var EngineTablePrivileges = map[string]map[string][]string{
	pgvector.Table: {
		"agent":  {"SELECT", "INSERT", "UPDATE", "DELETE"},
		"worker": {"SELECT", "INSERT", "UPDATE", "DELETE"},
	},
}

// EnsurePGVector makes sure the store's PGVector index exists with the declared
// shape, after EnsurePostgres made its schema: the vector extension (created as the
// admin when the database has none), the embeddings table with its HNSW index
// (pgvector.Ensure), and the store's two roles' privileges on them (USAGE on the
// extension's schema, EngineTablePrivileges on the table). A server without pgvector
// (or with one too old for HNSW) fails with ExtensionMissing; the worker role may
// also drop and build the HNSW index around a bulk load (pgvector.DropSearchIndex); an existing index of
// another dimension or metric with DimensionMismatch or MetricMismatch, untouched.
func EnsurePGVector(ctx context.Context, admin PostgresConn, names Names, spec vector.Spec, p pgvector.Params) (VectorResult, error) {
	return EnsurePGVectorServing(ctx, admin, names, pgvector.Table, spec, p)
}

// EnsurePGVectorServing is EnsurePGVector for the table that serves the store's
// searches: the embeddings table, or an index generation's (GenerationTable) once a
// switch of embedding model made it serve.
func EnsurePGVectorServing(ctx context.Context, admin PostgresConn, names Names, table string, spec vector.Spec, p pgvector.Params) (VectorResult, error) {
	what := "PostgreSQL " + admin.Endpoint()
	if err := pgvector.ValidateSpec(spec); err != nil {
		return VectorResult{}, fail(ReasonEngineUnavailable, "vector spec for the PGVector engine: %v", err)
	}
	if err := p.WithDefaults().Validate(); err != nil {
		return VectorResult{}, fail(ReasonBackendError, "%v", err)
	}
	pool, err := OpenPool(ctx, admin)
	if err != nil {
		return VectorResult{}, err
	}
	defer pool.Close()
	ext, err := pgvector.EnsureExtension(ctx, pool)
	if err != nil {
		return VectorResult{}, classifyPGVector(what+" (database "+admin.Database+")", err)
	}
	var existed bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, pgx.Identifier{names.Schema, table}.Sanitize()).Scan(&existed); err != nil {
		return VectorResult{}, classify(what, err)
	}
	if err := pgvector.EnsureServing(ctx, pool, names.Schema, table, spec, p); err != nil {
		return VectorResult{}, classifyPGVector(fmt.Sprintf("%s: vectors in schema %s", what, names.Schema), err)
	}
	if err := grantPGVector(ctx, pool, names, ext); err != nil {
		return VectorResult{}, classify(what+": granting "+names.Role+" and "+names.WorkerRole+" the vector index", err)
	}
	deferred, err := pgvector.TableSearchIndexDeferred(ctx, pool, names.Schema, table)
	if err != nil {
		return VectorResult{}, classify(what, err)
	}
	return VectorResult{Engine: EnginePGVector, Collection: names.Schema + "." + table, Created: !existed,
		Extension: "vector " + ext.Version + " in schema " + ext.Schema, SearchIndexDeferredSince: deferred}, nil
}

// classifyPGVector is classify, with a missing or too old extension as ExtensionMissing.
func classifyPGVector(what string, err error) error {
	if errors.Is(err, pgvector.ErrExtensionMissing) {
		return &Error{Reason: ReasonExtensionMissing, Err: fmt.Errorf("%s: %w", what, err)}
	}
	return classify(what, err)
}

// grantPGVector grants the store's roles the use of the extension's type and
// operators and their privileges on the embeddings table.
func grantPGVector(ctx context.Context, pool *pgxpool.Pool, names Names, ext pgvector.Extension) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := lockRoles(ctx, tx); err != nil {
			return err
		}
		for kind, role := range map[string]string{"agent": names.Role, "worker": names.WorkerRole} {
			if err := execFormattedTx(ctx, tx, `GRANT USAGE ON SCHEMA %I TO %I`, ext.Schema, role); err != nil {
				return err
			}
			if err := grantEngineTables(ctx, tx, names.Schema, kind, role); err != nil {
				return err
			}
		}
		// Restores into a new store load without the HNSW index and build it after.
		for _, fn := range []string{pgvector.DropIndexFunction, pgvector.BuildIndexFunction} {
			if err := execFormattedTx(ctx, tx, `GRANT EXECUTE ON FUNCTION %I.%I() TO %I`, names.Schema, fn, names.WorkerRole); err != nil {
				return err
			}
		}
		return nil
	})
}

// grantEngineTables grants role its EngineTablePrivileges on those tables of schema
// that exist, and its vectors privileges on the index generations' tables.
func grantEngineTables(ctx context.Context, tx pgx.Tx, schema, kind, role string) error {
	if err := grantGenerationTables(ctx, tx, schema, kind, role); err != nil {
		return err
	}
	for _, table := range slices.Sorted(maps.Keys(EngineTablePrivileges)) {
		privs := EngineTablePrivileges[table][kind]
		if len(privs) == 0 {
			continue
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, pgx.Identifier{schema, table}.Sanitize()).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			continue
		}
		// The privilege names are constants of this file, never input.
		if err := execFormattedTx(ctx, tx, `GRANT `+strings.Join(privs, ", ")+` ON %I.%I TO %I`, schema, table, role); err != nil {
			return err
		}
	}
	return nil
}
