package pgstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/memory"
)

// archiveHalfLives decays three types and leaves procedural memory without a
// half-life, which therefore does not decay.
var archiveHalfLives = memory.HalfLives{memory.Working: 6 * time.Hour, memory.Episodic: 30 * day, memory.Semantic: 180 * day}

// generated returns n memories of every type over many ages (from a day in the future
// to three years old) and base scores, some keyed, some expiring around now, some
// already archived, spread over a few scopes, one of which (user:gone) is tombstoned
// by the caller. Deterministic for a seed.
func generated(n int, seed uint64) []memory.Item {
	rng := mrand.New(mrand.NewPCG(seed, 7))
	types := memory.AllTypes()
	scopes := []string{"user:a", "user:b", "session:s1", "agent:planner", "user:gone"}
	items := make([]memory.Item, 0, n)
	for i := range n {
		typ := types[i%len(types)]
		age := time.Duration(rng.Int64N(int64(3*365*day))) - day
		key := ""
		if i%5 == 0 {
			key = fmt.Sprintf("k%d", i)
		}
		it := item(fmt.Sprintf("g%05d", i), scopes[rng.IntN(len(scopes))], typ, key,
			fmt.Sprintf(`{"n":%d}`, i), rng.Float64(), age)
		it.CreatedAt = it.UpdatedAt.Add(-time.Duration(rng.Int64N(int64(30 * day))))
		switch i % 23 {
		case 3:
			it.ExpiresAt = ptr(now.Add(-time.Minute)) // expired: purged, never archived
		case 4:
			it.ExpiresAt = ptr(now.Add(time.Hour)) // expires later: live now
		case 5:
			it.ArchivedAt = ptr(now.Add(-40 * day)) // archived before: untouched
		}
		items = append(items, it)
	}
	return items
}

// coveredBy reports whether a tombstone of the map (scope -> forgotten_at) covers it.
func coveredBy(tombstoned map[string]time.Time, it memory.Item) bool {
	at, ok := tombstoned[it.Scope]
	return ok && !it.CreatedAt.After(at)
}

// rawTombstone writes a tombstone row directly, without forgetting what it covers.
func rawTombstone(t *testing.T, s *Store, pool *pgxpool.Pool, scope string, at time.Time) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), `INSERT INTO `+s.t.tombstones+` VALUES ($1, $2, '')`, scope, at); err != nil {
		t.Fatal(err)
	}
}

// wantArchived is the Go side of the rule: the IDs of memories live at at (not
// archived, not expired, not covered by a tombstone) whose memory.HalfLives.Score is below
// threshold, and how many live memories there are.
func wantArchived(items []memory.Item, at time.Time, threshold float64, hl memory.HalfLives, tombstoned map[string]time.Time) (ids []string, live int64) {
	for _, it := range items {
		if it.ArchivedAt != nil || (it.ExpiresAt != nil && !it.ExpiresAt.After(at)) || coveredBy(tombstoned, it) {
			continue
		}
		live++
		if hl.Score(it, at) < threshold {
			ids = append(ids, it.MemoryID)
		}
	}
	sort.Strings(ids)
	return ids, live
}

// archivedIDs are the IDs of the store's memories archived exactly at at.
func archivedIDs(t *testing.T, s *Store, at time.Time) []string {
	t.Helper()
	var out []string
	for _, it := range exportAll(t, s, ExportFilter{IncludeArchived: true}) {
		if it.ArchivedAt != nil && it.ArchivedAt.Equal(at) {
			out = append(out, it.MemoryID)
		}
	}
	sort.Strings(out)
	return out
}

// archiveTables counts the rows of every table archival writes.
func archiveTables(t *testing.T, s *Store, pool *pgxpool.Pool) map[string]int64 {
	t.Helper()
	return map[string]int64{
		"archived":        countRows(t, pool, s.t.memories, "archived_at IS NOT NULL"),
		"memories":        countRows(t, pool, s.t.memories, ""),
		"index_deletions": countRows(t, pool, s.t.indexDeletions, ""),
		"archive_runs":    countRows(t, pool, s.t.archiveRuns, ""),
		"audit_log":       countRows(t, pool, s.t.auditLog, ""),
	}
}

func TestMarkArchivedMatchesGoScore(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	items := generated(3000, 1)
	importSlice(t, s, items)
	// A tombstone written without deleting what it covers (which only direct SQL can
	// do): archival never touches a covered memory, and treats the scope's later
	// memories like any other.
	rawTombstone(t, s, pool, "user:gone", now.Add(-day))
	tombstoned := map[string]time.Time{"user:gone": now.Add(-day)}

	// Another store holding the same memories is never touched.
	other := New(pool, s.Schema()+"_other")
	dropSchemaOnCleanup(t, pool, other.Schema())
	if _, err := Migrate(ctx, pool, other.Schema()); err != nil {
		t.Fatal(err)
	}
	importSlice(t, other, items)
	otherBefore := exportAll(t, other, ExportFilter{IncludeArchived: true})

	const threshold = 0.3
	want, live := wantArchived(items, now, threshold, archiveHalfLives, tombstoned)
	if len(want) < 300 || int64(len(want)) > live-300 {
		t.Fatalf("fixture: %d of %d live memories below the threshold; want a real mix", len(want), live)
	}
	wantByType := map[memory.Type]int64{}
	byID := map[string]memory.Item{}
	for _, it := range items {
		byID[it.MemoryID] = it
	}
	for _, id := range want {
		wantByType[byID[id].MemoryType]++
	}

	// A dry run counts exactly that and writes nothing.
	before := archiveTables(t, s, pool)
	dry, err := s.MarkArchived(ctx, now, threshold, archiveHalfLives, true)
	if err != nil {
		t.Fatal(err)
	}
	if dry.Archived != int64(len(want)) || dry.Scanned != live || !maps.Equal(dry.ByType, wantByType) {
		t.Fatalf("dry run = %+v, want %d archived (%v) of %d scanned", dry, len(want), wantByType, live)
	}
	if after := archiveTables(t, s, pool); !maps.Equal(after, before) {
		t.Fatalf("dry run wrote: %v -> %v", before, after)
	}

	res, err := s.MarkArchived(ctx, now, threshold, archiveHalfLives, false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Archived != int64(len(want)) || res.Scanned != live || !maps.Equal(res.ByType, wantByType) || !res.ArchivedAt.Equal(now) {
		t.Fatalf("MarkArchived = %+v, want %d archived (%v) of %d scanned at %v", res, len(want), wantByType, live, now)
	}
	if got := archivedIDs(t, s, now); !slices.Equal(got, want) {
		t.Fatalf("archived %d memories, want exactly the %d below the threshold; extra/missing: %v",
			len(got), len(want), symmetricDiff(got, want))
	}
	// Each one owes its vector deletion (through the run, no per-row record), and the
	// run is recorded without a cold copy.
	if n, err := s.PendingIndexDeletions(ctx); err != nil || n != int64(len(want)) {
		t.Fatalf("pending vector deletions = %d, %v; want the %d archived", n, err, len(want))
	}
	var recorded []string
	if _, err := s.ProcessIndexDeletions(ctx, DeletionOptions{BatchSize: 100}, func(_ context.Context, ids []string) error {
		recorded = append(recorded, ids...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(recorded, want) {
		t.Fatalf("vector deletions for %d IDs, want the %d archived; extra/missing %v", len(recorded), len(want), symmetricDiff(recorded, want))
	}
	runs, err := s.ArchiveRuns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || !runs[0].ArchivedAt.Equal(now) || runs[0].Marked != res.Archived || runs[0].StillArchived != res.Archived ||
		runs[0].VectorsDeletedAt == nil || runs[0].ColdPackage != "" || runs[0].ColdWrittenAt != nil {
		t.Fatalf("archive runs = %+v", runs)
	}
	if n := countRows(t, pool, s.t.auditLog, `action = 'archive' AND (detail->>'archived')::bigint = $1`, res.Archived); n != 1 {
		t.Fatalf("audit records of the run = %d, want 1", n)
	}
	// Tombstoned scopes and memories archived before are untouched.
	for _, it := range exportAll(t, s, ExportFilter{IncludeArchived: true}) {
		orig := byID[it.MemoryID]
		switch {
		case coveredBy(tombstoned, orig) && it.ArchivedAt != nil && (orig.ArchivedAt == nil || !it.ArchivedAt.Equal(*orig.ArchivedAt)):
			t.Fatalf("%s, covered by the tombstone of %s, was archived", it.MemoryID, it.Scope)
		case orig.ArchivedAt != nil && (it.ArchivedAt == nil || !it.ArchivedAt.Equal(*orig.ArchivedAt)):
			t.Fatalf("%s was archived at %v, now %v", it.MemoryID, *orig.ArchivedAt, it.ArchivedAt)
		}
	}
	// Recall no longer returns them.
	for _, scope := range []string{"user:a", "user:b", "session:s1", "agent:planner"} {
		rec, err := s.Recall(ctx, RecallQuery{Scope: scope, Now: now, HalfLives: archiveHalfLives, Limit: 10000})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rec {
			if r.ArchivedAt != nil || r.Score < threshold {
				t.Fatalf("recall of %s returned %s (archived %v, score %v)", scope, r.MemoryID, r.ArchivedAt, r.Score)
			}
		}
	}
	if got := exportAll(t, other, ExportFilter{IncludeArchived: true}); len(got) != len(otherBefore) {
		t.Fatalf("the other store changed: %d memories, was %d", len(got), len(otherBefore))
	} else {
		assertItemsEqual(t, got, otherBefore)
	}

	// Idempotent: the same run again archives nothing and changes nothing.
	before = archiveTables(t, s, pool)
	again, err := s.MarkArchived(ctx, now, threshold, archiveHalfLives, false)
	if err != nil {
		t.Fatal(err)
	}
	if again.Archived != 0 || again.Scanned != live-res.Archived {
		t.Fatalf("second run = %+v, want nothing archived of %d", again, live-res.Archived)
	}
	if after := archiveTables(t, s, pool); !maps.Equal(after, before) {
		t.Fatalf("second run wrote: %v -> %v", before, after)
	}

	// A month later more memories have decayed: again exactly those, as Go scores them.
	later := now.Add(30 * day)
	current := exportAll(t, s, ExportFilter{IncludeArchived: true})
	want2, live2 := wantArchived(current, later, threshold, archiveHalfLives, tombstoned)
	res2, err := s.MarkArchived(ctx, later, threshold, archiveHalfLives, false)
	if err != nil {
		t.Fatal(err)
	}
	if res2.Archived == 0 || res2.Archived != int64(len(want2)) || res2.Scanned != live2 {
		t.Fatalf("a month later = %+v, want %d of %d", res2, len(want2), live2)
	}
	if got := archivedIDs(t, s, later); !slices.Equal(got, want2) {
		t.Fatalf("a month later: extra/missing %v", symmetricDiff(got, want2))
	}
	if runs, _ := s.ArchiveRuns(ctx); len(runs) != 2 {
		t.Fatalf("archive runs = %+v, want 2", runs)
	}
}

func sorted(ss []string) []string {
	out := slices.Clone(ss)
	sort.Strings(out)
	return out
}

func symmetricDiff(a, b []string) []string {
	in := map[string]int{}
	for _, x := range a {
		in[x]++
	}
	for _, x := range b {
		in[x]--
	}
	var out []string
	for x, n := range in {
		if n != 0 {
			out = append(out, x)
		}
	}
	sort.Strings(out)
	return out
}

// TestMarkArchivedBoundaries pins the edges the Go rule defines: strictly below, one
// half-life exactly, no decay without a half-life, future updated_at, expiry at now.
func TestMarkArchivedBoundaries(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	const threshold = 0.25
	hl := archiveHalfLives
	cases := []struct {
		it      memory.Item
		archive bool
	}{
		{item("one-half-life", "user:a", memory.Working, "", `{"a":1}`, 0.5, 6*time.Hour), false}, // exactly 0.25: not below
		{item("one-half-life-1us", "user:a", memory.Working, "", `{"a":2}`, 0.5, 6*time.Hour+time.Microsecond), true},
		{item("one-half-life-minus", "user:a", memory.Working, "", `{"a":3}`, 0.5, 6*time.Hour-time.Microsecond), false},
		{item("age-0", "user:a", memory.Episodic, "", `{"a":4}`, 0.25, 0), false},
		{item("age-0-below", "user:a", memory.Episodic, "", `{"a":5}`, 0.2499999, 0), true},
		{item("future", "user:a", memory.Semantic, "", `{"a":6}`, 0.3, -day), false}, // negative age: no decay
		{item("no-half-life", "user:a", memory.Procedural, "", `{"a":7}`, 0.3, 3000*day), false},
		{item("no-half-life-low", "user:a", memory.Procedural, "", `{"a":8}`, 0.1, 0), true},
		{item("ancient", "user:a", memory.Working, "", `{"a":9}`, 1, 3000*day), true}, // underflows to 0, no SQL error
		{item("zero-base", "user:a", memory.Semantic, "", `{"a":10}`, 0, 0), true},
		{item("expires-now", "user:a", memory.Working, "", `{"a":11}`, 0, 0), false}, // expired: purged, not archived
		{item("expires-after", "user:a", memory.Working, "", `{"a":12}`, 0, 0), true},
	}
	cases[10].it.ExpiresAt = ptr(now)
	cases[11].it.ExpiresAt = ptr(now.Add(time.Microsecond))
	var items []memory.Item
	var want []string
	for _, c := range cases {
		items = append(items, c.it)
		// The Go rule says the same (ignoring expiry, which is not a score matter).
		if c.it.ExpiresAt == nil && (hl.Score(c.it, now) < threshold) != c.archive {
			t.Fatalf("%s: Go scores %v, which disagrees with the case", c.it.MemoryID, hl.Score(c.it, now))
		}
		if c.archive {
			want = append(want, c.it.MemoryID)
		}
	}
	importSlice(t, s, items)
	sort.Strings(want)
	res, err := s.MarkArchived(ctx, now, threshold, hl, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := archivedIDs(t, s, now); !slices.Equal(got, want) || res.Archived != int64(len(want)) || res.Scanned != int64(len(items)-1) {
		t.Fatalf("archived %v (%+v), want %v of %d", got, res, want, len(items)-1)
	}
	// Threshold 0 archives nothing: no score is below 0.
	s2, _ := newStore(t)
	importSlice(t, s2, items)
	if res, err := s2.MarkArchived(ctx, now, 0, hl, false); err != nil || res.Archived != 0 {
		t.Fatalf("threshold 0: %+v, %v", res, err)
	}
}

func TestProcessIndexDeletions(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	var items []memory.Item
	for i := range 25 {
		items = append(items, item(fmt.Sprintf("m%02d", i), "user:a", memory.Episodic, "", fmt.Sprintf(`{"i":%d}`, i), 0.1, 100*day))
	}
	items = append(items, item("keep", "user:a", memory.Semantic, "", `{"keep":1}`, 1, 0))
	items = append(items, item("slot", "user:a", memory.Episodic, "home", `{"city":"Porto"}`, 0.1, 100*day))
	importSlice(t, s, items)
	beforeMark, err := s.ServerTime(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.MarkArchived(ctx, now, 0.5, archiveHalfLives, false); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PendingIndexDeletions(ctx); err != nil || n != 26 {
		t.Fatalf("pending = %d, %v; want 26", n, err)
	}

	// Revived while pending: "slot" by a Put superseding it, m00 by Unarchive. Neither
	// vector may be deleted.
	revived := item("slot-new", "user:a", memory.Episodic, "home", `{"city":"Lisbon"}`, 0.9, 0)
	mustPut(t, s, revived, Superseded)
	if got, err := s.Unarchive(ctx, "user:a", now, "m00"); err != nil || len(got) != 1 {
		t.Fatalf("Unarchive = %v, %v", ids(got), err)
	}
	if n, _ := s.PendingIndexDeletions(ctx); n != 24 {
		t.Fatalf("pending after revivals = %d, want 24", n)
	}
	if n := countRows(t, pool, s.t.indexDeletions, ""); n != 0 {
		t.Fatalf("marking wrote %d per-row records", n)
	}

	// A failing index: batches before the failure are done, the rest stays recorded.
	var calls [][]string
	failOn := 2
	del := func(_ context.Context, ids []string) error {
		calls = append(calls, slices.Clone(ids))
		if len(calls) == failOn {
			return errors.New("index unreachable")
		}
		return nil
	}
	res, err := s.ProcessIndexDeletions(ctx, DeletionOptions{BatchSize: 10, RecordedBefore: beforeMark}, del)
	if err == nil || !strings.Contains(err.Error(), "index unreachable") {
		t.Fatalf("with a failing index: %v", err)
	}
	if res.Deleted != 10 || res.Recovered != 0 {
		t.Fatalf("before the failure: %+v, want 10 deleted, none recovered (recorded after %v)", res, beforeMark)
	}
	if n, _ := s.PendingIndexDeletions(ctx); n != 14 {
		t.Fatalf("pending after the failure = %d, want 14", n)
	}

	// The next pass finishes; what an earlier pass left counts as recovered.
	afterMark, err := s.ServerTime(ctx)
	if err != nil {
		t.Fatal(err)
	}
	calls, failOn = nil, -1
	res, err = s.ProcessIndexDeletions(ctx, DeletionOptions{BatchSize: 10, RecordedBefore: afterMark}, del)
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, c := range calls {
		if len(c) > 10 {
			t.Fatalf("a batch of %d IDs, more than 10", len(c))
		}
		all = append(all, c...)
	}
	if res.Deleted != 14 || res.Recovered != 14 || len(all) != 14 {
		t.Fatalf("second pass = %+v (%d IDs), want 14 deleted and recovered", res, len(all))
	}
	if slices.Contains(all, "m00") || slices.Contains(all, "keep") || slices.Contains(all, "slot") {
		t.Fatalf("deleted vectors of live memories: %v", all)
	}
	if n, _ := s.PendingIndexDeletions(ctx); n != 0 {
		t.Fatalf("pending after the second pass: %d", n)
	}
	if runs, _ := s.ArchiveRuns(ctx); len(runs) != 1 || runs[0].VectorsDeletedAt == nil {
		t.Fatalf("the run is not marked done: %+v", runs)
	}
	// A purged memory's deletion is recorded per row and dropped, not deleted, when a
	// memory of that ID exists again (a restore brought it back).
	exp := item("exp", "user:a", memory.Working, "", `{"exp":1}`, 1, time.Hour)
	exp.ExpiresAt = ptr(now.Add(-time.Minute))
	importSlice(t, s, []memory.Item{exp, item("exp2", "user:a", memory.Working, "", `{"exp":2}`, 1, time.Hour)})
	if _, err := pool.Exec(ctx, `UPDATE `+s.t.memories+` SET expires_at = $1 WHERE memory_id = 'exp2'`, now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PurgeExpired(ctx, now, "t", false); err != nil || n != 2 {
		t.Fatalf("purge = %d, %v", n, err)
	}
	exp.ExpiresAt = nil
	importSlice(t, s, []memory.Item{exp})
	calls = nil
	if res, err := s.ProcessIndexDeletions(ctx, DeletionOptions{}, del); err != nil || res.Deleted != 1 || len(calls) != 1 || !slices.Equal(calls[0], []string{"exp2"}) {
		t.Fatalf("purged deletions = %+v, %v, calls %v; want only exp2", res, err, calls)
	}
	if n := countRows(t, pool, s.t.indexDeletions, ""); n != 0 {
		t.Fatalf("index_deletions left: %d", n)
	}
	// Nothing pending: no call at all.
	calls = nil
	if res, err := s.ProcessIndexDeletions(ctx, DeletionOptions{}, del); err != nil || res != (DeletionResult{}) || len(calls) != 0 {
		t.Fatalf("empty pass = %+v, %v, %d calls", res, err, len(calls))
	}
}

// TestProcessIndexDeletionsHoldsRevival checks the lock: a memory revived while its
// batch is at the index waits, so its new vector cannot be deleted by that batch.
func TestProcessIndexDeletionsHoldsRevival(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	importSlice(t, s, []memory.Item{item("a", "user:a", memory.Episodic, "", `{"a":1}`, 0.1, 100*day)})
	if _, err := s.MarkArchived(ctx, now, 0.5, archiveHalfLives, false); err != nil {
		t.Fatal(err)
	}
	revived := make(chan error, 1)
	_, err := s.ProcessIndexDeletions(ctx, DeletionOptions{}, func(context.Context, []string) error {
		go func() {
			_, err := s.Unarchive(context.Background(), "user:a", now, "a")
			revived <- err
		}()
		select {
		case err := <-revived:
			return fmt.Errorf("Unarchive finished while the index delete was under way (err %v)", err)
		case <-time.After(300 * time.Millisecond):
			return nil
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-revived; err != nil {
		t.Fatal(err)
	}
	if it, err := s.Get(ctx, "a"); err != nil || it.ArchivedAt != nil {
		t.Fatalf("after the revival: %+v, %v", it, err)
	}
}

func TestPurgeExpired(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	items := []memory.Item{
		item("expired", "user:a", memory.Working, "", `{"a":1}`, 1, time.Hour),
		item("expires-now", "user:a", memory.Working, "", `{"a":2}`, 1, time.Hour),
		item("expires-later", "user:a", memory.Working, "", `{"a":3}`, 1, time.Hour),
		item("no-expiry", "user:a", memory.Semantic, "", `{"a":4}`, 1, time.Hour),
		item("expired-archived", "user:a", memory.Working, "", `{"a":5}`, 1, time.Hour),
		item("expired-forgotten", "user:gone", memory.Working, "", `{"a":6}`, 1, time.Hour),
	}
	items[0].ExpiresAt = ptr(now.Add(-time.Minute))
	items[1].ExpiresAt = ptr(now)
	items[2].ExpiresAt = ptr(now.Add(time.Microsecond))
	items[4].ExpiresAt = ptr(now.Add(-time.Minute))
	items[4].ArchivedAt = ptr(now.Add(-day))
	items[5].ExpiresAt = ptr(now.Add(-time.Minute))
	importSlice(t, s, items)
	rawTombstone(t, s, pool, "user:gone", now)
	before := archiveTables(t, s, pool)
	if n, err := s.PurgeExpired(ctx, now, "run-1", true); err != nil || n != 3 {
		t.Fatalf("dry run = %d, %v; want 3", n, err)
	}
	if after := archiveTables(t, s, pool); !maps.Equal(after, before) {
		t.Fatalf("dry run wrote: %v -> %v", before, after)
	}
	if n, err := s.PurgeExpired(ctx, now, "run-1", false); err != nil || n != 3 {
		t.Fatalf("PurgeExpired = %d, %v; want 3", n, err)
	}
	left := sorted(ids(exportAll(t, s, ExportFilter{IncludeArchived: true})))
	if want := []string{"expired-forgotten", "expires-later", "no-expiry"}; !slices.Equal(left, want) {
		t.Fatalf("left %v, want %v", left, want)
	}
	if n, _ := s.PendingIndexDeletions(ctx); n != 3 {
		t.Fatalf("pending vector deletions = %d, want the 3 purged", n)
	}
	if n := countRows(t, pool, s.t.auditLog, `action = 'purge-expired' AND detail->>'actor' = 'run-1' AND (detail->>'deleted')::int = 3`); n != 1 {
		t.Fatalf("audit records = %d, want 1", n)
	}
	if n, err := s.PurgeExpired(ctx, now, "run-2", false); err != nil || n != 0 {
		t.Fatalf("second purge = %d, %v", n, err)
	}
	if n := countRows(t, pool, s.t.auditLog, `action = 'purge-expired'`); n != 1 {
		t.Fatalf("a purge of nothing wrote an audit record (%d)", n)
	}
}

func TestColdCopyAndDeleteArchived(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	var items []memory.Item
	for i := range 10 {
		items = append(items, item(fmt.Sprintf("m%d", i), "user:a", memory.Episodic, "", fmt.Sprintf(`{"i":%d}`, i), 0.1, 100*day))
	}
	items = append(items, item("live", "user:a", memory.Semantic, "", `{"live":1}`, 1, 0))
	items = append(items, item("forgotten", "user:gone", memory.Episodic, "", `{"f":1}`, 0.1, 100*day))
	importSlice(t, s, items)
	t1 := now
	if res, err := s.MarkArchived(ctx, t1, 0.5, archiveHalfLives, false); err != nil || res.Archived != 11 {
		t.Fatalf("mark = %+v, %v", res, err)
	}
	// Archived in a scope forgotten afterwards (a tombstone without the delete, as a
	// restore brings): its memory stays whatever happens.
	rawTombstone(t, s, pool, "user:gone", now)

	// No cold copy yet: nothing may be deleted, however old.
	if n, err := s.DeleteArchived(ctx, t1.Add(1000*day), "r", false); err != nil || n != 0 {
		t.Fatalf("delete without a cold copy = %d, %v", n, err)
	}
	runs, err := s.PrepareColdCopy(ctx, "archive/run-1/")
	if err != nil || len(runs) != 1 || !runs[0].Equal(t1) {
		t.Fatalf("PrepareColdCopy = %v, %v; want [%v]", runs, err, t1)
	}
	cold := exportAll(t, s, ExportFilter{ArchivedAt: runs})
	if got := ids(cold); len(got) != 11 || slices.Contains(got, "live") {
		t.Fatalf("cold copy export = %v", got)
	}
	if err := s.RecordColdCopy(ctx, "archive/run-1/", runs, int64(len(cold))); err != nil {
		t.Fatal(err)
	}
	// The cold copy alone is not enough: the vectors must be gone first.
	if n, err := s.DeleteArchived(ctx, t1.Add(1000*day), "r", true); err != nil || n != 0 {
		t.Fatalf("delete with vectors pending = %d, %v", n, err)
	}
	noop := func(context.Context, []string) error { return nil }
	if _, err := s.ProcessIndexDeletions(ctx, DeletionOptions{}, noop); err != nil {
		t.Fatal(err)
	}
	rs, _ := s.ArchiveRuns(ctx)
	if len(rs) != 1 || rs[0].ColdPackage != "archive/run-1/" || rs[0].ColdItems != 11 || rs[0].ColdWrittenAt == nil {
		t.Fatalf("runs = %+v", rs)
	}
	if runs, _ := s.PrepareColdCopy(ctx, "archive/run-2/"); len(runs) != 0 {
		t.Fatalf("a recorded run is still pending: %v", runs)
	}

	// m0 is revived: it never goes, even though its run has a cold copy.
	if got, err := s.Unarchive(ctx, "user:a", now, "m0", "live", "m1-of-another-scope"); err != nil || len(got) != 1 || got[0].MemoryID != "m0" || got[0].ArchivedAt != nil {
		t.Fatalf("Unarchive = %+v, %v", got, err)
	}
	if got, err := s.Unarchive(ctx, "user:b", now, "m1"); err != nil || len(got) != 0 {
		t.Fatalf("Unarchive from another scope = %v, %v", ids(got), err)
	}
	// "before" is strict: archived at t1 is not before t1.
	if n, err := s.DeleteArchived(ctx, t1, "r", false); err != nil || n != 0 {
		t.Fatalf("delete before t1 = %d, %v", n, err)
	}
	before := archiveTables(t, s, pool)
	if n, err := s.DeleteArchived(ctx, t1.Add(time.Microsecond), "r", true); err != nil || n != 9 {
		t.Fatalf("dry run = %d, %v; want 9", n, err)
	}
	if after := archiveTables(t, s, pool); !maps.Equal(after, before) {
		t.Fatalf("dry run wrote: %v -> %v", before, after)
	}
	if n, err := s.DeleteArchived(ctx, t1.Add(time.Microsecond), "run-9", false); err != nil || n != 9 {
		t.Fatalf("DeleteArchived = %d, %v; want 9", n, err)
	}
	if left := sorted(ids(exportAll(t, s, ExportFilter{IncludeArchived: true}))); !slices.Equal(left, []string{"forgotten", "live", "m0"}) {
		t.Fatalf("left %v", left)
	}
	if n := countRows(t, pool, s.t.auditLog, `action = 'delete-archived' AND detail->>'actor' = 'run-9' AND (detail->>'deleted')::int = 9`); n != 1 {
		t.Fatalf("audit records = %d", n)
	}

	// A run at the same clock that archives more clears its record, and replacing the
	// package at a recorded prefix un-records it first.
	importSlice(t, s, []memory.Item{item("late", "user:a", memory.Episodic, "", `{"late":1}`, 0.1, 100*day)})
	if res, err := s.MarkArchived(ctx, t1, 0.5, archiveHalfLives, false); err != nil || res.Archived != 2 { // late and m0 again
		t.Fatalf("re-run = %+v, %v", res, err)
	}
	rs, _ = s.ArchiveRuns(ctx)
	if len(rs) != 1 || rs[0].ColdWrittenAt != nil || rs[0].VectorsDeletedAt != nil || rs[0].Marked != 13 || rs[0].StillArchived != 3 {
		t.Fatalf("after a re-run at the same clock: %+v", rs)
	}
	if n, _ := s.PendingIndexDeletions(ctx); n != 3 {
		t.Fatalf("pending after a re-run at the same clock = %d, want all 3 again", n)
	}
	if err := s.RecordColdCopy(ctx, "archive/run-1/", []time.Time{t1}, 3); err != nil {
		t.Fatal(err)
	}
	if runs, err := s.PrepareColdCopy(ctx, "archive/run-1/"); err != nil || len(runs) != 1 {
		t.Fatalf("PrepareColdCopy at the recorded prefix = %v, %v; want the run back", runs, err)
	}
	if rs, _ := s.ArchiveRuns(ctx); rs[0].ColdPackage != "" {
		t.Fatalf("the record survived: %+v", rs)
	}
}

func TestUnarchive(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	importSlice(t, s, []memory.Item{
		item("a", "user:a", memory.Episodic, "", `{"a":1}`, 0.1, 100*day),
		item("b", "user:a", memory.Episodic, "", `{"b":1}`, 0.1, 100*day),
	})
	if _, err := s.MarkArchived(ctx, now, 0.05, archiveHalfLives, false); err != nil {
		t.Fatal(err)
	}
	if rec, _ := s.Recall(ctx, RecallQuery{Scope: "user:a", Now: now}); len(rec) != 0 {
		t.Fatalf("recall returns archived memories: %v", rec)
	}
	later := now.Add(time.Hour)
	got, err := s.Unarchive(ctx, "user:a", later, "b", "a", "missing")
	if err != nil || !slices.Equal(ids(got), []string{"a", "b"}) {
		t.Fatalf("Unarchive = %v, %v", ids(got), err)
	}
	for _, it := range got {
		if it.ArchivedAt != nil || it.Scope != "user:a" || len(it.Content) == 0 || !it.UpdatedAt.Equal(later) {
			t.Fatalf("returned %+v", it)
		}
	}
	// Their age restarted: the next run, with the same threshold, keeps them.
	if res, err := s.MarkArchived(ctx, later, 0.05, archiveHalfLives, false); err != nil || res.Archived != 0 {
		t.Fatalf("a run right after rehydration archived %d (%v)", res.Archived, err)
	}
	if n, err := s.PendingIndexDeletions(ctx); err != nil || n != 0 {
		t.Fatalf("pending deletions of rehydrated memories: %d, %v", n, err)
	}
	if rec, _ := s.Recall(ctx, RecallQuery{Scope: "user:a", Now: now}); len(rec) != 2 {
		t.Fatalf("recall after rehydration = %d memories, want 2", len(rec))
	}
	if got, err := s.Unarchive(ctx, "user:a", later, "a"); err != nil || len(got) != 0 {
		t.Fatalf("second Unarchive = %v, %v", ids(got), err)
	}
	if _, err := s.Unarchive(ctx, "no scope", later, "a"); err == nil {
		t.Fatal("Unarchive with an invalid scope succeeded")
	}
}
