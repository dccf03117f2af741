package service_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/memory/service"
	"github.com/amemory/memory-operator/internal/vector"
)

// TestArchivalAndRehydration runs archival's store steps against each index: archived
// memories leave search and recall as soon as PostgreSQL marks them (while their
// vectors are still in the index), their vectors go with the pending deletions, and
// Rehydrate brings both back, repairing on a retry after an index failure.
func TestArchivalAndRehydration(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		var fi *faultyIndex
		e := newEnv(t, b, func(ix vector.Index) vector.Index {
			fi = &faultyIndex{Index: ix}
			return fi
		})
		ctx := t.Context()
		const scope = "user:ana"
		stale := func(text string) memory.Item {
			it := fact(scope, "", text)
			it.MemoryType, it.BaseScore = memory.Episodic, 0.5
			it.CreatedAt, it.UpdatedAt = now.Add(-200*24*time.Hour), now.Add(-200*24*time.Hour) // 0.5 * 2^-6.7: below 0.2
			return it
		}
		var staleIDs, freshIDs []string
		for _, text := range []string{"coffee at the old office", "coffee with a former colleague", "coffee machine broke in 2024"} {
			staleIDs = append(staleIDs, remember(t, e.mem, stale(text), pgstore.Inserted))
		}
		for _, text := range []string{"coffee with oat milk", "coffee after lunch only", "likes coffee strong"} {
			freshIDs = append(freshIDs, remember(t, e.mem, fact(scope, "", text), pgstore.Inserted))
		}
		other := fact("user:bo", "", "coffee at the old office")
		other.CreatedAt, other.UpdatedAt, other.BaseScore = now.Add(-400*24*time.Hour), now.Add(-400*24*time.Hour), 0.01
		otherID := remember(t, e.mem, other, pgstore.Inserted)
		all := sorted(append(slices.Clone(staleIDs), freshIDs...))
		staleIDs, freshIDs = sorted(staleIDs), sorted(freshIDs)

		q := service.SearchQuery{Scope: scope, Text: "coffee", K: 10}
		if got := sorted(resultIDs(search(t, e.mem, q))); !slices.Equal(got, all) {
			t.Fatalf("search before archival = %v, want %v", got, all)
		}

		res, err := e.store.MarkArchived(ctx, now, 0.2, memory.DefaultHalfLives(), false)
		if err != nil || res.Archived != 4 { // the three stale ones and user:bo's
			t.Fatalf("MarkArchived = %+v, %v", res, err)
		}
		// PostgreSQL says archived, the index still holds every vector: search and
		// recall already leave them out.
		if got := vectorsOf(t, e.index, scope); !slices.Equal(got, all) {
			t.Fatalf("index = %v, want all six still there", got)
		}
		if got := sorted(resultIDs(search(t, e.mem, q))); !slices.Equal(got, freshIDs) {
			t.Fatalf("search after marking = %v, want only the fresh %v", got, freshIDs)
		}
		assertRecall(t, e, scope, freshIDs)

		// The archive worker's vector step.
		del, err := e.store.ProcessIndexDeletions(ctx, pgstore.DeletionOptions{BatchSize: 2}, e.index.Delete)
		if err != nil || del.Deleted != 4 {
			t.Fatalf("ProcessIndexDeletions = %+v, %v", del, err)
		}
		if got := vectorsOf(t, e.index, scope); !slices.Equal(got, freshIDs) {
			t.Fatalf("index after the deletions = %v, want %v", got, freshIDs)
		}
		if got := vectorsOf(t, e.index, "user:bo"); len(got) != 0 {
			t.Fatalf("user:bo's archived vector is still indexed: %v", got)
		}

		// Rehydrate with the index failing: PostgreSQL is live again, the vectors are
		// missing, and the error says so.
		fi.failUpsert = 1
		ask := append(slices.Clone(staleIDs), otherID, "no-such-memory")
		got, err := e.mem.Rehydrate(ctx, scope, ask)
		if !errors.Is(err, service.ErrNotIndexed) || !errors.Is(err, errInjected) {
			t.Fatalf("Rehydrate with a failing index: err = %v", err)
		}
		if !slices.Equal(ids(got), staleIDs) {
			t.Fatalf("Rehydrate returned %v, want %v", ids(got), staleIDs)
		}
		assertRecall(t, e, scope, all)
		if got := vectorsOf(t, e.index, scope); !slices.Equal(got, freshIDs) {
			t.Fatalf("index after the failed rehydration = %v", got)
		}

		// Calling it again repairs: every memory is found by search, with the
		// similarity of its own text.
		got, err = e.mem.Rehydrate(ctx, scope, ask)
		if err != nil || !slices.Equal(ids(got), staleIDs) {
			t.Fatalf("second Rehydrate = %v, %v", ids(got), err)
		}
		if got := vectorsOf(t, e.index, scope); !slices.Equal(got, all) {
			t.Fatalf("index after rehydration = %v, want %v", got, all)
		}
		results := search(t, e.mem, q)
		if got := sorted(resultIDs(results)); !slices.Equal(got, all) {
			t.Fatalf("search after rehydration = %v, want %v", got, all)
		}
		for _, r := range results {
			if want := cosine(t, r.Item.EmbeddingText(), "coffee"); !closeTo(r.Similarity, want) {
				t.Fatalf("%s: similarity %v, want %v (its own text's vector)", r.Item.MemoryID, r.Similarity, want)
			}
		}
		// Another scope's memory is not rehydrated through this one.
		if it, err := e.store.Get(ctx, otherID); err != nil || it.ArchivedAt == nil {
			t.Fatalf("user:bo's memory = %+v, %v; want still archived", it, err)
		}
		if n, err := e.store.PendingIndexDeletions(ctx); err != nil || n != 0 {
			t.Fatalf("pending deletions = %d, %v", n, err)
		}
	})
}

func assertRecall(t *testing.T, e *env, scope string, want []string) {
	t.Helper()
	rec, err := e.mem.Recall(t.Context(), pgstore.RecallQuery{Scope: scope, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rec {
		got = append(got, r.MemoryID)
	}
	if got = sorted(got); !slices.Equal(got, want) {
		t.Fatalf("recall = %v, want %v", got, want)
	}
}

func ids(items []memory.Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.MemoryID
	}
	return out
}
