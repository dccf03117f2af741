package pgindex_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
)

// Snapshots and archival read an engine's vectors back through engine.Fetcher; the
// embedded engine is one like the others.
var _ engine.Fetcher = (*pgindex.Index)(nil)

// TestFetchMany: a batch written through COPY comes back whole, each vector exactly
// as stored (normalised, COSINE), in one Fetch of more IDs than it holds.
func TestFetchMany(t *testing.T) {
	pool := connect(t)
	ctx := context.Background()
	spec := vector.Spec{Dimension: 5, Metric: vector.Cosine}
	ix := newIndex(t, pool, spec)
	var entries []vector.Entry
	var ids []string
	for i := range 2500 {
		v := []float32{float32(i), 1, float32(i % 7), -2, 0.5}
		entries = append(entries, vector.Entry{ID: fmt.Sprintf("m-%04d", i), Scope: fmt.Sprintf("user:%d", i%3), Type: "semantic", Vector: v})
		ids = append(ids, fmt.Sprintf("m-%04d", i), fmt.Sprintf("gone-%04d", i))
	}
	if err := ix.Upsert(ctx, entries); err != nil {
		t.Fatal(err)
	}
	got, err := ix.Fetch(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(entries) {
		t.Fatalf("fetched %d vectors, want %d", len(got), len(entries))
	}
	for _, e := range entries {
		if want := vector.Prepare(spec.Metric, e.Vector); !slices.Equal(got[e.ID], want) {
			t.Fatalf("%s: fetched %v, want %v", e.ID, got[e.ID], want)
		}
	}
}

// TestFetchSkipsOtherDimensions: a row of another dimension than the spec's (written
// past the index, by hand) is neither searched nor fetched: Fetch returns what Search
// compares, never a vector a snapshot would declare with the wrong dimension.
func TestFetchSkipsOtherDimensions(t *testing.T) {
	pool := connect(t)
	ctx := context.Background()
	spec := vector.Spec{Dimension: 3, Metric: vector.L2}
	ix := newIndex(t, pool, spec)
	if err := ix.Upsert(ctx, []vector.Entry{{ID: "ok", Scope: "user:1", Type: "semantic", Vector: []float32{1, 2, 3}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{ix.Schema(), "vectors"}.Sanitize()+` VALUES ('odd', 'user:1', 'semantic', $1)`,
		pgindex.EncodeVector([]float32{1, 2, 3, 4})); err != nil {
		t.Fatal(err)
	}
	hits, err := ix.Search(ctx, vector.Query{Scope: "user:1", Vector: []float32{1, 2, 3}, K: 10})
	if err != nil || len(hits) != 1 || hits[0].ID != "ok" {
		t.Fatalf("search: %v, %v", hits, err)
	}
	got, err := ix.Fetch(ctx, []string{"ok", "odd"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !slices.Equal(got["ok"], []float32{1, 2, 3}) {
		t.Fatalf("fetched %v, want only ok", got)
	}
}
