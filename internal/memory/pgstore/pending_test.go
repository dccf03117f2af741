package pgstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/memory"
)

// TestPendingInGroupsEitherWay: PendingInGroups answers the same whether few memories
// owe index work (it starts from them) or more than pendingDriveLimit do (it walks the
// groups): live, unarchived memories of the asked groups only, at most 1000 a group,
// in memory_id order.
func TestPendingInGroupsEitherWay(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	tbl := func(name string) string { return pgx.Identifier{s.schema, name}.Sanitize() }
	// user:a semantic: 1200 owing work (1000 come back) and 5 indexed; user:a episodic:
	// 3 owing, not asked for; user:b semantic: 2 owing, one archived.
	if _, err := pool.Exec(ctx, `INSERT INTO `+tbl("memories")+` (memory_id, memory_type, scope, content, content_hash, base_score, created_at, updated_at, archived_at)
		SELECT id, typ, scope, '{}', sha256(id::bytea), 1, now(), now(), CASE WHEN id = 'b-1' THEN now() END FROM (
			SELECT format('a-%s', lpad(i::text, 5, '0')) AS id, 'semantic' AS typ, 'user:a' AS scope FROM generate_series(1, 1205) i
			UNION ALL SELECT format('ae-%s', i), 'episodic', 'user:a' FROM generate_series(1, 3) i
			UNION ALL SELECT format('b-%s', i), 'semantic', 'user:b' FROM generate_series(0, 1) i) x;
		INSERT INTO `+tbl("index_pending")+` (memory_id) SELECT memory_id FROM `+tbl("memories")+` WHERE memory_id NOT BETWEEN 'a-01201' AND 'a-01205'`); err != nil {
		t.Fatal(err)
	}
	groups := []ScopeType{{"user:a", memory.Semantic}, {"user:b", memory.Semantic}, {"user:c", memory.Semantic}}
	ask := func() map[ScopeType][]string {
		t.Helper()
		lock, err := s.LockScopes(ctx, groups)
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Unlock()
		got, err := lock.PendingInGroups(ctx, groups)
		if err != nil {
			t.Fatal(err)
		}
		ids := map[ScopeType][]string{}
		for g, items := range got {
			for _, it := range items {
				ids[g] = append(ids[g], it.MemoryID)
			}
		}
		return ids
	}
	check := func(way string, got map[ScopeType][]string) {
		t.Helper()
		a := got[ScopeType{"user:a", memory.Semantic}]
		if len(a) != 1000 || a[0] != "a-00001" || a[999] != "a-01000" || !slices.IsSorted(a) {
			t.Errorf("%s: user:a semantic: %d memories %.40v", way, len(a), a)
		}
		if b := got[ScopeType{"user:b", memory.Semantic}]; fmt.Sprint(b) != "[b-0]" {
			t.Errorf("%s: user:b semantic: %v, want [b-0] (b-1 is archived)", way, b)
		}
		if len(got) != 2 {
			t.Errorf("%s: groups %v, want user:a and user:b semantic only", way, len(got))
		}
	}
	check("from the pending rows", ask())
	if _, err := pool.Exec(ctx, `INSERT INTO `+tbl("index_pending")+` (memory_id) SELECT 'gone-' || i FROM generate_series(1, `+pendingDriveLimit+`) i`); err != nil {
		t.Fatal(err)
	}
	check("walking the groups", ask())
}

// TestIndexRefsAgainstAQueueTakenForEmpty: IndexDone and IndexFailed stay linear in
// their refs when the planner believes index_pending empty (a queue is, whenever
// autovacuum analyzes it). Joining the refs' list (unnest) made a nested loop that
// compared every record with every ref: 420 ms for a batch of 1,000. Their statements
// must find the records through the primary key, with no join at all, in a generic
// plan too; and they must still tell a record's current sequence number from a stale
// one.
func TestIndexRefsAgainstAQueueTakenForEmpty(t *testing.T) {
	// The store under test records its statements, whose plans are checked at the end.
	s, pool, rec := newTracedStore(t)
	ctx := t.Context()
	pending := s.t.indexPending
	if _, err := pool.Exec(ctx, `ANALYZE `+pending); err != nil {
		t.Fatal(err)
	}
	const n = 5000
	refs := insertRefs(t, pool, `INSERT INTO `+pending+` (memory_id) SELECT format('m-%s', lpad(i::text, 5, '0')) FROM generate_series(1, $1) i
		RETURNING memory_id, seq`, n)
	if len(refs) != n {
		t.Fatalf("%d refs, want %d", len(refs), n)
	}
	slices.SortFunc(refs, func(a, b PendingRef) int { return cmp.Compare(a.MemoryID, b.MemoryID) })

	// Records 1-1000 are replaced by a later change (a new sequence number): neither
	// IndexDone nor IndexFailed may touch those with the old refs.
	if _, err := pool.Exec(ctx, `UPDATE `+pending+` SET seq = DEFAULT WHERE memory_id <= 'm-01000'`); err != nil {
		t.Fatal(err)
	}
	// IndexFailed on 1-3000: 1001-2000 have failed once before (parked now at the
	// limit of 2), 2001-3000 never (due again after a second).
	if _, err := pool.Exec(ctx, `UPDATE `+pending+` SET attempts = 1 WHERE memory_id BETWEEN 'm-01001' AND 'm-02000'`); err != nil {
		t.Fatal(err)
	}
	parked, err := s.IndexFailed(ctx, refs[:3000], "embedder down", RetryPolicy{Backoff: func(int) time.Duration { return time.Second }, MaxAttempts: 2}, false)
	if err != nil || parked != 1000 {
		t.Fatalf("IndexFailed: %d parked, %v; want 1000", parked, err)
	}
	// IndexDone on every ref: 1001-5000 go, 1-1000 (re-recorded) stay.
	if err := s.IndexDone(ctx, refs); err != nil {
		t.Fatal(err)
	}
	type state struct {
		attempts int
		parked   bool
		errText  string
	}
	got := map[string]state{}
	rows, err := pool.Query(ctx, `SELECT memory_id, attempts, next_attempt_at = 'infinity', last_error FROM `+pending)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var st state
		if err := rows.Scan(&id, &st.attempts, &st.parked, &st.errText); err != nil {
			t.Fatal(err)
		}
		got[id] = st
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1000 || got["m-00001"] != (state{}) || got["m-01000"] != (state{}) {
		t.Fatalf("after IndexDone: %d records (want the 1000 re-recorded, untouched); m-00001 %+v", len(got), got["m-00001"])
	}

	// IndexFailed's effect, seen before IndexDone removed them: run it again on a
	// fresh set and read the records back.
	if _, err := pool.Exec(ctx, `DELETE FROM `+pending); err != nil {
		t.Fatal(err)
	}
	refs = insertRefs(t, pool, `INSERT INTO `+pending+` (memory_id, attempts) SELECT format('f-%s', i), i % 3 FROM generate_series(1, 3000) i
		RETURNING memory_id, seq`)
	backoff := func(a int) time.Duration { return time.Duration(a) * time.Hour }
	if parked, err = s.IndexFailed(ctx, refs, "embedder down", RetryPolicy{Backoff: backoff, MaxAttempts: 3}, false); err != nil || parked != 1000 {
		t.Fatalf("IndexFailed: %d parked, %v; want 1000 (those at 2 attempts)", parked, err)
	}
	var wrong int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+pending+` WHERE last_error <> 'embedder down'
		OR attempts <> substring(memory_id from 3)::int % 3 + 1
		OR (attempts = 3) <> (next_attempt_at = 'infinity')
		OR (attempts < 3 AND next_attempt_at NOT BETWEEN now() + make_interval(hours => attempts) - interval '1 minute' AND now() + make_interval(hours => attempts) + interval '1 minute')`).Scan(&wrong); err != nil {
		t.Fatal(err)
	}
	if wrong != 0 {
		t.Errorf("IndexFailed: %d of 3000 records have the wrong attempts, delay or error", wrong)
	}

	// Every statement they ran on index_pending, planned generically (as a cached
	// prepared statement is after five runs) with the arguments it ran with: no join
	// with the list of refs, no function scan of it.
	stmts := rec.on("index_pending")
	if len(stmts) < 5 {
		t.Fatalf("recorded %d statements on index_pending, want IndexDone's and IndexFailed's", len(stmts))
	}
	for _, st := range stmts {
		plan := genericPlan(t, pool, st)
		for _, node := range []string{`"Nested Loop"`, `"Function Scan"`, `"Hash Join"`, `"Merge Join"`} {
			if strings.Contains(plan, node) {
				t.Errorf("the generic plan of %q has a %s:\n%s", st.sql, node, plan)
			}
		}
	}
}

// insertRefs runs an INSERT into index_pending RETURNING memory_id, seq and returns
// the refs it made.
func insertRefs(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) []PendingRef {
	t.Helper()
	rows, err := pool.Query(t.Context(), sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	refs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PendingRef, error) {
		var p PendingRef
		return p, r.Scan(&p.MemoryID, &p.Seq)
	})
	if err != nil {
		t.Fatal(err)
	}
	return refs
}

// newTracedStore is newStore whose store records the statements it runs; pool is
// an untraced pool on the same database.
func newTracedStore(t *testing.T) (*Store, *pgxpool.Pool, *sqlRecorder) {
	t.Helper()
	plain, pool := newStore(t)
	rec := &sqlRecorder{}
	cfg := pool.Config()
	cfg.ConnConfig.Tracer = rec
	traced, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(traced.Close)
	return New(traced, plain.schema), pool, rec
}

// sqlRecorder is a pgx tracer that keeps each statement's text and arguments.
type sqlRecorder struct {
	mu    sync.Mutex
	stmts []recordedSQL
}

type recordedSQL struct {
	sql  string
	args []any
}

func (r *sqlRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	var args []any
	for _, a := range d.Args {
		if _, mode := a.(pgx.QueryExecMode); !mode {
			args = append(args, a)
		}
	}
	r.mu.Lock()
	r.stmts = append(r.stmts, recordedSQL{d.SQL, args})
	r.mu.Unlock()
	return ctx
}

func (r *sqlRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// The statements of a pipeline (SendBatch) are traced one by one as they are read.
func (r *sqlRecorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (r *sqlRecorder) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.mu.Lock()
	r.stmts = append(r.stmts, recordedSQL{d.SQL, d.Args})
	r.mu.Unlock()
}

func (r *sqlRecorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// on returns the recorded statements whose text names table.
func (r *sqlRecorder) on(table string) []recordedSQL {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []recordedSQL
	for _, st := range r.stmts {
		if strings.Contains(st.sql, table) {
			out = append(out, st)
		}
	}
	return out
}

// genericPlan is EXPLAIN's JSON of st's generic plan with st's arguments (in a
// transaction rolled back, so the statement's effects do not stay), planned after
// the SET LOCAL statements of settings.
func genericPlan(t *testing.T, pool *pgxpool.Pool, st recordedSQL, settings ...string) string {
	t.Helper()
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, set := range append([]string{"plan_cache_mode = force_generic_plan"}, settings...) {
		if _, err := tx.Exec(ctx, `SET LOCAL `+set); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Exec(ctx, `PREPARE generic_plan AS `+st.sql); err != nil {
		t.Fatalf("prepare %q: %v", st.sql, err)
	}
	placeholders := make([]string, len(st.args))
	for i := range placeholders {
		placeholders[i] = fmt.Sprintf("$%d", i+1)
	}
	call := `EXPLAIN (FORMAT JSON) EXECUTE generic_plan`
	if len(placeholders) > 0 {
		call += "(" + strings.Join(placeholders, ", ") + ")"
	}
	var plan string
	if err := tx.QueryRow(ctx, call, append([]any{pgx.QueryExecModeSimpleProtocol}, st.args...)...).Scan(&plan); err != nil {
		t.Fatalf("explain %q: %v", st.sql, err)
	}
	if _, err := tx.Exec(ctx, `DEALLOCATE generic_plan`); err != nil { // a session's, whatever the transaction does
		t.Fatal(err)
	}
	return plan
}

// TestTryLockScopesTakesAllOrNone: TryLockScopes takes every lock when all are
// free, and when another session holds one of them it returns at once, holding
// none (a third session can take the ones that were free).
func TestTryLockScopesTakesAllOrNone(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	a, b := ScopeType{"user:a", memory.Semantic}, ScopeType{"user:b", memory.Semantic}

	all, err := s.TryLockScopes(ctx, []ScopeType{a, b})
	if err != nil || all == nil {
		t.Fatalf("free locks: %v, %v; want them held", all, err)
	}
	if other, err := s.TryLockScopes(ctx, []ScopeType{b}); err != nil || other != nil {
		t.Fatalf("a lock held by another session: %v, %v; want nil", other, err)
	}
	all.Unlock()

	held, err := s.LockScope(ctx, b.Scope, b.Type)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock()
	// Waiting for held would be a deadlock here: the context ends it as an error.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if got, err := s.TryLockScopes(wctx, []ScopeType{a, b}); err != nil || got != nil {
		t.Fatalf("one of two held elsewhere: %v, %v; want nil", got, err)
	}
	// a was taken and let go: it is free.
	free, err := s.TryLockScopes(ctx, []ScopeType{a})
	if err != nil || free == nil {
		t.Fatalf("the lock a failed try took: %v, %v; want it free again", free, err)
	}
	free.Unlock()
}
