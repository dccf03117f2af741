package provision

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
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
}

// ownerComment marks a schema as a given MemoryStore's, so two stores claiming the same
// tenant on one server (or two clusters sharing it) never write into each other's data.
func ownerComment(owner string) string { return "memory-operator store " + owner }

// EnsurePostgres creates or repairs the store's schema (by versioned migrations) and its
// agent role, limited to that schema and logging in with agentPassword. It is
// idempotent: on a provisioned store it only re-checks and re-applies grants.
func EnsurePostgres(ctx context.Context, admin PostgresConn, names Names, owner, agentPassword string) (PostgresResult, error) {
	pool, err := OpenPool(ctx, admin)
	if err != nil {
		return PostgresResult{}, err
	}
	defer pool.Close()
	what := "PostgreSQL " + admin.Endpoint()

	if err := checkSchemaOwner(ctx, pool, names.Schema, owner); err != nil {
		return PostgresResult{}, err
	}
	if err := ensureRole(ctx, pool, names.Role, agentPassword); err != nil {
		return PostgresResult{}, classify(what+": role "+names.Role, err)
	}
	if _, err := pgstore.Migrate(ctx, pool, names.Schema); err != nil {
		return PostgresResult{}, classify(what+": migrating schema "+names.Schema, err)
	}
	if err := execFormatted(ctx, pool, `COMMENT ON SCHEMA %I IS %L`, names.Schema, ownerComment(owner)); err != nil {
		return PostgresResult{}, classify(what, err)
	}
	if err := grantAgent(ctx, pool, admin.Database, names); err != nil {
		return PostgresResult{}, classify(what+": granting "+names.Role, err)
	}
	return PostgresResult{SchemaVersion: pgstore.LatestVersion}, nil
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
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, role).Scan(&exists); err != nil {
		return err
	}
	if !exists {
		err := execFormatted(ctx, pool, `CREATE ROLE %I LOGIN NOINHERIT PASSWORD %L`, role, password)
		var pgErr *pgconn.PgError
		concurrent := errors.As(err, &pgErr) && pgErr.Code == "42710" // duplicate_object: created concurrently
		if !concurrent {
			return err
		}
	}
	return execFormatted(ctx, pool, `ALTER ROLE %I WITH LOGIN NOINHERIT PASSWORD %L`, role, password)
}

// grantAgent gives the agent role exactly what an agent needs: read and write memories
// and vectors, forget (tombstones, audit), archive and rehydrate (pending vector
// deletions, archive runs), read settings; no DDL, nothing outside. The snapshot,
// restore and archive workers connect as this role too.
func grantAgent(ctx context.Context, pool *pgxpool.Pool, database string, n Names) error {
	stmts := []struct {
		sql  string
		args []any
	}{
		{`GRANT CONNECT ON DATABASE %I TO %I`, []any{database, n.Role}},
		{`GRANT USAGE ON SCHEMA %I TO %I`, []any{n.Schema, n.Role}},
		{`GRANT SELECT, INSERT, UPDATE, DELETE ON %I.memories, %I.vectors TO %I`, []any{n.Schema, n.Schema, n.Role}},
		{`GRANT SELECT, INSERT, UPDATE ON %I.tombstones TO %I`, []any{n.Schema, n.Role}},
		{`GRANT SELECT, INSERT ON %I.audit_log TO %I`, []any{n.Schema, n.Role}},
		{`GRANT SELECT, INSERT, DELETE ON %I.index_deletions TO %I`, []any{n.Schema, n.Role}},
		{`GRANT SELECT, INSERT, UPDATE ON %I.archive_runs TO %I`, []any{n.Schema, n.Role}},
		{`GRANT USAGE ON ALL SEQUENCES IN SCHEMA %I TO %I`, []any{n.Schema, n.Role}},
		{`GRANT SELECT ON %I.store_meta, %I.schema_migrations TO %I`, []any{n.Schema, n.Schema, n.Role}},
		{`ALTER ROLE %I SET search_path = %I`, []any{n.Role, n.Schema}},
	}
	for _, s := range stmts {
		if err := execFormatted(ctx, pool, s.sql, s.args...); err != nil {
			return err
		}
	}
	return nil
}

// DeletePostgres drops the store's schema and role. It refuses to drop a schema that is
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
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, names.Role).Scan(&exists); err != nil {
		return classify(what, err)
	}
	if exists {
		// DROP OWNED revokes the role's remaining privileges (CONNECT) in this database.
		if err := execFormatted(ctx, pool, `DROP OWNED BY %I`, names.Role); err != nil {
			return classify(what+": dropping role "+names.Role, err)
		}
		if err := execFormatted(ctx, pool, `DROP ROLE IF EXISTS %I`, names.Role); err != nil {
			return classify(what+": dropping role "+names.Role, err)
		}
	}
	return nil
}

// execFormatted builds a statement server-side with format() (%I identifiers, %L
// literals), so names and passwords are quoted by PostgreSQL itself, then runs it.
// DDL takes no bind parameters, and this keeps quoting out of our hands.
func execFormatted(ctx context.Context, pool *pgxpool.Pool, format string, args ...any) error {
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
