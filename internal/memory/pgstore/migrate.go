package pgstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"text/template"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migrations are applied in order; migration i has version i+1. They are templates:
// {{t "name"}} expands to the schema-qualified, quoted table name and {{i "name"}} to
// a quoted bare identifier (index names live in their table's schema). Never edit a
// released migration; append a new one.
var migrations = []string{
	// 1: the memory store.
	`
CREATE TABLE {{t "memories"}} (
	-- Byte-order ("C") collation: exports stream in scope order, snapshot packages need
	-- that order to be the same on every server whatever its locale.
	memory_id    text COLLATE "C" PRIMARY KEY,
	memory_type  text NOT NULL CHECK (memory_type IN ('working', 'episodic', 'semantic', 'procedural')),
	scope        text COLLATE "C" NOT NULL,
	key          text,
	content      jsonb NOT NULL CHECK (jsonb_typeof(content) = 'object'),
	content_hash bytea NOT NULL,
	source       text NOT NULL DEFAULT '',
	base_score   double precision NOT NULL,
	created_at   timestamptz NOT NULL,
	updated_at   timestamptz NOT NULL,
	expires_at   timestamptz,
	archived_at  timestamptz,
	history      jsonb NOT NULL DEFAULT '[]'
);
CREATE UNIQUE INDEX {{i "memories_scope_key_uq"}} ON {{t "memories"}} (scope, key) WHERE key IS NOT NULL;
CREATE UNIQUE INDEX {{i "memories_scope_hash_uq"}} ON {{t "memories"}} (scope, content_hash) WHERE key IS NULL;
CREATE INDEX {{i "memories_scope_type_idx"}} ON {{t "memories"}} (scope, memory_type);
-- Export streams in (scope, memory_id) order; this index lets it do so without a sort.
CREATE INDEX {{i "memories_scope_id_idx"}} ON {{t "memories"}} (scope, memory_id);

CREATE TABLE {{t "tombstones"}} (
	scope        text PRIMARY KEY,
	forgotten_at timestamptz NOT NULL,
	reason       text NOT NULL DEFAULT ''
);

CREATE TABLE {{t "audit_log"}} (
	id     bigserial PRIMARY KEY,
	at     timestamptz NOT NULL DEFAULT now(),
	action text NOT NULL,
	scope  text,
	detail jsonb NOT NULL DEFAULT '{}'
);

CREATE TABLE {{t "vectors"}} (
	memory_id   text PRIMARY KEY,
	scope       text NOT NULL,
	memory_type text NOT NULL,
	embedding   real[] NOT NULL
);
CREATE INDEX {{i "vectors_scope_type_idx"}} ON {{t "vectors"}} (scope, memory_type);

CREATE TABLE {{t "store_meta"}} (
	key   text PRIMARY KEY,
	value text NOT NULL
);
`,
	// 2: scheduled archival (see archive.go).
	`
-- Vector deletions owed to the index for memories deleted from this table (purged),
-- recorded in the transaction that deleted them; removed once the index has done them.
CREATE TABLE {{t "index_deletions"}} (
	memory_id   text COLLATE "C" PRIMARY KEY,
	scope       text COLLATE "C" NOT NULL,
	recorded_at timestamptz NOT NULL DEFAULT now()
);

-- One row per archival run that archived something, keyed by its clock (the archived_at
-- of what it archived): how far the deletion of their vectors got (memory_id order),
-- and where and when their cold copy was written.
CREATE TABLE {{t "archive_runs"}} (
	archived_at        timestamptz PRIMARY KEY,
	marked             bigint NOT NULL CHECK (marked >= 0),
	recorded_at        timestamptz NOT NULL DEFAULT now(),
	vectors_after      text COLLATE "C" NOT NULL DEFAULT '',
	vectors_deleted_at timestamptz,
	cold_package       text,
	cold_items         bigint,
	cold_written_at    timestamptz,
	CHECK ((cold_package IS NULL) = (cold_written_at IS NULL))
);

-- Partial: live memories (nearly all) cost these indexes nothing. The first walks a
-- run's memories in memory_id order.
CREATE INDEX {{i "memories_archived_idx"}} ON {{t "memories"}} (archived_at, memory_id) WHERE archived_at IS NOT NULL;
CREATE INDEX {{i "memories_expires_at_idx"}} ON {{t "memories"}} (expires_at) WHERE expires_at IS NOT NULL;
`,
	// 3: append-only tombstones (see forget.go). A scope may have several rows, one per
	// forget; its tombstone is the latest. Updating a row is never needed, so no role
	// but the operator's admin can move or remove a tombstone. Byte-order collation:
	// snapshots stream tombstones in scope order.
	`
ALTER TABLE {{t "tombstones"}} DROP CONSTRAINT {{i "tombstones_pkey"}};
ALTER TABLE {{t "tombstones"}} ALTER COLUMN scope TYPE text COLLATE "C";
ALTER TABLE {{t "tombstones"}} ADD CONSTRAINT {{i "tombstones_pkey"}} PRIMARY KEY (scope, forgotten_at);
`,
	// 4: the restores the store received (restores.go), one row per MemoryRestore
	// that completed into it: a second restore of a package already received writes
	// nothing unless asked to.
	`
CREATE TABLE {{t "restores"}} (
	restore_uid     text PRIMARY KEY,
	restore_name    text NOT NULL,
	package_id      text NOT NULL,
	manifest_sha256 text NOT NULL,
	source          text NOT NULL,
	completed_at    timestamptz NOT NULL,
	restored        bigint NOT NULL,
	unchanged       bigint NOT NULL
);
CREATE INDEX {{i "restores_manifest_idx"}} ON {{t "restores"}} (manifest_sha256, completed_at);
CREATE INDEX {{i "restores_completed_idx"}} ON {{t "restores"}} (completed_at);
`,
	// 5: index work owed for memories the gateway changed (pending.go): the vector of
	// memory_id must be brought in line with its row (written, or deleted when the row
	// is gone or archived). Recorded in the transaction that changed the row, removed
	// once the index has it; seq tells a newer change of the same memory from the one
	// a writer just indexed.
	`
CREATE TABLE {{t "index_pending"}} (
	memory_id       text COLLATE "C" PRIMARY KEY,
	seq             bigint GENERATED BY DEFAULT AS IDENTITY,
	enqueued_at     timestamptz NOT NULL DEFAULT now(),
	attempts        integer NOT NULL DEFAULT 0,
	next_attempt_at timestamptz NOT NULL DEFAULT now(),
	last_error      text NOT NULL DEFAULT ''
);
CREATE INDEX {{i "index_pending_due_idx"}} ON {{t "index_pending"}} (next_attempt_at);
`,
	// 6: where renamed scopes came from (scopes.go): a restore that renames a package
	// scope records, in each batch's transaction, the package's source store and the
	// scope's name there. A later restore of the same source scope onto the same
	// target scope (a newer snapshot, bringing its forgets) is the same person's, not
	// a mix of two.
	`
CREATE TABLE {{t "scope_renames"}} (
	target_scope text COLLATE "C" NOT NULL,
	source       text NOT NULL,
	source_scope text COLLATE "C" NOT NULL,
	recorded_at  timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (target_scope, source, source_scope)
);
`,
	// 7: whose clock forgets (forget.go). recorded_at is when the store took a
	// memory's current value in, by the server's clock; a tombstone covers what its
	// scope recorded up to it, whatever created_at (the client's word) says. Existing
	// rows were taken in no later than now. Tombstones that a future created_at had
	// pushed past now (the old rule took the latest created_at) come back to just
	// before now: they still cover everything their scope held at the forget, and
	// nothing recorded since. Agents cannot set recorded_at (provision grants them no
	// column privilege on it); a change of a memory's value by such a role is
	// recorded now, by the trigger. The default is the writing statement's start (a
	// write's statements follow its lock, forget.go), which a write that gives no
	// created_at takes as its created_at too (Put), and which lets COPY batch rows.
	`
ALTER TABLE {{t "memories"}} ADD COLUMN recorded_at timestamptz;
UPDATE {{t "memories"}} SET recorded_at = least(created_at, now());
ALTER TABLE {{t "memories"}} ALTER COLUMN recorded_at SET DEFAULT statement_timestamp(),
	ALTER COLUMN recorded_at SET NOT NULL;

WITH future AS (
	DELETE FROM {{t "tombstones"}} WHERE forgotten_at >= now() RETURNING scope, forgotten_at, reason
)
INSERT INTO {{t "tombstones"}} (scope, forgotten_at, reason)
SELECT DISTINCT ON (scope) scope, now() - interval '1 microsecond', reason FROM future ORDER BY scope, forgotten_at DESC
ON CONFLICT DO NOTHING;

CREATE FUNCTION {{t "memories_recorded_at"}}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NOT has_column_privilege(TG_RELID, 'recorded_at', 'UPDATE') THEN
		NEW.recorded_at := clock_timestamp();
	END IF;
	RETURN NEW;
END
$$;
CREATE TRIGGER {{i "memories_recorded_at"}} BEFORE UPDATE ON {{t "memories"}}
	FOR EACH ROW WHEN (OLD.content_hash IS DISTINCT FROM NEW.content_hash)
	EXECUTE FUNCTION {{t "memories_recorded_at"}}();
`,
	// 8: the lexical index (lexical.go). memory_terms holds the postings, one row per
	// term of a memory, scope first so that a term's document frequency in a scope is
	// a range of its primary key; dl (the memory's length in terms) rides along so
	// that scoring reads no other row. term_docs says, per memory, which content its
	// postings were made from and how long it is (a scope's N and average length).
	// Neither references memories: a foreign key check per posting doubles the cost
	// of writing them; the statement trigger below removes both when memories go.
	// term_pending marks scopes whose bulk writes (restore, import) left postings to
	// be made; a search of the scope makes them first. Every existing scope is marked,
	// so a store upgraded from version 7 finds its memories at its first search.
	`
CREATE TABLE {{t "memory_terms"}} (
	scope     text COLLATE "C" NOT NULL,
	term      text COLLATE "C" NOT NULL,
	memory_id text COLLATE "C" NOT NULL,
	tf        integer NOT NULL CHECK (tf > 0),
	dl        integer NOT NULL CHECK (dl > 0),
	PRIMARY KEY (scope, term, memory_id)
);
CREATE INDEX {{i "memory_terms_memory_idx"}} ON {{t "memory_terms"}} (memory_id);

CREATE TABLE {{t "term_docs"}} (
	memory_id    text COLLATE "C" PRIMARY KEY,
	scope        text COLLATE "C" NOT NULL,
	content_hash bytea NOT NULL,
	length       integer NOT NULL CHECK (length >= 0)
);
CREATE INDEX {{i "term_docs_scope_idx"}} ON {{t "term_docs"}} (scope) INCLUDE (length);

CREATE TABLE {{t "term_pending"}} (
	scope     text COLLATE "C" NOT NULL,
	marked_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX {{i "term_pending_scope_idx"}} ON {{t "term_pending"}} (scope);

CREATE FUNCTION {{t "memories_drop_terms"}}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	DELETE FROM {{t "memory_terms"}} t USING gone g WHERE t.scope = g.scope AND t.memory_id = g.memory_id;
	DELETE FROM {{t "term_docs"}} d USING gone g WHERE d.memory_id = g.memory_id;
	RETURN NULL;
END
$$;
CREATE TRIGGER {{i "memories_drop_terms"}} AFTER DELETE ON {{t "memories"}}
	REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION {{t "memories_drop_terms"}}();

INSERT INTO {{t "term_pending"}} (scope) SELECT DISTINCT scope FROM {{t "memories"}};
`,
	// 9: the embedded engine's vectors as bytea (package pgindex, storage.go): each
	// component's float4send bytes, which a scope search reads 25 times faster than a
	// real[]'s array_send. The conversion rewrites the table once, under the
	// migration's lock; the helper function lives only inside this migration.
	`
CREATE FUNCTION {{t "vector_bytes"}}(v real[]) RETURNS bytea LANGUAGE sql IMMUTABLE STRICT AS $$
	SELECT coalesce(string_agg(float4send(x), ''::bytea ORDER BY o), ''::bytea) FROM unnest(v) WITH ORDINALITY AS u(x, o)
$$;
ALTER TABLE {{t "vectors"}} ALTER COLUMN embedding TYPE bytea USING {{t "vector_bytes"}}(embedding);
DROP FUNCTION {{t "vector_bytes"}}(real[]);
`,
	// 10: a batch write marks its scopes owed postings under a token of its own and
	// clears exactly those marks once it has written them (batch.go, WriteTerms);
	// marks of bulk writes have none.
	`
ALTER TABLE {{t "term_pending"}} ADD COLUMN batch bigint;
CREATE INDEX {{i "term_pending_batch_idx"}} ON {{t "term_pending"}} (batch) WHERE batch IS NOT NULL;
`,
	// 11: the short-term tier on PostgreSQL, for stores without Redis (sessions.go):
	// a session's state, and its turns as the JSON text they were given. A session
	// is gone once expires_at passed; Purge deletes what is left of it.
	`
CREATE TABLE {{t "sessions"}} (
	session    text COLLATE "C" PRIMARY KEY,
	owner      text COLLATE "C" NOT NULL,
	seq        bigint NOT NULL DEFAULT 0,
	promoted   bigint NOT NULL DEFAULT 0,
	active_at  timestamptz NOT NULL,
	expires_at timestamptz NOT NULL
);
CREATE INDEX {{i "sessions_owner_idx"}} ON {{t "sessions"}} (owner);
CREATE INDEX {{i "sessions_expires_idx"}} ON {{t "sessions"}} (expires_at);
CREATE INDEX {{i "sessions_idle_idx"}} ON {{t "sessions"}} (active_at) WHERE promoted < seq;

CREATE TABLE {{t "session_turns"}} (
	session text COLLATE "C" NOT NULL REFERENCES {{t "sessions"}} (session) ON DELETE CASCADE,
	seq     bigint NOT NULL,
	role    text NOT NULL,
	content text NOT NULL,
	at      timestamptz NOT NULL,
	PRIMARY KEY (session, seq)
);
`,
	// 12: scope versions (scopeversion.go): a counter per scope that every commit
	// changing what a search of the scope can return raises by one, whoever writes
	// (the gateway, restore, import and archival Jobs): the query cache files results
	// under it. Statement triggers note the scopes a statement touched in
	// scope_versions_owed (unlogged: a row lives as long as its transaction); at
	// commit a deferred trigger raises their versions in one statement, in scope
	// order, and removes the notes. Bumping at commit rather than per statement is
	// what keeps it free of deadlocks: a transaction takes version row locks only
	// once it has taken every other lock it will take, all in one order. The
	// functions are SECURITY DEFINER so that no role needs a privilege on the two
	// tables (scope_version() reads one version); versions are never deleted, so
	// none ever comes back. The epoch tells this schema's versions from those of
	// an earlier store of the same name.
	`
CREATE TABLE {{t "scope_versions"}} (
	scope   text COLLATE "C" PRIMARY KEY,
	version bigint NOT NULL
);

CREATE UNLOGGED TABLE {{t "scope_versions_owed"}} (
	xact  xid8 NOT NULL,
	scope text COLLATE "C" NOT NULL,
	PRIMARY KEY (xact, scope)
);

INSERT INTO {{t "store_meta"}} (key, value) VALUES ('scope_versions_epoch', gen_random_uuid()::text);

-- The scopes of the rows a statement changed (the transition table "changed", and
-- "changed_old" for updates), and once per transaction the empty scope, whose note
-- queues the bump for the commit.
CREATE FUNCTION {{t "scope_versions_note"}}() RETURNS trigger LANGUAGE plpgsql
	SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	WITH s AS (SELECT DISTINCT scope FROM changed)
	INSERT INTO {{t "scope_versions_owed"}} (xact, scope)
	SELECT pg_current_xact_id(), scope FROM s
	UNION ALL SELECT pg_current_xact_id(), '' WHERE EXISTS (SELECT 1 FROM s)
	ON CONFLICT DO NOTHING;
	RETURN NULL;
END
$$;

CREATE FUNCTION {{t "scope_versions_note_update"}}() RETURNS trigger LANGUAGE plpgsql
	SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	WITH s AS (SELECT scope FROM changed UNION SELECT scope FROM changed_old)
	INSERT INTO {{t "scope_versions_owed"}} (xact, scope)
	SELECT pg_current_xact_id(), scope FROM s
	UNION ALL SELECT pg_current_xact_id(), '' WHERE EXISTS (SELECT 1 FROM s)
	ON CONFLICT DO NOTHING;
	RETURN NULL;
END
$$;

-- Index work done (IndexDone deletes the record once the vector index has the
-- memory's current value): the dense channel of the memory's scope changed.
CREATE FUNCTION {{t "scope_versions_note_indexed"}}() RETURNS trigger LANGUAGE plpgsql
	SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	WITH s AS (SELECT DISTINCT m.scope FROM changed p JOIN {{t "memories"}} m ON m.memory_id = p.memory_id)
	INSERT INTO {{t "scope_versions_owed"}} (xact, scope)
	SELECT pg_current_xact_id(), scope FROM s
	UNION ALL SELECT pg_current_xact_id(), '' WHERE EXISTS (SELECT 1 FROM s)
	ON CONFLICT DO NOTHING;
	RETURN NULL;
END
$$;

CREATE FUNCTION {{t "scope_versions_bump"}}() RETURNS trigger LANGUAGE plpgsql
	SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	WITH owed AS (
		DELETE FROM {{t "scope_versions_owed"}} WHERE xact = pg_current_xact_id() RETURNING scope
	)
	INSERT INTO {{t "scope_versions"}} AS v (scope, version)
	SELECT scope, 1 FROM owed WHERE scope <> '' ORDER BY scope
	ON CONFLICT (scope) DO UPDATE SET version = v.version + 1;
	RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER {{i "scope_versions_bump"}} AFTER INSERT ON {{t "scope_versions_owed"}}
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.scope = '')
	EXECUTE FUNCTION {{t "scope_versions_bump"}}();

CREATE FUNCTION {{t "scope_version"}}(scope text) RETURNS bigint LANGUAGE sql STABLE
	SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
	SELECT coalesce((SELECT v.version FROM {{t "scope_versions"}} v WHERE v.scope = $1), 0)
$$;

CREATE TRIGGER {{i "memories_scope_versions_ins"}} AFTER INSERT ON {{t "memories"}}
	REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION {{t "scope_versions_note"}}();
CREATE TRIGGER {{i "memories_scope_versions_upd"}} AFTER UPDATE ON {{t "memories"}}
	REFERENCING OLD TABLE AS changed_old NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION {{t "scope_versions_note_update"}}();
CREATE TRIGGER {{i "memories_scope_versions_del"}} AFTER DELETE ON {{t "memories"}}
	REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION {{t "scope_versions_note"}}();
CREATE TRIGGER {{i "vectors_scope_versions_ins"}} AFTER INSERT ON {{t "vectors"}}
	REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION {{t "scope_versions_note"}}();
CREATE TRIGGER {{i "vectors_scope_versions_upd"}} AFTER UPDATE ON {{t "vectors"}}
	REFERENCING OLD TABLE AS changed_old NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION {{t "scope_versions_note_update"}}();
CREATE TRIGGER {{i "vectors_scope_versions_del"}} AFTER DELETE ON {{t "vectors"}}
	REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION {{t "scope_versions_note"}}();
CREATE TRIGGER {{i "index_pending_scope_versions_del"}} AFTER DELETE ON {{t "index_pending"}}
	REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION {{t "scope_versions_note_indexed"}}();
`,
	// 13: index generations (generations.go): a second vector index of the store,
	// made with another embedding model while the first one serves. A generation that
	// is not serving (building, or retained after a switch for a rollback) is kept in
	// step with the memories by its re-embed worker: every statement that inserts,
	// updates or deletes memories records their IDs for each such generation in
	// generation_pending, whoever writes (the gateway, restores, imports, archival).
	// The function is SECURITY DEFINER so that no writer needs a privilege on the two
	// tables; with no generation but the serving one it records nothing.
	`
CREATE TABLE {{t "index_generations"}} (
	generation     integer PRIMARY KEY CHECK (generation > 0),
	state          text NOT NULL CHECK (state IN ('serving', 'building', 'retained')),
	model          text NOT NULL,
	dimension      integer NOT NULL CHECK (dimension > 1),
	embedder       text NOT NULL DEFAULT '',
	location       text NOT NULL DEFAULT '',
	changed_at     timestamptz NOT NULL DEFAULT now(),
	backfill_after text COLLATE "C" NOT NULL DEFAULT '',
	backfill_until text COLLATE "C",
	backfill_done  boolean NOT NULL DEFAULT false,
	embedded       bigint NOT NULL DEFAULT 0 CHECK (embedded >= 0),
	embed_rate     double precision NOT NULL DEFAULT 0,
	progress_at    timestamptz,
	verified_at    timestamptz,
	recall         double precision,
	serving_recall double precision
);
CREATE UNIQUE INDEX {{i "index_generations_serving_uq"}} ON {{t "index_generations"}} ((true)) WHERE state = 'serving';

CREATE TABLE {{t "generation_pending"}} (
	generation integer NOT NULL REFERENCES {{t "index_generations"}} (generation) ON DELETE CASCADE,
	memory_id  text COLLATE "C" NOT NULL,
	seq        bigint GENERATED BY DEFAULT AS IDENTITY,
	PRIMARY KEY (generation, memory_id)
);

CREATE FUNCTION {{t "generation_note"}}() RETURNS trigger LANGUAGE plpgsql
	SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	INSERT INTO {{t "generation_pending"}} AS p (generation, memory_id)
	SELECT g.generation, c.memory_id FROM changed c CROSS JOIN {{t "index_generations"}} g
	WHERE g.state <> 'serving'
	ON CONFLICT (generation, memory_id) DO UPDATE SET seq = DEFAULT;
	RETURN NULL;
END
$$;

CREATE TRIGGER {{i "memories_generation_ins"}} AFTER INSERT ON {{t "memories"}}
	REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION {{t "generation_note"}}();
CREATE TRIGGER {{i "memories_generation_upd"}} AFTER UPDATE ON {{t "memories"}}
	REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION {{t "generation_note"}}();
CREATE TRIGGER {{i "memories_generation_del"}} AFTER DELETE ON {{t "memories"}}
	REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION {{t "generation_note"}}();
`,
	// 14: a memory's terms ride in term_docs, and memory_terms loses its memory_id
	// index. Every posting written paid for two index entries, and the second one
	// served only to find a memory's postings when they are replaced or its memory
	// goes: term_docs.terms names them, and each is a probe of the primary key. A
	// batch write of 1000 memories writes some 12,000 postings. terms is NULL only
	// where a gateway of the previous version wrote after the migration, until the
	// rollout replaced it: those postings are found by reading the memory's postings
	// in its scope.
	`
ALTER TABLE {{t "term_docs"}} ADD COLUMN terms text[] COLLATE "C";
UPDATE {{t "term_docs"}} d SET terms = p.terms
FROM (SELECT memory_id, array_agg(term ORDER BY term) AS terms FROM {{t "memory_terms"}} GROUP BY memory_id) p
WHERE p.memory_id = d.memory_id;
UPDATE {{t "term_docs"}} SET terms = '{}' WHERE terms IS NULL;

-- One primary-key probe per posting, whatever the planner guesses of the transition
-- table (a session's plan is made for the first statement's rows and kept): the
-- postings' keys are made first (OFFSET 0 keeps them apart), then each is looked up.
-- Planned as one join (as the trigger of migration 8 was), the probe took
-- (scope, memory_id) alone and read the scope's postings for each memory gone: after
-- a delete of one memory in the session, a forget of a 100,000-memory scope ran for
-- over ten minutes.
CREATE OR REPLACE FUNCTION {{t "memories_drop_terms"}}() RETURNS trigger LANGUAGE plpgsql
	SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off AS $$
BEGIN
	DELETE FROM {{t "memory_terms"}} t USING (
		SELECT d.scope, x.term, d.memory_id
		FROM gone g JOIN {{t "term_docs"}} d ON d.memory_id = g.memory_id CROSS JOIN LATERAL unnest(coalesce(d.terms,
			ARRAY(SELECT p.term FROM {{t "memory_terms"}} p WHERE p.scope = d.scope AND p.memory_id = d.memory_id))) AS x(term)
		OFFSET 0
	) k
	WHERE t.scope = k.scope AND t.term = k.term AND t.memory_id = k.memory_id;
	DELETE FROM {{t "term_docs"}} d USING gone g WHERE d.memory_id = g.memory_id;
	RETURN NULL;
END
$$;

DROP INDEX {{t "memory_terms_memory_idx"}};
`,
	// 15: a vector row names the transaction that last wrote it (pgindex's
	// ChangeTracker). A batch's near-duplicate check that finds its locks held
	// searches its scopes while it waits, and under them only the rows written
	// since its snapshot:
	// xact >= the snapshot's oldest transaction, through the (scope, memory_type,
	// xact) index, which takes the place of (scope, memory_type). Inserts take the
	// column's default; updates a row trigger, so no writer can leave a stale one.
	// Rows written before have none: older than any snapshot. The tables of index
	// generations (vectors_g2, ...: a store that switched models serves from one)
	// get the same column, trigger and index.
	`
ALTER TABLE {{t "vectors"}} ADD COLUMN xact xid8;
ALTER TABLE {{t "vectors"}} ALTER COLUMN xact SET DEFAULT pg_current_xact_id();

CREATE FUNCTION {{t "vectors_xact"}}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	NEW.xact := pg_current_xact_id();
	RETURN NEW;
END
$$;
CREATE TRIGGER {{i "vectors_xact"}} BEFORE UPDATE ON {{t "vectors"}}
	FOR EACH ROW EXECUTE FUNCTION {{t "vectors_xact"}}();

CREATE INDEX {{i "vectors_scope_type_xact_idx"}} ON {{t "vectors"}} (scope, memory_type, xact);
DROP INDEX {{t "vectors_scope_type_idx"}};

DO $$
DECLARE
	gen text;
	old text;
BEGIN
	FOR gen IN SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = {{literal}} AND c.relkind = 'r' AND c.relname ~ '^vectors_g[0-9]+$'
	LOOP
		EXECUTE format('ALTER TABLE %I.%I ADD COLUMN xact xid8', {{literal}}, gen);
		EXECUTE format('ALTER TABLE %I.%I ALTER COLUMN xact SET DEFAULT pg_current_xact_id()', {{literal}}, gen);
		EXECUTE format('CREATE TRIGGER %I BEFORE UPDATE ON %I.%I FOR EACH ROW EXECUTE FUNCTION %I.vectors_xact()',
			gen || '_xact', {{literal}}, gen, {{literal}});
		EXECUTE format('CREATE INDEX ON %I.%I (scope, memory_type, xact)', {{literal}}, gen);
		FOR old IN SELECT i.indexname FROM pg_indexes i
			WHERE i.schemaname = {{literal}} AND i.tablename = gen AND i.indexdef LIKE '%(scope, memory_type)'
		LOOP
			EXECUTE format('DROP INDEX %I.%I', {{literal}}, old);
		END LOOP;
	END LOOP;
END
$$;
`,
}

// ExportableFrom is the oldest schema version an export reads (Store.ReadingVersion):
// the version of the first released chart (0.1.0). Exports of older layouts differ
// in three places: before 7 a memory has no recorded_at (the migration's own value,
// the earlier of created_at and now, is read), and a tombstone may lie in the future
// (read as just before now, as the migration moves it); before 9 the embedded
// engine's vectors are real[] instead of bytes.
const ExportableFrom = 5

// LatestVersion is the schema version Migrate brings a store to: the number of
// migrations.
const LatestVersion = 15

// MaxSchemaLen is the longest schema name accepted: PostgreSQL silently truncates
// identifiers beyond 63 bytes, which could make two stores share one schema.
const MaxSchemaLen = 63

// ValidateSchema checks a schema name. Any characters are allowed (names are always
// quoted), but the name must be 1..MaxSchemaLen bytes of valid UTF-8 without NUL.
func ValidateSchema(schema string) error {
	switch {
	case schema == "":
		return errors.New("pgstore: schema name is empty")
	case len(schema) > MaxSchemaLen:
		return fmt.Errorf("pgstore: schema name is %d bytes long (PostgreSQL allows at most %d)", len(schema), MaxSchemaLen)
	case !utf8.ValidString(schema):
		return errors.New("pgstore: schema name is not valid UTF-8")
	case strings.IndexByte(schema, 0) >= 0:
		return errors.New("pgstore: schema name contains a NUL byte")
	}
	return nil
}

// renderMigration expands a migration template for schema.
func renderMigration(schema, text string) (string, error) {
	tmpl, err := template.New("migration").Funcs(template.FuncMap{
		"t": func(name string) string { return pgx.Identifier{schema, name}.Sanitize() },
		"i": func(name string) string { return pgx.Identifier{name}.Sanitize() },
		// literal is the schema's name as an SQL string literal (an escape string, so
		// it reads the same whatever standard_conforming_strings says).
		"literal": func() string {
			return "E'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(schema) + "'"
		},
	}).Parse(text)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if err := tmpl.Execute(&b, nil); err != nil {
		return "", err
	}
	return b.String(), nil
}

// lockKey is the advisory lock serialising migrations of one schema.
func lockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("memory-operator/pgstore/migrate\x00"))
	h.Write([]byte(schema))
	return int64(h.Sum64())
}

// Migrate creates schema if it is missing and applies the migrations it has not yet
// had, each in its own transaction, recording them in <schema>.schema_migrations.
// Every transaction holds a transaction-scoped advisory lock on the schema name, so
// concurrent callers and reruns are safe. It returns how many migrations it applied
// (0 when the schema is up to date).
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) (applied int, err error) {
	return migrateTo(ctx, pool, schema, len(migrations))
}

// migrateTo is Migrate stopping at version to (tests build older stores with it).
func migrateTo(ctx context.Context, pool *pgxpool.Pool, schema string, to int) (applied int, err error) {
	if err := ValidateSchema(schema); err != nil {
		return 0, err
	}
	key := lockKey(schema)
	versions := pgx.Identifier{schema, "schema_migrations"}.Sanitize()

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, key); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{schema}.Sanitize()); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+versions+` (
			version    int PRIMARY KEY,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("pgstore: preparing schema %q: %w", schema, err)
	}

	for i, text := range migrations[:to] {
		version := i + 1
		sql, err := renderMigration(schema, text)
		if err != nil {
			return applied, fmt.Errorf("pgstore: rendering migration %d: %w", version, err)
		}
		did := false
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, key); err != nil {
				return err
			}
			var done bool
			if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+versions+` WHERE version = $1)`, version).Scan(&done); err != nil {
				return err
			}
			if done {
				return nil
			}
			if _, err := tx.Exec(ctx, sql); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO `+versions+` (version, applied_at) VALUES ($1, now())`, version); err != nil {
				return err
			}
			did = true
			return nil
		})
		if err != nil {
			return applied, fmt.Errorf("pgstore: applying migration %d to schema %q: %w", version, schema, err)
		}
		if did {
			applied++
		}
	}
	return applied, nil
}

// Version returns the highest migration version applied to schema, 0 when the schema
// or its migrations table does not exist.
func Version(ctx context.Context, pool *pgxpool.Pool, schema string) (int, error) {
	if err := ValidateSchema(schema); err != nil {
		return 0, err
	}
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`,
		pgx.Identifier{schema, "schema_migrations"}.Sanitize()).Scan(&exists); err != nil {
		return 0, err
	}
	if !exists {
		return 0, nil
	}
	var v int
	err := pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+pgx.Identifier{schema, "schema_migrations"}.Sanitize()).Scan(&v)
	return v, err
}
