package pgstore

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/amemory/memory-operator/internal/memory"
)

// TestBatchRacedOnEveryUniqueSlot: a concurrent writer that stores, between
// BeginBatch and Commit, a memory with one of the batch's memory_ids, (scope, key)
// slots or key-less contents makes Commit say ErrBatchRaced and store nothing, through
// each of the three unique indexes the batch's INSERT meets.
func TestBatchRacedOnEveryUniqueSlot(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	for _, c := range []struct {
		name         string
		batch, other memory.Item
	}{
		{"memory_id", item("id-1", "user:1", memory.Semantic, "", `{"text":"mine"}`, 0.5, time.Hour),
			item("id-1", "user:2", memory.Semantic, "", `{"text":"theirs"}`, 0.5, time.Hour)},
		{"slot", item("slot-mine", "user:3", memory.Semantic, "city", `{"text":"Paris"}`, 0.5, time.Hour),
			item("slot-theirs", "user:3", memory.Semantic, "city", `{"text":"Rome"}`, 0.5, time.Hour)},
		{"content", item("content-mine", "user:4", memory.Semantic, "", `{"text":"same"}`, 0.5, time.Hour),
			item("content-theirs", "user:4", memory.Semantic, "", `{"text":"same"}`, 0.5, time.Hour)},
	} {
		t.Run(c.name, func(t *testing.T) {
			bystander := item(c.batch.MemoryID+"-bystander", "user:9", memory.Episodic, "", `{"text":"`+c.name+`"}`, 0.5, time.Hour)
			tx, err := s.BeginBatch(ctx, nil, []memory.Item{bystander, c.batch})
			if err != nil {
				t.Fatal(err)
			}
			mustPut(t, s, c.other, Inserted)
			if _, err := tx.Commit(ctx, []BatchOp{{Kind: BatchInsert}, {Kind: BatchInsert}}); !errors.Is(err, ErrBatchRaced) {
				t.Fatalf("commit after a concurrent writer took the %s: %v, want ErrBatchRaced", c.name, err)
			}
			if _, err := s.Get(ctx, bystander.MemoryID); !errors.Is(err, ErrNotFound) {
				t.Fatalf("a raced batch stored its other item: %v", err)
			}
		})
	}
}

// TestBatchRacedRollsBack: what a batch was planned against can change before it
// commits; Commit then stores nothing and says ErrBatchRaced, and the batch begun
// again sees the change. A concurrent writer storing the same content first, and a
// reinforced memory deleted meanwhile, are both caught.
func TestBatchRacedRollsBack(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	a := item("a", "user:1", memory.Semantic, "", `{"text":"first"}`, 0.5, time.Hour)
	b := item("b", "user:1", memory.Episodic, "", `{"text":"second"}`, 0.5, time.Hour)
	target := mustPut(t, s, item("t", "user:1", memory.Semantic, "", `{"text":"target"}`, 0.5, time.Hour), Inserted)

	tx, err := s.BeginBatch(ctx, nil, []memory.Item{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if _, dup := tx.Duplicate(1); dup || !tx.Fresh(0) || !tx.Fresh(1) {
		t.Fatal("a fresh batch was seen as meeting stored memories")
	}
	// Another writer stores b's content first (under another memory_id).
	other := b
	other.MemoryID = "other"
	mustPut(t, s, other, Inserted)
	_, err = tx.Commit(ctx, []BatchOp{{Kind: BatchInsert}, {Kind: BatchInsert}})
	if !errors.Is(err, ErrBatchRaced) {
		t.Fatalf("commit after a concurrent insert of the same content: %v, want ErrBatchRaced", err)
	}
	if _, err := s.Get(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a raced batch stored an item: %v", err)
	}
	tx, err = s.BeginBatch(ctx, nil, []memory.Item{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if id, dup := tx.Duplicate(1); !dup || id != "other" {
		t.Fatalf("begun again, b's duplicate = %q, %v; want the other writer's memory", id, dup)
	}
	// The memory a reinforces is deleted before the commit.
	if _, _, err := s.DeleteQueued(ctx, target.MemoryID, "test"); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Commit(ctx, []BatchOp{{Kind: BatchReinforce, Target: target.MemoryID, Boost: 0.1, At: now}, {Kind: BatchUnchanged, Target: "other"}})
	if !errors.Is(err, ErrBatchRaced) {
		t.Fatalf("commit reinforcing a deleted memory: %v, want ErrBatchRaced", err)
	}
	tx, err = s.BeginBatch(ctx, nil, []memory.Item{a, b})
	if err != nil {
		t.Fatal(err)
	}
	res, err := tx.Commit(ctx, []BatchOp{{Kind: BatchInsert}, {Kind: BatchUnchanged, Target: "other"}})
	if err != nil || res[0].Outcome != Inserted || res[0].Pending == 0 || res[1].MemoryID != "other" {
		t.Fatalf("commit: %+v, %v", res, err)
	}
	got, err := s.Get(ctx, "a")
	if err != nil || got.Scope != "user:1" || string(got.Content) != `{"text": "first"}` || !got.CreatedAt.Equal(a.CreatedAt) {
		t.Fatalf("stored a = %+v %s, %v", got, got.Content, err)
	}
	if hits, err := s.LexicalSearch(ctx, LexicalQuery{Scope: "user:1", Text: "first", K: 5}); err != nil || len(hits) != 1 || hits[0].MemoryID != "a" {
		t.Fatalf("the batch's postings: %+v, %v", hits, err)
	}
}

// TestBatchLookupsAgainstAStoreTakenForEmpty: a store filling up through batches
// faster than autovacuum analyzes it has statistics saying it is empty. BeginBatch's
// lookup of the stored memories its items could meet was then planned as a hash join
// over every stored key-less memory (55 ms a batch at 90,000, growing with the
// store). Its plan must probe the unique indexes item by item whatever the planner
// believes the costs are, in a generic plan too, and still find what is stored.
func TestBatchLookupsAgainstAStoreTakenForEmpty(t *testing.T) {
	s, pool, rec := newTracedStore(t)
	ctx := t.Context()
	// Analyzed empty, then filled: 20,000 memories in 50 scopes, 2,000 of them keyed.
	if _, err := pool.Exec(ctx, `ALTER TABLE `+s.t.memories+` SET (autovacuum_enabled = off); ANALYZE `+s.t.memories); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+s.t.memories+` (memory_id, memory_type, scope, key, content, source, base_score, created_at, updated_at, content_hash)
		SELECT 'm-' || g, 'semantic', 'user:' || (g % 50), CASE WHEN g % 10 = 0 THEN 'k' || g END, jsonb_build_object('text', 'fact ' || g), '', 0.5, now(), now(),
			sha256(('fact ' || g)::bytea)
		FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	stored := item("m-7", "user:7", memory.Semantic, "", `{"text":"x"}`, 0.5, time.Hour)
	keyed := item("fresh-k", "user:10", memory.Semantic, "k10", `{"text":"y"}`, 0.5, time.Hour)
	var items []memory.Item
	for i := range 1000 {
		items = append(items, item(fmt.Sprintf("fresh-%d", i), fmt.Sprintf("user:%d", i%50), memory.Semantic, "", fmt.Sprintf(`{"text":"new %d"}`, i), 0.5, time.Hour))
	}
	items = append(items, stored, keyed)
	tx, err := s.BeginBatch(ctx, nil, items)
	if err != nil {
		t.Fatal(err)
	}
	if tx.Fresh(1000) || tx.Fresh(1001) || !tx.Fresh(0) {
		t.Fatal("the lookups did not find the stored memory_id m-7 and slot (user:10, k10), or took a fresh item for stored")
	}
	tx.Rollback()

	var lookups []recordedSQL
	for _, st := range rec.on("memories") {
		if strings.Contains(st.sql, "content_hash = u.hash") {
			lookups = append(lookups, st)
		}
	}
	if len(lookups) != 1 {
		t.Fatalf("recorded %d lookup statements, want BeginBatch's one", len(lookups))
	}
	// With nested loops costed out, a join of the lists with memories becomes the
	// hash join the stale statistics chose; the per-item lookups cannot.
	plan := genericPlan(t, pool, lookups[0], "enable_nestloop = off")
	for _, node := range []string{`"Hash Join"`, `"Merge Join"`, `"Seq Scan"`} {
		if strings.Contains(plan, node) {
			t.Errorf("the generic plan of BeginBatch's lookups has a %s:\n%s", node, plan)
		}
	}
	// By memory_id, by (scope, content hash), by (scope, key): each an index probe.
	if n := strings.Count(plan, `"Index Cond"`); n != 3 {
		t.Errorf("the generic plan of BeginBatch's lookups has %d index conditions, want 3:\n%s", n, plan)
	}
}

// allInserts is a Commit's operations for a batch of n fresh memories.
func allInserts(n int) []BatchOp {
	ops := make([]BatchOp, n)
	for i := range ops {
		ops[i] = BatchOp{Kind: BatchInsert}
	}
	return ops
}

// TestBatchWriteTerms: Commit leaves a batch's postings owed, under marks of its
// own; WriteTerms writes them and clears exactly those marks. A memory deleted or
// superseded between the two gets no postings from the batch (the supersede wrote
// its own, which stay), and a bulk write's mark is left for the catch-up.
func TestBatchWriteTerms(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	// A restore's mark on another scope, which is not the batch's to clear.
	if _, err := s.Merge(ctx, []memory.Item{textItem("restored", "user:other", "", "restored quince")}, MergeOptions{}); err != nil {
		t.Fatal(err)
	}
	batch := []memory.Item{
		textItem("a", "user:bt", "", "alpha apricot apricot"),
		textItem("b", "user:bt", "", "bravo banana"),
		textItem("k", "user:bt", "fav", "kiwi lime"),
		textItem("c", "user:bt2", "", "charlie cherry"),
	}
	tx, err := s.BeginBatch(ctx, nil, batch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(ctx, allInserts(len(batch))); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, pool, s.t.termPending, "batch IS NOT NULL"); n != 2 {
		t.Fatalf("the committed batch left %d marks, want one per scope (2)", n)
	}
	if n := countRows(t, pool, s.t.memoryTerms, "memory_id = ANY($1)", []string{"a", "b", "k", "c"}); n != 0 {
		t.Fatalf("Commit wrote %d postings; they are WriteTerms's", n)
	}
	// Between Commit and WriteTerms: b is deleted, k's slot superseded.
	if _, _, err := s.DeleteQueued(ctx, "b", "test"); err != nil {
		t.Fatal(err)
	}
	newer := textItem("k2", "user:bt", "fav", "mango papaya")
	newer.UpdatedAt = now
	mustPut(t, s, newer, Superseded)
	if err := tx.WriteTerms(ctx); err != nil {
		t.Fatal(err)
	}
	for _, it := range []memory.Item{batch[0], batch[3]} {
		if got, want := postings(t, s, it.MemoryID), wantPostings(it); !maps.Equal(got, want) {
			t.Errorf("%s's postings = %v, want %v", it.MemoryID, got, want)
		}
	}
	if len(postings(t, s, "b")) != 0 || countRows(t, pool, s.t.termDocs, "memory_id = 'b'") != 0 {
		t.Error("the batch wrote postings for a memory deleted before WriteTerms")
	}
	final, err := s.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := postings(t, s, "k"), wantPostings(final); !maps.Equal(got, want) {
		t.Errorf("the superseded slot's postings = %v, want those of its new value %v", got, want)
	}
	if n := countRows(t, pool, s.t.termPending, "batch IS NOT NULL"); n != 0 {
		t.Errorf("%d of the batch's marks left after WriteTerms", n)
	}
	if n := countRows(t, pool, s.t.termPending, "scope = 'user:other'"); n != 1 {
		t.Errorf("the restore's mark: %d rows, want 1 (WriteTerms clears only its own)", n)
	}
	if got := hitIDs(search(t, s, LexicalQuery{Scope: "user:bt", Text: "kiwi"})); len(got) != 0 {
		t.Errorf("the superseded words still find %v", got)
	}
	if got := hitIDs(search(t, s, LexicalQuery{Scope: "user:bt", Text: "mango"})); !slices.Equal(got, []string{"k"}) {
		t.Errorf("the slot's new words find %v", got)
	}
}

// TestBatchWriteTermsRacingWriters: WriteTerms runs while other writers supersede,
// delete and catch up the batch's memories; afterwards every memory's postings are
// those of its stored value, and a deleted one has none (a catch-up that read a
// memory before its delete used to leave its postings behind: IndexTerms now reads
// FOR KEY SHARE).
func TestBatchWriteTermsRacingWriters(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	const n = 300
	sc := "user:race"
	var batch []memory.Item
	for i := range n {
		batch = append(batch, textItem(fmt.Sprintf("m%03d", i), sc, fmt.Sprintf("slot%03d", i), fmt.Sprintf("first value %d alpha", i)))
	}
	tx, err := s.BeginBatch(ctx, nil, batch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(ctx, allInserts(n)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	wg.Go(func() {
		if err := tx.WriteTerms(ctx); err != nil {
			errs <- err
		}
	})
	wg.Go(func() { // supersedes, from the last memory down (against WriteTerms's order)
		for i := n - 1; i >= 0; i -= 3 {
			it := textItem(fmt.Sprintf("new%03d", i), sc, fmt.Sprintf("slot%03d", i), fmt.Sprintf("second value %d bravo", i))
			it.UpdatedAt = now
			if _, err := s.Put(ctx, it); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Go(func() { // deletes
		for i := 1; i < n; i += 3 {
			if _, _, err := s.DeleteQueued(ctx, fmt.Sprintf("m%03d", i), "test"); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Go(func() { // a search's catch-up
		for range 5 {
			if err := s.IndexTerms(ctx, sc); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	stored := exportAll(t, s, ExportFilter{})
	if len(stored) != n-n/3 {
		t.Fatalf("%d memories stored, want %d", len(stored), n-n/3)
	}
	for _, it := range stored {
		if got, want := postings(t, s, it.MemoryID), wantPostings(it); !maps.Equal(got, want) {
			t.Errorf("%s (%s): postings %v, want %v", it.MemoryID, it.Content, got, want)
		}
	}
	if n := countRows(t, pool, s.t.memoryTerms, "NOT EXISTS (SELECT 1 FROM "+s.t.memories+" m WHERE m.memory_id = "+s.t.memoryTerms+".memory_id)"); n != 0 {
		t.Errorf("%d postings of deleted memories", n)
	}
	termsConsistent(t, s)
}

// TestBatchWriteTermsCopiesManyPostings: a batch with at least copyPostingsFrom
// postings writes them with COPY, in primary-key order across its scopes; each
// memory's postings are then exactly its terms (tf and dl), as the INSERT writes
// them, and a later write of a memory replaces them.
func TestBatchWriteTermsCopiesManyPostings(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	words := strings.Fields("apple banana cherry damson elder fig grape hazel iris juniper kale lemon")
	var batch []memory.Item
	total := 0
	for i := range 300 {
		// Eight words from a rotating window, one of them twice (tf 2).
		var text []string
		for j := range 7 {
			text = append(text, words[(i+j*5)%len(words)])
		}
		text = append(text, text[i%7], fmt.Sprintf("n%d", i))
		key := ""
		if i%50 == 0 {
			key = fmt.Sprintf("slot%d", i)
		}
		it := textItem(fmt.Sprintf("m%03d", i), fmt.Sprintf("user:c%d", i%7), key, strings.Join(text, " "))
		batch = append(batch, it)
		total += len(wantPostings(it))
	}
	if total < copyPostingsFrom {
		t.Fatalf("the batch has %d postings, below copyPostingsFrom (%d): it would not be copied", total, copyPostingsFrom)
	}
	tx, err := s.BeginBatch(ctx, nil, batch)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(ctx, allInserts(len(batch))); err != nil {
		t.Fatal(err)
	}
	if err := tx.WriteTerms(ctx); err != nil {
		t.Fatal(err)
	}
	for _, it := range batch {
		if got, want := postings(t, s, it.MemoryID), wantPostings(it); !maps.Equal(got, want) {
			t.Fatalf("%s's postings = %v, want %v", it.MemoryID, got, want)
		}
		var dls []int32
		rows, err := s.pool.Query(ctx, `SELECT DISTINCT dl FROM `+s.t.memoryTerms+` WHERE memory_id = $1`, it.MemoryID)
		if err != nil {
			t.Fatal(err)
		}
		if dls, err = pgx.CollectRows(rows, pgx.RowTo[int32]); err != nil {
			t.Fatal(err)
		}
		if want := int32(len(memory.Terms(it.EmbeddingText()))); len(dls) != 1 || dls[0] != want {
			t.Fatalf("%s's postings have lengths %v, want [%d]", it.MemoryID, dls, want)
		}
	}
	newer := textItem("m-new", "user:c0", "slot0", "quince rhubarb")
	newer.UpdatedAt = now
	mustPut(t, s, newer, Superseded)
	final, err := s.Get(ctx, "m000")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := postings(t, s, "m000"), wantPostings(final); !maps.Equal(got, want) {
		t.Fatalf("the superseded slot's postings = %v, want %v", got, want)
	}
	if got := hitIDs(search(t, s, LexicalQuery{Scope: "user:c3", Text: "n10"})); !slices.Equal(got, []string{"m010"}) {
		t.Fatalf("a word of one memory finds %v", got)
	}
}
