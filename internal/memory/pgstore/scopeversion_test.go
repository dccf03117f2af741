package pgstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/testutil"
)

// versions reads the versions of scopes.
func versions(t *testing.T, s *Store, scopes ...string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, sc := range scopes {
		v, err := s.ScopeVersion(t.Context(), sc)
		if err != nil {
			t.Fatal(err)
		}
		out[sc] = v
	}
	return out
}

// TestScopeVersionBumps: every kind of write a search can see raises the version of
// each scope it touched by exactly one per commit (several statements of one
// transaction count once), whoever writes and however; what changes nothing a search
// sees, and what is rolled back, raises none.
func TestScopeVersionBumps(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	const a, b, other = "user:a", "user:b", "user:other"
	want := map[string]int64{a: 0, b: 0, other: 0}
	check := func(what string) {
		t.Helper()
		if got := versions(t, s, a, b, other); !maps.Equal(got, want) {
			t.Fatalf("after %s: versions %v, want %v", what, got, want)
		}
	}
	check("nothing")

	mustPut(t, s, item("a1", a, memory.Semantic, "k", `{"v":1}`, 0.5, 0), Inserted)
	want[a]++
	check("an insert")
	mustPut(t, s, item("a1", a, memory.Semantic, "k", `{"v":1}`, 0.5, 0), Unchanged)
	check("an unchanged write")
	mustPut(t, s, item("a1", a, memory.Semantic, "k", `{"v":2}`, 0.5, 0), Superseded)
	want[a]++
	check("a supersede")

	// The gateway's path: the write and its index work, then the index work done.
	res, err := s.PutQueued(ctx, item("b1", b, memory.Semantic, "", `{"v":"b"}`, 0.5, 0))
	if err != nil {
		t.Fatal(err)
	}
	want[b]++
	check("a queued write")
	if err := s.IndexDone(ctx, []PendingRef{{MemoryID: res.MemoryID, Seq: res.Pending}}); err != nil {
		t.Fatal(err)
	}
	want[b]++
	check("its index work done")

	// One batch over two scopes: several statements, one bump each.
	bt, err := s.BeginBatch(ctx, nil, []memory.Item{
		item("a2", a, memory.Episodic, "", `{"v":"a2"}`, 0.5, 0),
		item("b2", b, memory.Episodic, "", `{"v":"b2"}`, 0.5, 0),
		item("b3", b, memory.Episodic, "", `{"v":"b3"}`, 0.5, 0),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bt.Commit(ctx, []BatchOp{{Kind: BatchInsert}, {Kind: BatchInsert}, {Kind: BatchInsert}}); err != nil {
		t.Fatal(err)
	}
	want[a]++
	want[b]++
	check("a batch")
	// Its postings, written after, change nothing a search returns (see lexical.go).
	if err := bt.WriteTerms(ctx); err != nil {
		t.Fatal(err)
	}
	check("the batch's postings")

	// A Job writing the tables directly, several statements in one transaction,
	// the embedded index's vectors included.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, q := range []string{
			`UPDATE ` + s.t.memories + ` SET base_score = 0.9 WHERE scope = '` + b + `'`,
			`UPDATE ` + s.t.memories + ` SET archived_at = now() WHERE memory_id = 'a2'`,
			`INSERT INTO ` + s.t.vectors + ` (memory_id, scope, memory_type, embedding) VALUES ('a1', '` + a + `', 'semantic', '\x00000000')`,
		} {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want[a]++
	want[b]++
	check("a direct transaction")
	if _, err := pool.Exec(ctx, `DELETE FROM `+s.t.vectors+` WHERE memory_id = 'a1'`); err != nil {
		t.Fatal(err)
	}
	want[a]++
	check("a vector deleted")

	// Rolled back, whole or to a savepoint: nothing.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM `+s.t.memories+` WHERE scope = '`+a+`'`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	check("a rolled back delete")
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := sp.Exec(ctx, `DELETE FROM `+s.t.memories+` WHERE scope = '`+a+`'`); err != nil {
			return err
		}
		if err := sp.Rollback(ctx); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE `+s.t.memories+` SET base_score = 0.1 WHERE scope = '`+b+`'`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	want[b]++
	check("a delete rolled back to a savepoint, then an update")
	// A statement that matched nothing.
	if _, err := pool.Exec(ctx, `UPDATE `+s.t.memories+` SET base_score = 0.1 WHERE scope = 'user:none'`); err != nil {
		t.Fatal(err)
	}
	check("an update of nothing")

	// Restore and import (the Jobs' own paths), rehydration, delete, forget.
	if _, err := s.Merge(ctx, []memory.Item{item("a3", a, memory.Semantic, "", `{"v":"a3"}`, 0.5, 0)}, MergeOptions{Policy: SkipExisting}); err != nil {
		t.Fatal(err)
	}
	want[a]++
	check("a restore")
	importSlice(t, s, []memory.Item{item("b4", b, memory.Semantic, "", `{"v":"b4"}`, 0.5, 0)})
	want[b]++
	check("an import")
	if _, err := s.Unarchive(ctx, a, now, "a2"); err != nil {
		t.Fatal(err)
	}
	want[a]++
	check("a rehydration")
	if _, _, err := s.DeleteQueued(ctx, "b4", "test"); err != nil {
		t.Fatal(err)
	}
	want[b]++
	check("a delete")
	if _, err := s.Forget(ctx, a, "test", "test"); err != nil {
		t.Fatal(err)
	}
	want[a]++
	check("a forget")

	// Nothing is left noted once the transactions are over.
	if n := countRows(t, pool, pgx.Identifier{s.schema, "scope_versions_owed"}.Sanitize(), ""); n != 0 {
		t.Fatalf("%d notes left in scope_versions_owed", n)
	}
}

// TestScopeVersionsNoDeadlock: writers whose transactions touch overlapping scopes in
// opposite orders, statement after statement (a Job's direct writes), and batches
// inserting into some scopes while reinforcing in others, all at once. None fails
// (a deadlock would fail one of each cycle after deadlock_timeout), and each scope's
// version ends at exactly the number of committed transactions that touched it.
func TestScopeVersionsNoDeadlock(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	scopes := make([]string, 6)
	for i := range scopes {
		scopes[i] = fmt.Sprintf("user:%d", i)
	}
	// One keyless semantic memory per scope for the batches to reinforce.
	for i, sc := range scopes {
		mustPut(t, s, item(fmt.Sprintf("base-%d", i), sc, memory.Semantic, "", fmt.Sprintf(`{"base":%d}`, i), 0.5, 0), Inserted)
	}
	base := versions(t, s, scopes...)

	const workers, rounds = 6, 25
	var (
		mu      sync.Mutex
		touched = map[string]int64{}
		wg      sync.WaitGroup
		errs    = make(chan error, workers)
	)
	committed := func(scs []string) {
		mu.Lock()
		defer mu.Unlock()
		for _, sc := range scs {
			touched[sc]++
		}
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				// Overlapping scope sets, ascending for even workers, descending for odd.
				set := slices.Clone(scopes[(w+r)%3 : (w+r)%3+4])
				if w%2 == 1 {
					slices.Reverse(set)
				}
				var err error
				if r%2 == 0 {
					err = directWrites(ctx, s, set, fmt.Sprintf("w%d-r%d", w, r))
				} else {
					err = insertAndReinforce(ctx, s, set[:2], set[2:], fmt.Sprintf("w%d-r%d", w, r))
				}
				if err != nil {
					errs <- fmt.Errorf("worker %d round %d: %w", w, r, err)
					return
				}
				committed(set)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "40P01" {
			t.Errorf("deadlock: %v", err)
		} else {
			t.Error(err)
		}
	}
	if t.Failed() {
		return
	}
	got := versions(t, s, scopes...)
	for _, sc := range scopes {
		if got[sc] != base[sc]+touched[sc] {
			t.Errorf("%s: version %d, want %d (%d before, %d transactions touched it)", sc, got[sc], base[sc]+touched[sc], base[sc], touched[sc])
		}
	}
}

// directWrites inserts one memory per scope, one statement each in the order given,
// in one transaction.
func directWrites(ctx context.Context, s *Store, scopes []string, tag string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for i, sc := range scopes {
			_, err := tx.Exec(ctx, `INSERT INTO `+s.t.memories+` (memory_id, memory_type, scope, content, content_hash, base_score, created_at, updated_at)
				VALUES ($1, 'episodic', $2, '{}', $3, 0.5, now(), now())`, fmt.Sprintf("%s-%d", tag, i), sc, []byte(tag+sc))
			if err != nil {
				return err
			}
			// Give the other writers time to take their first scopes meanwhile.
			if _, err := tx.Exec(ctx, `SELECT pg_sleep(0.002)`); err != nil {
				return err
			}
		}
		return nil
	})
}

// insertAndReinforce is one batch that inserts an episode into each of into and
// reinforces the base memory of each of reinforce, under the near-duplicate locks of
// those: the insert is one statement over its scopes, each reinforcement one after it.
func insertAndReinforce(ctx context.Context, s *Store, into, reinforce []string, tag string) error {
	var items []memory.Item
	var ops []BatchOp
	for i, sc := range into {
		items = append(items, item(fmt.Sprintf("%s-%d", tag, i), sc, memory.Episodic, "", fmt.Sprintf(`{"tag":%q}`, tag+sc), 0.5, 0))
		ops = append(ops, BatchOp{Kind: BatchInsert})
	}
	for _, sc := range reinforce {
		var n int
		if _, err := fmt.Sscanf(sc, "user:%d", &n); err != nil {
			return err
		}
		items = append(items, item("", sc, memory.Semantic, "", fmt.Sprintf(`{"again":%q}`, tag+sc), 0.5, 0))
		ops = append(ops, BatchOp{Kind: BatchReinforce, Target: fmt.Sprintf("base-%d", n), Boost: 0.01, At: time.Now()})
	}
	// As the service does: the near-duplicate locks of the groups it reinforces in
	// (without them, two batches reinforcing one memory wait on its row lock).
	var groups []ScopeType
	for _, sc := range reinforce {
		groups = append(groups, ScopeType{Scope: sc, Type: memory.Semantic})
	}
	lock, err := s.LockScopes(ctx, groups)
	if err != nil {
		return err
	}
	defer lock.Unlock()
	b, err := s.BeginBatch(ctx, lock, items)
	if err != nil {
		return err
	}
	_, err = b.Commit(ctx, ops)
	return err
}

// TestScopeVersionsEpoch: each schema has an epoch of its own.
func TestScopeVersionsEpoch(t *testing.T) {
	s1, pool := newStore(t)
	schema := testutil.UniqueName("t_")
	dropSchemaOnCleanup(t, pool, schema)
	if _, err := Migrate(t.Context(), pool, schema); err != nil {
		t.Fatal(err)
	}
	e1, err := s1.ScopeVersionsEpoch(t.Context())
	if err != nil || e1 == "" {
		t.Fatalf("epoch %q, %v", e1, err)
	}
	e2, err := New(pool, schema).ScopeVersionsEpoch(t.Context())
	if err != nil || e2 == "" || e2 == e1 {
		t.Fatalf("second schema's epoch %q, %v (first %q)", e2, err, e1)
	}
}

// BenchmarkScopeVersionsBatch is the triggers' cost on a batch write: batches of
// 1,000 new memories over 600 scopes (BeginBatch, Commit, WriteTerms), with the
// scope-version triggers and with them disabled.
func BenchmarkScopeVersionsBatch(b *testing.B) {
	for _, mode := range []string{"triggers", "without"} {
		b.Run(mode, func(b *testing.B) {
			// One connection, which counts the time spent in PL/pgSQL functions
			// (pg_stat_user_functions): the triggers' own time, the deferred bump at
			// commit included, apart from the noise of the machine.
			cfg, err := pgxpool.ParseConfig(testutil.PostgresDSN(b))
			if err != nil {
				b.Fatal(err)
			}
			cfg.MaxConns = 1
			cfg.ConnConfig.RuntimeParams["track_functions"] = "pl"
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			schema := testutil.UniqueName("b_")
			defer func() {
				_, _ = pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
			}()
			ctx := context.Background()
			if _, err := Migrate(ctx, pool, schema); err != nil {
				b.Fatal(err)
			}
			s := New(pool, schema)
			if mode == "without" {
				for table, triggers := range map[string][]string{
					"memories":      {"memories_scope_versions_ins", "memories_scope_versions_upd", "memories_scope_versions_del"},
					"vectors":       {"vectors_scope_versions_ins", "vectors_scope_versions_upd", "vectors_scope_versions_del"},
					"index_pending": {"index_pending_scope_versions_del"},
				} {
					for _, tr := range triggers {
						if _, err := pool.Exec(ctx, `ALTER TABLE `+pgx.Identifier{schema, table}.Sanitize()+` DISABLE TRIGGER `+pgx.Identifier{tr}.Sanitize()); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			n := 0
			batch := func() {
				items := make([]memory.Item, 1000)
				ops := make([]BatchOp, len(items))
				for i := range items {
					n++
					items[i] = item(fmt.Sprintf("m%d", n), fmt.Sprintf("user:%d", n%600), memory.Episodic, "", fmt.Sprintf(`{"text":"note %d about topic %d"}`, n, n%97), 0.5, 0)
					ops[i] = BatchOp{Kind: BatchInsert}
				}
				bt, err := s.BeginBatch(ctx, nil, items)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := bt.Commit(ctx, ops); err != nil {
					b.Fatal(err)
				}
				if err := bt.WriteTerms(ctx); err != nil {
					b.Fatal(err)
				}
			}
			for range 5 {
				batch()
			}
			if _, err := pool.Exec(ctx, `SELECT pg_stat_reset()`); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				batch()
			}
			b.StopTimer()
			if _, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
				b.Fatal(err)
			}
			var ms float64
			if err := pool.QueryRow(ctx, `SELECT coalesce(sum(total_time), 0) FROM pg_stat_user_functions WHERE schemaname = $1`, schema).Scan(&ms); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(ms/float64(b.N), "trigger-ms/op")
		})
	}
}
