package worker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
)

// BenchmarkSnapshot exports 200k memories to MinIO (compressed and encrypted) per
// iteration; `make bench` compares the whole worker process with reference tools.
func BenchmarkSnapshot(b *testing.B) {
	f := newFixture(b)
	ctx := context.Background()
	const n = 200_000
	i := 0
	if _, err := f.store.Import(ctx, func() (memory.Item, bool, error) {
		if i == n {
			return memory.Item{}, false, nil
		}
		i++
		return mem(fmt.Sprintf("m%07d", i), fmt.Sprintf("user:%06d", i/20), memory.Semantic, "",
			fmt.Sprintf("memory number %d about coffee, trains and the weather in Lisbon", i), time.Duration(i)*time.Second), true, nil
	}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		cfg := f.config(fmt.Sprintf("bench/%d/", it))
		if _, err := RunSnapshot(ctx, cfg, f.sec, RunOptions{Now: testNow}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "items/s")
}
