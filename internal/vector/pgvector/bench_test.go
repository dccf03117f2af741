package pgvector_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/pgvector"
)

// The search benchmark: one scope of 100k clustered 384-dimensional vectors
// (MEMORY_BENCH_PGVECTOR_N overrides the size) and one of 10k beside it, searched
// through the HNSW index at several ef_search values and exactly, with recall@10 of
// each HNSW setting against the exact answer reported as a metric. The data stays in
// schema pgv_bench_<n> between runs (it takes minutes to load and index); drop the
// schema to rebuild it.
//
//	go test ./internal/vector/pgvector -run '^$' -bench BenchmarkSearch -benchtime 200x

const benchDim = 384

// clustered returns n vectors around 1000 centroids (embeddings of real text cluster
// by topic; uniform random vectors would make any ANN index look bad and exact search
// look typical).
func clustered(rng *rand.Rand, centroids [][]float32, n int) [][]float32 {
	out := make([][]float32, n)
	for i := range out {
		c := centroids[rng.IntN(len(centroids))]
		v := make([]float32, benchDim)
		for j := range v {
			v[j] = c[j] + float32(rng.NormFloat64()*0.35)
		}
		out[i] = v
	}
	return out
}

func BenchmarkSearch(b *testing.B) {
	n := 100_000
	if s := os.Getenv("MEMORY_BENCH_PGVECTOR_N"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	const small = 10_000
	ctx := context.Background()
	admin := openPool(b, testutil.PGVectorDSN(b), "", "")
	if _, err := pgvector.EnsureExtension(ctx, admin); err != nil {
		b.Fatal(err)
	}
	schema := fmt.Sprintf("pgv_bench_%d", n)
	spec := vector.Spec{Dimension: benchDim, Metric: vector.Cosine}
	rng := rand.New(rand.NewPCG(2026, 22))
	centroids := make([][]float32, 1000)
	for i := range centroids {
		centroids[i] = randomVector(rng, benchDim)
	}
	table := pgx.Identifier{schema, "embeddings"}.Sanitize()
	var have int
	_ = admin.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&have)
	if have != n+small {
		if _, err := admin.Exec(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE; CREATE SCHEMA `+schema+`;
			CREATE TABLE `+schema+`.store_meta (key text primary key, value text not null)`); err != nil {
			b.Fatal(err)
		}
		if err := pgvector.Ensure(ctx, admin, schema, spec, pgvector.DefaultParams()); err != nil {
			b.Fatal(err)
		}
		// As a restore into a new store would: load, then build the index.
		ix := pgvector.New(admin, schema, spec, pgvector.DefaultParams())
		if err := ix.DropSearchIndex(ctx); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for _, part := range []struct {
			scope string
			n     int
		}{{"user:big", n}, {"user:10k", small}} {
			for off := 0; off < part.n; off += 10_000 {
				vecs := clustered(rng, centroids, min(10_000, part.n-off))
				entries := make([]vector.Entry, len(vecs))
				for i, v := range vecs {
					entries[i] = vector.Entry{ID: fmt.Sprintf("%s-%07d", part.scope, off+i), Scope: part.scope, Type: "semantic", Vector: v}
				}
				if err := ix.Upsert(ctx, entries); err != nil {
					b.Fatal(err)
				}
			}
		}
		loaded := time.Since(start)
		start = time.Now()
		if err := ix.BuildSearchIndex(ctx, "1GB"); err != nil {
			b.Fatal(err)
		}
		if _, err := admin.Exec(ctx, `VACUUM ANALYZE `+table); err != nil {
			b.Fatal(err)
		}
		b.Logf("loaded %d vectors in %v (COPY), built the HNSW index in %v", n+small, loaded.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	}
	queries := clustered(rand.New(rand.NewPCG(7, 7)), centroids, 100)

	exactIx := pgvector.New(admin, schema, spec, pgvector.Params{ExactBelow: 1_000_000})
	truth := make([][]vector.Hit, len(queries))
	for i, q := range queries {
		hits, err := exactIx.Search(ctx, vector.Query{Scope: "user:big", Vector: q, K: 10})
		if err != nil {
			b.Fatal(err)
		}
		truth[i] = hits
	}
	run := func(name string, ix *pgvector.Index, scope string, withRecall bool) {
		b.Run(name, func(b *testing.B) {
			recall := func() {
				if !withRecall {
					return
				}
				found, total := 0, 0
				for i, q := range queries {
					hits, err := ix.Search(ctx, vector.Query{Scope: scope, Vector: q, K: 10})
					if err != nil {
						b.Fatal(err)
					}
					want := map[string]bool{}
					for _, h := range truth[i] {
						want[h.ID] = true
					}
					for _, h := range hits {
						if want[h.ID] {
							found++
						}
					}
					total += len(truth[i])
				}
				b.ReportMetric(float64(found)/float64(total), "recall@10")
			}
			exact0, ann0, fb0 := pgvector.Paths(ix)
			b.ResetTimer()
			for i := range b.N {
				if _, err := ix.Search(ctx, vector.Query{Scope: scope, Vector: queries[i%len(queries)], K: 10}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			exact1, ann1, fb1 := pgvector.Paths(ix)
			recall() // after the loop: ResetTimer drops reported metrics
			b.ReportMetric(float64(fb1-fb0)/float64(b.N), "redone/op")
			if name != "exact" && name != "exact-10k" && ann1-ann0+fb1-fb0 != int64(b.N) || (name == "exact" || name == "exact-10k") && exact1-exact0 != int64(b.N) {
				b.Fatalf("%s: paths exact %d, hnsw %d, redone %d for %d searches", name, exact1-exact0, ann1-ann0, fb1-fb0, b.N)
			}
		})
	}
	for _, ef := range []int{40, 100, 200} {
		run(fmt.Sprintf("hnsw-ef%d", ef), pgvector.New(admin, schema, spec, pgvector.Params{EfSearch: ef, ExactBelow: small}), "user:big", true)
	}
	run("exact", exactIx, "user:big", false)
	run("exact-10k", pgvector.New(admin, schema, spec, pgvector.Params{ExactBelow: small}), "user:10k", false)
}

// BenchmarkUpsertIndexed measures a load into a new PGVector store both ways: COPY
// into the table with its HNSW index in place, and DropSearchIndex, COPY,
// BuildSearchIndex (MEMORY_BENCH_PGVECTOR_UPSERT_N vectors of 384 dimensions,
// default 20k).
//
//	go test ./internal/vector/pgvector -run '^$' -bench BenchmarkUpsertIndexed -benchtime 1x
func BenchmarkUpsertIndexed(b *testing.B) {
	n := 20_000
	if s := os.Getenv("MEMORY_BENCH_PGVECTOR_UPSERT_N"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	admin := openPool(b, testutil.PGVectorDSN(b), "", "")
	if _, err := pgvector.EnsureExtension(ctx, admin); err != nil {
		b.Fatal(err)
	}
	spec := vector.Spec{Dimension: benchDim, Metric: vector.Cosine}
	rng := rand.New(rand.NewPCG(1, 1))
	centroids := make([][]float32, 1000)
	for i := range centroids {
		centroids[i] = randomVector(rng, benchDim)
	}
	vecs := clustered(rng, centroids, n)
	entries := make([]vector.Entry, n)
	for i, v := range vecs {
		entries[i] = vector.Entry{ID: fmt.Sprintf("m-%07d", i), Scope: "user:big", Type: "semantic", Vector: v}
	}
	load := func(b *testing.B, withIndex bool) time.Duration {
		schema := testutil.UniqueName("pgv_upsert_")
		if _, err := admin.Exec(ctx, `CREATE SCHEMA `+schema+`; CREATE TABLE `+schema+`.store_meta (key text primary key, value text not null)`); err != nil {
			b.Fatal(err)
		}
		defer func() { _, _ = admin.Exec(context.Background(), `DROP SCHEMA `+schema+` CASCADE`) }()
		if err := pgvector.Ensure(ctx, admin, schema, spec, pgvector.DefaultParams()); err != nil {
			b.Fatal(err)
		}
		ix := pgvector.New(admin, schema, spec, pgvector.DefaultParams())
		start := time.Now()
		if !withIndex {
			if err := ix.DropSearchIndex(ctx); err != nil {
				b.Fatal(err)
			}
		}
		for off := 0; off < n; off += 5000 {
			if err := ix.Upsert(ctx, entries[off:min(off+5000, n)]); err != nil {
				b.Fatal(err)
			}
		}
		if !withIndex {
			if err := ix.BuildSearchIndex(ctx, "1GB"); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	for range b.N {
		indexed := load(b, true)
		reference := load(b, false)
		b.ReportMetric(indexed.Seconds(), "s-indexed")
		b.ReportMetric(reference.Seconds(), "s-drop+copy+build")
		b.ReportMetric(indexed.Seconds()/reference.Seconds(), "ratio")
	}
}
