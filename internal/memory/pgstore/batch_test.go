package pgstore

import (
	"errors"
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
