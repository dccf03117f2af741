package main

import (
	"math"
	"slices"
	"testing"
)

// TestExactTop: the benchmark's exact answer is the top of a full sort, ties and all
// edges (fewer vectors than k, k of one).
func TestExactTop(t *testing.T) {
	syn := newSynthetic(3, 8)
	vecs := make([][]float32, 500)
	for i := range vecs {
		vecs[i] = syn.bigVector(i)
	}
	vecs[7] = vecs[3] // a tie: the lower index comes first
	id := func(i int) string { return bigID(i) }
	for _, tc := range []struct{ n, k int }{{500, 10}, {500, 1}, {5, 10}, {0, 10}} {
		q := syn.queryVector(tc.n + tc.k)
		got := exactTop(q, tc.n, tc.k, func(i int) []float32 { return vecs[i] }, id)
		idx := make([]int, tc.n)
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int {
			da, db := dot(q, vecs[a]), dot(q, vecs[b])
			switch {
			case da > db:
				return -1
			case da < db:
				return 1
			}
			return 0
		})
		want := []string{}
		for _, i := range idx[:min(tc.k, tc.n)] {
			want = append(want, id(i))
		}
		if !slices.Equal(got, want) {
			t.Errorf("n %d, k %d: %v, want %v", tc.n, tc.k, got, want)
		}
	}
}

// TestSynthetic: vectors are unit length, a function of seed and position, and
// clustered (a point is nearer its cluster's other points than a random one).
func TestSynthetic(t *testing.T) {
	a, b := newSynthetic(1, 16), newSynthetic(1, 16)
	if !slices.Equal(a.bigVector(42), b.bigVector(42)) || !slices.Equal(a.smallVector(3, 7), b.smallVector(3, 7)) {
		t.Fatal("the same seed gives other vectors")
	}
	if slices.Equal(a.bigVector(1), a.bigVector(2)) || slices.Equal(a.queryVector(1), a.bigVector(1)) {
		t.Fatal("different positions give the same vector")
	}
	var n float64
	for _, x := range a.queryVector(9) {
		n += float64(x) * float64(x)
	}
	if math.Abs(n-1) > 1e-5 {
		t.Fatalf("squared norm %v, want 1", n)
	}
	// With 16 centres, a point's best match among 200 others is far closer than the
	// average pair (about 0 for random unit vectors in 384 dimensions).
	best, sum := float32(-1), float32(0)
	p := a.queryVector(0)
	for i := range 200 {
		d := dot(p, a.bigVector(i))
		best, sum = max(best, d), sum+d
	}
	if best < 0.3 || best < 4*sum/200 {
		t.Fatalf("best similarity %v, average %v: not clustered", best, sum/200)
	}
}
