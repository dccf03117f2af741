package main

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/memory/service"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
)

// benchSwitch measures an embedding switch (memorystore_switch.go) of a store of
// items memories with the hashing embedder, 8 to 16 dimensions: the reembed worker
// filling generation 2 (no rate limit), beside the plain alternative, a restore of
// the store's package into a new store re-embedding at 16 dimensions, in one run.
// Searches of the serving index run throughout: their p50/p99 before the switch and
// during it.
func (e *env) benchSwitch(ctx context.Context, items int) error {
	fmt.Printf("\nEmbedding switch benchmark: %d memories, hashing 8 -> 16 dimensions\n\n", items)
	const schema, ref = "bench_switch", "bench_switch_ref"
	if err := e.generate(ctx, schema, items); err != nil {
		return err
	}
	if _, err := e.measure("snapshot for the switch benchmark", e.bin, e.snapshotArgs(schema, "switch")...); err != nil {
		return err
	}
	pkg := e.lastPrefix
	restoreArgs := func(target string, dim int) []string {
		return []string{"restore", "--schema=" + target, "--detail-key=" + pkg + "restores/" + target + "/detail.jsonl.zst",
			"--source-endpoint=" + e.s3Endpoint, "--source-insecure", "--source-bucket=bench", "--source-prefix=" + pkg,
			"--vector-engine=Postgres", "--embedding-model=memory-operator/hashing-v1", fmt.Sprintf("--dimension=%d", dim), "--metric=COSINE",
			"--embedder=Hashing", "--embeddings=Reembed", "--unmapped=Keep", "--conflict-policy=Overwrite", "--skip-sessions",
			"--types=working,episodic,semantic,procedural"}
	}
	// The serving store: the same memories, with their 8-dimensional vectors.
	if err := e.freshSchemas(ctx, schema+"_live", ref); err != nil {
		return err
	}
	live := schema + "_live"
	for s, dim := range map[string]int{live: 8, ref: 16} {
		if err := pgindex.Ensure(ctx, e.pool, s, vector.Spec{Dimension: dim, Metric: vector.Cosine}); err != nil {
			return err
		}
	}
	if _, err := e.measure("restore into the serving store (8 dimensions)", e.bin, restoreArgs(live, 8)...); err != nil {
		return err
	}
	reference, err := e.measure(fmt.Sprintf("restore re-embedding at 16 dimensions, %d memories", items), e.bin, restoreArgs(ref, 16)...)
	if err != nil {
		return err
	}

	// The switch: generation 2's table and record, then the worker, searched meanwhile.
	spec16 := vector.Spec{Dimension: 16, Metric: vector.Cosine}
	if err := pgindex.EnsureTable(ctx, e.pool, live, "vectors_g2", spec16); err != nil {
		return err
	}
	if _, err := pgstore.StartGeneration(ctx, e.pool, live,
		pgstore.Generation{Number: 1, Model: "memory-operator/hashing-v1", Dimension: 8, Location: "vectors"},
		pgstore.Generation{Number: 2, Model: "memory-operator/hashing-v1", Dimension: 16, Location: "vectors_g2"}); err != nil {
		return err
	}
	searcher, err := service.New(pgstore.New(e.pool, live), pgindex.New(e.pool, live, vector.Spec{Dimension: 8, Metric: vector.Cosine}), embed.NewHashing(8))
	if err != nil {
		return err
	}
	if _, err := searchLatencies(ctx, searcher, items, 500, nil); err != nil { // warm-up
		return err
	}
	before, err := searchLatencies(ctx, searcher, items, 2000, nil)
	if err != nil {
		return err
	}
	stop := make(chan struct{})
	var during []time.Duration
	var searchErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		during, searchErr = searchLatencies(ctx, searcher, items, 0, stop)
	}()
	sw, err := e.measure(fmt.Sprintf("memory-operator reembed, %d memories", items), e.bin, "reembed", "--schema="+live, "--generation=2",
		"--vector-engine=Postgres", "--vector-table=vectors_g2", "--embedder=Hashing", "--dimension=16", "--metric=COSINE",
		"--batch=1000", "--sample-scopes=20", "--sample-queries=5")
	close(stop)
	wg.Wait()
	if err != nil {
		return err
	}
	if searchErr != nil {
		return searchErr
	}
	fmt.Printf("\n%-60s %9.2fs %9.1f MiB\n%-60s %9.2fs %9.1f MiB\n", reference.name, reference.wall.Seconds(), reference.rssMiB, sw.name, sw.wall.Seconds(), sw.rssMiB)
	fmt.Printf("re-embed rate: switch %.0f memories/s, restore %.0f memories/s\n", float64(items)/sw.wall.Seconds(), float64(items)/reference.wall.Seconds())
	fmt.Printf("ratio switch / restore re-embedding: %.2fx\n", sw.wall.Seconds()/reference.wall.Seconds())
	p := func(d []time.Duration, q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	fmt.Printf("search of the serving index: before p50 %s p99 %s (%d searches); during p50 %s p99 %s (%d searches)\n",
		p(before, 0.5), p(before, 0.99), len(before), p(during, 0.5), p(during, 0.99), len(during))
	fmt.Printf("ratio search p99 during / before: %.2fx   (target <= 2x)\n", float64(p(during, 0.99))/float64(p(before, 0.99)))
	_, err = e.pool.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE; DROP SCHEMA `+live+` CASCADE; DROP SCHEMA `+ref+` CASCADE`)
	return err
}

// searchPace is the agents' search load during the measurements: a steady 200
// searches a second (one search at a time), not as many as one core can run.
const searchPace = 5 * time.Millisecond

// searchLatencies times searches of random users' scopes (generate makes about 20
// memories a user) at searchPace: n of them, or until stop closes. Sorted.
func searchLatencies(ctx context.Context, m *service.Memory, items, n int, stop <-chan struct{}) ([]time.Duration, error) {
	rng := mrand.New(mrand.NewPCG(7, uint64(items)))
	var out []time.Duration
	words := []string{"coffee refund", "berlin jazz", "window seat morning", "peanuts allergy", "premium plan support"}
	tick := time.NewTicker(searchPace)
	defer tick.Stop()
	for i := 0; n == 0 || i < n; i++ {
		<-tick.C
		if stop != nil {
			select {
			case <-stop:
				slices.Sort(out)
				return out, nil
			default:
			}
		}
		scope := fmt.Sprintf("user:%07d", rng.IntN(max(items/20, 1)))
		start := time.Now()
		if _, err := m.Search(ctx, service.SearchQuery{Scope: scope, Text: words[i%len(words)], K: 10}); err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
	}
	slices.Sort(out)
	return out, nil
}
