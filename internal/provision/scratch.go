package provision

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/milvus-io/milvus-sdk-go/v2/client"
	"github.com/milvus-io/milvus-sdk-go/v2/entity"

	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/milvus"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
	"github.com/amemory/memory-operator/internal/vector/pgvector"
)

// A restore drill restores a store's latest snapshot into a scratch copy of the store
// (on the same PostgreSQL database and Milvus server), checks it and drops it. The
// drill's Job logs in as the store's worker role (and, on a Milvus server with
// authentication, as the store's Milvus user); the operator makes the scratch copy
// before the Job (EnsureScratch) and drops it afterwards, always (DropScratch).
//
// A scratch copy is never reused: EnsureScratch drops a leftover one (a drill killed
// before its cleanup) and makes it again, empty. It is marked as a drill's
// (drillComment on the schema, drillOwner on the collection), never with a store's
// mark, so no store's provisioning or deletion ever takes it for its own, and
// nothing of the scratch copy's is touched when the name is taken by something else
// (TenantConflict). One drill per store runs at a time: two EnsureScratch calls for
// one store at once would each start the copy over.

// scratchPrefix starts a scratch copy's schema and collection names, which otherwise
// hold the tenant's identifier. A store's own names start with "mem_", so no tenant's
// name is ever a scratch copy's.
const scratchPrefix = "drill_"

// Scratch returns the identifiers of the store's scratch copy for a restore drill: the
// schema and the Milvus collection are "drill_" and the tenant's identifier (the
// store's schema without its "mem_" prefix); everything else (the roles and Milvus
// user and role the drill's Job uses, the Redis user, the object-storage prefix) is
// the store's own. The longest tenant (40 characters) gives a 46-byte schema name,
// within PostgreSQL's 63.
func (n Names) Scratch() Names {
	s := n
	ident := scratchPrefix + strings.TrimPrefix(n.Schema, "mem_")
	s.Schema, s.Collection, s.Generations = ident, ident, nil
	return s
}

// drillComment marks a schema as the scratch copy of owner's store. It differs from
// the store's own mark (ownerComment), so neither is ever taken for the other.
func drillComment(owner string) string { return "memory-operator drill " + owner }

// drillOwner is the owner mark of the scratch copy's Milvus collection: owner's
// followed by "/drill", which no store's is (a store's owner is namespace/name).
func drillOwner(owner string) milvus.Owner { return milvus.Owner{ID: owner + "/drill"} }

// EnsureScratch makes an empty scratch copy of the store whose names (the store's,
// not Scratch's) and owner (its mark, as given to EnsurePostgres) are given, and
// returns the copy's names (names.Scratch(), also with an error: call DropScratch
// with the store's names either way):
//
//   - PostgreSQL: the schema names.Scratch().Schema with the store's migrations,
//     marked as owner's drill (a leftover one with that mark is dropped first), on
//     which the store's worker role (names.WorkerRole) gets what it gets on its own
//     schema (Privileges["worker"]) and the agent role nothing; the role's
//     search_path stays its store's. The migrations' triggers (scope versions, the
//     lexical index, recorded_at) work for it as in its store: their SECURITY
//     DEFINER functions are the admin's here too. The store's schema must exist
//     with owner's mark (else TenantConflict): the worker role is then the store's.
//   - The vector index, by engine (EnginePostgres, EnginePGVector, EngineMilvus) and
//     spec: the embedded vectors table (pgindex.Ensure); pgvector's embeddings table
//     and HNSW index with pgv's parameters, as EnsurePGVector makes a store's, the
//     worker role alone granted its use; or, on the Milvus server m (its admin
//     login), the collection names.Scratch().Collection marked as owner's drill (a
//     leftover one with that mark dropped first). When m has credentials and the
//     store's Milvus role exists (EnsureMilvusTenant made it), that role gets
//     MilvusPrivileges on the scratch collection, so the store's Milvus user writes
//     and searches it; Milvus applies grants in the background, so call
//     ScratchMilvusReady until it returns nil before starting the Job. m is used
//     only for EngineMilvus.
//
// A schema or collection of the scratch copy's name that is not marked as owner's
// drill (another's, or unmarked) gives TenantConflict, and nothing is touched: every
// mark is checked before anything is dropped or made. After any other error what
// was made stays until DropScratch (or the next EnsureScratch) removes it.
func EnsureScratch(ctx context.Context, admin PostgresConn, m *MilvusConn, names Names, owner string, spec vector.Spec,
	engine string, pgv pgvector.Params) (Names, error) {
	scratch := names.Scratch()
	if err := validateScratch(names, spec, engine, m, pgv); err != nil {
		return scratch, err
	}
	pool, err := OpenPool(ctx, admin)
	if err != nil {
		return scratch, err
	}
	defer pool.Close()
	if err := scratchPreflight(ctx, pool, admin, names, owner); err != nil {
		return scratch, err
	}
	var mc client.Client
	if engine == EngineMilvus {
		if mc, err = ConnectMilvus(ctx, *m); err != nil {
			return scratch, err
		}
		defer func() { _ = mc.Close() }()
		if _, err := milvus.CheckOwner(ctx, mc, scratch.Collection, drillOwner(owner)); err != nil {
			return scratch, classify(fmt.Sprintf("Milvus %s: collection %s", m.Address, scratch.Collection), err)
		}
	}

	// Every mark is ours or absent: start over.
	if err := buildScratchSchema(ctx, pool, admin, names, owner, spec, engine, pgv); err != nil {
		return scratch, err
	}
	if engine == EngineMilvus {
		if err := recreateScratchCollection(ctx, mc, *m, scratch, owner, spec); err != nil {
			return scratch, err
		}
	}
	return scratch, nil
}

// validateScratch checks EnsureScratch's arguments before anything is reached.
func validateScratch(names Names, spec vector.Spec, engine string, m *MilvusConn, pgv pgvector.Params) error {
	scratch := names.Scratch()
	if err := spec.Validate(); err != nil {
		return fail(ReasonBackendError, "vector spec: %v", err)
	}
	switch engine {
	case EnginePostgres:
	case EnginePGVector:
		if err := pgvector.ValidateSpec(spec); err != nil {
			return fail(ReasonEngineUnavailable, "vector spec for the PGVector engine: %v", err)
		}
		if err := pgv.WithDefaults().Validate(); err != nil {
			return fail(ReasonBackendError, "%v", err)
		}
	case EngineMilvus:
		if m == nil {
			return fail(ReasonEngineUnavailable, "the Milvus engine needs a Milvus server for the scratch copy of %s", names.Schema)
		}
	default:
		return fail(ReasonBackendError, "unknown vector engine %q: want %s, %s or %s", engine, EnginePostgres, EnginePGVector, EngineMilvus)
	}
	if err := pgstore.ValidateSchema(scratch.Schema); err != nil {
		return fail(ReasonBackendError, "scratch copy of %s: %v", names.Schema, err)
	}
	if err := milvus.ValidCollectionName(scratch.Collection); err != nil {
		return fail(ReasonBackendError, "scratch copy of %s: %v", names.Schema, err)
	}
	return nil
}

// scratchPreflight checks, before anything is touched, that the store's schema is
// owner's (its worker role is then the store's), that the role exists, and that the
// scratch schema is absent or marked as owner's drill.
func scratchPreflight(ctx context.Context, pool *pgxpool.Pool, admin PostgresConn, names Names, owner string) error {
	what := "PostgreSQL " + admin.Endpoint()
	switch own, msg, err := SchemaOwnership(ctx, admin, names, owner); {
	case err != nil:
		return err
	case own == NoSchema:
		return fail(ReasonBackendError, "%s: schema %s does not exist; a store's scratch copy is made after the store (EnsurePostgres)",
			what, names.Schema)
	case own == OwnedByOther:
		return fail(ReasonTenantConflict, "%s", msg)
	}
	var worker bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, names.WorkerRole).Scan(&worker); err != nil {
		return classify(what, err)
	}
	if !worker {
		return fail(ReasonBackendError, "%s: role %s does not exist; a store's scratch copy is made after its roles (EnsurePostgres)",
			what, names.WorkerRole)
	}
	_, err := scratchMark(ctx, pool, names.Scratch().Schema, owner)
	return err
}

// buildScratchSchema makes the scratch schema afresh: marked, migrated, with the
// engine's vectors table when the vectors live in PostgreSQL, and the worker role's
// grants.
func buildScratchSchema(ctx context.Context, pool *pgxpool.Pool, admin PostgresConn, names Names, owner string, spec vector.Spec,
	engine string, pgv pgvector.Params) error {
	scratch := names.Scratch()
	what := "PostgreSQL " + admin.Endpoint()
	if err := recreateScratchSchema(ctx, pool, scratch.Schema, owner); err != nil {
		return err
	}
	if _, err := pgstore.Migrate(ctx, pool, scratch.Schema); err != nil {
		return classify(what+": migrating schema "+scratch.Schema, err)
	}
	var ext *pgvector.Extension
	switch engine {
	case EnginePostgres:
		if err := pgindex.Ensure(ctx, pool, scratch.Schema, spec); err != nil {
			return classify(fmt.Sprintf("%s: vectors in schema %s", what, scratch.Schema), err)
		}
	case EnginePGVector:
		e, err := pgvector.EnsureExtension(ctx, pool)
		if err != nil {
			return classifyPGVector(what+" (database "+admin.Database+")", err)
		}
		ext = &e
		if err := pgvector.Ensure(ctx, pool, scratch.Schema, spec, pgv); err != nil {
			return classifyPGVector(fmt.Sprintf("%s: vectors in schema %s", what, scratch.Schema), err)
		}
	}
	if err := grantScratchWorker(ctx, pool, admin.Database, scratch, ext); err != nil {
		return classify(what+": granting "+names.WorkerRole+" the scratch copy "+scratch.Schema, err)
	}
	return nil
}

// DropScratch removes the scratch copy of the store whose names (the store's) and
// owner are given, whatever a drill left of it: on the Milvus server m (its admin
// login; nil when the store's engine is not Milvus) the store's Milvus role's grants
// on the scratch collection and the collection, then the scratch schema (CASCADE,
// with its vectors). It drops only what carries owner's drill mark: a schema or
// collection marked otherwise (or unmarked) stays untouched and gives
// TenantConflict, while the rest is still removed. What is absent is fine: it is
// idempotent, and neither the store's roles nor its schema need exist any more.
func DropScratch(ctx context.Context, admin PostgresConn, m *MilvusConn, names Names, owner string) error {
	scratch := names.Scratch()
	var errs []error
	if m != nil {
		errs = append(errs, dropScratchCollection(ctx, *m, scratch, owner))
	}
	errs = append(errs, dropScratchSchema(ctx, admin, scratch.Schema, owner))
	return errors.Join(errs...)
}

// ScratchMilvusReady makes sure the store's Milvus user (names.MilvusUser, logging in
// with password) can use the scratch copy's collection that EnsureScratch made for
// owner's store (names are the store's): it grants the store's role
// MilvusPrivileges on the collection again (which has the server send them to its
// proxies again: Milvus 2.3 applies grants in the background and now and then
// misses one until it is sent again) and checks, as that user, by the probes
// EnsureMilvusTenant uses, that every one is in effect. It returns nil once they
// are, else an error wrapping ErrMilvusTenantPending: call it again a few seconds
// later (not EnsureScratch, which would start the copy over). On a server without
// authentication (admin without credentials) there is nothing to wait for. The
// collection must exist with owner's drill mark, and the store's role too.
func ScratchMilvusReady(ctx context.Context, admin MilvusConn, names Names, owner, password string) error {
	if admin.Username == "" {
		return nil
	}
	scratch := names.Scratch()
	what := fmt.Sprintf("Milvus %s: collection %s", admin.Address, scratch.Collection)
	c, err := ConnectMilvus(ctx, admin)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	exists, err := milvus.CheckOwner(ctx, c, scratch.Collection, drillOwner(owner))
	if err != nil {
		return classify(what, err)
	}
	if !exists {
		return fail(ReasonBackendError, "%s does not exist; EnsureScratch makes the scratch copy", what)
	}
	role, err := scratchMilvusRole(ctx, c, admin, scratch)
	if err != nil {
		return classify(what+": role "+scratch.MilvusRole, err)
	}
	if !role {
		return fail(ReasonBackendError, "%s: the store's role %s does not exist; EnsureMilvusTenant makes it", what, scratch.MilvusRole)
	}
	if err := grantScratchCollection(ctx, c, scratch); err != nil {
		return classify(what, err)
	}
	return milvusTenantWorks(ctx, MilvusConn{Address: admin.Address, Username: names.MilvusUser, Password: password}, scratch)
}

// scratchMark reads a scratch schema's mark: exists is false when there is no such
// schema; err is TenantConflict when there is one without owner's drill mark.
func scratchMark(ctx context.Context, q execer, schema, owner string) (exists bool, err error) {
	var comment *string
	err = q.QueryRow(ctx, `SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = $1`, schema).Scan(&comment)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, classify("PostgreSQL: reading schema "+schema, err)
	}
	if comment == nil || *comment != drillComment(owner) {
		found := "no owner mark"
		if comment != nil {
			found = fmt.Sprintf("%q", *comment)
		}
		return true, fail(ReasonTenantConflict,
			"PostgreSQL schema %s already exists and is not the restore drill's scratch copy of store %s (%s); left untouched", schema, owner, found)
	}
	return true, nil
}

// scratchLockKey is the advisory lock under which a scratch schema is checked and
// dropped or made, so the mark read is the mark of the schema dropped.
func scratchLockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("memory-operator/provision/scratch\x00"))
	h.Write([]byte(schema))
	return int64(h.Sum64())
}

// recreateScratchSchema drops the scratch schema if it has owner's drill mark, makes
// it again, empty, and marks it, in one transaction (TenantConflict, and nothing
// done, when it is marked otherwise).
func recreateScratchSchema(ctx context.Context, pool *pgxpool.Pool, schema, owner string) error {
	what := "PostgreSQL: scratch schema " + schema
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, scratchLockKey(schema)); err != nil {
			return classify(what, err)
		}
		exists, err := scratchMark(ctx, tx, schema, owner)
		if err != nil {
			return err
		}
		if exists {
			if err := execFormattedTx(ctx, tx, `DROP SCHEMA %I CASCADE`, schema); err != nil {
				return classify(what+": dropping the leftover copy", err)
			}
		}
		if err := execFormattedTx(ctx, tx, `CREATE SCHEMA %I`, schema); err != nil {
			return classify(what, err)
		}
		if err := execFormattedTx(ctx, tx, `COMMENT ON SCHEMA %I IS %L`, schema, drillComment(owner)); err != nil {
			return classify(what, err)
		}
		return nil
	})
}

// grantScratchWorker gives the store's worker role on the scratch schema what
// grantRoles gives it on the store's (Privileges["worker"], the sequences, and
// EngineTablePrivileges on the engine tables present) and, with the PGVector engine
// (ext set), the use of the extension and of the bulk-load functions, as
// grantPGVector does. Unlike grantRoles it leaves the role's search_path (the
// store's schema) alone, and the agent role gets nothing.
func grantScratchWorker(ctx context.Context, pool *pgxpool.Pool, database string, scratch Names, ext *pgvector.Extension) error {
	role := scratch.WorkerRole
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := lockRoles(ctx, tx); err != nil {
			return err
		}
		stmts := []struct {
			sql  string
			args []any
		}{
			{`GRANT CONNECT ON DATABASE %I TO %I`, []any{database, role}},
			{`GRANT USAGE ON SCHEMA %I TO %I`, []any{scratch.Schema, role}},
			// The audit log's id.
			{`GRANT USAGE ON ALL SEQUENCES IN SCHEMA %I TO %I`, []any{scratch.Schema, role}},
		}
		tables := Privileges["worker"]
		for _, table := range slices.Sorted(maps.Keys(tables)) {
			// The privilege names are constants of postgres.go, never input.
			stmts = append(stmts, struct {
				sql  string
				args []any
			}{`GRANT ` + strings.Join(tables[table], ", ") + ` ON %I.%I TO %I`, []any{scratch.Schema, table, role}})
		}
		if ext != nil {
			stmts = append(stmts, struct {
				sql  string
				args []any
			}{`GRANT USAGE ON SCHEMA %I TO %I`, []any{ext.Schema, role}})
			for _, fn := range []string{pgvector.DropIndexFunction, pgvector.BuildIndexFunction} {
				stmts = append(stmts, struct {
					sql  string
					args []any
				}{`GRANT EXECUTE ON FUNCTION %I.%I() TO %I`, []any{scratch.Schema, fn, role}})
			}
		}
		for _, s := range stmts {
			if err := execFormattedTx(ctx, tx, s.sql, s.args...); err != nil {
				return err
			}
		}
		return grantEngineTables(ctx, tx, scratch.Schema, "worker", role)
	})
}

// dropScratchSchema drops the scratch schema if it carries owner's drill mark.
func dropScratchSchema(ctx context.Context, admin PostgresConn, schema, owner string) error {
	pool, err := OpenPool(ctx, admin)
	if err != nil {
		return err
	}
	defer pool.Close()
	what := "PostgreSQL " + admin.Endpoint() + ": scratch schema " + schema
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, scratchLockKey(schema)); err != nil {
			return classify(what, err)
		}
		exists, err := scratchMark(ctx, tx, schema, owner)
		if err != nil || !exists {
			return err
		}
		if err := execFormattedTx(ctx, tx, `DROP SCHEMA %I CASCADE`, schema); err != nil {
			return classify(what+": dropping", err)
		}
		return nil
	})
}

// scratchMilvusRole reports whether the scratch collection's grants are to be kept:
// m has credentials (a server with authentication: EnsureMilvusTenant made the store
// a user and role there) and the store's role exists.
func scratchMilvusRole(ctx context.Context, c client.Client, m MilvusConn, scratch Names) (bool, error) {
	if m.Username == "" {
		return false, nil
	}
	return milvusRoleExists(ctx, c, scratch.MilvusRole)
}

// revokeScratchGrants revokes every privilege the store's Milvus role holds on the
// scratch collection.
func revokeScratchGrants(ctx context.Context, c client.Client, scratch Names) error {
	return revokeMilvusGrants(ctx, c, scratch.MilvusRole, func(g entity.RoleGrants) bool {
		return g.Object != "Collection" || g.ObjectName != scratch.Collection
	})
}

// recreateScratchCollection drops the scratch collection if it has owner's drill
// mark (first revoking the store's role's grants on it), makes it again, empty, with
// that mark, and grants the store's Milvus role exactly MilvusPrivileges on it when
// the server has authentication.
func recreateScratchCollection(ctx context.Context, c client.Client, m MilvusConn, scratch Names, owner string, spec vector.Spec) error {
	what := fmt.Sprintf("Milvus %s: collection %s", m.Address, scratch.Collection)
	role, err := clearScratchCollection(ctx, c, m, scratch, owner)
	if err != nil {
		return err
	}
	if _, err := milvus.EnsureCollection(ctx, c, scratch.Collection, spec, drillOwner(owner)); err != nil {
		return classify(what, err)
	}
	if !role {
		return nil
	}
	return classify(what, grantScratchCollection(ctx, c, scratch))
}

// clearScratchCollection revokes every grant of the store's Milvus role on the scratch
// collection's name (also any granted by hand), then drops the collection if it has
// owner's drill mark; role says whether the store has a Milvus role.
func clearScratchCollection(ctx context.Context, c client.Client, m MilvusConn, scratch Names, owner string) (role bool, err error) {
	what := fmt.Sprintf("Milvus %s: collection %s", m.Address, scratch.Collection)
	dOwner := drillOwner(owner)
	exists, err := milvus.CheckOwner(ctx, c, scratch.Collection, dOwner)
	if err != nil {
		return false, classify(what, err)
	}
	if role, err = scratchMilvusRole(ctx, c, m, scratch); err != nil {
		return false, classify(what+": role "+scratch.MilvusRole, err)
	}
	// The grants first: from here on the store's user cannot use the copy.
	if role {
		if err := revokeScratchGrants(ctx, c, scratch); err != nil {
			return false, classify(what+": revoking the privileges of role "+scratch.MilvusRole, err)
		}
	}
	if exists {
		if err := milvus.DropCollection(ctx, c, scratch.Collection, dOwner); err != nil {
			return false, classify(what+": dropping", err)
		}
	}
	return role, nil
}

// grantScratchCollection grants the store's Milvus role MilvusPrivileges on the
// scratch collection (a privilege it holds is granted again: a no-op, but for the
// server sending it to its proxies again).
func grantScratchCollection(ctx context.Context, c client.Client, scratch Names) error {
	for _, p := range MilvusPrivileges {
		if err := c.Grant(ctx, scratch.MilvusRole, entity.PriviledegeObjectTypeCollection, scratch.Collection, p); err != nil {
			return fmt.Errorf("granting role %s %s: %w", scratch.MilvusRole, p, err)
		}
	}
	return nil
}

// dropScratchCollection revokes the store's Milvus role's grants on the scratch
// collection and drops it, if it has owner's drill mark (or is gone: grants left on
// the name go too).
func dropScratchCollection(ctx context.Context, m MilvusConn, scratch Names, owner string) error {
	c, err := ConnectMilvus(ctx, m)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	_, err = clearScratchCollection(ctx, c, m, scratch, owner)
	return err
}
