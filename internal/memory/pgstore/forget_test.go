package pgstore

import (
	"context"
	"encoding/json"
	"errors"
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

func TestForget(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	a1 := item("a1", "user:a", memory.Semantic, "name", `{"name":"Ana","secret":"s3cr3t"}`, 1, 0)
	a1.Embedding = []float32{1}
	a2 := item("a2", "user:a", memory.Episodic, "", `{"trip":"Lisbon"}`, 1, 0)
	a2.Embedding = []float32{2}
	a3 := item("a3", "user:a", memory.Working, "", `{"x":1}`, 1, 0)
	b1 := item("b1", "user:b", memory.Semantic, "name", `{"name":"Bo"}`, 1, 0)
	b1.Embedding = []float32{3}
	if res := importSlice(t, s, []memory.Item{a1, a2, a3, b1}); res.Inserted != 4 || res.Embeddings != 3 {
		t.Fatalf("Import = %+v", res)
	}
	// A stray vector row of the scope whose memory is gone is deleted too.
	if _, err := pool.Exec(ctx, `INSERT INTO `+s.t.vectors+` VALUES ('orphan', 'user:a', 'semantic', '{1}')`); err != nil {
		t.Fatal(err)
	}

	if ok, err := s.IsForgotten(ctx, "user:a"); err != nil || ok {
		t.Fatalf("IsForgotten before = %v, %v", ok, err)
	}
	before := time.Now().Add(-time.Minute)
	res, err := s.Forget(ctx, "user:a", "GDPR erasure request #42", "alice@ops")
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted != 3 || res.VectorsDeleted != 3 || res.ForgottenAt.Before(before) {
		t.Fatalf("Forget = %+v, want 3 deleted and 3 vectors", res)
	}
	if n := countRows(t, pool, s.t.memories, "scope = 'user:a'"); n != 0 {
		t.Fatalf("user:a memories left: %d", n)
	}
	if n := countRows(t, pool, s.t.vectors, "scope = 'user:a'"); n != 0 {
		t.Fatalf("user:a vectors left: %d", n)
	}
	if c, _ := s.Count(ctx); c != 1 {
		t.Fatalf("Count = %d, want 1 (user:b)", c)
	}
	if n := countRows(t, pool, s.t.vectors, "scope = 'user:b'"); n != 1 {
		t.Fatalf("user:b vectors = %d, want 1", n)
	}
	if got, err := s.Recall(ctx, RecallQuery{Scope: "user:a", Now: now}); err != nil || len(got) != 0 {
		t.Fatalf("Recall after forget = %v, %v", got, err)
	}
	if ok, _ := s.IsForgotten(ctx, "user:a"); !ok {
		t.Fatal("IsForgotten(user:a) = false after Forget")
	}
	if ok, _ := s.IsForgotten(ctx, "user:b"); ok {
		t.Fatal("IsForgotten(user:b) = true")
	}
	ts, err := s.Tombstones(ctx)
	if err != nil || len(ts) != 1 || ts[0].Scope != "user:a" || ts[0].Reason != "GDPR erasure request #42" || !ts[0].ForgottenAt.Equal(res.ForgottenAt) {
		t.Fatalf("Tombstones = %+v, %v", ts, err)
	}

	type audit struct {
		action, scope string
		detail        map[string]any
	}
	readAudit := func() []audit {
		rows, err := pool.Query(ctx, `SELECT action, scope, detail FROM `+s.t.auditLog+` ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []audit
		for rows.Next() {
			var a audit
			var raw []byte
			if err := rows.Scan(&a.action, &a.scope, &raw); err != nil {
				t.Fatal(err)
			}
			if string(raw) == "" || json.Unmarshal(raw, &a.detail) != nil {
				t.Fatalf("detail %q", raw)
			}
			for _, leak := range []string{"s3cr3t", "Lisbon", "Ana"} {
				if strings.Contains(string(raw), leak) {
					t.Fatalf("audit detail %s leaks content %q", raw, leak)
				}
			}
			out = append(out, a)
		}
		return out
	}
	logs := readAudit()
	want := map[string]any{"actor": "alice@ops", "reason": "GDPR erasure request #42", "deleted": float64(3), "vectors_deleted": float64(3),
		"forgotten_at": logs[0].detail["forgotten_at"]}
	if at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(want["forgotten_at"])); err != nil || !at.Equal(res.ForgottenAt) {
		t.Fatalf("audit forgotten_at = %v, want %s", want["forgotten_at"], res.ForgottenAt)
	}
	if len(logs) != 1 || logs[0].action != "forget" || logs[0].scope != "user:a" || !equalMaps(logs[0].detail, want) {
		t.Fatalf("audit = %+v, want one forget record with %v", logs, want)
	}

	// Forgetting again: nothing to delete, a later tombstone, a second record. The
	// first tombstone stays as it was (tombstones are append-only).
	res2, err := s.Forget(ctx, "user:a", "repeat", "bob")
	if err != nil || res2.Deleted != 0 || res2.VectorsDeleted != 0 || !res2.ForgottenAt.After(res.ForgottenAt) {
		t.Fatalf("second Forget = %+v, %v", res2, err)
	}
	ts, _ = s.Tombstones(ctx)
	if len(ts) != 1 || ts[0].Reason != "repeat" || !ts[0].ForgottenAt.Equal(res2.ForgottenAt) {
		t.Fatalf("Tombstones after second forget = %+v", ts)
	}
	if n := countRows(t, pool, s.t.tombstones, "scope = 'user:a'"); n != 2 {
		t.Fatalf("user:a has %d tombstone rows, want 2", n)
	}
	if logs = readAudit(); len(logs) != 2 || logs[1].detail["actor"] != "bob" || logs[1].detail["deleted"] != float64(0) {
		t.Fatalf("audit after second forget = %+v", logs)
	}

	// A memory created after the forget is new consent and is stored; one created
	// before it belongs to what was forgotten and is refused.
	later := item("a9", "user:a", memory.Semantic, "", `{"new":true}`, 1, 0)
	later.CreatedAt, later.UpdatedAt = time.Now().Add(time.Second), time.Now().Add(time.Second)
	mustPut(t, s, later, Inserted)
	if _, err := s.Put(ctx, item("a8", "user:a", memory.Semantic, "", `{"old":true}`, 1, 0)); !errors.Is(err, ErrForgotten) {
		t.Fatalf("Put of a memory created before the forget = %v, want ErrForgotten", err)
	}

	if _, err := s.Forget(ctx, "user:a' OR '1'='1", "", ""); err == nil {
		t.Fatal("Forget of an invalid scope succeeded")
	}
	if c, _ := s.Count(ctx); c != 2 {
		t.Fatalf("Count = %d, want 2", c)
	}
}

func equalMaps(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// auditRecords returns the detail of every audit record of action for scope, oldest first.
func auditRecords(t *testing.T, s *Store, pool *pgxpool.Pool, action, scope string) []map[string]any {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT detail FROM `+s.t.auditLog+` WHERE action = $1 AND scope = $2 ORDER BY id`, action, scope)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (map[string]any, error) {
		var d map[string]any
		return d, r.Scan(&d)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestGuaranteeTombstoneCoversWhatCameBefore pins the one meaning of a tombstone on
// every write path of the store: it forgets what its scope held up to its time, and
// what is created later (a returning user) is new consent.
func TestGuaranteeTombstoneCoversWhatCameBefore(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	at := now
	before := item("before", "user:1", memory.Semantic, "", `{"v":"before"}`, 1, day)
	same := item("same", "user:1", memory.Semantic, "", `{"v":"same"}`, 1, 0) // created exactly at the tombstone
	later := item("later", "user:1", memory.Semantic, "", `{"v":"later"}`, 1, -time.Minute)
	for _, it := range []memory.Item{before, same, later} {
		it.Embedding = []float32{1}
		importSlice(t, s, []memory.Item{it})
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+s.t.vectors+` VALUES ('orphan', 'user:1', 'semantic', '{1}')`); err != nil {
		t.Fatal(err)
	}
	res, err := s.ApplyTombstones(ctx, []Tombstone{{Scope: "user:1", ForgottenAt: at, Reason: "asked"}}, ApplyOptions{Actor: "restore team-a/r1", Source: "s3://b/p/"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Added != 1 || res.Forgotten != 2 || res.VectorsDeleted != 3 {
		t.Fatalf("ApplyTombstones = %+v, want 1 added, 2 memories and 3 vectors deleted", res)
	}
	if got := ids(exportAll(t, s, ExportFilter{IncludeArchived: true})); !slices.Equal(got, []string{"later"}) {
		t.Fatalf("left %v, want only the memory created after the tombstone", got)
	}
	if n := countRows(t, pool, s.t.vectors, "scope = 'user:1'"); n != 1 {
		t.Fatalf("%d vectors left in user:1, want 1 (later's)", n)
	}

	// Every path then agrees: Put, Merge and Import refuse what the tombstone covers
	// and store what comes after it.
	if _, err := s.Put(ctx, before); !errors.Is(err, ErrForgotten) || !strings.Contains(err.Error(), "user:1 was forgotten at") {
		t.Fatalf("Put of a covered memory = %v, want ErrForgotten", err)
	}
	if _, err := s.Put(ctx, same); !errors.Is(err, ErrForgotten) {
		t.Fatalf("Put of a memory created at the tombstone's time = %v, want ErrForgotten", err)
	}
	mustPut(t, s, item("later2", "user:1", memory.Semantic, "", `{"v":"later2"}`, 1, -time.Hour), Inserted)
	assertOutcomes(t, mustMerge(t, s, KeepNewer, before, same, item("later3", "user:1", memory.Semantic, "", `{"v":"l3"}`, 1, -time.Hour)),
		MergeTombstoned, MergeTombstoned, MergeInserted)
	if r := importSlice(t, s, []memory.Item{before, item("later4", "user:1", memory.Semantic, "", `{"v":"l4"}`, 1, -time.Hour)}); r.Inserted != 1 {
		t.Fatalf("Import = %+v, want only the later memory", r)
	}
	if got := ids(exportAll(t, s, ExportFilter{IncludeArchived: true})); !slices.Equal(got, []string{"later", "later2", "later3", "later4"}) {
		t.Fatalf("left %v", got)
	}

	// The audit record says who, why, when and how much, never content.
	rec := auditRecords(t, s, pool, "forget", "user:1")
	if len(rec) != 1 || rec[0]["actor"] != "restore team-a/r1" || rec[0]["reason"] != "asked" || rec[0]["source"] != "s3://b/p/" ||
		rec[0]["deleted"] != float64(2) || rec[0]["vectors_deleted"] != float64(3) {
		t.Fatalf("audit = %+v", rec)
	}
}

func TestApplyTombstones(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	importSlice(t, s, []memory.Item{
		item("a1", "user:1", memory.Semantic, "", `{"v":1}`, 1, 2*day),
		item("b1", "user:2", memory.Semantic, "", `{"v":2}`, 1, day),
		item("c1", "user:4", memory.Semantic, "", `{"v":4}`, 1, day),
	})
	batch := []Tombstone{
		{Scope: "user:1", ForgottenAt: now, Reason: "r1"},
		{Scope: "user:2", ForgottenAt: now.Add(-3 * day), Reason: "before b1"}, // covers nothing
		{Scope: "user:3", ForgottenAt: now.Add(-day), Reason: "older duplicate"},
		{Scope: "user:3", ForgottenAt: now, Reason: "latest"},
	}
	opts := ApplyOptions{Actor: "test", RecordIndexDeletions: true}

	// A dry run reports and writes nothing.
	snapshot := func() []int64 {
		return []int64{countRows(t, pool, s.t.memories, "true"), countRows(t, pool, s.t.tombstones, "true"),
			countRows(t, pool, s.t.auditLog, "true"), countRows(t, pool, s.t.indexDeletions, "true")}
	}
	empty := snapshot()
	dry := opts
	dry.DryRun = true
	if res, err := s.ApplyTombstones(ctx, batch, dry); err != nil || res != (ApplyResult{Added: 3, Forgotten: 1}) {
		t.Fatalf("dry run = %+v, %v", res, err)
	}
	if got := snapshot(); !slices.Equal(got, empty) {
		t.Fatalf("dry run wrote: %v -> %v", empty, got)
	}

	res, err := s.ApplyTombstones(ctx, batch, opts)
	if err != nil || res != (ApplyResult{Added: 3, Forgotten: 1}) {
		t.Fatalf("ApplyTombstones = %+v, %v", res, err)
	}
	ts, err := s.Tombstones(ctx)
	want := []Tombstone{{Scope: "user:1", ForgottenAt: now, Reason: "r1"}, {Scope: "user:2", ForgottenAt: now.Add(-3 * day), Reason: "before b1"},
		{Scope: "user:3", ForgottenAt: now, Reason: "latest"}}
	if err != nil || !slices.Equal(ts, want) {
		t.Fatalf("Tombstones = %+v, %v; want %+v", ts, err, want)
	}
	// The forgotten memory's vector deletion is owed to an external index.
	var owed []string
	if _, err := s.ProcessDeletionEntries(ctx, DeletionOptions{}, func(_ context.Context, ids []string) error {
		owed = append(owed, ids...)
		return nil
	}); err != nil || !slices.Equal(owed, []string{"a1"}) {
		t.Fatalf("vector deletions = %v, %v; want [a1]", owed, err)
	}
	for scope, n := range map[string]int{"user:1": 1, "user:2": 1, "user:3": 1, "user:4": 0} {
		if got := auditRecords(t, s, pool, "forget", scope); len(got) != n {
			t.Errorf("%s has %d forget records, want %d", scope, len(got), n)
		}
	}

	// Applying them again changes nothing, and so does an older tombstone.
	after := snapshot()
	for _, again := range [][]Tombstone{batch, {{Scope: "user:1", ForgottenAt: now.Add(-day), Reason: "older"}}} {
		if res, err := s.ApplyTombstones(ctx, again, opts); err != nil || res != (ApplyResult{}) {
			t.Fatalf("again = %+v, %v", res, err)
		}
	}
	if got := snapshot(); !slices.Equal(got, after) {
		t.Fatalf("reapplying wrote: %v -> %v", after, got)
	}
	// A later tombstone of the same scope is a new row; the older one stays.
	if res, err := s.ApplyTombstones(ctx, []Tombstone{{Scope: "user:2", ForgottenAt: now}}, opts); err != nil || res != (ApplyResult{Added: 1, Forgotten: 1}) {
		t.Fatalf("later tombstone = %+v, %v", res, err)
	}
	if n := countRows(t, pool, s.t.tombstones, "scope = 'user:2'"); n != 2 {
		t.Fatalf("user:2 has %d tombstone rows, want 2", n)
	}

	for _, bad := range [][]Tombstone{{{Scope: "nobody", ForgottenAt: now}}, {{Scope: "user:9"}}, make([]Tombstone, MaxApplyBatch+1)} {
		if _, err := s.ApplyTombstones(ctx, bad, opts); err == nil {
			t.Errorf("ApplyTombstones(%d tombstones, first %+v) succeeded", len(bad), bad[0])
		}
	}
}

// Tombstones stream in byte order of their scopes, one per scope (its latest), so a
// snapshot writes them in the order its readers check.
func TestTombstonesInByteOrder(t *testing.T) {
	s, pool := newStore(t)
	for i, scope := range []string{"user:a", "user:B", "user:_x", "user:B", "session:z", "user:a"} {
		rawTombstone(t, s, pool, scope, now.Add(time.Duration(i)*time.Hour))
	}
	ts, err := s.Tombstones(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tb := range ts {
		got = append(got, tb.Scope+"@"+tb.ForgottenAt.Sub(now).String())
	}
	want := []string{"session:z@4h0m0s", "user:B@3h0m0s", "user:_x@2h0m0s", "user:a@5h0m0s"}
	if !slices.Equal(got, want) {
		t.Fatalf("tombstones %v, want %v", got, want)
	}
	if at, ok, err := s.ForgottenAt(t.Context(), "user:B"); err != nil || !ok || !at.Equal(now.Add(3*time.Hour)) {
		t.Fatalf("ForgottenAt(user:B) = %v, %v, %v", at, ok, err)
	}
}

// Forget covers everything it deletes, also a memory dated ahead of the server's
// clock: restoring that memory afterwards never brings it back.
func TestForgetCoversFutureDatedMemories(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	ahead := item("ahead", "user:f", memory.Semantic, "", `{"v":1}`, 1, 0)
	ahead.CreatedAt = time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	ahead.UpdatedAt = ahead.CreatedAt
	mustPut(t, s, ahead, Inserted)
	res, err := s.Forget(ctx, "user:f", "", "test")
	if err != nil || res.Deleted != 1 || res.ForgottenAt.Before(ahead.CreatedAt) {
		t.Fatalf("Forget = %+v, %v; the tombstone must cover the memory created at %s", res, err, ahead.CreatedAt)
	}
	assertOutcomes(t, mustMerge(t, s, KeepNewer, ahead), MergeTombstoned)
}

// TestGuaranteeConcurrentWritesNeverOutliveAForget races writers against repeated
// forgets of one scope: afterwards no stored memory is covered by the scope's
// tombstone, and every write that succeeded is either stored or was created before
// a forget that then deleted it.
func TestGuaranteeConcurrentWritesNeverOutliveAForget(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	const writers, forgets = 4, 15
	type written struct {
		id      string
		created time.Time
	}
	var (
		mu      sync.Mutex
		ok      []written
		refused int
		wg      sync.WaitGroup
		err     error
	)
	forgetting := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			// Write while the forgets go on, and a few more after the last one.
			for i, extra := 0, 0; extra < 5; i++ {
				select {
				case <-forgetting:
					extra++
				default:
				}
				it := item(fmt.Sprintf("w%d-%d", w, i), "user:race", memory.Episodic, "", fmt.Sprintf(`{"w":%d,"i":%d}`, w, i), 1, 0)
				it.CreatedAt = time.Now().UTC().Truncate(time.Microsecond)
				it.UpdatedAt = it.CreatedAt
				_, perr := s.Put(ctx, it)
				mu.Lock()
				switch {
				case perr == nil:
					ok = append(ok, written{it.MemoryID, it.CreatedAt})
				case errors.Is(perr, ErrForgotten):
					refused++
				case err == nil:
					err = perr
				}
				mu.Unlock()
			}
		})
	}
	wg.Go(func() {
		defer close(forgetting)
		for range forgets {
			if _, ferr := s.Forget(ctx, "user:race", "", "test"); ferr != nil {
				mu.Lock()
				err = ferr
				mu.Unlock()
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	final, _, err := s.ForgottenAt(ctx, "user:race")
	if err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, pool, s.t.memories, "scope = 'user:race' AND created_at <= $1", final); n != 0 {
		t.Fatalf("%d memories covered by the tombstone survived", n)
	}
	stored := map[string]bool{}
	for _, id := range ids(exportAll(t, s, ExportFilter{IncludeArchived: true})) {
		stored[id] = true
	}
	kept := 0
	for _, w := range ok {
		switch {
		case w.created.After(final) && !stored[w.id]:
			t.Errorf("%s, written after the last forget, is lost", w.id)
		case !w.created.After(final) && stored[w.id]:
			t.Errorf("%s, written before the last forget, survived it", w.id)
		case stored[w.id]:
			kept++
		}
	}
	if kept == 0 || len(ok) == kept {
		t.Fatalf("%d writes, %d kept: the writes did not interleave with the forgets", len(ok), kept)
	}
	t.Logf("%d writes succeeded, %d refused as forgotten, %d kept after %d forgets", len(ok), refused, kept, forgets)
}
