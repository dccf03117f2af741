package pgindex_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
)

// BenchmarkSearchScope is one search of a scope of n memories (the embedded engine
// scans its scope exactly): the cost a gateway search pays on the dense channel.
func BenchmarkSearchScope(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		for _, dim := range []int{256, 384} {
			b.Run(fmt.Sprintf("n=%d/dim=%d", n, dim), func(b *testing.B) {
				pool := connect(b)
				schema := newSchema(b, pool, testutil.UniqueName("bench_"))
				spec := vector.Spec{Dimension: dim, Metric: vector.Cosine}
				ix := pgindex.New(pool, schema, spec)
				r := rand.New(rand.NewPCG(1, 2))
				vec := func() []float32 {
					v := make([]float32, dim)
					for i := range v {
						v[i] = float32(r.NormFloat64())
					}
					return v
				}
				entries := make([]vector.Entry, 0, 500)
				for i := range n {
					entries = append(entries, vector.Entry{ID: fmt.Sprintf("m%06d", i), Scope: "user:1", Type: "episodic", Vector: vec()})
					if len(entries) == cap(entries) || i == n-1 {
						if err := ix.Upsert(context.Background(), entries); err != nil {
							b.Fatal(err)
						}
						entries = entries[:0]
					}
				}
				q := vec()
				b.ResetTimer()
				for b.Loop() {
					if _, err := ix.Search(context.Background(), vector.Query{Scope: "user:1", Vector: q, K: 64}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
