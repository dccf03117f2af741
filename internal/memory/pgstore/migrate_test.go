package pgstore

import (
	"bytes"
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
)

func TestLatestVersion(t *testing.T) {
	if LatestVersion != len(migrations) {
		t.Fatalf("LatestVersion = %d, but there are %d migrations", LatestVersion, len(migrations))
	}
}

func TestValidateSchema(t *testing.T) {
	tests := []struct{ in, wantErr string }{
		{"t_abc", ""},
		{`we"ird; drop`, ""},
		{strings.Repeat("s", 63), ""},
		{"", "pgstore: schema name is empty"},
		{strings.Repeat("s", 64), "pgstore: schema name is 64 bytes long (PostgreSQL allows at most 63)"},
		{"a\x00b", "pgstore: schema name contains a NUL byte"},
		{"a\xffb", "pgstore: schema name is not valid UTF-8"},
	}
	for _, tt := range tests {
		err := ValidateSchema(tt.in)
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr) {
			t.Errorf("ValidateSchema(%q) = %v, want %q", tt.in, err, tt.wantErr)
		}
	}
}

func TestMigrate(t *testing.T) {
	pool := testPool(t)
	ctx := t.Context()
	schema := testutil.UniqueName("t_")
	dropSchemaOnCleanup(t, pool, schema)

	if v, err := Version(ctx, pool, schema); err != nil || v != 0 {
		t.Fatalf("Version before = %d, %v; want 0", v, err)
	}
	n, err := Migrate(ctx, pool, schema)
	if err != nil || n != LatestVersion {
		t.Fatalf("first Migrate = %d, %v; want %d", n, err, LatestVersion)
	}
	n, err = Migrate(ctx, pool, schema)
	if err != nil || n != 0 {
		t.Fatalf("second Migrate = %d, %v; want 0", n, err)
	}
	if v, err := Version(ctx, pool, schema); err != nil || v != LatestVersion {
		t.Fatalf("Version = %d, %v; want %d", v, err, LatestVersion)
	}
	if got := countRows(t, pool, pgx.Identifier{schema, "schema_migrations"}.Sanitize(), ""); got != LatestVersion {
		t.Fatalf("schema_migrations rows = %d, want %d", got, LatestVersion)
	}

	// The exact tables and columns other packages depend on.
	rows, err := pool.Query(ctx, `SELECT table_name, column_name, data_type, is_nullable, coalesce(column_default, '')
		FROM information_schema.columns WHERE table_schema = $1 ORDER BY table_name, ordinal_position`, schema)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var tbl, col, typ, null, def string
		if err := rows.Scan(&tbl, &col, &typ, &null, &def); err != nil {
			t.Fatal(err)
		}
		got = append(got, strings.Join([]string{tbl, col, typ, null, def}, " | "))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	auditSeq := "nextval('" + schema + ".audit_log_id_seq'::regclass)"
	want := []string{
		"archive_runs | archived_at | timestamp with time zone | NO | ",
		"archive_runs | marked | bigint | NO | ",
		"archive_runs | recorded_at | timestamp with time zone | NO | now()",
		"archive_runs | vectors_after | text | NO | ''::text",
		"archive_runs | vectors_deleted_at | timestamp with time zone | YES | ",
		"archive_runs | cold_package | text | YES | ",
		"archive_runs | cold_items | bigint | YES | ",
		"archive_runs | cold_written_at | timestamp with time zone | YES | ",
		"audit_log | id | bigint | NO | " + auditSeq,
		"audit_log | at | timestamp with time zone | NO | now()",
		"audit_log | action | text | NO | ",
		"audit_log | scope | text | YES | ",
		"audit_log | detail | jsonb | NO | '{}'::jsonb",
		"generation_pending | generation | integer | NO | ",
		"generation_pending | memory_id | text | NO | ",
		"generation_pending | seq | bigint | NO | ",
		"index_deletions | memory_id | text | NO | ",
		"index_deletions | scope | text | NO | ",
		"index_deletions | recorded_at | timestamp with time zone | NO | now()",
		"index_generations | generation | integer | NO | ",
		"index_generations | state | text | NO | ",
		"index_generations | model | text | NO | ",
		"index_generations | dimension | integer | NO | ",
		"index_generations | embedder | text | NO | ''::text",
		"index_generations | location | text | NO | ''::text",
		"index_generations | changed_at | timestamp with time zone | NO | now()",
		"index_generations | backfill_after | text | NO | ''::text",
		"index_generations | backfill_until | text | YES | ",
		"index_generations | backfill_done | boolean | NO | false",
		"index_generations | embedded | bigint | NO | 0",
		"index_generations | embed_rate | double precision | NO | 0",
		"index_generations | progress_at | timestamp with time zone | YES | ",
		"index_generations | verified_at | timestamp with time zone | YES | ",
		"index_generations | recall | double precision | YES | ",
		"index_generations | serving_recall | double precision | YES | ",
		"index_pending | memory_id | text | NO | ",
		"index_pending | seq | bigint | NO | ",
		"index_pending | enqueued_at | timestamp with time zone | NO | now()",
		"index_pending | attempts | integer | NO | 0",
		"index_pending | next_attempt_at | timestamp with time zone | NO | now()",
		"index_pending | last_error | text | NO | ''::text",
		"memories | memory_id | text | NO | ",
		"memories | memory_type | text | NO | ",
		"memories | scope | text | NO | ",
		"memories | key | text | YES | ",
		"memories | content | jsonb | NO | ",
		"memories | content_hash | bytea | NO | ",
		"memories | source | text | NO | ''::text",
		"memories | base_score | double precision | NO | ",
		"memories | created_at | timestamp with time zone | NO | ",
		"memories | updated_at | timestamp with time zone | NO | ",
		"memories | expires_at | timestamp with time zone | YES | ",
		"memories | archived_at | timestamp with time zone | YES | ",
		"memories | history | jsonb | NO | '[]'::jsonb",
		"memories | recorded_at | timestamp with time zone | NO | statement_timestamp()",
		"memory_terms | scope | text | NO | ",
		"memory_terms | term | text | NO | ",
		"memory_terms | memory_id | text | NO | ",
		"memory_terms | tf | integer | NO | ",
		"memory_terms | dl | integer | NO | ",
		"restores | restore_uid | text | NO | ",
		"restores | restore_name | text | NO | ",
		"restores | package_id | text | NO | ",
		"restores | manifest_sha256 | text | NO | ",
		"restores | source | text | NO | ",
		"restores | completed_at | timestamp with time zone | NO | ",
		"restores | restored | bigint | NO | ",
		"restores | unchanged | bigint | NO | ",
		"schema_migrations | version | integer | NO | ",
		"schema_migrations | applied_at | timestamp with time zone | NO | now()",
		"scope_renames | target_scope | text | NO | ",
		"scope_renames | source | text | NO | ",
		"scope_renames | source_scope | text | NO | ",
		"scope_renames | recorded_at | timestamp with time zone | NO | now()",
		"scope_versions | scope | text | NO | ",
		"scope_versions | version | bigint | NO | ",
		"scope_versions_owed | xact | xid8 | NO | ",
		"scope_versions_owed | scope | text | NO | ",
		"session_turns | session | text | NO | ",
		"session_turns | seq | bigint | NO | ",
		"session_turns | role | text | NO | ",
		"session_turns | content | text | NO | ",
		"session_turns | at | timestamp with time zone | NO | ",
		"sessions | session | text | NO | ",
		"sessions | owner | text | NO | ",
		"sessions | seq | bigint | NO | 0",
		"sessions | promoted | bigint | NO | 0",
		"sessions | active_at | timestamp with time zone | NO | ",
		"sessions | expires_at | timestamp with time zone | NO | ",
		"store_meta | key | text | NO | ",
		"store_meta | value | text | NO | ",
		"term_docs | memory_id | text | NO | ",
		"term_docs | scope | text | NO | ",
		"term_docs | content_hash | bytea | NO | ",
		"term_docs | length | integer | NO | ",
		"term_docs | terms | ARRAY | YES | ",
		"term_pending | scope | text | NO | ",
		"term_pending | marked_at | timestamp with time zone | NO | now()",
		"term_pending | batch | bigint | YES | ",
		"tombstones | scope | text | NO | ",
		"tombstones | forgotten_at | timestamp with time zone | NO | ",
		"tombstones | reason | text | NO | ''::text",
		"vectors | memory_id | text | NO | ",
		"vectors | scope | text | NO | ",
		"vectors | memory_type | text | NO | ",
		"vectors | embedding | bytea | NO | ",
		"vectors | xact | xid8 | YES | pg_current_xact_id()",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("columns:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	idx, err := pool.Query(ctx, `SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname NOT LIKE '%pkey' ORDER BY indexname`, schema)
	if err != nil {
		t.Fatal(err)
	}
	defs, err := pgx.CollectRows(idx, func(r pgx.CollectableRow) (string, error) {
		var name, def string
		err := r.Scan(&name, &def)
		return name + ": " + strings.ReplaceAll(def, schema+".", "S."), err
	})
	if err != nil {
		t.Fatal(err)
	}
	wantIdx := []string{
		"index_generations_serving_uq: CREATE UNIQUE INDEX index_generations_serving_uq ON S.index_generations USING btree ((true)) WHERE (state = 'serving'::text)",
		"index_pending_due_idx: CREATE INDEX index_pending_due_idx ON S.index_pending USING btree (next_attempt_at)",
		"memories_archived_idx: CREATE INDEX memories_archived_idx ON S.memories USING btree (archived_at, memory_id) WHERE (archived_at IS NOT NULL)",
		"memories_expires_at_idx: CREATE INDEX memories_expires_at_idx ON S.memories USING btree (expires_at) WHERE (expires_at IS NOT NULL)",
		"memories_scope_hash_uq: CREATE UNIQUE INDEX memories_scope_hash_uq ON S.memories USING btree (scope, content_hash) WHERE (key IS NULL)",
		"memories_scope_id_idx: CREATE INDEX memories_scope_id_idx ON S.memories USING btree (scope, memory_id)",
		"memories_scope_key_uq: CREATE UNIQUE INDEX memories_scope_key_uq ON S.memories USING btree (scope, key) WHERE (key IS NOT NULL)",
		"memories_scope_type_idx: CREATE INDEX memories_scope_type_idx ON S.memories USING btree (scope, memory_type)",
		"restores_completed_idx: CREATE INDEX restores_completed_idx ON S.restores USING btree (completed_at)",
		"restores_manifest_idx: CREATE INDEX restores_manifest_idx ON S.restores USING btree (manifest_sha256, completed_at)",
		"sessions_expires_idx: CREATE INDEX sessions_expires_idx ON S.sessions USING btree (expires_at)",
		"sessions_idle_idx: CREATE INDEX sessions_idle_idx ON S.sessions USING btree (active_at) WHERE (promoted < seq)",
		"sessions_owner_idx: CREATE INDEX sessions_owner_idx ON S.sessions USING btree (owner)",
		"term_docs_scope_idx: CREATE INDEX term_docs_scope_idx ON S.term_docs USING btree (scope) INCLUDE (length)",
		"term_pending_batch_idx: CREATE INDEX term_pending_batch_idx ON S.term_pending USING btree (batch) WHERE (batch IS NOT NULL)",
		"term_pending_scope_idx: CREATE INDEX term_pending_scope_idx ON S.term_pending USING btree (scope)",
		"vectors_scope_type_xact_idx: CREATE INDEX vectors_scope_type_xact_idx ON S.vectors USING btree (scope, memory_type, xact)",
	}
	if strings.Join(defs, "\n") != strings.Join(wantIdx, "\n") {
		t.Fatalf("indexes:\n%s\nwant:\n%s", strings.Join(defs, "\n"), strings.Join(wantIdx, "\n"))
	}

	// The type check and the object check hold even for writers that bypass Put.
	_, err = pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "memories"}.Sanitize()+
		` (memory_id, memory_type, scope, content, content_hash, base_score, created_at, updated_at)
		VALUES ('x', 'longterm', 'user:1', '{}', '\x00', 1, now(), now())`)
	if err == nil || !strings.Contains(err.Error(), "memories_memory_type_check") {
		t.Fatalf("insert of a bad type: %v, want a check violation", err)
	}
	_, err = pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "memories"}.Sanitize()+
		` (memory_id, memory_type, scope, content, content_hash, base_score, created_at, updated_at)
		VALUES ('x', 'semantic', 'user:1', '"a string"', '\x00', 1, now(), now())`)
	if err == nil || !strings.Contains(err.Error(), "memories_content_check") {
		t.Fatalf("insert of string content: %v, want a check violation", err)
	}
}

func TestMigrateConcurrent(t *testing.T) {
	pool := testPool(t)
	schema := testutil.UniqueName("t_")
	dropSchemaOnCleanup(t, pool, schema)

	const workers = 4
	var wg sync.WaitGroup
	applied := make([]int, workers)
	errs := make([]error, workers)
	start := make(chan struct{})
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			applied[i], errs[i] = Migrate(context.Background(), pool, schema)
		}()
	}
	close(start)
	wg.Wait()
	total := 0
	for i := range workers {
		if errs[i] != nil {
			t.Fatalf("worker %d: %v", i, errs[i])
		}
		total += applied[i]
	}
	if total != LatestVersion {
		t.Fatalf("migrations applied in total = %d (%v), want %d", total, applied, LatestVersion)
	}
	if got := countRows(t, pool, pgx.Identifier{schema, "schema_migrations"}.Sanitize(), ""); got != LatestVersion {
		t.Fatalf("schema_migrations rows = %d, want %d", got, LatestVersion)
	}
}

// TestIdentifierSafety runs the whole store under schema names built to break out of
// unquoted SQL, and proves that a table they target survives and that the names were
// used literally.
func TestIdentifierSafety(t *testing.T) {
	pool := testPool(t)
	ctx := t.Context()

	victim := testutil.UniqueName("v_")
	dropSchemaOnCleanup(t, pool, victim)
	victimTable := pgx.Identifier{victim, "victim"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{victim}.Sanitize()+`; CREATE TABLE `+victimTable+` (x int)`); err != nil {
		t.Fatal(err)
	}

	names := []string{
		// Unquoted, this one would run as a second statement.
		testutil.UniqueName("q_") + `; DROP TABLE ` + victim + `.victim; --`,
		testutil.UniqueName("q_") + `"; DROP TABLE ` + victim + `.victim; --`,
		testutil.UniqueName("q_") + `'; DROP TABLE ` + victim + `.victim; --`,
		testutil.UniqueName("Q_") + `.x\ "y"`,
	}
	for _, schema := range names {
		t.Run(schema, func(t *testing.T) {
			if len(schema) > MaxSchemaLen {
				t.Fatalf("test name %q too long", schema)
			}
			dropSchemaOnCleanup(t, pool, schema)
			if n, err := Migrate(ctx, pool, schema); err != nil || n != LatestVersion {
				t.Fatalf("Migrate(%q) = %d, %v", schema, n, err)
			}
			var exists bool
			if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil || !exists {
				t.Fatalf("schema named exactly %q exists = %v, %v", schema, exists, err)
			}
			s := New(pool, schema)
			it := item("id-1", "user:1", memory.Semantic, "k", `{"a":1}`, 1, 0)
			it.Embedding = []float32{1, 2}
			if res := importSlice(t, s, []memory.Item{it}); res.Inserted != 1 || res.Embeddings != 1 {
				t.Fatalf("Import = %+v", res)
			}
			mustPut(t, s, item("id-2", "user:1", memory.Semantic, "k", `{"a":2}`, 1, 0), Superseded)
			if got, err := s.Recall(ctx, RecallQuery{Scope: "user:1", Now: now}); err != nil || len(got) != 1 {
				t.Fatalf("Recall = %v, %v", got, err)
			}
			if got := exportAll(t, s, ExportFilter{IncludeEmbeddings: true}); len(got) != 1 || len(got[0].Embedding) != 2 {
				t.Fatalf("Export = %+v", got)
			}
			if res, err := s.Forget(ctx, "user:1", "test", "me"); err != nil || res.Deleted != 1 || res.VectorsDeleted != 1 {
				t.Fatalf("Forget = %+v, %v", res, err)
			}
			if ts, err := s.Tombstones(ctx); err != nil || len(ts) != 1 {
				t.Fatalf("Tombstones = %v, %v", ts, err)
			}
			if _, err := pool.Exec(ctx, `SELECT count(*) FROM `+victimTable); err != nil {
				t.Fatalf("victim table is gone: %v", err)
			}
		})
	}

	for _, bad := range []string{"", strings.Repeat("x", 64), "a\x00b"} {
		if _, err := Migrate(ctx, pool, bad); err == nil {
			t.Errorf("Migrate(%q) succeeded, want an error", bad)
		}
	}
	if _, err := pool.Exec(ctx, `SELECT count(*) FROM `+victimTable); err != nil {
		t.Fatalf("victim table is gone: %v", err)
	}
}

func TestStoreWithoutMigrationFails(t *testing.T) {
	pool := testPool(t)
	s := New(pool, testutil.UniqueName("missing_"))
	_, err := s.Count(t.Context())
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Count on an unmigrated schema = %v, want a 'does not exist' error", err)
	}
	if _, err := s.Get(t.Context(), "x"); err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("Get on an unmigrated schema = %v, want a database error, not ErrNotFound", err)
	}
}

// TestGuaranteeMigrateToTheServersClock: a store written under the old rule (tombstones by
// created_at, a client's 2099 date pushing its scope's tombstone to 2099) keeps,
// after migration 7, exactly what it held and what its tombstones covered: rows are
// recorded no later than they were created (and than now), a tombstone in the future
// comes back to just before now, and the user can come back.
func TestGuaranteeMigrateToTheServersClock(t *testing.T) {
	pool := testPool(t)
	ctx := t.Context()
	schema := testutil.UniqueName("t_")
	dropSchemaOnCleanup(t, pool, schema)
	if _, err := migrateTo(ctx, pool, schema, 6); err != nil {
		t.Fatal(err)
	}
	tbl := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	// user:past holds a memory created after its tombstone (new consent under the old
	// rule); user:2099 was forgotten while it held a memory dated 2099, so its
	// tombstone is 2099, and it holds one dated 2100.
	if _, err := pool.Exec(ctx, `INSERT INTO `+tbl("memories")+` (memory_id, memory_type, scope, content, content_hash, base_score, created_at, updated_at) VALUES
		('p1', 'semantic', 'user:past', '{"v":1}', '\x01', 1, '2025-03-02', '2025-03-02'),
		('f1', 'semantic', 'user:2099', '{"v":2}', '\x02', 1, '2100-01-01', '2100-01-01');
		INSERT INTO `+tbl("tombstones")+` (scope, forgotten_at, reason) VALUES
		('user:past', '2025-03-01', 'old'), ('user:2099', '2098-01-01', 'first'), ('user:2099', '2099-01-01', 'pushed')`); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if n, err := Migrate(ctx, pool, schema); err != nil || n != LatestVersion-6 {
		t.Fatalf("Migrate = %d, %v", n, err)
	}
	s := New(pool, schema)
	got := map[string]memory.Item{}
	for _, it := range exportAll(t, s, ExportFilter{}) {
		got[it.MemoryID] = it
	}
	if p := got["p1"]; !p.RecordedAt.Equal(p.CreatedAt) {
		t.Fatalf("p1 recorded at %s, want its created_at", p.RecordedAt)
	}
	if f := got["f1"]; f.RecordedAt.Before(before.Add(-time.Minute)) || f.RecordedAt.After(time.Now()) {
		t.Fatalf("f1 (dated 2100) recorded at %s, want the migration's time", f.RecordedAt)
	}
	ts, err := s.Tombstones(ctx)
	if err != nil || len(ts) != 2 {
		t.Fatalf("tombstones %+v, %v", ts, err)
	}
	byScope := map[string]Tombstone{ts[0].Scope: ts[0], ts[1].Scope: ts[1]}
	if f := byScope["user:2099"]; !f.ForgottenAt.Before(got["f1"].RecordedAt) || f.ForgottenAt.Before(before.Add(-time.Minute)) || f.Reason != "pushed" {
		t.Fatalf("user:2099's tombstone %+v: want just before now, before f1's recorded_at %s", f, got["f1"].RecordedAt)
	}
	if p := byScope["user:past"]; !p.ForgottenAt.Equal(time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("user:past's tombstone moved: %+v", p)
	}
	// Nothing the store holds is covered; reapplying the tombstones deletes nothing.
	if res, err := s.ApplyTombstones(ctx, ts, ApplyOptions{}); err != nil || res.Forgotten != 0 {
		t.Fatalf("reapplying the tombstones: %+v, %v", res, err)
	}
	// The user forgotten "until 2099" can come back now.
	mustPut(t, s, item("back", "user:2099", memory.Semantic, "", `{"v":"back"}`, 1, 0), Inserted)
}

// TestMigrateVectorsToBytes: migration 9 turns the real[] vectors of a version 8
// store into the embedded engine's bytes (pgindex.EncodeVector of the same floats,
// extreme values and negative zero included), and the index searches them as before.
func TestMigrateVectorsToBytes(t *testing.T) {
	pool := testPool(t)
	ctx := t.Context()
	schema := testutil.UniqueName("t_")
	dropSchemaOnCleanup(t, pool, schema)
	if _, err := migrateTo(ctx, pool, schema, 8); err != nil {
		t.Fatal(err)
	}
	vectors := pgx.Identifier{schema, "vectors"}.Sanitize()
	want := map[string][]float32{
		"a": {0.6, -0.8, 0},
		"b": {float32(math.Copysign(0, -1)), math.MaxFloat32, math.SmallestNonzeroFloat32},
		"c": {1, 0, 0},
	}
	for id, v := range want {
		if _, err := pool.Exec(ctx, `INSERT INTO `+vectors+` (memory_id, scope, memory_type, embedding) VALUES ($1, 'user:1', 'semantic', $2::real[])`, id, v); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := Migrate(ctx, pool, schema); err != nil || n != LatestVersion-8 {
		t.Fatalf("Migrate = %d, %v", n, err)
	}
	rows, err := pool.Query(ctx, `SELECT memory_id, embedding FROM `+vectors)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]byte{}
	var id string
	var raw []byte
	if _, err := pgx.ForEachRow(rows, []any{&id, &raw}, func() error { got[id] = slices.Clone(raw); return nil }); err != nil {
		t.Fatal(err)
	}
	for id, v := range want {
		if !bytes.Equal(got[id], pgindex.EncodeVector(v)) {
			t.Errorf("%s: stored %x, want %x (%v)", id, got[id], pgindex.EncodeVector(v), v)
		}
	}
	var helper int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 AND p.proname = 'vector_bytes'`, schema).Scan(&helper); err != nil || helper != 0 {
		t.Fatalf("the migration's helper function is left in the schema: %d, %v", helper, err)
	}
	spec := vector.Spec{Dimension: 3, Metric: vector.IP}
	hits, err := pgindex.New(pool, schema, spec).Search(ctx, vector.Query{Scope: "user:1", Vector: []float32{1, 0, 0}, K: 2})
	if err != nil || len(hits) != 2 || hits[0].ID != "c" || hits[1].ID != "a" {
		t.Fatalf("search after the migration: %v, %v", hits, err)
	}
}

// TestExportFromEveryOlderVersion: a store written at version 5 (the first released
// chart's) exports, at every version on the way to the latest, what it exports once
// migrated: the same memories with their vectors (real[] before version 9, bytes
// after), recorded_at as migration 7 sets it, tombstones (one in the future read as
// migration 7 moves it). That is what the snapshot an operator upgrade takes before
// it migrates reads. Older versions are refused.
func TestExportFromEveryOlderVersion(t *testing.T) {
	pool := testPool(t)
	ctx := t.Context()
	schema := testutil.UniqueName("t_")
	dropSchemaOnCleanup(t, pool, schema)
	if _, err := migrateTo(ctx, pool, schema, ExportableFrom); err != nil {
		t.Fatal(err)
	}
	if _, err := New(pool, schema).ReadingVersion(ExportableFrom - 1); err == nil {
		t.Fatal("an export from version 4 was accepted")
	}
	tbl := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	if _, err := pool.Exec(ctx, `INSERT INTO `+tbl("memories")+` (memory_id, memory_type, scope, key, content, content_hash, base_score, created_at, updated_at, archived_at) VALUES
		('p1', 'semantic', 'user:1', 'diet', '{"text":"vegetarian"}', '\x01', 0.7, '2025-03-02', '2025-03-04', NULL),
		('p2', 'episodic', 'user:1', NULL, '{"text":"asked for a refund"}', '\x02', 0.5, '2025-04-01', '2025-04-01', '2025-06-01'),
		('f1', 'semantic', 'user:2099', NULL, '{"text":"from the future"}', '\x03', 1, '2100-01-01', '2100-01-01', NULL);
		INSERT INTO `+tbl("vectors")+` (memory_id, scope, memory_type, embedding) VALUES
		('p1', 'user:1', 'semantic', '{0.6,-0.8,0}'), ('f1', 'user:2099', 'semantic', '{1,0,0}');
		INSERT INTO `+tbl("tombstones")+` (scope, forgotten_at, reason) VALUES
		('user:gone', '2025-01-01', 'asked'), ('user:2099', '2099-01-01', 'pushed')`); err != nil {
		t.Fatal(err)
	}
	type export struct {
		items      map[string]memory.Item
		tombstones map[string]Tombstone
	}
	read := func(v int) export {
		t.Helper()
		s, err := New(pool, schema).ReadingVersion(v)
		if err != nil {
			t.Fatal(err)
		}
		out := export{items: map[string]memory.Item{}, tombstones: map[string]Tombstone{}}
		err = s.ReadCut(ctx, func(ctx context.Context, c *Cut) error {
			if err := c.Export(ctx, ExportFilter{IncludeArchived: true, IncludeEmbeddings: true}, func(it memory.Item) error {
				out.items[it.MemoryID] = it
				return nil
			}); err != nil {
				return err
			}
			return c.EachTombstone(ctx, func(ts Tombstone) error {
				out.tombstones[ts.Scope] = ts
				return nil
			})
		})
		if err != nil {
			t.Fatalf("export at version %d: %v", v, err)
		}
		return out
	}
	var exports []export
	for v := ExportableFrom; v <= LatestVersion; v++ {
		if _, err := migrateTo(ctx, pool, schema, v); err != nil {
			t.Fatal(err)
		}
		exports = append(exports, read(v))
	}
	latest := exports[len(exports)-1]
	if len(latest.items) != 3 || len(latest.tombstones) != 2 {
		t.Fatalf("the migrated store exports %d memories and %d tombstones", len(latest.items), len(latest.tombstones))
	}
	for i, e := range exports {
		v := ExportableFrom + i
		for id, want := range latest.items {
			got, ok := e.items[id]
			switch {
			case !ok:
				t.Errorf("version %d: %s is missing", v, id)
				continue
			case !slices.Equal(got.Embedding, want.Embedding):
				t.Errorf("version %d: %s has vector %v, the migrated store %v", v, id, got.Embedding, want.Embedding)
			case string(got.Content) != string(want.Content) || got.Key != want.Key || !got.UpdatedAt.Equal(want.UpdatedAt) ||
				!equalTimes(got.ArchivedAt, want.ArchivedAt) || got.BaseScore != want.BaseScore:
				t.Errorf("version %d: %s is %+v, the migrated store's %+v", v, id, got, want)
			}
			// The future memory is recorded when the migration runs: within the test.
			if d := got.RecordedAt.Sub(want.RecordedAt); d > time.Minute || d < -time.Minute || (id != "f1" && d != 0) {
				t.Errorf("version %d: %s recorded at %s, the migrated store at %s", v, id, got.RecordedAt, want.RecordedAt)
			}
		}
		for scope, want := range latest.tombstones {
			got := e.tombstones[scope]
			if d := got.ForgottenAt.Sub(want.ForgottenAt); got.Reason != want.Reason || d > time.Minute || d < -time.Minute || (scope == "user:gone" && d != 0) {
				t.Errorf("version %d: tombstone %+v, the migrated store's %+v", v, got, want)
			}
		}
	}
}

func equalTimes(a, b *time.Time) bool {
	return (a == nil) == (b == nil) && (a == nil || a.Equal(*b))
}
