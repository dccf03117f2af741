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

	// A write after the forget is new consent, whatever date its writer gives it: the
	// server's clock records it after the tombstone.
	backdated := item("a9", "user:a", memory.Semantic, "", `{"new":true}`, 1, 0) // created_at long before the forget
	mustPut(t, s, backdated, Inserted)
	if got, err := s.Get(ctx, "a9"); err != nil || !got.RecordedAt.After(res2.ForgottenAt) || !got.CreatedAt.Equal(backdated.CreatedAt) {
		t.Fatalf("the write after the forget: %+v, %v (tombstone %s)", got, err, res2.ForgottenAt)
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

	// Every path then agrees. Merge and Import (restores, imports) refuse what their
	// source recorded up to the tombstone (recorded_at, or created_at for items that
	// never carried one) and store what came after it; Put, the write path, records
	// by the server's clock, so what an agent writes now comes after the tombstone
	// whatever its created_at says (the user came back).
	assertOutcomes(t, mustMerge(t, s, KeepNewer, before, same, item("later3", "user:1", memory.Semantic, "", `{"v":"l3"}`, 1, -time.Hour)),
		MergeTombstoned, MergeTombstoned, MergeInserted)
	recordedBefore := item("rec-before", "user:1", memory.Semantic, "", `{"v":"recorded before"}`, 1, -time.Hour)
	recordedBefore.RecordedAt = at.Add(-time.Second) // created "after", recorded before: covered
	if r := importSlice(t, s, []memory.Item{before, recordedBefore, item("later4", "user:1", memory.Semantic, "", `{"v":"l4"}`, 1, -time.Hour)}); r.Inserted != 1 {
		t.Fatalf("Import = %+v, want only the later memory", r)
	}
	put := mustPut(t, s, item("again", "user:1", memory.Semantic, "", `{"v":"before, written again"}`, 1, day), Inserted)
	if got := ids(exportAll(t, s, ExportFilter{IncludeArchived: true})); !slices.Equal(got, []string{"again", "later", "later3", "later4"}) || put.MemoryID != "again" {
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

// TestGuaranteeClientDatesNeverMoveForgetting: a writer's created_at decides nothing
// about forgetting. A date ahead of the server's clock by more than the skew is
// refused on every write path; one within it neither pushes the scope's tombstone
// into the future (so the user can come back at once) nor escapes a later forget
// (restoring the memory afterwards never brings it back).
func TestGuaranteeClientDatesNeverMoveForgetting(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	clock := time.Now().UTC().Truncate(time.Microsecond)
	far := item("far", "user:f", memory.Semantic, "", `{"v":"2099"}`, 1, 0)
	far.CreatedAt = time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)
	far.UpdatedAt = far.CreatedAt
	var fe *memory.FieldError
	if _, err := s.Put(ctx, far); !errors.As(err, &fe) || fe.Field != "created_at" || !strings.Contains(err.Error(), "more than 5m0s after the server's clock") {
		t.Fatalf("Put of a memory dated 2099 = %v, want a created_at field error", err)
	}
	updated := item("upd", "user:f", memory.Semantic, "", `{"v":"updated ahead"}`, 1, 0)
	updated.UpdatedAt = clock.Add(time.Hour)
	if _, err := s.Put(ctx, updated); !errors.As(err, &fe) || fe.Field != "updated_at" {
		t.Fatalf("Put of a memory updated an hour ahead = %v, want an updated_at field error", err)
	}
	assertOutcomes(t, mustMerge(t, s, KeepNewer, far), MergeInvalid)
	if _, err := s.Import(ctx, sliceSource([]memory.Item{far})); !errors.As(err, &fe) || fe.Field != "created_at" {
		t.Fatalf("Import of a memory dated 2099 = %v", err)
	}

	ahead := item("ahead", "user:f", memory.Semantic, "", `{"v":"a minute ahead"}`, 1, 0)
	ahead.CreatedAt = clock.Add(time.Minute) // within the skew: a client whose clock runs fast
	ahead.UpdatedAt = ahead.CreatedAt
	mustPut(t, s, ahead, Inserted)
	stored := exportAll(t, s, ExportFilter{})
	res, err := s.Forget(ctx, "user:f", "", "test")
	if err != nil || res.Deleted != 1 || res.ForgottenAt.After(time.Now().Add(time.Second)) || res.ForgottenAt.Before(stored[0].RecordedAt) {
		t.Fatalf("Forget = %+v, %v; want the server's clock, covering %s", res, err, stored[0].RecordedAt)
	}
	// The user comes back at once: a write right after the forget is stored.
	mustPut(t, s, item("back", "user:f", memory.Semantic, "", `{"v":"back"}`, 1, 0), Inserted)
	// The forgotten memory, restored from a snapshot taken before (with its
	// recorded_at), stays forgotten, though its created_at is after the tombstone.
	assertOutcomes(t, mustMerge(t, s, KeepNewer, stored[0]), MergeTombstoned)
}

// TestGuaranteeConcurrentWritesNeverOutliveAForget races writers against repeated
// forgets of one scope: afterwards no stored memory is covered by the scope's
// tombstone; every write acknowledged before the last forget began is gone, every
// write begun after it ended is stored, and none is refused (a write after a forget
// is new consent). The writers date their memories an hour back, which changes
// nothing: the server's clock decides.
func TestGuaranteeConcurrentWritesNeverOutliveAForget(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	const writers, forgets = 4, 15
	type written struct {
		id           string
		start, acked time.Time
	}
	var (
		mu                  sync.Mutex
		ok                  []written
		refused             int
		wg                  sync.WaitGroup
		err                 error
		lastStart, lastDone time.Time // of the last forget
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
				it.CreatedAt = time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
				it.UpdatedAt = it.CreatedAt
				start := time.Now()
				_, perr := s.Put(ctx, it)
				acked := time.Now()
				mu.Lock()
				switch {
				case perr == nil:
					ok = append(ok, written{it.MemoryID, start, acked})
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
			start := time.Now()
			_, ferr := s.Forget(ctx, "user:race", "", "test")
			done := time.Now()
			mu.Lock()
			lastStart, lastDone = start, done
			if ferr != nil {
				err = ferr
			}
			mu.Unlock()
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
	if n := countRows(t, pool, s.t.memories, "scope = 'user:race' AND recorded_at <= $1", final); n != 0 {
		t.Fatalf("%d memories covered by the tombstone survived", n)
	}
	stored := map[string]bool{}
	for _, id := range ids(exportAll(t, s, ExportFilter{IncludeArchived: true})) {
		stored[id] = true
	}
	kept := 0
	for _, w := range ok {
		switch {
		case w.start.After(lastDone) && !stored[w.id]:
			t.Errorf("%s, written after the last forget, is lost", w.id)
		case w.acked.Before(lastStart) && stored[w.id]:
			t.Errorf("%s, written before the last forget, survived it", w.id)
		}
		if stored[w.id] {
			kept++
		}
	}
	if refused > 0 {
		t.Errorf("%d writes refused as forgotten: a write after a forget is new consent", refused)
	}
	if kept == 0 || len(ok) == kept {
		t.Fatalf("%d writes, %d kept: the writes did not interleave with the forgets", len(ok), kept)
	}
	t.Logf("%d writes succeeded, %d refused as forgotten, %d kept after %d forgets", len(ok), refused, kept, forgets)
}

// TestGuaranteeACopyReadBeforeAForgetIsRefused: a write that copies content read at
// some time (its RecordedAt: the promotion of a session's turns, an update of a
// memory read before) is refused when its scope was forgotten at or after that time,
// by Put and by a batch alike, and stored when the forget came before the read. A
// plain write after the forget is still new consent.
func TestGuaranteeACopyReadBeforeAForgetIsRefused(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	readAt, err := s.ServerTime(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Forget(ctx, "user:c", "", "test"); err != nil {
		t.Fatal(err)
	}
	stale := item("stale", "user:c", memory.Episodic, "", `{"turn":"read before the forget"}`, 1, 0)
	stale.RecordedAt = readAt
	if _, err := s.Put(ctx, stale); !errors.Is(err, ErrForgotten) || !strings.Contains(err.Error(), "after what this write copies was read") {
		t.Fatalf("Put of a copy read before the forget = %v, want ErrForgotten", err)
	}
	other := item("other", "user:c", memory.Episodic, "", `{"turn":"another"}`, 1, 0)
	other.RecordedAt = readAt
	b, err := s.BeginBatch(ctx, nil, []memory.Item{item("plain", "user:c", memory.Episodic, "", `{"turn":"plain"}`, 1, 0), other})
	if !errors.Is(err, ErrForgotten) {
		if b != nil {
			b.Rollback()
		}
		t.Fatalf("BeginBatch with a copy read before the forget = %v, want ErrForgotten", err)
	}
	if n, _ := s.Count(ctx); n != 0 {
		t.Fatalf("%d memories stored, want none", n)
	}
	// Read after the forget: stored.
	if stale.RecordedAt, err = s.ServerTime(ctx); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, stale, Inserted)
	mustPut(t, s, item("back", "user:c", memory.Episodic, "", `{"turn":"plain write"}`, 1, 0), Inserted)
	if got := exportAll(t, s, ExportFilter{}); len(got) != 2 {
		t.Fatalf("stored %d memories, want 2", len(got))
	}
}
