package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/service"
	"github.com/amemory/memory-operator/internal/vector"
)

// singleSearches hides an index's SearchMany, so a batch searches one query at a time
// as it did before the engines had it (the reference of BenchmarkWriteBatchSemantic).
type singleSearches struct{ vector.Index }

// BenchmarkWriteBatchSemantic: batches of 1,000 semantic memories over 600 scopes with
// the near-duplicate check on, into a store already holding 20,000, on the embedded
// engine: its SearchMany ("many") against one search per memory ("single").
func BenchmarkWriteBatchSemantic(b *testing.B) {
	for _, mode := range []string{"many", "single"} {
		b.Run(mode, func(b *testing.B) {
			var wrap func(vector.Index) vector.Index
			if mode == "single" {
				wrap = func(ix vector.Index) vector.Index { return singleSearches{ix} }
			}
			e := newEnv(b, backends[0], wrap)
			rng := rand.New(rand.NewPCG(1, 2))
			batch := func(n int) []memory.Item {
				items := make([]memory.Item, n)
				for i := range items {
					c, _ := json.Marshal(map[string]string{"text": fmt.Sprintf("fact %d about topic %d and %d", rng.IntN(1_000_000), rng.IntN(500), rng.IntN(500))})
					items[i] = memory.Item{MemoryType: memory.Semantic, Scope: fmt.Sprintf("user:%d", rng.IntN(600)), Content: c, Source: "bench", BaseScore: 0.5}
				}
				return items
			}
			ctx := context.Background()
			for range 20 {
				if _, err := e.mem.Write(ctx, batch(1000), service.WriteOptions{DedupThreshold: 0.95}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for range b.N {
				if _, err := e.mem.Write(ctx, batch(1000), service.WriteOptions{DedupThreshold: 0.95}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*1000)/b.Elapsed().Seconds(), "memories/s")
		})
	}
}
