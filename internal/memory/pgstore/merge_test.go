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

	"github.com/amemory/memory-operator/internal/memory"
)

// dumpMemories returns every stored column of every memory as text, in memory_id order.
func dumpMemories(t *testing.T, s *Store) []string {
	t.Helper()
	rows, err := s.pool.Query(t.Context(), `SELECT row(m.*)::text FROM `+s.t.memories+` m ORDER BY memory_id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustMerge(t *testing.T, s *Store, policy ConflictPolicy, items ...memory.Item) *MergeResult {
	t.Helper()
	res, err := s.Merge(t.Context(), items, MergeOptions{Policy: policy})
	if err != nil {
		t.Fatalf("Merge: %v", err)
	}
	return res
}

func assertOutcomes(t *testing.T, res *MergeResult, want ...MergeOutcome) {
	t.Helper()
	if !slices.Equal(res.Outcomes, want) {
		t.Fatalf("outcomes = %v, want %v (errs %v)", res.Outcomes, want, res.Errs)
	}
}

func rev(content string, updated, superseded time.Time) memory.Revision {
	return revScore(content, 0.5, updated, superseded)
}

func revScore(content string, score float64, updated, superseded time.Time) memory.Revision {
	return memory.Revision{Content: json.RawMessage(content), Source: "test@1", BaseScore: score,
		UpdatedAt: updated, SupersededAt: superseded}
}

func assertHistory(t *testing.T, got []memory.Revision, want ...memory.Revision) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("history = %+v, want %+v", got, want)
	}
	for i := range got {
		g, w := got[i], want[i]
		if !sameJSON(t, g.Content, w.Content) || g.Source != w.Source || g.BaseScore != w.BaseScore ||
			!g.UpdatedAt.Equal(w.UpdatedAt) || !g.SupersededAt.Equal(w.SupersededAt) {
			t.Fatalf("history[%d] = %+v (content %s), want %+v (content %s)", i, g, g.Content, w, w.Content)
		}
	}
}

func mustGet(t *testing.T, s *Store, id string) memory.Item {
	t.Helper()
	it, err := s.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return it
}

func TestMergeInsertsAndIsIdempotent(t *testing.T) {
	s, _ := newStore(t)
	keyed := item("k1", "user:1", memory.Semantic, "preference.coffee", `{"drink":"flat white"}`, 0.9, day)
	// History out of order and with a duplicate: stored as a set, oldest first.
	keyed.History = []memory.Revision{
		rev(`{"drink":"latte"}`, now.Add(-3*day), now.Add(-2*day)),
		rev(`{"drink":"espresso"}`, now.Add(-5*day), now.Add(-3*day)),
		rev(`{"drink":"latte"}`, now.Add(-3*day), now.Add(-2*day)),
	}
	keyless := item("e1", "user:1", memory.Episodic, "", `{"event":"flew to Lisbon","n":1.50}`, 0.5, 2*day)
	archived := item("a1", "user:2", memory.Semantic, "", `{"x":1}`, 0.1, 3*day)
	archived.ArchivedAt = ptr(now.Add(-day))
	res := mustMerge(t, s, KeepNewer, keyed, keyless, archived)
	assertOutcomes(t, res, MergeInserted, MergeInserted, MergeInserted)
	if !slices.Equal(res.IDs, []string{"k1", "e1", "a1"}) {
		t.Fatalf("ids = %v", res.IDs)
	}
	got := mustGet(t, s, "k1")
	assertHistory(t, got.History,
		rev(`{"drink":"espresso"}`, now.Add(-5*day), now.Add(-3*day)),
		rev(`{"drink":"latte"}`, now.Add(-3*day), now.Add(-2*day)))
	if a := mustGet(t, s, "a1"); a.ArchivedAt == nil || !a.ArchivedAt.Equal(now.Add(-day)) {
		t.Fatalf("archived_at = %v", a.ArchivedAt)
	}

	before := dumpMemories(t, s)
	for _, p := range []ConflictPolicy{KeepNewer, Overwrite, SkipExisting} {
		res = mustMerge(t, s, p, keyed, keyless, archived)
		assertOutcomes(t, res, MergeUnchanged, MergeUnchanged, MergeUnchanged)
		if after := dumpMemories(t, s); !slices.Equal(before, after) {
			t.Fatalf("%s: second merge changed the table:\n%v\n%v", p, before, after)
		}
	}
}

func TestMergeKeepNewer(t *testing.T) {
	s, _ := newStore(t)
	stored := item("a", "user:1", memory.Semantic, "address", `{"city":"Berlin"}`, 0.8, 2*day)
	mustPut(t, s, stored, Inserted)

	// A newer value for the slot under another ID: it wins, the slot keeps its ID,
	// and the old value goes to history.
	newer := item("b", "user:1", memory.Semantic, "address", `{"city":"Lisbon"}`, 0.9, day)
	newer.CreatedAt = now.Add(-10 * day)
	res := mustMerge(t, s, KeepNewer, newer)
	assertOutcomes(t, res, MergeReplaced)
	if res.IDs[0] != "a" {
		t.Fatalf("merged into %q, want a", res.IDs[0])
	}
	got := mustGet(t, s, "a")
	if !sameJSON(t, got.Content, []byte(`{"city":"Lisbon"}`)) || got.BaseScore != 0.9 || !got.UpdatedAt.Equal(now.Add(-day)) ||
		!got.CreatedAt.Equal(now.Add(-10*day)) {
		t.Fatalf("after newer: %+v", got)
	}
	assertHistory(t, got.History, revScore(`{"city":"Berlin"}`, 0.8, now.Add(-2*day), now.Add(-day)))

	// An older value: the stored one stays, the older one is recorded in history
	// (superseded when the stored value was written), in time order.
	older := item("c", "user:1", memory.Semantic, "address", `{"city":"Paris"}`, 0.7, 3*day)
	res = mustMerge(t, s, KeepNewer, older)
	assertOutcomes(t, res, MergeKept)
	got = mustGet(t, s, "a")
	if !sameJSON(t, got.Content, []byte(`{"city":"Lisbon"}`)) {
		t.Fatalf("content = %s", got.Content)
	}
	assertHistory(t, got.History,
		revScore(`{"city":"Paris"}`, 0.7, now.Add(-3*day), now.Add(-day)),
		revScore(`{"city":"Berlin"}`, 0.8, now.Add(-2*day), now.Add(-day)))

	// Again: nothing changes, nothing is recorded twice.
	before := dumpMemories(t, s)
	res = mustMerge(t, s, KeepNewer, newer, older)
	assertOutcomes(t, res, MergeUnchanged, MergeSkipped)
	if after := dumpMemories(t, s); !slices.Equal(before, after) {
		t.Fatalf("rerun changed the table:\n%v\n%v", before, after)
	}

	// A Put after a merge still appends to the merged history.
	put := item("d", "user:1", memory.Semantic, "address", `{"city":"Rome"}`, 0.9, 0)
	mustPut(t, s, put, Superseded)
	got = mustGet(t, s, "a")
	if len(got.History) != 3 || !sameJSON(t, got.History[2].Content, []byte(`{"city":"Lisbon"}`)) {
		t.Fatalf("history after put = %+v", got.History)
	}
}

func TestMergeKeepNewerTieIsOrderIndependent(t *testing.T) {
	x := item("x", "user:1", memory.Semantic, "k", `{"v":"x"}`, 0.5, day)
	y := item("y", "user:1", memory.Semantic, "k", `{"v":"y"}`, 0.5, day)
	var dumps [][]string
	for _, order := range [][]memory.Item{{x, y}, {y, x}} {
		s, _ := newStore(t)
		mustMerge(t, s, KeepNewer, order[0])
		mustMerge(t, s, KeepNewer, order[1])
		it := mustGet(t, s, order[0].MemoryID)
		it.MemoryID = ""
		b, _ := json.Marshal(canonItem(t, it))
		dumps = append(dumps, []string{string(b)})
	}
	if !slices.Equal(dumps[0], dumps[1]) {
		t.Fatalf("outcome depends on order:\n%v\n%v", dumps[0], dumps[1])
	}
}

func TestMergeOverwrite(t *testing.T) {
	s, _ := newStore(t)
	stored := item("a", "user:1", memory.Semantic, "address", `{"city":"Berlin"}`, 0.8, day)
	mustPut(t, s, stored, Inserted)

	older := item("b", "user:1", memory.Procedural, "address", `{"city":"Paris"}`, 0.3, 3*day)
	older.Source = "legacy@1"
	older.ExpiresAt = ptr(now.Add(day))
	older.History = []memory.Revision{rev(`{"city":"Oslo"}`, now.Add(-4*day), now.Add(-3*day))}
	res := mustMerge(t, s, Overwrite, older)
	assertOutcomes(t, res, MergeReplaced)
	got := mustGet(t, s, "a")
	if !sameJSON(t, got.Content, []byte(`{"city":"Paris"}`)) || got.MemoryType != memory.Procedural || got.Source != "legacy@1" ||
		got.BaseScore != 0.3 || !got.UpdatedAt.Equal(now.Add(-3*day)) || !got.CreatedAt.Equal(now.Add(-3*day)) ||
		got.ExpiresAt == nil || !got.ExpiresAt.Equal(now.Add(day)) {
		t.Fatalf("after overwrite: %+v", got)
	}
	assertHistory(t, got.History,
		rev(`{"city":"Oslo"}`, now.Add(-4*day), now.Add(-3*day)),
		revScore(`{"city":"Berlin"}`, 0.8, now.Add(-day), now.Add(-3*day)))

	before := dumpMemories(t, s)
	assertOutcomes(t, mustMerge(t, s, Overwrite, older), MergeUnchanged)
	if after := dumpMemories(t, s); !slices.Equal(before, after) {
		t.Fatalf("rerun changed the table:\n%v\n%v", before, after)
	}

	// Same content, other metadata: Overwrite takes the metadata, adds no history.
	meta := older
	meta.BaseScore = 0.99
	meta.ExpiresAt = nil
	assertOutcomes(t, mustMerge(t, s, Overwrite, meta), MergeReplaced)
	got = mustGet(t, s, "a")
	if got.BaseScore != 0.99 || got.ExpiresAt != nil || len(got.History) != 2 {
		t.Fatalf("after metadata overwrite: %+v", got)
	}
	// KeepNewer and Skip leave the same value alone.
	meta.BaseScore = 0.1
	assertOutcomes(t, mustMerge(t, s, KeepNewer, meta), MergeUnchanged)
	assertOutcomes(t, mustMerge(t, s, SkipExisting, meta), MergeUnchanged)
}

func TestMergeSkip(t *testing.T) {
	s, _ := newStore(t)
	mustPut(t, s, item("a", "user:1", memory.Semantic, "address", `{"city":"Berlin"}`, 0.8, 2*day), Inserted)
	before := dumpMemories(t, s)
	newer := item("b", "user:1", memory.Semantic, "address", `{"city":"Lisbon"}`, 0.9, day)
	fresh := item("c", "user:1", memory.Semantic, "other", `{"v":1}`, 0.9, day)
	res := mustMerge(t, s, SkipExisting, newer, fresh)
	assertOutcomes(t, res, MergeSkipped, MergeInserted)
	if res.IDs[0] != "a" {
		t.Fatalf("ids = %v", res.IDs)
	}
	if got := mustGet(t, s, "a"); !sameJSON(t, got.Content, []byte(`{"city":"Berlin"}`)) || len(got.History) != 0 {
		t.Fatalf("skip changed the stored memory: %+v", got)
	}
	if n, _ := s.Count(t.Context()); n != int64(len(before))+1 {
		t.Fatalf("count = %d", n)
	}
}

func TestMergeKeylessConflicts(t *testing.T) {
	s, _ := newStore(t)
	mustPut(t, s, item("x", "user:1", memory.Episodic, "", `{"event":"a"}`, 0.5, 2*day), Inserted)

	// The same content under another ID: it is the same memory.
	res := mustMerge(t, s, KeepNewer, item("y", "user:1", memory.Episodic, "", `{ "event" : "a" }`, 0.9, day))
	assertOutcomes(t, res, MergeUnchanged)
	if res.IDs[0] != "x" {
		t.Fatalf("ids = %v", res.IDs)
	}
	// The same ID with new content: a newer version of that memory.
	res = mustMerge(t, s, KeepNewer, item("x", "user:1", memory.Episodic, "", `{"event":"b"}`, 0.5, day))
	assertOutcomes(t, res, MergeReplaced)
	got := mustGet(t, s, "x")
	if !sameJSON(t, got.Content, []byte(`{"event":"b"}`)) {
		t.Fatalf("content = %s", got.Content)
	}
	assertHistory(t, got.History, rev(`{"event":"a"}`, now.Add(-2*day), now.Add(-day)))
	if n, _ := s.Count(t.Context()); n != 1 {
		t.Fatalf("count = %d", n)
	}
}

func TestMergeIDInUseAndTombstoned(t *testing.T) {
	s, pool := newStore(t)
	mustPut(t, s, item("x", "user:1", memory.Semantic, "k", `{"v":1}`, 0.5, day), Inserted)
	rawTombstone(t, s, pool, "user:gone", now)
	before := dumpMemories(t, s)
	res := mustMerge(t, s, Overwrite,
		item("x", "user:2", memory.Semantic, "k", `{"v":2}`, 0.5, 0),     // another scope
		item("x", "user:1", memory.Semantic, "other", `{"v":2}`, 0.5, 0), // another slot
		item("g", "user:gone", memory.Semantic, "", `{"v":3}`, 0.5, 0),   // created when it was forgotten
		item("h", "user:gone", memory.Semantic, "", `{"v":4}`, 0.5, day), // created before
	)
	assertOutcomes(t, res, MergeIDInOtherScope, MergeIDInUse, MergeTombstoned, MergeTombstoned)
	if !slices.Equal(res.IDs, []string{"", "", "", ""}) {
		t.Fatalf("ids = %v", res.IDs)
	}
	if after := dumpMemories(t, s); !slices.Equal(before, after) {
		t.Fatalf("table changed:\n%v\n%v", before, after)
	}
	// A memory created after the forget is new consent: merged like any other.
	back := item("i", "user:gone", memory.Semantic, "", `{"v":5}`, 0.5, -time.Minute)
	assertOutcomes(t, mustMerge(t, s, Overwrite, back), MergeInserted)
}

func TestMergeDuplicatesInOneBatch(t *testing.T) {
	for _, tc := range []struct {
		policy ConflictPolicy
		want   []MergeOutcome
		final  string
		hist   int
	}{
		{KeepNewer, []MergeOutcome{MergeInserted, MergeReplaced, MergeKept, MergeUnchanged, MergeIDInUse}, `{"v":2}`, 2},
		{Overwrite, []MergeOutcome{MergeInserted, MergeReplaced, MergeReplaced, MergeReplaced, MergeIDInUse}, `{"v":2}`, 3},
		{SkipExisting, []MergeOutcome{MergeInserted, MergeSkipped, MergeSkipped, MergeSkipped, MergeIDInUse}, `{"v":1}`, 0},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			s, _ := newStore(t)
			res := mustMerge(t, s, tc.policy,
				item("a", "user:1", memory.Semantic, "k", `{"v":1}`, 0.5, 2*day),
				item("b", "user:1", memory.Semantic, "k", `{"v":2}`, 0.5, day),   // same slot, newer
				item("c", "user:1", memory.Semantic, "k", `{"v":0}`, 0.5, 3*day), // same slot, older
				item("d", "user:1", memory.Semantic, "k", `{"v":2}`, 0.5, day),   // same value as b
				item("a", "user:1", memory.Semantic, "j", `{"v":9}`, 0.5, day),   // a's ID, another slot
			)
			assertOutcomes(t, res, tc.want...)
			got := mustGet(t, s, "a")
			if !sameJSON(t, got.Content, []byte(tc.final)) || len(got.History) != tc.hist {
				t.Fatalf("stored %s with history %+v", got.Content, got.History)
			}
			if n, _ := s.Count(t.Context()); n != 1 {
				t.Fatalf("count = %d", n)
			}
		})
	}
}

func TestMergeDryRunWritesNothing(t *testing.T) {
	s, _ := newStore(t)
	mustPut(t, s, item("a", "user:1", memory.Semantic, "k", `{"v":1}`, 0.5, 2*day), Inserted)
	before := dumpMemories(t, s)
	items := []memory.Item{
		item("b", "user:1", memory.Semantic, "k", `{"v":2}`, 0.5, day),
		item("c", "user:2", memory.Semantic, "", `{"v":2}`, 0.5, day),
		item("", "user:2", memory.Semantic, "", `{"v":3}`, 0.5, day),
	}
	var seen []MergeOutcome
	res, err := s.Merge(t.Context(), items, MergeOptions{DryRun: true, BeforeCommit: func(_ context.Context, r *MergeResult) error {
		seen = slices.Clone(r.Outcomes)
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	assertOutcomes(t, res, MergeReplaced, MergeInserted, MergeInvalid)
	if !slices.Equal(seen, res.Outcomes) {
		t.Fatalf("BeforeCommit saw %v", seen)
	}
	if res.Errs[2] == nil || !strings.Contains(res.Errs[2].Error(), "memory_id") {
		t.Fatalf("errs = %v", res.Errs)
	}
	if after := dumpMemories(t, s); !slices.Equal(before, after) {
		t.Fatalf("dry run changed the table:\n%v\n%v", before, after)
	}
	full := mustMerge(t, s, KeepNewer, items...)
	assertOutcomes(t, full, res.Outcomes...)
}

func TestMergeBeforeCommitErrorRollsBack(t *testing.T) {
	s, _ := newStore(t)
	boom := errors.New("boom")
	_, err := s.Merge(t.Context(), []memory.Item{item("a", "user:1", memory.Semantic, "", `{"v":1}`, 0.5, day)},
		MergeOptions{BeforeCommit: func(context.Context, *MergeResult) error { return boom }})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	if n, _ := s.Count(t.Context()); n != 0 {
		t.Fatalf("count = %d", n)
	}
}

// Parallel merges into the same slots (as a restore whose mapping sends two package
// scopes to one target scope does) settle to the order-independent KeepNewer result.
func TestMergeConcurrentSameSlots(t *testing.T) {
	s, _ := newStore(t)
	const writers, slots = 4, 50
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var items []memory.Item
			for k := range slots {
				items = append(items, item(fmt.Sprintf("w%d-%d", w, k), "user:1", memory.Semantic, fmt.Sprintf("k%d", k),
					fmt.Sprintf(`{"w":%d}`, w), 0.5, time.Duration(w+1)*time.Hour))
			}
			if _, err := s.Merge(context.Background(), items, MergeOptions{}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n, _ := s.Count(t.Context()); n != slots {
		t.Fatalf("count = %d", n)
	}
	err := s.Export(t.Context(), ExportFilter{}, func(it memory.Item) error {
		// Writer 0 is the newest (updated 1h ago); the three others are in history.
		if !sameJSON(t, it.Content, []byte(`{"w":0}`)) || len(it.History) != writers-1 {
			return fmt.Errorf("%s: %s with %d revisions", it.Key, it.Content, len(it.History))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMergeNewBatchesCopyStraightIn: a batch that meets no stored memory is copied
// straight into the table (insertNew) and stores exactly what the merge statement
// stores; a batch whose COPY meets a memory falls back to the statement, with its
// outcomes, and the Store stops trying.
func TestMergeNewBatchesCopyStraightIn(t *testing.T) {
	batch := func() []memory.Item {
		keyed := item("k1", "user:1", memory.Semantic, "pref", `{"drink":"tea","<&>":"\u2028"}`, 0.9, day)
		keyed.History = []memory.Revision{rev(`{"drink":"coffee"}`, now.Add(-3*day), now.Add(-2*day))} // one revision: stored as is
		keyless := item("e1", "user:1", memory.Episodic, "", `{"event":"flew","n":1.50}`, 0.5, 2*day)
		archived := item("a1", "user:2", memory.Semantic, "", `{"x":1}`, 0.1, 3*day)
		archived.ArchivedAt = ptr(now.Add(-day))
		expiring := item("w1", "user:2", memory.Working, "", `{"x":2}`, 0.2, time.Hour)
		expiring.ExpiresAt = ptr(now.Add(day))
		return []memory.Item{keyed, keyless, archived, expiring}
	}
	copied, _ := newStore(t)
	res := mustMerge(t, copied, KeepNewer, batch()...)
	assertOutcomes(t, res, MergeInserted, MergeInserted, MergeInserted, MergeInserted)
	if !slices.Equal(res.IDs, []string{"k1", "e1", "a1", "w1"}) {
		t.Fatalf("ids = %v", res.IDs)
	}
	if n := copied.copiedNew.Load(); n != 1 {
		t.Fatalf("batches copied straight in = %d, want 1", n)
	}
	stated, _ := newStore(t)
	stated.insertsMet.Store(true) // the merge statement only
	assertOutcomes(t, mustMerge(t, stated, KeepNewer, batch()...), res.Outcomes...)
	if a, b := dumpMemories(t, copied), dumpMemories(t, stated); !slices.Equal(a, b) {
		t.Fatalf("copied straight in:\n%v\nthrough the merge statement:\n%v", a, b)
	}

	// New scopes, but an ID the store holds in another scope: the COPY fails on it
	// and the statement reports it in use; nothing of the failed COPY remains.
	before := dumpMemories(t, copied)
	res = mustMerge(t, copied, KeepNewer,
		item("n1", "user:3", memory.Semantic, "", `{"v":1}`, 0.5, 0),
		item("k1", "user:3", memory.Semantic, "pref", `{"v":2}`, 0.5, 0))
	assertOutcomes(t, res, MergeInserted, MergeIDInOtherScope)
	after := slices.DeleteFunc(dumpMemories(t, copied), func(row string) bool { return strings.HasPrefix(row, "(n1,") })
	if !slices.Equal(after, before) {
		t.Fatalf("after the fallback, besides n1:\n%v\nwant\n%v", after, before)
	}
	if !copied.insertsMet.Load() || copied.copiedNew.Load() != 1 {
		t.Fatalf("insertsMet = %v, copied = %d after a COPY met a memory", copied.insertsMet.Load(), copied.copiedNew.Load())
	}
	assertOutcomes(t, mustMerge(t, copied, KeepNewer, item("n2", "user:4", memory.Semantic, "", `{"v":1}`, 0.5, 0)), MergeInserted)
	if n := copied.copiedNew.Load(); n != 1 {
		t.Fatalf("the Store kept copying after a COPY met a memory: %d", n)
	}
}

// TestMergeNewBatchesRaceWithWriters: batches copied straight into one new scope at
// once, with overlapping slots and IDs, end as the merge statement alone would end
// them: one memory per slot, the newest value winning, the others in its history.
func TestMergeNewBatchesRaceWithWriters(t *testing.T) {
	s, _ := newStore(t)
	const writers, slots = 6, 200
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			var items []memory.Item
			for k := range slots {
				// Keyed slots shared by every writer, and keyless memories whose IDs
				// collide across writers.
				items = append(items, item(fmt.Sprintf("w%d-%d", w, k), "user:race", memory.Semantic, fmt.Sprintf("k%d", k),
					fmt.Sprintf(`{"w":%d}`, w), 0.5, time.Duration(w+1)*time.Hour),
					item(fmt.Sprintf("e%d", k), "user:race", memory.Episodic, "", fmt.Sprintf(`{"e":%d,"w":%d}`, k, w), 0.5, time.Duration(w+1)*time.Hour))
			}
			if _, err := s.Merge(context.Background(), items, MergeOptions{}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var keyed, keyless int
	err := s.Export(t.Context(), ExportFilter{}, func(it memory.Item) error {
		if it.Key == "" {
			keyless++
			return nil
		}
		keyed++
		if !sameJSON(t, it.Content, []byte(`{"w":0}`)) || len(it.History) != writers-1 {
			return fmt.Errorf("%s: %s with %d revisions", it.Key, it.Content, len(it.History))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Keyless memories e<k> of different writers differ in content and share an ID:
	// the first stored keeps it, the rest are in use.
	if keyed != slots || keyless != slots {
		t.Fatalf("keyed = %d, keyless = %d, want %d each", keyed, keyless, slots)
	}
	// One writer's batch was copied straight in; the others' COPY met it.
	if s.copiedNew.Load() != 1 || !s.insertsMet.Load() {
		t.Fatalf("copied straight in = %d, a COPY met a memory = %v; want 1, true", s.copiedNew.Load(), s.insertsMet.Load())
	}
}
