package pgstore

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
)

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
