package pgstore

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/memory"
)

func changedIDs(t *testing.T, s *Store, gen int) []string {
	t.Helper()
	refs, err := s.GenerationChanges(t.Context(), gen, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range refs {
		ids = append(ids, r.MemoryID)
	}
	slices.Sort(ids)
	return ids
}

// Every way memories change (insert, update, archive, delete, forget, a batch, an
// import) is recorded for a building or retained generation, whoever writes, and
// nothing for the serving one or before the first generation starts.
func TestGenerationsRecordEveryChange(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	mustPut(t, s, item("a1", "user:a", memory.Semantic, "k1", `{"v":1}`, 0.5, time.Hour), Inserted)
	if got := countRows(t, pool, s.generationPending(), ""); got != 0 {
		t.Fatalf("%d changes recorded before any generation", got)
	}
	serving := Generation{Number: 1, Model: "m1", Dimension: 8, Location: "vectors"}
	g, err := StartGeneration(ctx, pool, s.Schema(), serving, Generation{Number: 2, Model: "m2", Dimension: 16, Location: "vectors_g2"})
	if err != nil || g.State != GenerationBuilding || g.Model != "m2" {
		t.Fatalf("StartGeneration = %+v, %v", g, err)
	}
	// Starting it again changes nothing.
	if again, err := StartGeneration(ctx, pool, s.Schema(), serving, Generation{Number: 2, Model: "other", Dimension: 4}); err != nil || again.Model != "m2" {
		t.Fatalf("StartGeneration again = %+v, %v", again, err)
	}
	gs, err := s.Generations(ctx)
	if err != nil || len(gs) != 2 || gs[0].State != GenerationServing || gs[1].State != GenerationBuilding {
		t.Fatalf("Generations = %+v, %v", gs, err)
	}

	mustPut(t, s, item("a2", "user:a", memory.Semantic, "", `{"v":2}`, 0.5, time.Hour), Inserted)
	mustPut(t, s, item("x", "user:a", memory.Semantic, "k1", `{"v":3}`, 0.5, time.Minute), Superseded) // a1's slot
	mustPut(t, s, item("b1", "user:b", memory.Episodic, "", `{"v":4}`, 0.5, time.Hour), Inserted)
	mustPut(t, s, item("c1", "user:c", memory.Episodic, "", `{"v":5}`, 0.5, time.Hour), Inserted)
	if _, _, err := s.DeleteQueued(ctx, "b1", "test"); err != nil {
		t.Fatal(err)
	}
	if got, want := changedIDs(t, s, 2), []string{"a1", "a2", "b1", "c1"}; !slices.Equal(got, want) {
		t.Fatalf("changes = %v, want %v", got, want)
	}
	if err := s.GenerationChangesDone(ctx, 2, mustRefs(t, s, 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Forget(ctx, "user:c", "asked", "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE `+s.t.memories+` SET archived_at = now() WHERE memory_id = 'a2'`); err != nil {
		t.Fatal(err)
	}
	if got, want := changedIDs(t, s, 2), []string{"a2", "c1"}; !slices.Equal(got, want) {
		t.Fatalf("changes after forget and archive = %v, want %v", got, want)
	}
	if n, err := s.GenerationBacklog(ctx, 2); err != nil || n != 2 {
		t.Fatalf("GenerationBacklog = %d, %v", n, err)
	}

	// The cutover: the new generation serves, the old one is retained and from now
	// on gets the changes; what was recorded for the new one stays for its worker.
	if err := CutOver(ctx, pool, s.Schema(), 2); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, item("d1", "user:d", memory.Semantic, "", `{"v":6}`, 0.5, time.Hour), Inserted)
	if got := changedIDs(t, s, 1); !slices.Equal(got, []string{"d1"}) {
		t.Fatalf("retained generation's changes = %v, want [d1]", got)
	}
	if got := changedIDs(t, s, 2); !slices.Equal(got, []string{"a2", "c1"}) {
		t.Fatalf("new serving generation's changes = %v, want the two recorded before", got)
	}
	if err := CutOver(ctx, pool, s.Schema(), 7); !errors.Is(err, ErrNoGeneration) {
		t.Fatalf("CutOver to a generation that does not exist: %v", err)
	}
	// Dropping the retained generation drops its records; the serving one stays.
	if err := DropGeneration(ctx, pool, s.Schema(), 1); err != nil {
		t.Fatal(err)
	}
	if err := DropGeneration(ctx, pool, s.Schema(), 2); err != nil {
		t.Fatal(err)
	}
	if gs, err := s.Generations(ctx); err != nil || len(gs) != 1 || gs[0].Number != 2 || gs[0].State != GenerationServing {
		t.Fatalf("Generations after the drops = %+v, %v", gs, err)
	}
	if got := changedIDs(t, s, 1); len(got) != 0 {
		t.Fatalf("the dropped generation keeps changes %v", got)
	}
}

func mustRefs(t *testing.T, s *Store, gen int) []PendingRef {
	t.Helper()
	refs, err := s.GenerationChanges(t.Context(), gen, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return refs
}

// A change recorded while a worker works on an earlier one of the same memory is
// not cleared by that worker.
func TestGenerationChangesDoneKeepsANewerChange(t *testing.T) {
	s, pool := newStore(t)
	ctx := t.Context()
	if _, err := StartGeneration(ctx, pool, s.Schema(), Generation{Number: 1, Model: "m1", Dimension: 8}, Generation{Number: 2, Model: "m2", Dimension: 8}); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, item("a1", "user:a", memory.Semantic, "k", `{"v":1}`, 0.5, time.Hour), Inserted)
	seen := mustRefs(t, s, 2)
	mustPut(t, s, item("a1", "user:a", memory.Semantic, "k", `{"v":2}`, 0.5, time.Minute), Superseded)
	if err := s.GenerationChangesDone(ctx, 2, seen); err != nil {
		t.Fatal(err)
	}
	if got := changedIDs(t, s, 2); !slices.Equal(got, []string{"a1"}) {
		t.Fatalf("changes = %v: the newer change of a1 was cleared", got)
	}
}

// WaitForEarlierWriters waits for a transaction that wrote before it was called,
// and not for one that starts after.
func TestWaitForEarlierWriters(t *testing.T) {
	s, pool := newStore(t)
	other, otherPool := newStore(t)
	ctx := t.Context()
	// writer opens a transaction that has written (no row: the lock is the mark) the
	// memories of st, left open.
	writer := func(pool *pgxpool.Pool, st *Store) pgx.Tx {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		if _, err := tx.Exec(ctx, `DELETE FROM `+st.t.memories+` WHERE memory_id = 'nobody'`); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	// Another store's long writer, and a transaction of this store that wrote other
	// tables only, never hold the wait up.
	writer(otherPool, other)
	bystander, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = bystander.Rollback(context.Background()) }()
	if _, err := bystander.Exec(ctx, `INSERT INTO `+s.t.storeMeta+` (key, value) VALUES ('bystander', 'x')`); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if err := s.WaitForEarlierWriters(wctx, 10*time.Millisecond); err != nil {
		t.Fatalf("with only other stores' and tables' writers open: %v", err)
	}
	cancel()

	tx := writer(pool, s)
	done := make(chan error, 1)
	go func() { done <- s.WaitForEarlierWriters(ctx, 10*time.Millisecond) }()
	select {
	case err := <-done:
		t.Fatalf("WaitForEarlierWriters returned (%v) while an earlier writer is open", err)
	case <-time.After(300 * time.Millisecond):
	}
	// A writer that starts now does not hold it up.
	writer(pool, s)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitForEarlierWriters still waits after the earlier writer committed")
	}
}
