// Package vectortest is the conformance suite every vector.Index implementation runs
// against its real backend, so that Milvus and the PostgreSQL-embedded index behave
// identically: ranking and scores per metric, scope isolation, type filters, deletes,
// idempotent upserts, reading vectors back (Fetch), input validation and spec
// mismatches of an existing store, filtered searches that return exactly min(K,
// matches), restarts, the dimension range's edges and concurrent writers.
package vectortest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/amemory/memory-operator/internal/vector"
)

// Harness connects the suite to one implementation.
type Harness struct {
	// New returns an empty index with spec on its own collection or schema, created
	// the way the operator creates it, and removed in t.Cleanup.
	New func(t *testing.T, spec vector.Spec) vector.Index
	// Reopen ensures the store behind idx again, as the operator does on every
	// reconcile, but with spec, and returns an index on it (nil with the error when
	// the existing store does not match spec).
	Reopen func(t *testing.T, idx vector.Index, spec vector.Spec) (vector.Index, error)
	// Restart, when set, returns an index on the store behind idx through a new
	// connection or client (a restarted gateway), without ensuring it again; unset,
	// the suite uses Reopen with idx's spec.
	Restart func(t *testing.T, idx vector.Index) vector.Index
	// MaxDimension is the largest dimension the engine takes (vector.MaxDimension
	// when 0).
	MaxDimension int
}

// Run runs the whole suite as subtests of t.
func Run(t *testing.T, h Harness) {
	t.Run("RankingCosine", func(t *testing.T) { testRankingCosine(t, h) })
	t.Run("RankingL2", func(t *testing.T) { testRankingL2(t, h) })
	t.Run("RankingIP", func(t *testing.T) { testRankingIP(t, h) })
	t.Run("ScopeIsolation", func(t *testing.T) { testScopeIsolation(t, h) })
	t.Run("UnicodeScopeIsolation", func(t *testing.T) { testUnicodeScopeIsolation(t, h) })
	t.Run("TypeFilter", func(t *testing.T) { testTypeFilter(t, h) })
	t.Run("UpsertReplaces", func(t *testing.T) { testUpsertReplaces(t, h) })
	t.Run("Delete", func(t *testing.T) { testDelete(t, h) })
	t.Run("Fetch", func(t *testing.T) { testFetch(t, h) })
	t.Run("DeleteScope", func(t *testing.T) { testDeleteScope(t, h) })
	t.Run("Validation", func(t *testing.T) { testValidation(t, h) })
	t.Run("LargeBatchMatchesBruteForce", func(t *testing.T) { testLargeBatch(t, h) })
	t.Run("ScoreIDs", func(t *testing.T) { testScoreIDs(t, h) })
	t.Run("SearchMany", func(t *testing.T) { testSearchMany(t, h) })
	t.Run("ReopenMismatch", func(t *testing.T) { testReopenMismatch(t, h) })
	t.Run("FilteredSearchExact", func(t *testing.T) { testFilteredSearchExact(t, h) })
	t.Run("Restart", func(t *testing.T) { testRestart(t, h) })
	t.Run("DimensionEdges", func(t *testing.T) { testDimensionEdges(t, h) })
	t.Run("ConcurrentUpserts", func(t *testing.T) { testConcurrentUpserts(t, h) })
}

// scoreTolerance bounds how far an engine's score may be from the exact one: 1e-4,
// relative to the score once it exceeds 1. Engines add a vector's products in their
// own order in float32, which at 32768 dimensions and scores in the hundreds (inner
// products) moves the fourth decimal (Milvus 2.3: 257.32703 for 257.3268).
const scoreTolerance = 1e-4

// scoreClose reports whether got is within scoreTolerance of want.
func scoreClose(got, want float32) bool {
	return math.Abs(float64(got-want)) <= scoreTolerance*math.Max(1, math.Abs(float64(want)))
}

func e(id, scope, typ string, v ...float32) vector.Entry {
	return vector.Entry{ID: id, Scope: scope, Type: typ, Vector: v}
}

func upsert(t *testing.T, idx vector.Index, entries ...vector.Entry) {
	t.Helper()
	if err := idx.Upsert(context.Background(), entries); err != nil {
		t.Fatalf("upsert: %v", err)
	}
}

func search(t *testing.T, idx vector.Index, q vector.Query) []vector.Hit {
	t.Helper()
	hits, err := idx.Search(context.Background(), q)
	if err != nil {
		t.Fatalf("search %+v: %v", q, err)
	}
	return hits
}

func ids(hits []vector.Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.ID
	}
	return out
}

// expectHits checks the exact order of IDs and each score to scoreTolerance.
func expectHits(t *testing.T, got []vector.Hit, wantIDs []string, wantScores []float32) {
	t.Helper()
	if !slices.Equal(ids(got), wantIDs) {
		t.Fatalf("hits = %v (%v), want ids %v", ids(got), got, wantIDs)
	}
	for i, w := range wantScores {
		if !scoreClose(got[i].Score, w) {
			t.Errorf("hit %d (%s): score %v, want %v", i, got[i].ID, got[i].Score, w)
		}
	}
}

func testRankingCosine(t *testing.T, h Harness) {
	spec := vector.Spec{Dimension: 4, Metric: vector.Cosine}
	idx := h.New(t, spec)
	if idx.Spec() != spec {
		t.Fatalf("Spec() = %+v, want %+v", idx.Spec(), spec)
	}
	// Magnitudes differ on purpose: cosine must not depend on them.
	upsert(t, idx,
		e("far", "user:1", "semantic", 0, 0, 5, 0),
		e("same-dir", "user:1", "semantic", 10, 0, 0, 0),
		e("diag", "user:1", "semantic", 1, 1, 0, 0),
		e("opposite", "user:1", "semantic", -0.5, 0, 0, 0),
		e("close", "user:1", "semantic", 3, 1, 0, 0),
	)
	got := search(t, idx, vector.Query{Scope: "user:1", Vector: []float32{0.5, 0, 0, 0}, K: 10})
	expectHits(t, got,
		[]string{"same-dir", "close", "diag", "far", "opposite"},
		[]float32{1, float32(3 / math.Sqrt(10)), float32(1 / math.Sqrt2), 0, -1})

	got = search(t, idx, vector.Query{Scope: "user:1", Vector: []float32{0.5, 0, 0, 0}, K: 2})
	expectHits(t, got, []string{"same-dir", "close"}, nil)
}

func testRankingL2(t *testing.T, h Harness) {
	idx := h.New(t, vector.Spec{Dimension: 3, Metric: vector.L2})
	upsert(t, idx,
		e("d5", "user:1", "episodic", 4, 4, 0), // distance 5 from (1,0,0)
		e("d0", "user:1", "episodic", 1, 0, 0),
		e("d2", "user:1", "episodic", 1, 2, 0),
		e("d3", "user:1", "episodic", 1, 0, -3),
		e("d1", "user:1", "episodic", 2, 0, 0),
	)
	got := search(t, idx, vector.Query{Scope: "user:1", Vector: []float32{1, 0, 0}, K: 10})
	// Scores are negated Euclidean distances (not squared), higher = nearer.
	expectHits(t, got, []string{"d0", "d1", "d2", "d3", "d5"}, []float32{0, -1, -2, -3, -5})

	got = search(t, idx, vector.Query{Scope: "user:1", Vector: []float32{4, 4, 0}, K: 1})
	expectHits(t, got, []string{"d5"}, []float32{0})
	if math.Signbit(float64(got[0].Score)) {
		t.Errorf("exact match scores -0, want 0")
	}
}

func testRankingIP(t *testing.T, h Harness) {
	idx := h.New(t, vector.Spec{Dimension: 2, Metric: vector.IP})
	// IP does not normalise: the long vector wins over the well-aligned short one.
	upsert(t, idx,
		e("short", "agent:planner", "procedural", 1, 0),
		e("long", "agent:planner", "procedural", 3, 3),
		e("neg", "agent:planner", "procedural", -2, 0),
	)
	got := search(t, idx, vector.Query{Scope: "agent:planner", Vector: []float32{2, 0}, K: 3})
	expectHits(t, got, []string{"long", "short", "neg"}, []float32{6, 2, -4})
}

func testScopeIsolation(t *testing.T, h Harness) {
	idx := h.New(t, vector.Spec{Dimension: 3, Metric: vector.Cosine})
	// Identical vectors in two scopes whose names are prefixes of each other.
	var entries []vector.Entry
	for i := range 5 {
		v := []float32{1, float32(i), 0}
		entries = append(entries,
			e(fmt.Sprintf("a-%d", i), "user:1", "semantic", v...),
			e(fmt.Sprintf("b-%d", i), "user:10", "semantic", v...),
		)
	}
	upsert(t, idx, entries...)
	for _, tc := range []struct {
		scope, prefix string
	}{{"user:1", "a-"}, {"user:10", "b-"}} {
		got := search(t, idx, vector.Query{Scope: tc.scope, Vector: []float32{1, 0, 0}, K: 100})
		if len(got) != 5 {
			t.Fatalf("scope %s: %d hits %v, want 5", tc.scope, len(got), ids(got))
		}
		for _, hit := range got {
			if !strings.HasPrefix(hit.ID, tc.prefix) {
				t.Fatalf("scope %s returned %s from another scope: %v", tc.scope, hit.ID, ids(got))
			}
		}
		if got[0].ID != tc.prefix+"0" {
			t.Errorf("scope %s: nearest %s, want %s0", tc.scope, got[0].ID, tc.prefix)
		}
	}
	if got := search(t, idx, vector.Query{Scope: "user:2", Vector: []float32{1, 0, 0}, K: 10}); len(got) != 0 {
		t.Fatalf("scope without entries returned %v", ids(got))
	}
	// A scope that looks like an expression or a pattern is rejected, never widened.
	for _, bad := range []string{`user:1" || scope != "`, "user:1' OR '1'='1", "user:%", "user:1 ", "user:*"} {
		if _, err := idx.Search(context.Background(), vector.Query{Scope: bad, Vector: []float32{1, 0, 0}, K: 10}); err == nil {
			t.Errorf("search with scope %q: no error", bad)
		}
	}
}

// unicodeScopes are scopes an index must keep apart: prefixes of one another with '/',
// one id composed and decomposed (the index compares bytes; memory scopes are NFC
// before they get here), and 𠮷 (U+20BB7) with ஷ (U+0BB7), which a Milvus server's
// expression parser confuses when they are written into a filter as they are.
var unicodeScopes = []string{"user:zoë", "user:zoe\u0308", "user:zoë-ユーザー", "user:用户123", "user:𠮷", "user:ஷ",
	"session:a", "session:a/b", "session:a/b:c", "agent:हिन्दी"}

func testUnicodeScopeIsolation(t *testing.T, h Harness) {
	idx := h.New(t, vector.Spec{Dimension: 3, Metric: vector.Cosine})
	// The same vectors in every scope: only the filter tells them apart.
	var entries []vector.Entry
	for i, scope := range unicodeScopes {
		for j := range 3 {
			entries = append(entries, e(fmt.Sprintf("s%d-%d", i, j), scope, []string{"semantic", "episodic", "semantic"}[j], 1, float32(j), 0))
		}
	}
	upsert(t, idx, entries...)
	check := func(deleted map[int]bool) {
		t.Helper()
		for i, scope := range unicodeScopes {
			got := ids(search(t, idx, vector.Query{Scope: scope, Vector: []float32{1, 0, 0}, K: 100}))
			want := []string{fmt.Sprintf("s%d-0", i), fmt.Sprintf("s%d-1", i), fmt.Sprintf("s%d-2", i)}
			if deleted[i] {
				want = []string{}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("scope %q: hits %v, want %v", scope, got, want)
			}
			typed := ids(search(t, idx, vector.Query{Scope: scope, Types: []string{"episodic"}, Vector: []float32{1, 0, 0}, K: 100}))
			if want := want[min(1, len(want)):min(2, len(want))]; !slices.Equal(typed, want) {
				t.Fatalf("scope %q, episodic: hits %v, want %v", scope, typed, want)
			}
		}
	}
	check(nil)
	// Deleting a scope deletes it alone.
	for _, i := range []int{4, 7, 0} { // 𠮷, session:a/b, the composed zoë
		if err := idx.DeleteScope(context.Background(), unicodeScopes[i]); err != nil {
			t.Fatalf("delete scope %q: %v", unicodeScopes[i], err)
		}
	}
	check(map[int]bool{4: true, 7: true, 0: true})
}

func testTypeFilter(t *testing.T, h Harness) {
	idx := h.New(t, vector.Spec{Dimension: 2, Metric: vector.L2})
	upsert(t, idx,
		e("sem", "session:s1", "semantic", 0, 0),
		e("epi", "session:s1", "episodic", 1, 0),
		e("pro", "session:s1", "procedural", 2, 0),
		e("wrk", "session:s1", "working", 3, 0),
		e("other-scope", "session:s2", "semantic", 0, 0),
	)
	q := vector.Query{Scope: "session:s1", Vector: []float32{0, 0}, K: 10}
	expectHits(t, search(t, idx, q), []string{"sem", "epi", "pro", "wrk"}, []float32{0, -1, -2, -3})

	q.Types = []string{"episodic"}
	expectHits(t, search(t, idx, q), []string{"epi"}, []float32{-1})

	q.Types = []string{"working", "semantic"}
	expectHits(t, search(t, idx, q), []string{"sem", "wrk"}, []float32{0, -3})

	q.Types = []string{"unknown"}
	if got := search(t, idx, q); len(got) != 0 {
		t.Fatalf("type without entries returned %v", ids(got))
	}
	q.Types = []string{`semantic"]`}
	if _, err := idx.Search(context.Background(), q); err == nil {
		t.Fatal("search with a malformed type: no error")
	}
}

func testUpsertReplaces(t *testing.T, h Harness) {
	idx := h.New(t, vector.Spec{Dimension: 2, Metric: vector.L2})
	first := []vector.Entry{e("m1", "user:1", "semantic", 0, 0), e("m2", "user:1", "semantic", 5, 0)}
	upsert(t, idx, first...)
	upsert(t, idx, first...) // idempotent
	q := vector.Query{Scope: "user:1", Vector: []float32{0, 0}, K: 10}
	expectHits(t, search(t, idx, q), []string{"m1", "m2"}, []float32{0, -5})

	// New vector for m1: it moves behind m2.
	upsert(t, idx, e("m1", "user:1", "semantic", 0, 10))
	expectHits(t, search(t, idx, q), []string{"m2", "m1"}, []float32{-5, -10})

	// New scope and type for m2: it leaves user:1 and its type.
	upsert(t, idx, e("m2", "user:2", "episodic", 5, 0))
	expectHits(t, search(t, idx, q), []string{"m1"}, []float32{-10})
	expectHits(t, search(t, idx, vector.Query{Scope: "user:2", Types: []string{"episodic"}, Vector: []float32{0, 0}, K: 10}),
		[]string{"m2"}, []float32{-5})

	if err := idx.Upsert(context.Background(), nil); err != nil {
		t.Fatalf("empty upsert: %v", err)
	}
}

func testDelete(t *testing.T, h Harness) {
	idx := h.New(t, vector.Spec{Dimension: 2, Metric: vector.Cosine})
	upsert(t, idx,
		e("k1", "user:1", "semantic", 1, 0),
		e("k2", "user:1", "semantic", 1, 1),
		e("k3", "user:1", "semantic", 0, 1),
		e("k4", "user:2", "semantic", 1, 0),
	)
	ctx := context.Background()
	if err := idx.Delete(ctx, []string{"k1", "missing-id", "k4"}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := idx.Delete(ctx, nil); err != nil {
		t.Fatalf("empty delete: %v", err)
	}
	if err := idx.Delete(ctx, []string{"k1"}); err != nil {
		t.Fatalf("delete again: %v", err)
	}
	expectHits(t, search(t, idx, vector.Query{Scope: "user:1", Vector: []float32{1, 0}, K: 10}), []string{"k2", "k3"}, nil)
	if got := search(t, idx, vector.Query{Scope: "user:2", Vector: []float32{1, 0}, K: 10}); len(got) != 0 {
		t.Fatalf("deleted k4 still found: %v", ids(got))
	}
	// A deleted ID can be written again.
	upsert(t, idx, e("k1", "user:1", "semantic", 1, 0))
	expectHits(t, search(t, idx, vector.Query{Scope: "user:1", Vector: []float32{1, 0}, K: 1}), []string{"k1"}, []float32{1})
}

// Fetcher is an index whose stored vectors can be read back by memory ID (the
// engine package's Fetcher, which snapshots and archival use); every engine is one.
type Fetcher interface {
	Fetch(ctx context.Context, ids []string) (map[string][]float32, error)
}

// testFetch: Fetch returns the stored vector of each ID it holds, as Search compares
// it (normalised for COSINE, as written otherwise), and leaves out IDs it does not
// hold; a replaced vector comes back new, a deleted one (by ID or scope) not at all;
// no IDs give an empty map, and an invalid ID an error.
func testFetch(t *testing.T, h Harness) {
	for _, metric := range []vector.Metric{vector.Cosine, vector.L2, vector.IP} {
		t.Run(string(metric), func(t *testing.T) {
			spec := vector.Spec{Dimension: 3, Metric: metric}
			idx := h.New(t, spec)
			f, ok := idx.(Fetcher)
			if !ok {
				t.Fatalf("%T cannot read its vectors back (Fetch)", idx)
			}
			ctx := context.Background()
			fetch := func(ids ...string) map[string][]float32 {
				t.Helper()
				got, err := f.Fetch(ctx, ids)
				if err != nil {
					t.Fatalf("fetch %v: %v", ids, err)
				}
				return got
			}
			expect := func(got map[string][]float32, want ...vector.Entry) {
				t.Helper()
				if len(got) != len(want) {
					t.Fatalf("fetched %d vectors (%v), want %d", len(got), got, len(want))
				}
				for _, w := range want {
					v, ok := got[w.ID]
					if !ok {
						t.Fatalf("fetched %v: %s is missing", got, w.ID)
					}
					stored := vector.Prepare(metric, w.Vector)
					if len(v) != len(stored) {
						t.Fatalf("%s: fetched %v, want %v", w.ID, v, stored)
					}
					for i := range v {
						if math.Abs(float64(v[i]-stored[i])) > 1e-6 {
							t.Fatalf("%s: fetched %v, want %v", w.ID, v, stored)
						}
					}
				}
			}
			a, b := e("f1", "user:1", "semantic", 3, 4, 0), e("f2", "user:1", "episodic", -1, 2, 2)
			c := e("f3", "user:2", "semantic", 0, 0, 7)
			upsert(t, idx, a, b, c)
			if got := fetch(); len(got) != 0 {
				t.Fatalf("fetch of no IDs: %v", got)
			}
			expect(fetch("f1", "f2", "f3"), a, b, c)
			expect(fetch("f2", "missing", "f2"), b)
			expect(fetch("missing"))

			// Replaced, also moved to another scope: the new vector.
			a2 := e("f1", "user:3", "procedural", 0, -2, 1)
			upsert(t, idx, a2)
			expect(fetch("f1", "f2"), a2, b)

			if err := idx.Delete(ctx, []string{"f2"}); err != nil {
				t.Fatalf("delete: %v", err)
			}
			if err := idx.DeleteScope(ctx, "user:2"); err != nil {
				t.Fatalf("delete scope: %v", err)
			}
			expect(fetch("f1", "f2", "f3"), a2)
			if _, err := f.Fetch(ctx, []string{"f1", ""}); err == nil {
				t.Error("fetch of an empty ID: no error")
			}
		})
	}
}

func testDeleteScope(t *testing.T, h Harness) {
	idx := h.New(t, vector.Spec{Dimension: 2, Metric: vector.Cosine})
	upsert(t, idx,
		e("a1", "user:alice@example.com", "semantic", 1, 0),
		e("a2", "user:alice@example.com", "episodic", 0, 1),
		e("b1", "user:bob", "semantic", 1, 0),
	)
	ctx := context.Background()
	if err := idx.DeleteScope(ctx, "user:alice@example.com"); err != nil {
		t.Fatalf("delete scope: %v", err)
	}
	if err := idx.DeleteScope(ctx, "user:nobody"); err != nil {
		t.Fatalf("delete empty scope: %v", err)
	}
	if got := search(t, idx, vector.Query{Scope: "user:alice@example.com", Vector: []float32{1, 0}, K: 10}); len(got) != 0 {
		t.Fatalf("forgotten scope still returns %v", ids(got))
	}
	expectHits(t, search(t, idx, vector.Query{Scope: "user:bob", Vector: []float32{1, 0}, K: 10}), []string{"b1"}, []float32{1})
	for _, bad := range []string{"", `user:bob" || scope != "x`, "user bob"} {
		if err := idx.DeleteScope(ctx, bad); err == nil {
			t.Errorf("DeleteScope(%q): no error", bad)
		}
	}
	expectHits(t, search(t, idx, vector.Query{Scope: "user:bob", Vector: []float32{1, 0}, K: 10}), []string{"b1"}, []float32{1})
}

func testValidation(t *testing.T, h Harness) {
	idx := h.New(t, vector.Spec{Dimension: 3, Metric: vector.Cosine})
	ctx := context.Background()
	upsert(t, idx, e("ok", "user:1", "semantic", 1, 0, 0))

	// A batch with one vector of the wrong dimension writes nothing.
	err := idx.Upsert(ctx, []vector.Entry{e("good", "user:1", "semantic", 0, 1, 0), e("bad", "user:1", "semantic", 1, 0)})
	if !errors.Is(err, vector.ErrDimensionMismatch) {
		t.Fatalf("upsert of a 2-dim vector into a 3-dim index: err = %v, want ErrDimensionMismatch", err)
	}
	if !strings.Contains(err.Error(), "3") || !strings.Contains(err.Error(), "2") {
		t.Errorf("dimension error %q does not name both dimensions", err)
	}
	expectHits(t, search(t, idx, vector.Query{Scope: "user:1", Vector: []float32{0, 1, 0}, K: 10}), []string{"ok"}, nil)

	for name, bad := range map[string]vector.Entry{
		"empty id":         e("", "user:1", "semantic", 1, 0, 0),
		"quote in id":      e(`x"y`, "user:1", "semantic", 1, 0, 0),
		"empty scope":      e("x", "", "semantic", 1, 0, 0),
		"bad scope":        e("x", "user:1\"", "semantic", 1, 0, 0),
		"empty type":       e("x", "user:1", "", 1, 0, 0),
		"zero cosine":      e("x", "user:1", "semantic", 0, 0, 0),
		"nan":              e("x", "user:1", "semantic", float32(math.NaN()), 0, 0),
		"long scope":       e("x", strings.Repeat("s", vector.MaxScopeLen+1), "semantic", 1, 0, 0),
		"long id":          e(strings.Repeat("i", vector.MaxIDLen+1), "user:1", "semantic", 1, 0, 0),
		"too long type":    e("x", "user:1", "semantic_and_more", 1, 0, 0),
		"duplicate in set": e("ok", "user:1", "semantic", 1, 0, 0), // paired with itself below
	} {
		batch := []vector.Entry{bad}
		if name == "duplicate in set" {
			batch = append(batch, bad)
		}
		if err := idx.Upsert(ctx, batch); err == nil {
			t.Errorf("upsert with %s: no error", name)
		}
	}
	if err := idx.Delete(ctx, []string{`ok" || memory_id != "`}); err == nil {
		t.Error("delete with a quoted id: no error")
	}
	expectHits(t, search(t, idx, vector.Query{Scope: "user:1", Vector: []float32{1, 0, 0}, K: 10}), []string{"ok"}, []float32{1})

	for name, q := range map[string]vector.Query{
		"empty scope": {Vector: []float32{1, 0, 0}, K: 1},
		"zero k":      {Scope: "user:1", Vector: []float32{1, 0, 0}},
		"huge k":      {Scope: "user:1", Vector: []float32{1, 0, 0}, K: vector.MaxK + 1},
		"zero vector": {Scope: "user:1", Vector: []float32{0, 0, 0}, K: 1},
	} {
		if _, err := idx.Search(ctx, q); err == nil {
			t.Errorf("search with %s: no error", name)
		}
	}
	_, err = idx.Search(ctx, vector.Query{Scope: "user:1", Vector: []float32{1, 0, 0, 0}, K: 1})
	if !errors.Is(err, vector.ErrDimensionMismatch) {
		t.Errorf("search with a 4-dim vector: err = %v, want ErrDimensionMismatch", err)
	}
}

// testLargeBatch writes more entries than one request or statement carries and checks
// the results against brute force with the reference scoring of package vector.
func testLargeBatch(t *testing.T, h Harness) {
	for _, metric := range []vector.Metric{vector.Cosine, vector.L2} {
		t.Run(string(metric), func(t *testing.T) {
			spec := vector.Spec{Dimension: 8, Metric: metric}
			idx := h.New(t, spec)
			rng := rand.New(rand.NewPCG(42, uint64(len(metric))))
			const n = 2500
			entries := make([]vector.Entry, n)
			for i := range entries {
				v := make([]float32, spec.Dimension)
				for j := range v {
					v[j] = float32(rng.NormFloat64())
				}
				entries[i] = vector.Entry{ID: fmt.Sprintf("mem-%04d", i), Scope: []string{"user:x", "user:y"}[i%2], Type: "semantic", Vector: v}
			}
			upsert(t, idx, entries...)
			for range 3 {
				qv := make([]float32, spec.Dimension)
				for j := range qv {
					qv[j] = float32(rng.NormFloat64())
				}
				want := bruteForce(spec, entries, "user:y", qv, 10)
				got := search(t, idx, vector.Query{Scope: "user:y", Vector: qv, K: 10})
				expectHits(t, got, ids(want), scores(want))
			}
			// An entry's own vector finds itself first, at the best possible score.
			self := entries[777]
			got := search(t, idx, vector.Query{Scope: self.Scope, Vector: self.Vector, K: 1})
			best := float32(1)
			if metric == vector.L2 {
				best = 0
			}
			expectHits(t, got, []string{self.ID}, []float32{best})
		})
	}
}

func bruteForce(spec vector.Spec, entries []vector.Entry, scope string, q []float32, k int) []vector.Hit {
	pq := vector.Prepare(spec.Metric, q)
	var hits []vector.Hit
	for _, en := range entries {
		if en.Scope == scope {
			hits = append(hits, vector.Hit{ID: en.ID, Score: vector.Score(spec.Metric, vector.Prepare(spec.Metric, en.Vector), pq)})
		}
	}
	sort.Slice(hits, func(i, j int) bool { return hits[i].Score > hits[j].Score })
	return hits[:min(k, len(hits))]
}

func scores(hits []vector.Hit) []float32 {
	out := make([]float32, len(hits))
	for i, h := range hits {
		out[i] = h.Score
	}
	return out
}

func testReopenMismatch(t *testing.T, h Harness) {
	spec := vector.Spec{Dimension: 4, Metric: vector.Cosine}
	idx := h.New(t, spec)
	upsert(t, idx, e("keep", "user:1", "semantic", 1, 2, 3, 4))

	_, err := h.Reopen(t, idx, vector.Spec{Dimension: 8, Metric: vector.Cosine})
	if !errors.Is(err, vector.ErrDimensionMismatch) {
		t.Fatalf("reopen with dimension 8: err = %v, want ErrDimensionMismatch", err)
	}
	if !strings.Contains(err.Error(), "4") || !strings.Contains(err.Error(), "8") {
		t.Errorf("mismatch error %q does not name both dimensions", err)
	}
	_, err = h.Reopen(t, idx, vector.Spec{Dimension: 4, Metric: vector.L2})
	if !errors.Is(err, vector.ErrMetricMismatch) {
		t.Fatalf("reopen with metric L2: err = %v, want ErrMetricMismatch", err)
	}
	if !strings.Contains(err.Error(), "COSINE") || !strings.Contains(err.Error(), "L2") {
		t.Errorf("mismatch error %q does not name both metrics", err)
	}

	// Nothing was dropped or altered: the same spec reopens and finds the data.
	again, err := h.Reopen(t, idx, spec)
	if err != nil {
		t.Fatalf("reopen with the original spec: %v", err)
	}
	expectHits(t, search(t, again, vector.Query{Scope: "user:1", Vector: []float32{1, 2, 3, 4}, K: 5}), []string{"keep"}, []float32{1})
}

// testSearchMany: many searches at once (vector.SearchMany: the index's own
// MultiSearcher when it has one) answer each as Search does, whatever mix of scopes,
// types and K they are, repeats and empty scopes included.
func testSearchMany(t *testing.T, h Harness) {
	spec := vector.Spec{Dimension: 8, Metric: vector.Cosine}
	idx := h.New(t, spec)
	rng := rand.New(rand.NewPCG(11, 12))
	types := []string{"semantic", "episodic"}
	var entries []vector.Entry
	for i := range 300 {
		entries = append(entries, vector.Entry{ID: fmt.Sprintf("m-%03d", i), Scope: fmt.Sprintf("user:%d", i%7),
			Type: types[i%2], Vector: RandomVector(rng, spec.Dimension)})
	}
	upsert(t, idx, entries...)
	var qs []vector.Query
	for i := range 60 {
		q := vector.Query{Scope: fmt.Sprintf("user:%d", i%9), Vector: RandomVector(rng, spec.Dimension), K: 1 + i%12}
		if i%3 == 0 {
			q.Types = []string{types[i%2]}
		}
		qs = append(qs, q)
	}
	qs = append(qs, qs[5], qs[6]) // the same search twice
	got, err := vector.SearchMany(context.Background(), idx, qs, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(qs) {
		t.Fatalf("SearchMany of %d queries: %d answers", len(qs), len(got))
	}
	for i, q := range qs {
		want := search(t, idx, q)
		if !slices.Equal(ids(got[i]), ids(want)) {
			t.Fatalf("query %d (%s, types %v, K %d): SearchMany %v, Search %v", i, q.Scope, q.Types, q.K, ids(got[i]), ids(want))
		}
		for j := range want {
			if !scoreClose(got[i][j].Score, want[j].Score) {
				t.Fatalf("query %d hit %d: score %v, Search's %v", i, j, got[i][j].Score, want[j].Score)
			}
		}
	}
}
