package vectortest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/amemory/memory-operator/internal/vector"
)

// RandomVector returns dim standard normal components from rng.
func RandomVector(rng *rand.Rand, dim int) []float32 {
	v := make([]float32, dim)
	for j := range v {
		v[j] = float32(rng.NormFloat64())
	}
	return v
}

// bruteForceTypes is bruteForce restricted to types (all when empty), ranked as
// vector.RankHits ranks (ties by ID).
func bruteForceTypes(spec vector.Spec, entries []vector.Entry, scope string, types []string, q []float32, k int) []vector.Hit {
	var pick []vector.Entry
	for _, en := range entries {
		if len(types) == 0 || slices.Contains(types, en.Type) {
			pick = append(pick, en)
		}
	}
	all := bruteForce(spec, pick, scope, q, len(pick))
	return vector.RankHits(all, k)
}

// testFilteredSearchExact: a search returns exactly min(K, matches) of its scope and
// types, however small a part of the store they are: a scope of 7 beside scopes of
// 1200, a type of 60 inside a scope of 1200, K above the matches, K above an ANN
// engine's default candidate list, a Unicode scope. Filtered cases must equal brute
// force; a whole big scope (where an engine may answer approximately) must have the
// exact count, the true scores of the IDs it returns, and recall@K of at least 0.9.
func testFilteredSearchExact(t *testing.T, h Harness) {
	for _, metric := range []vector.Metric{vector.Cosine, vector.L2} {
		t.Run(string(metric), func(t *testing.T) {
			spec := vector.Spec{Dimension: 8, Metric: metric}
			idx := h.New(t, spec)
			rng := rand.New(rand.NewPCG(22, uint64(len(metric))))
			var entries []vector.Entry
			add := func(scope string, n int, typeOf func(i int) string) {
				for i := range n {
					entries = append(entries, vector.Entry{ID: fmt.Sprintf("f-%05d", len(entries)), Scope: scope, Type: typeOf(i), Vector: RandomVector(rng, spec.Dimension)})
				}
			}
			const big = 1200
			add("user:big-a", big, func(i int) string {
				if i%20 == 7 {
					return "procedural" // 60 of them
				}
				return "semantic"
			})
			add("user:big-b", big, func(int) string { return "semantic" })
			add("user:small", 7, func(int) string { return "episodic" })
			add("user:zoë-小", 12, func(i int) string { return []string{"semantic", "episodic", "working"}[i%3] })
			upsert(t, idx, entries...)

			count := func(scope string, types []string) int {
				n := 0
				for _, en := range entries {
					if en.Scope == scope && (len(types) == 0 || slices.Contains(types, en.Type)) {
						n++
					}
				}
				return n
			}
			for _, tc := range []struct {
				scope string
				types []string
				k     int
				exact bool // filtered: must equal brute force
			}{
				{"user:small", nil, 5, true},
				{"user:small", nil, 7, true},
				{"user:small", nil, 100, true},
				{"user:small", []string{"episodic"}, 3, true},
				{"user:small", []string{"semantic"}, 10, true}, // no such entries: none
				{"user:big-a", []string{"procedural"}, 10, true},
				{"user:big-a", []string{"procedural"}, 59, true},
				{"user:big-a", []string{"procedural"}, 100, true},
				{"user:big-a", []string{"procedural", "episodic"}, 25, true},
				{"user:big-b", []string{"episodic"}, 10, true},
				{"user:zoë-小", []string{"working"}, 10, true},
				{"user:zoë-小", nil, 50, true},
				{"user:nobody", nil, 10, true},
				{"user:big-a", nil, 10, false},
				{"user:big-b", nil, 10, false},
				{"user:big-b", nil, 300, false}, // more than an HNSW search's default candidates
				{"user:big-a", []string{"semantic"}, 40, false},
			} {
				for qi := range 2 {
					qv := RandomVector(rng, spec.Dimension)
					got := search(t, idx, vector.Query{Scope: tc.scope, Types: tc.types, Vector: qv, K: tc.k})
					want := bruteForceTypes(spec, entries, tc.scope, tc.types, qv, tc.k)
					name := fmt.Sprintf("scope %s, types %v, k %d, query %d", tc.scope, tc.types, tc.k, qi)
					if n := min(tc.k, count(tc.scope, tc.types)); len(got) != n {
						t.Fatalf("%s: %d hits, want exactly min(k, matches) = %d", name, len(got), n)
					}
					if tc.exact {
						if !slices.Equal(ids(got), ids(want)) {
							t.Fatalf("%s: hits %v, want (brute force) %v", name, ids(got), ids(want))
						}
						expectHits(t, got, ids(want), scores(want))
						continue
					}
					checkApproximate(t, name, spec, entries, tc.scope, tc.types, qv, got, want)
				}
			}
		})
	}
}

// checkApproximate holds an ANN answer to: entries of the scope and types only, each
// with its true score, best first, and recall of at least 0.9 against want.
func checkApproximate(t *testing.T, name string, spec vector.Spec, entries []vector.Entry, scope string, types []string,
	qv []float32, got, want []vector.Hit) {
	t.Helper()
	byID := make(map[string]vector.Entry, len(entries))
	for _, en := range entries {
		byID[en.ID] = en
	}
	pq := vector.Prepare(spec.Metric, qv)
	for i, hit := range got {
		en, ok := byID[hit.ID]
		if !ok || en.Scope != scope || len(types) > 0 && !slices.Contains(types, en.Type) {
			t.Fatalf("%s: hit %s is not an entry of the scope and types", name, hit.ID)
		}
		if ref := vector.Score(spec.Metric, vector.Prepare(spec.Metric, en.Vector), pq); !scoreClose(hit.Score, ref) {
			t.Fatalf("%s: hit %s scores %v, its score is %v", name, hit.ID, hit.Score, ref)
		}
		if i > 0 && got[i-1].Score < hit.Score {
			t.Fatalf("%s: hits not best first: %v", name, got)
		}
	}
	found := 0
	wantIDs := ids(want)
	for _, hit := range got {
		if slices.Contains(wantIDs, hit.ID) {
			found++
		}
	}
	if recall := float64(found) / float64(len(want)); recall < 0.9 {
		t.Fatalf("%s: recall %.2f against brute force, want at least 0.9", name, recall)
	}
}

// testRestart: an index opened afresh on the same store (a new connection or client,
// as after a gateway restart) finds what the first one wrote and answers alike, and
// writes through either are seen by both.
func testRestart(t *testing.T, h Harness) {
	spec := vector.Spec{Dimension: 8, Metric: vector.Cosine}
	idx := h.New(t, spec)
	rng := rand.New(rand.NewPCG(3, 1))
	var entries []vector.Entry
	for i := range 1500 {
		entries = append(entries, vector.Entry{ID: fmt.Sprintf("r-%04d", i), Scope: []string{"user:r", "user:s"}[i%2],
			Type: []string{"semantic", "episodic", "semantic"}[i%3], Vector: RandomVector(rng, spec.Dimension)})
	}
	upsert(t, idx, entries...)
	var queries []vector.Query
	for i := range 6 {
		q := vector.Query{Scope: []string{"user:r", "user:s"}[i%2], Vector: RandomVector(rng, spec.Dimension), K: 10}
		if i >= 4 {
			q.Types = []string{"episodic"}
		}
		queries = append(queries, q)
	}
	before := make([][]vector.Hit, len(queries))
	for i, q := range queries {
		before[i] = search(t, idx, q)
	}
	again := h.restart(t, idx)
	if again.Spec() != spec {
		t.Fatalf("restarted index has spec %+v, want %+v", again.Spec(), spec)
	}
	for i, q := range queries {
		expectHits(t, search(t, again, q), ids(before[i]), scores(before[i]))
	}
	// Writes through the new index reach the old one, and the other way round.
	upsert(t, again, e("r-new", "user:r", "semantic", queries[0].Vector...))
	if err := idx.Delete(context.Background(), []string{before[1][0].ID}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if got := search(t, idx, vector.Query{Scope: "user:r", Vector: queries[0].Vector, K: 1}); len(got) != 1 || got[0].ID != "r-new" {
		t.Fatalf("entry written after the restart: old index finds %v", ids(got))
	}
	for _, hit := range search(t, again, queries[1]) {
		if hit.ID == before[1][0].ID {
			t.Fatalf("entry deleted through the old index still found by the new one")
		}
	}
}

// testDimensionEdges: the smallest and the largest dimension the engine takes store
// and rank exactly; a vector one component short or long is refused at the largest.
func testDimensionEdges(t *testing.T, h Harness) {
	maxDim := h.MaxDimension
	if maxDim == 0 {
		maxDim = vector.MaxDimension
	}
	for _, dim := range []int{vector.MinDimension, maxDim} {
		t.Run(fmt.Sprint(dim), func(t *testing.T) {
			spec := vector.Spec{Dimension: dim, Metric: vector.IP}
			idx := h.New(t, spec)
			rng := rand.New(rand.NewPCG(uint64(dim), 9))
			var entries []vector.Entry
			for i := range 20 {
				entries = append(entries, vector.Entry{ID: fmt.Sprintf("d-%02d", i), Scope: "user:dims", Type: "semantic", Vector: RandomVector(rng, dim)})
			}
			upsert(t, idx, entries...)
			qv := RandomVector(rng, dim)
			want := bruteForceTypes(spec, entries, "user:dims", nil, qv, 5)
			expectHits(t, search(t, idx, vector.Query{Scope: "user:dims", Vector: qv, K: 5}), ids(want), scores(want))
			for _, n := range []int{dim - 1, dim + 1} {
				err := idx.Upsert(context.Background(), []vector.Entry{{ID: "bad", Scope: "user:dims", Type: "semantic", Vector: RandomVector(rng, n)}})
				if err == nil {
					t.Errorf("upsert of a %d-dimensional vector into a %d-dimensional index: no error", n, dim)
				}
			}
		})
	}
}

// testConcurrentUpserts: writers upserting overlapping batches at once (in opposite
// orders, small and large) all succeed, and the index ends with one entry per ID
// holding one of the written vectors.
func testConcurrentUpserts(t *testing.T, h Harness) {
	spec := vector.Spec{Dimension: 4, Metric: vector.L2}
	idx := h.New(t, spec)
	const n = 1200 // above a COPY threshold
	batch := func(w int) []vector.Entry {
		out := make([]vector.Entry, n)
		for i := range out {
			out[i] = e(fmt.Sprintf("c-%04d", i), "user:c", "semantic", float32(w), float32(i), 0, 0)
		}
		if w%2 == 1 {
			slices.Reverse(out)
		}
		if w >= 2 { // small batches too
			out = out[:300]
		}
		return out
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for w := range 4 {
		wg.Go(func() { errs[w] = idx.Upsert(context.Background(), batch(w)) })
	}
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			t.Fatalf("writer %d: %v", w, err)
		}
	}
	got := search(t, idx, vector.Query{Scope: "user:c", Vector: []float32{0, 0, 0, 0}, K: vector.MaxK})
	if len(got) != n {
		t.Fatalf("%d entries after concurrent upserts, want %d", len(got), n)
	}
}

func (h Harness) restart(t *testing.T, idx vector.Index) vector.Index {
	t.Helper()
	if h.Restart != nil {
		return h.Restart(t, idx)
	}
	again, err := h.Reopen(t, idx, idx.Spec())
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	return again
}
