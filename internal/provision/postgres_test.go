package provision

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/pgvector"
)

// provisioned is a store's schema and roles on the test server, removed afterwards.
func provisioned(t *testing.T) (PostgresConn, Names, Passwords) {
	t.Helper()
	return provisionedOn(t, testutil.PostgresParts(t), "grants-")
}

// provisionedOn is provisioned on the server pg, the tenant named with prefix.
func provisionedOn(t *testing.T, pg testutil.Postgres, prefix string) (PostgresConn, Names, Passwords) {
	t.Helper()
	admin := PostgresConn{Host: pg.Host, Port: pg.PortNumber, Database: "postgres", SSLMode: "disable", User: pg.User, Password: pg.Password}
	names, err := NamesFor(testutil.UniqueName(prefix), "")
	if err != nil {
		t.Fatal(err)
	}
	pw := Passwords{Agent: "agent-pw", Worker: "worker-pw"}
	if _, err := EnsurePostgres(context.Background(), admin, names, "team-a/bot", pw); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := DeletePostgres(context.Background(), admin, names, "team-a/bot"); err != nil {
			t.Errorf("DeletePostgres: %v", err)
		}
	})
	return admin, names, pw
}

// connectAs opens a connection as one of the store's roles.
func connectAs(t *testing.T, admin PostgresConn, role, password string) *pgx.Conn {
	t.Helper()
	c := admin
	c.User, c.Password = role, password
	conn, err := pgx.Connect(context.Background(), c.URL(nil))
	if err != nil {
		t.Fatalf("connecting as %s: %v", role, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// TestGuaranteeRolePrivileges holds each role of a store to exactly the privileges
// docs/memorystore.md lists (the table below is that one, written out again: the test
// does not read Privileges), and shows what they mean: neither role can move or
// remove a tombstone, agents cannot touch the archival bookkeeping, no one can change
// the schema. Re-provisioning takes back what an older version granted.
func TestGuaranteeRolePrivileges(t *testing.T) {
	admin, names, pw := provisioned(t)
	ctx := context.Background()
	crud := "SELECT,INSERT,UPDATE,DELETE"
	want := map[string]map[string]string{
		names.Role: {
			// memories: and INSERT, UPDATE of some columns (below)
			"memories": "SELECT,DELETE", "vectors": crud, "tombstones": "SELECT,INSERT", "audit_log": "INSERT",
			"index_deletions": "", "archive_runs": "", "restores": "", "index_pending": crud, "scope_renames": "", "store_meta": "SELECT", "schema_migrations": "SELECT",
			"memory_terms": "SELECT,INSERT,DELETE", "term_docs": "SELECT,INSERT,DELETE", "term_pending": "SELECT,INSERT,DELETE",
			"sessions": crud, "session_turns": "SELECT,INSERT,DELETE",
			// Scope versions: written by SECURITY DEFINER triggers, read through
			// scope_version(); no role touches the tables.
			"scope_versions": "", "scope_versions_owed": "",
			// Index generations: recorded by a SECURITY DEFINER trigger; an
			// embedding switch's generation table is the vectors table's twin.
			"index_generations": "", "generation_pending": "", "vectors_g2": crud,
		},
		names.WorkerRole: {
			"memories": crud, "vectors": crud, "tombstones": "SELECT,INSERT", "audit_log": "SELECT,INSERT",
			"index_deletions": "SELECT,INSERT,DELETE", "archive_runs": "SELECT,INSERT,UPDATE", "restores": "SELECT,INSERT,UPDATE",
			"index_pending": "", "scope_renames": "SELECT,INSERT", "store_meta": "SELECT", "schema_migrations": "SELECT",
			"memory_terms": "SELECT,INSERT,DELETE", "term_docs": "SELECT,INSERT,DELETE", "term_pending": "SELECT,INSERT,DELETE",
			"sessions": "", "session_turns": "",
			"scope_versions": "", "scope_versions_owed": "",
			// index_generations: and UPDATE of the backfill's progress columns.
			"index_generations": "SELECT", "generation_pending": "SELECT,DELETE", "vectors_g2": crud,
		},
	}
	// A switch's generation table keeps its grants through every later reconcile
	// (the second check below comes after one).
	if err := EnsureGenerationTable(ctx, admin, names, EnginePostgres, 2, vector.Spec{Dimension: 8, Metric: vector.Cosine}, pgvector.Params{}); err != nil {
		t.Fatal(err)
	}
	check := func(t *testing.T) {
		t.Helper()
		conn := connectAs(t, admin, admin.User, admin.Password)
		rows, err := conn.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY 1`, names.Schema)
		if err != nil {
			t.Fatal(err)
		}
		tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if len(tables) != 21 {
			t.Fatalf("schema %s has tables %v; this test knows 21", names.Schema, tables)
		}
		for role, perTable := range want {
			for _, table := range tables {
				expected, ok := perTable[table]
				if !ok {
					t.Errorf("table %s is not in the privileges table: decide what %s may do with it", table, role)
					continue
				}
				var got []string
				for _, priv := range []string{"SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER"} {
					var has bool
					if err := conn.QueryRow(ctx, `SELECT has_table_privilege($1, $2, $3)`, role,
						pgx.Identifier{names.Schema, table}.Sanitize(), priv).Scan(&has); err != nil {
						t.Fatal(err)
					}
					if has {
						got = append(got, priv)
					}
				}
				if strings.Join(got, ",") != expected {
					t.Errorf("%s on %s: %v, want %q", role, table, got, expected)
				}
			}
			var create bool
			if err := conn.QueryRow(ctx, `SELECT has_schema_privilege($1, $2, 'CREATE')`, role, names.Schema).Scan(&create); err != nil || create {
				t.Errorf("%s may create objects in %s (%v)", role, names.Schema, err)
			}
		}
	}
	check(t)

	denied := func(t *testing.T, conn *pgx.Conn, sql string) {
		t.Helper()
		_, err := conn.Exec(ctx, sql)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("%q: %v, want permission denied", sql, err)
		}
	}
	for role, password := range map[string]string{names.Role: pw.Agent, names.WorkerRole: pw.Worker} {
		conn := connectAs(t, admin, role, password)
		if _, err := conn.Exec(ctx, `INSERT INTO tombstones (scope, forgotten_at) VALUES ('user:`+role+`', now())`); err != nil {
			t.Errorf("%s cannot record a tombstone: %v", role, err)
		}
		denied(t, conn, `UPDATE tombstones SET scope = 'user:elsewhere'`)
		denied(t, conn, `DELETE FROM tombstones`)
		denied(t, conn, `TRUNCATE tombstones`)
		denied(t, conn, `CREATE TABLE sneaky (x int)`)
		denied(t, conn, `DROP TABLE memories`)
	}
	agent := connectAs(t, admin, names.Role, pw.Agent)
	// Agents write memories, but recorded_at is the server's, and a memory's ID,
	// scope, slot and created_at stay as written.
	for col, want := range map[string]string{"memory_id": "INSERT", "scope": "INSERT", "key": "INSERT", "created_at": "INSERT",
		"recorded_at": "", "content": "INSERT,UPDATE", "content_hash": "INSERT,UPDATE", "updated_at": "INSERT,UPDATE", "history": "INSERT,UPDATE"} {
		var got []string
		for _, priv := range []string{"INSERT", "UPDATE"} {
			var has bool
			if err := agent.QueryRow(ctx, `SELECT has_column_privilege($1, $2, $3, $4)`, names.Role,
				pgx.Identifier{names.Schema, "memories"}.Sanitize(), col, priv).Scan(&has); err != nil {
				t.Fatal(err)
			}
			if has {
				got = append(got, priv)
			}
		}
		if strings.Join(got, ",") != want {
			t.Errorf("agent on memories.%s: %v, want %q", col, got, want)
		}
	}
	if _, err := agent.Exec(ctx, `INSERT INTO memories (memory_id, memory_type, scope, content, content_hash, base_score, created_at, updated_at)
		VALUES ('m1', 'semantic', 'user:1', '{}', '\x00', 0.5, '2099-01-01', '2099-01-01')`); err != nil {
		t.Fatalf("agent insert: %v", err)
	}
	denied(t, agent, `UPDATE memories SET recorded_at = '2099-01-01'`)
	denied(t, agent, `UPDATE memories SET created_at = '2099-01-01'`)
	denied(t, agent, `UPDATE memories SET scope = 'user:2'`)
	denied(t, agent, `INSERT INTO memories (memory_id, memory_type, scope, content, content_hash, base_score, created_at, updated_at, recorded_at)
		VALUES ('m2', 'semantic', 'user:1', '{}', '\x00', 0.5, now(), now(), '2099-01-01')`)
	// A change of value by the agent is recorded by the server's clock.
	var before, after time.Time
	if err := agent.QueryRow(ctx, `SELECT recorded_at FROM memories WHERE memory_id = 'm1'`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.Exec(ctx, `UPDATE memories SET content = '{"v":2}', content_hash = '\x01' WHERE memory_id = 'm1'`); err != nil {
		t.Fatalf("agent update: %v", err)
	}
	if err := agent.QueryRow(ctx, `SELECT recorded_at FROM memories WHERE memory_id = 'm1'`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if !after.After(before) || after.After(time.Now().Add(time.Minute)) {
		t.Errorf("recorded_at %s after the agent's change (was %s)", after, before)
	}
	denied(t, agent, `SELECT * FROM index_deletions`)
	denied(t, agent, `INSERT INTO archive_runs (archived_at, marked) VALUES (now(), 1)`)
	denied(t, agent, `SELECT * FROM audit_log`)

	// What an older operator granted (UPDATE on tombstones, the archival tables to the
	// agent) is taken back by the next reconcile.
	adminConn := connectAs(t, admin, admin.User, admin.Password)
	for _, g := range []string{`GRANT UPDATE, DELETE ON %s.tombstones TO %s`, `GRANT ALL ON %s.index_deletions TO %s`, `GRANT ALL ON %s.archive_runs TO %s`} {
		if _, err := adminConn.Exec(ctx, strings.NewReplacer("%s.", pgx.Identifier{names.Schema}.Sanitize()+".").Replace(
			strings.Replace(g, "TO %s", "TO "+pgx.Identifier{names.Role}.Sanitize(), 1))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := EnsurePostgres(ctx, admin, names, "team-a/bot", pw); err != nil {
		t.Fatal(err)
	}
	check(t)
}

// TestGuaranteeStoresProvisionConcurrentlyOnOneServer: many stores provisioned and
// deleted at the same time on one server (tenants onboarded together, a namespace
// deleted), and the same store by two operator instances at once, all succeed. Each
// grants or revokes CONNECT on the one database and alters its roles: changes to
// shared catalog rows that PostgreSQL refuses to make twice at once ("tuple
// concurrently updated") unless they take turns.
func TestGuaranteeStoresProvisionConcurrentlyOnOneServer(t *testing.T) {
	pg := testutil.PostgresParts(t)
	admin := PostgresConn{Host: pg.Host, Port: pg.PortNumber, Database: "postgres", SSLMode: "disable", User: pg.User, Password: pg.Password}
	ctx := context.Background()
	const n = 12
	all := make([]Names, n)
	for i := range all {
		names, err := NamesFor(testutil.UniqueName("conc-"), "")
		if err != nil {
			t.Fatal(err)
		}
		all[i] = names
	}
	pw := Passwords{Agent: "agent-pw", Worker: "worker-pw"}
	owner := func(i int) string { return fmt.Sprintf("team-a/bot-%d", i) }
	run := func(what string, fn func(i int) error) {
		t.Helper()
		errs := make(chan error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				if err := fn(i); err != nil {
					errs <- fmt.Errorf("%s store %d: %w", what, i, err)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
	// Half are provisioned first; then the others are provisioned while those are
	// re-provisioned and deleted.
	run("provisioning", func(i int) error {
		if i%2 == 1 {
			return nil
		}
		_, err := EnsurePostgres(ctx, admin, all[i], owner(i), pw)
		return err
	})
	run("provisioning or deleting", func(i int) error {
		if i%4 == 0 {
			return DeletePostgres(ctx, admin, all[i], owner(i))
		}
		_, err := EnsurePostgres(ctx, admin, all[i], owner(i), pw)
		return err
	})
	// Two operator instances at once (a leader hand-over) re-provision the same stores.
	run("re-provisioning", func(i int) error {
		j := 1 + 2*(i%3)
		_, err := EnsurePostgres(ctx, admin, all[j], owner(j), pw)
		return err
	})
	run("deleting", func(i int) error { return DeletePostgres(ctx, admin, all[i], owner(i)) })
}
