package provision

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/memory/pgstore"
)

// connectTimeout bounds every connection attempt so an unreachable backend turns into a
// condition quickly instead of stalling a reconcile worker.
const connectTimeout = 10 * time.Second

// PostgresConn is how to reach a PostgreSQL server as a given user.
type PostgresConn struct {
	Host     string
	Port     int
	Database string
	SSLMode  string
	User     string
	Password string
}

// URL renders the connection as a postgres:// URL, escaping every part. It contains the
// password: never log it.
func (c PostgresConn) URL(extra url.Values) string {
	q := url.Values{}
	q.Set("sslmode", c.SSLMode)
	if c.SSLMode == "" {
		q.Set("sslmode", "prefer")
	}
	q.Set("connect_timeout", strconv.Itoa(int(connectTimeout.Seconds())))
	for k, v := range extra {
		q[k] = v
	}
	u := url.URL{
		Scheme: "postgres",
		User:   url.UserPassword(c.User, c.Password),
		Host:   net.JoinHostPort(c.Host, strconv.Itoa(c.Port)),
		Path:   "/" + c.Database,
		// libpq reads '+' literally, so spaces (in "options") must be %20.
		RawQuery: strings.ReplaceAll(q.Encode(), "+", "%20"),
	}
	return u.String()
}

// Endpoint is host:port, for messages.
func (c PostgresConn) Endpoint() string { return net.JoinHostPort(c.Host, strconv.Itoa(c.Port)) }

// OpenPool connects to PostgreSQL with a small pool and checks the connection works.
func OpenPool(ctx context.Context, c PostgresConn) (*pgxpool.Pool, error) {
	what := "PostgreSQL " + c.Endpoint()
	cfg, err := pgxpool.ParseConfig(c.URL(nil))
	if err != nil {
		// pgx redacts the password in parse errors.
		return nil, fail(ReasonBackendError, "%s: invalid connection settings: %v", what, err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, classify(what, err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, classify(what, err)
	}
	return pool, nil
}

// PostgresResult reports what EnsurePostgres found or made.
type PostgresResult struct {
	SchemaVersion int
	// LastRestore is the latest restore the store received, nil when none.
	LastRestore *pgstore.ReceivedRestore
}

// ownerComment marks a schema as a given MemoryStore's, so two stores claiming the same
// tenant on one server (or two clusters sharing it) never write into each other's data.
func ownerComment(owner string) string { return "memory-operator store " + owner }

// Passwords are the logins of a store's two roles.
type Passwords struct {
	// Agent is the password of the agents' role (the connection Secret's).
	Agent string
	// Worker is the password of the Jobs' role.
	Worker string
}

// EnsurePostgres creates or repairs the store's schema (by versioned migrations) and
// its two roles, limited to that schema: the agents' (names.Role) and the Jobs'
// (names.WorkerRole), logging in with the given passwords. It is idempotent: on a
// provisioned store it only re-checks and re-applies the grants.
func EnsurePostgres(ctx context.Context, admin PostgresConn, names Names, owner string, pw Passwords) (PostgresResult, error) {
	pool, err := OpenPool(ctx, admin)
	if err != nil {
		return PostgresResult{}, err
	}
	defer pool.Close()
	what := "PostgreSQL " + admin.Endpoint()

	if err := checkSchemaOwner(ctx, pool, names.Schema, owner); err != nil {
		return PostgresResult{}, err
	}
	for _, r := range []struct{ role, password string }{{names.Role, pw.Agent}, {names.WorkerRole, pw.Worker}} {
		if err := ensureRole(ctx, pool, r.role, r.password); err != nil {
			return PostgresResult{}, classify(what+": role "+r.role, err)
		}
	}
	if _, err := pgstore.Migrate(ctx, pool, names.Schema); err != nil {
		return PostgresResult{}, classify(what+": migrating schema "+names.Schema, err)
	}
	if err := execFormatted(ctx, pool, `COMMENT ON SCHEMA %I IS %L`, names.Schema, ownerComment(owner)); err != nil {
		return PostgresResult{}, classify(what, err)
	}
	if err := grantRoles(ctx, pool, admin.Database, names); err != nil {
		return PostgresResult{}, classify(what+": granting "+names.Role+" and "+names.WorkerRole, err)
	}
	last, err := pgstore.New(pool, names.Schema).LastRestore(ctx)
	if err != nil {
		return PostgresResult{}, classify(what, err)
	}
	return PostgresResult{SchemaVersion: pgstore.LatestVersion, LastRestore: last}, nil
}

// Ownership says whose a store's schema is: the mark provisioning leaves on it decides
// whose the tenant's backends are, since the schema is made (and marked) first.
type Ownership int

const (
	// OwnedByUs means the schema exists with this store's mark.
	OwnedByUs Ownership = iota
	// NoSchema means there is no such schema.
	NoSchema
	// OwnedByOther means the schema exists and is another store's, or unmarked.
	OwnedByOther
)

// SchemaOwnership reads whose the store's schema is, and when it is another's, a
// message saying whose.
func SchemaOwnership(ctx context.Context, admin PostgresConn, names Names, owner string) (Ownership, string, error) {
	pool, err := OpenPool(ctx, admin)
	if err != nil {
		return 0, "", err
	}
	defer pool.Close()
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, names.Schema).Scan(&exists); err != nil {
		return 0, "", classify("PostgreSQL: reading schema "+names.Schema, err)
	}
	if !exists {
		return NoSchema, "", nil
	}
	err = checkSchemaOwner(ctx, pool, names.Schema, owner)
	var pe *Error
	if errors.As(err, &pe) && pe.Reason == ReasonTenantConflict {
		return OwnedByOther, pe.Error(), nil
	}
	if err != nil {
		return 0, "", err
	}
	return OwnedByUs, "", nil
}

// checkSchemaOwner fails with TenantConflict when the schema exists and belongs to
// another MemoryStore (or to something that is not ours at all).
func checkSchemaOwner(ctx context.Context, pool *pgxpool.Pool, schema, owner string) error {
	var comment *string
	err := pool.QueryRow(ctx,
		`SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = $1`, schema).Scan(&comment)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return classify("PostgreSQL: reading schema "+schema, err)
	}
	if comment == nil || *comment != ownerComment(owner) {
		found := "no owner mark"
		if comment != nil {
			found = fmt.Sprintf("%q", *comment)
		}
		return fail(ReasonTenantConflict,
			"PostgreSQL schema %s already exists and is not this store's (%s); another MemoryStore or application uses this tenant", schema, found)
	}
	return nil
}

// ensureRole creates the agent role or resets its password to the one in the connection
// Secret, so a crash between the two steps heals on the next reconcile.
func ensureRole(ctx context.Context, pool *pgxpool.Pool, role, password string) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := lockRoles(ctx, tx); err != nil {
			return err
		}
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, role).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			// Under the lock no operator creates it meanwhile; anyone else, on their own head.
			return execFormattedTx(ctx, tx, `CREATE ROLE %I LOGIN NOINHERIT PASSWORD %L`, role, password)
		}
		return execFormattedTx(ctx, tx, `ALTER ROLE %I WITH LOGIN NOINHERIT PASSWORD %L`, role, password)
	})
}

// Privileges are what each role may do on each table of a store's schema. Nothing
// else is granted: no DDL, nothing outside the schema, and no UPDATE or DELETE of
// tombstones for anyone (they are append-only: only the operator's admin could
// un-forget). docs/memorystore.md has this table.
var Privileges = map[string]map[string][]string{
	// Agents (and the gateway, which connects as the agent role) remember, recall,
	// search and forget: they read and write memories and (embedded index) vectors,
	// record tombstones and the audit of their forgets, and keep the index work the
	// gateway owes for the memories it wrote. A memory's recorded_at is the server's
	// (its default, and a trigger on a change of value), so forgetting never depends
	// on an agent's word; nor may an agent move a memory to another ID, scope or slot,
	// or change its created_at once written.
	"agent": {
		"memories": {"SELECT", "DELETE",
			"INSERT (memory_id, memory_type, scope, key, content, content_hash, source, base_score, created_at, updated_at, expires_at, archived_at, history)",
			"UPDATE (memory_type, content, content_hash, source, base_score, updated_at, expires_at, archived_at, history)"},
		"vectors":       {"SELECT", "INSERT", "UPDATE", "DELETE"},
		"tombstones":    {"SELECT", "INSERT"},
		"audit_log":     {"INSERT"},
		"index_pending": {"SELECT", "INSERT", "UPDATE", "DELETE"},
		// The lexical index (pgstore's lexical.go): Put rewrites a memory's
		// postings, a batch writes its own just after it commits, a search makes
		// those a bulk write left owed, and a delete of memories removes theirs (a
		// trigger running as the deleting role).
		"memory_terms": {"SELECT", "INSERT", "DELETE"},
		"term_docs":    {"SELECT", "INSERT", "DELETE"},
		"term_pending": {"SELECT", "INSERT", "DELETE"},
		// The short-term tier when the store has no Redis (pgstore's sessions.go).
		"sessions":          {"SELECT", "INSERT", "UPDATE", "DELETE"},
		"session_turns":     {"SELECT", "INSERT", "DELETE"},
		"store_meta":        {"SELECT"},
		"schema_migrations": {"SELECT"},
	},
	// Jobs also keep the archival, the pending index deletions and the record of the
	// restores received, and read the audit log's counterpart of what they did.
	"worker": {
		"memories":        {"SELECT", "INSERT", "UPDATE", "DELETE"},
		"vectors":         {"SELECT", "INSERT", "UPDATE", "DELETE"},
		"tombstones":      {"SELECT", "INSERT"},
		"audit_log":       {"SELECT", "INSERT"},
		"index_deletions": {"SELECT", "INSERT", "DELETE"},
		"archive_runs":    {"SELECT", "INSERT", "UPDATE"},
		"restores":        {"SELECT", "INSERT", "UPDATE"},
		"scope_renames":   {"SELECT", "INSERT"},
		// Restores and imports mark the scopes owed postings, may make them
		// (IndexPendingTerms), and purges and forgets remove them.
		"memory_terms":      {"SELECT", "INSERT", "DELETE"},
		"term_docs":         {"SELECT", "INSERT", "DELETE"},
		"term_pending":      {"SELECT", "INSERT", "DELETE"},
		"store_meta":        {"SELECT"},
		"schema_migrations": {"SELECT"},
		// A re-embed Job fills an index generation (pgstore's generations.go): it
		// reads its generation, saves its place, and clears the changes it caught
		// up on. Only the operator's admin adds, cuts over and drops generations.
		"index_generations":  {"SELECT", "UPDATE (backfill_after, backfill_until, backfill_done, embedded, embed_rate, progress_at, verified_at, recall, serving_recall)"},
		"generation_pending": {"SELECT", "DELETE"},
	},
}

// grantRoles gives each role exactly its Privileges (and EngineTablePrivileges on the
// engine tables present), in one transaction that first
// revokes whatever it held (so a privilege dropped in a newer version goes, and no
// agent ever sees the gap between the revoke and the grants).
func grantRoles(ctx context.Context, pool *pgxpool.Pool, database string, n Names) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := lockRoles(ctx, tx); err != nil {
			return err
		}
		for kind, role := range map[string]string{"agent": n.Role, "worker": n.WorkerRole} {
			stmts := []struct {
				sql  string
				args []any
			}{
				{`GRANT CONNECT ON DATABASE %I TO %I`, []any{database, role}},
				{`GRANT USAGE ON SCHEMA %I TO %I`, []any{n.Schema, role}},
				{`REVOKE ALL ON ALL TABLES IN SCHEMA %I FROM %I`, []any{n.Schema, role}},
				{`REVOKE ALL ON ALL SEQUENCES IN SCHEMA %I FROM %I`, []any{n.Schema, role}},
				// The audit log's id.
				{`GRANT USAGE ON ALL SEQUENCES IN SCHEMA %I TO %I`, []any{n.Schema, role}},
				{`ALTER ROLE %I SET search_path = %I`, []any{role, n.Schema}},
			}
			tables := Privileges[kind]
			for _, table := range slices.Sorted(maps.Keys(tables)) {
				// The privilege names are constants of this file, never input.
				stmts = append(stmts, struct {
					sql  string
					args []any
				}{`GRANT ` + strings.Join(tables[table], ", ") + ` ON %I.%I TO %I`, []any{n.Schema, table, role}})
			}
			for _, s := range stmts {
				if err := execFormattedTx(ctx, tx, s.sql, s.args...); err != nil {
					return err
				}
			}
			// A vector engine's tables (pgvector.go), in the same transaction.
			if err := grantEngineTables(ctx, tx, n.Schema, kind, role); err != nil {
				return err
			}
		}
		return nil
	})
}

// SchemaVersion reads the schema version of the store's schema (0 when it has none
// yet), changing nothing: an operator upgrade compares it with its own before it
// migrates (EnsurePostgres).
func SchemaVersion(ctx context.Context, admin PostgresConn, names Names) (int, error) {
	pool, err := OpenPool(ctx, admin)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	v, err := pgstore.Version(ctx, pool, names.Schema)
	return v, classify("PostgreSQL "+admin.Endpoint()+": reading the schema version of "+names.Schema, err)
}

// rolesLock is the advisory lock held by every transaction that changes roles or the
// database's access list: creating, altering, granting to and dropping a store's
// roles. Each of those rewrites a shared catalog row (the role's in pg_authid, the
// database's one row in pg_database), and two changes to one row at once fail with
// "tuple concurrently updated": stores provisioned or deleted together, or two
// operator instances during a leader hand-over, take turns instead.
var rolesLock = int64(0x6d656d6f72796f70) // "memoryop"

func lockRoles(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, rolesLock)
	return err
}

// DeletePostgres drops the store's schema and roles. It refuses to drop a schema that is
// not marked as this store's. Missing objects are fine (deletion is retried).
func DeletePostgres(ctx context.Context, admin PostgresConn, names Names, owner string) error {
	pool, err := OpenPool(ctx, admin)
	if err != nil {
		return err
	}
	defer pool.Close()
	what := "PostgreSQL " + admin.Endpoint()
	if err := checkSchemaOwner(ctx, pool, names.Schema, owner); err != nil {
		return err
	}
	if err := execFormatted(ctx, pool, `DROP SCHEMA IF EXISTS %I CASCADE`, names.Schema); err != nil {
		return classify(what+": dropping schema "+names.Schema, err)
	}
	for _, role := range []string{names.Role, names.WorkerRole} {
		var exists bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, role).Scan(&exists); err != nil {
			return classify(what, err)
		}
		if !exists {
			continue
		}
		// DROP OWNED revokes the role's remaining privileges (CONNECT) in this database.
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := lockRoles(ctx, tx); err != nil {
				return err
			}
			if err := execFormattedTx(ctx, tx, `DROP OWNED BY %I`, role); err != nil {
				return err
			}
			return execFormattedTx(ctx, tx, `DROP ROLE IF EXISTS %I`, role)
		})
		if err != nil {
			return classify(what+": dropping role "+role, err)
		}
	}
	return nil
}

// execFormatted builds a statement server-side with format() (%I identifiers, %L
// literals), so names and passwords are quoted by PostgreSQL itself, then runs it.
// DDL takes no bind parameters, and this keeps quoting out of our hands.
func execFormatted(ctx context.Context, pool *pgxpool.Pool, format string, args ...any) error {
	return execFormattedOn(ctx, pool, format, args...)
}

// execFormattedTx is execFormatted in a transaction.
func execFormattedTx(ctx context.Context, tx pgx.Tx, format string, args ...any) error {
	return execFormattedOn(ctx, tx, format, args...)
}

type execer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func execFormattedOn(ctx context.Context, pool execer, format string, args ...any) error {
	placeholders := ""
	for i := range args {
		placeholders += fmt.Sprintf(", $%d::text", i+2)
	}
	var stmt string
	params := append([]any{format}, args...)
	if err := pool.QueryRow(ctx, "SELECT format($1::text"+placeholders+")", params...).Scan(&stmt); err != nil {
		return err
	}
	_, err := pool.Exec(ctx, stmt)
	return err
}
