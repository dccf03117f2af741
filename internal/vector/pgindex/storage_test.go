package pgindex

import (
	"math/rand/v2"
	"testing"

	"github.com/amemory/memory-operator/internal/vector"
)

// scoreStored must give vector.Score's result bit for bit: the batch writer ranks the
// index's hits (scored here) against its own memories (scored by vector.Score), and a
// search must rank the same memories the same way whichever path scored them.
func TestScoreStoredIsVectorScore(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	for _, m := range []vector.Metric{vector.Cosine, vector.IP, vector.L2} {
		for _, dim := range []int{1, 2, 3, 4, 5, 7, 8, 255, 256, 384, 1536} {
			for range 50 {
				a, q := make([]float32, dim), make([]float32, dim)
				for i := range a {
					a[i], q[i] = float32(rng.NormFloat64()*10), float32(rng.NormFloat64()*1e-3)
				}
				a, q = vector.Prepare(m, a), vector.Prepare(m, q)
				got, err := scoreStored(m, EncodeVector(a), q)
				if err != nil {
					t.Fatal(err)
				}
				if want := vector.Score(m, a, q); got != want {
					t.Fatalf("%s dim %d: scoreStored %v, vector.Score %v", m, dim, got, want)
				}
			}
		}
	}
	if _, err := scoreStored(vector.Cosine, make([]byte, 15), make([]float32, 4)); err == nil {
		t.Fatal("15 bytes against a 4-dimensional query: no error")
	}
	if _, err := scoreStored(vector.Cosine, make([]byte, 12), make([]float32, 4)); err == nil {
		t.Fatal("3 components against a 4-dimensional query: no error")
	}
}

// BenchmarkScoreStored: one stored vector of 256 dimensions against one query, the
// inner loop of an exact scope search.
func BenchmarkScoreStored(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	a, q := make([]float32, 256), make([]float32, 256)
	for i := range a {
		a[i], q[i] = rng.Float32(), rng.Float32()
	}
	raw := EncodeVector(vector.Prepare(vector.Cosine, a))
	q = vector.Prepare(vector.Cosine, q)
	for _, m := range []vector.Metric{vector.Cosine, vector.L2} {
		b.Run(string(m), func(b *testing.B) {
			for b.Loop() {
				if _, err := scoreStored(m, raw, q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
