package restore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/restore"
	"github.com/amemory/memory-operator/internal/snapshot"
)

// benchItems builds n items in n/10 user scopes, with realistic content: keyed
// preferences (a third with history), facts and events, and (dim > 0) embeddings.
func benchItems(n, dim int) []memory.Item {
	r := rand.New(rand.NewPCG(42, 42))
	words := []string{"coffee", "refund", "Berlin", "invoice", "flight", "vegetarian", "password", "delivery", "upgrade", "sushi"}
	types := []memory.Type{memory.Semantic, memory.Episodic, memory.Procedural}
	items := make([]memory.Item, n)
	for i := range items {
		at := testNow.Add(-time.Duration(r.IntN(1e6)) * time.Second)
		content, _ := json.Marshal(map[string]any{
			"text":   fmt.Sprintf("%s %s %s", words[r.IntN(len(words))], words[r.IntN(len(words))], words[r.IntN(len(words))]),
			"ticket": r.IntN(1e6), "confidence": float64(r.IntN(100)) / 100,
			"tags": []string{words[r.IntN(len(words))], words[r.IntN(len(words))]},
		})
		it := memory.Item{MemoryID: fmt.Sprintf("b%09d", i), MemoryType: types[r.IntN(len(types))],
			Scope: fmt.Sprintf("user:%07d", i/10), Content: content, Source: "redis-agent@1.4",
			BaseScore: float64(r.IntN(100)) / 100, CreatedAt: at, UpdatedAt: at}
		if i%10 < 3 {
			it.Key = fmt.Sprintf("preference.%d", i%10)
			if i%10 == 0 {
				old, _ := json.Marshal(map[string]string{"text": words[r.IntN(len(words))]})
				it.History = []memory.Revision{{Content: old, Source: "redis-agent@1.3", BaseScore: 0.5,
					UpdatedAt: at.Add(-time.Hour), SupersededAt: at}}
				it.CreatedAt = at.Add(-time.Hour)
			}
		}
		if dim > 0 {
			it.Embedding = make([]float32, dim)
			for j := range it.Embedding {
				it.Embedding[j] = r.Float32()*2 - 1
			}
		}
		items[i] = it
	}
	return items
}

// BenchmarkRestore restores 200,000 items in 20,000 scopes, every scope renamed by an
// exact map, into a fresh store per iteration, and reports items/s.
func BenchmarkRestore(b *testing.B) {
	const n = 200_000
	for _, bc := range []struct {
		name        string
		vectors     bool
		parallelism int
	}{
		{"defer", false, 1},
		{"defer-parallel2", false, 2},
		{"reuse-pgindex", true, 1},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e := newEnv(b)
			d := 0
			var info *snapshot.EmbeddingInfo
			if bc.vectors {
				d, info = dim, &snapshot.EmbeddingInfo{Model: hashingModel, Dimension: dim, Metric: "cosine"}
			}
			items := benchItems(n, d)
			pkg := e.writePackage(b, "bench/", items, pkgOptions{key: testKey, embedding: info, shardBytes: 16 << 20})
			mapper := exactMapper(b, items, restore.UnmappedFail)
			b.ResetTimer()
			var elapsed time.Duration
			for range b.N {
				b.StopTimer()
				dst := e.newStore(b)
				o := restore.Options{Reader: pkg, Target: dst.Store, Mapping: mapper, Now: testNow, Parallelism: bc.parallelism}
				if bc.vectors {
					o.Index, o.Embedder = dst.index, embed.NewHashing(dim)
				}
				b.StartTimer()
				start := time.Now()
				res, err := restore.Run(context.Background(), o)
				elapsed += time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				if res.Restored != n || res.Mapped != n || (bc.vectors && res.Vectors != n) {
					b.Fatalf("result %+v", res)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/elapsed.Seconds(), "items/s")
		})
	}
}
