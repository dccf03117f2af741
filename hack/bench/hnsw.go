package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/vector/pgvector"
)

// The HNSW parameters benchmark (make bench-hnsw; the hnsw section): how pgvector's
// HNSW index trades build time against recall and search time on the engines
// benchmark's data, to choose the PGVector engine's defaults. The data (one scope of
// -engines-items clustered 384-dimensional vectors and -engines-small-scopes scopes
// of 100 beside it) is copied once into a table of the engine's shape on the pgvector
// server; then for each ef_construction of -hnsw-efc the index is built (m 16, the
// engine's operator class, -engines-index-memory) and the big scope searched at each
// ef_search of -hnsw-ef with the statement the engine runs (the scope filter, K 64 as
// the gateway asks for top_k 10, the vectors returned for re-ranking), one client.
// recall@10 is the first ten of the returned 64, ranked exactly, against the exact ten.

const (
	hnswSchema = "bench_hnsw"
	hnswK      = 64 // what the gateway asks the index for, for top_k 10
)

type hnswOptions struct {
	efcs, efs []int
	m         int
}

func (e *env) benchHNSW(ctx context.Context, o enginesOptions, h hnswOptions) error {
	dsn := os.Getenv("MEMORY_TEST_PGVECTOR_DSN")
	if dsn == "" {
		return fmt.Errorf("MEMORY_TEST_PGVECTOR_DSN unset: run through `make bench-hnsw`")
	}
	if o.clusters == 0 {
		o.clusters = min(4000, max(64, o.items/250))
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	var version, buffers string
	if err := pool.QueryRow(ctx, `SELECT extversion FROM pg_extension WHERE extname = 'vector'`).Scan(&version); err != nil {
		if _, err := pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS vector`); err != nil {
			return err
		}
		_ = pool.QueryRow(ctx, `SELECT extversion FROM pg_extension WHERE extname = 'vector'`).Scan(&version)
	}
	_ = pool.QueryRow(ctx, `SHOW shared_buffers`).Scan(&buffers)
	fmt.Printf("\nHNSW parameters: pgvector %s, shared_buffers %s; one scope of %d and %d scopes of %d, %d dimensions (%d centres), m %d, %d queries\n\n",
		version, buffers, o.items, o.smallScopes, engSmallSize, engDim, o.clusters, h.m, o.queries)

	syn := newSynthetic(o.seed, o.clusters)
	start := time.Now()
	big := make([][]float32, o.items)
	parallel(o.items, func(i int) { big[i] = syn.bigVector(i) })
	queries := make([][]float32, o.queries)
	exact := make([][]string, o.queries)
	parallel(o.queries, func(i int) {
		queries[i] = syn.queryVector(i)
		exact[i] = exactTop(queries[i], o.items, engTopK, func(j int) []float32 { return big[j] }, bigID)
	})
	fmt.Printf("exact answers computed in %.1fs\n", time.Since(start).Seconds())

	if _, err := pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+hnswSchema+` CASCADE; CREATE SCHEMA `+hnswSchema+`;
		CREATE TABLE `+hnswSchema+`.embeddings (memory_id text COLLATE "C" PRIMARY KEY, scope text COLLATE "C" NOT NULL,
			memory_type text COLLATE "C" NOT NULL, embedding vector(`+strconv.Itoa(engDim)+`) NOT NULL);
		CREATE INDEX ON `+hnswSchema+`.embeddings (scope, memory_type)`); err != nil {
		return err
	}
	defer func() { _, _ = pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+hnswSchema+` CASCADE`) }()
	start = time.Now()
	if err := hnswLoad(ctx, pool, syn, big, o.smallScopes); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE `+hnswSchema+`.embeddings`); err != nil {
		return err
	}
	fmt.Printf("loaded %d vectors in %.1fs\n\n", o.items+o.smallScopes*engSmallSize, time.Since(start).Seconds())

	fmt.Printf("%-16s %-10s %10s %10s %10s %10s\n", "ef_construction", "ef_search", "build", "p50", "p99", "recall@10")
	for _, efc := range h.efcs {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		start := time.Now()
		_, err = conn.Exec(ctx, fmt.Sprintf(`SET maintenance_work_mem = '%s'; DROP INDEX IF EXISTS %s.hnsw;
			CREATE INDEX hnsw ON %s.embeddings USING hnsw (embedding vector_ip_ops) WITH (m = %d, ef_construction = %d)`,
			o.indexMemory, hnswSchema, hnswSchema, h.m, efc))
		conn.Release()
		if err != nil {
			return err
		}
		build := time.Since(start)
		for _, ef := range h.efs {
			p50, p99, recall, err := hnswSearch(ctx, pool, queries, exact, ef)
			if err != nil {
				return err
			}
			fmt.Printf("%-16d %-10d %9.1fs %8.2fms %8.2fms %10.3f\n", efc, ef, build.Seconds(),
				float64(p50.Microseconds())/1000, float64(p99.Microseconds())/1000, recall)
		}
	}
	return nil
}

// hnswLoad copies the big scope's vectors and the small scopes' into the table as
// COPY text, from a pipe.
func hnswLoad(ctx context.Context, pool *pgxpool.Pool, syn *engSynthetic, big [][]float32, smallScopes int) error {
	pr, pw := io.Pipe()
	go func() {
		w := bufio.NewWriterSize(pw, 1<<20)
		var line []byte
		row := func(id, scope string, v []float32) {
			line = append(line[:0], id...)
			line = append(line, '\t')
			line = append(line, scope...)
			line = append(line, "\tsemantic\t["...)
			for j, x := range v {
				if j > 0 {
					line = append(line, ',')
				}
				line = strconv.AppendFloat(line, float64(x), 'g', -1, 32)
			}
			line = append(line, "]\n"...)
			_, _ = w.Write(line)
		}
		for i, v := range big {
			row(bigID(i), engBigScope, v)
		}
		for k := range smallScopes {
			for j := range engSmallSize {
				row(smallID(k, j), smallScope(k), syn.smallVector(k, j))
			}
		}
		pw.CloseWithError(w.Flush())
	}()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		_ = pr.Close()
		return err
	}
	defer conn.Release()
	_, err = conn.Conn().PgConn().CopyFrom(ctx, pr, `COPY `+hnswSchema+`.embeddings (memory_id, scope, memory_type, embedding) FROM STDIN`)
	_ = pr.Close()
	return err
}

// hnswSearch runs every query against the big scope at ef_search ef as the engine's
// ANN statement does, and returns its latency and recall@10.
func hnswSearch(ctx context.Context, pool *pgxpool.Pool, queries [][]float32, exact [][]string, ef int) (p50, p99 time.Duration, recall float64, err error) {
	const ann = `SELECT memory_id, embedding::real[] FROM ` + hnswSchema + `.embeddings WHERE scope = $1 ORDER BY embedding <#> $2::vector LIMIT $3`
	times := make([]time.Duration, 0, len(queries))
	found := 0
	for i, q := range queries {
		text := pgvector.TextVector(q)
		start := time.Now()
		b := &pgx.Batch{}
		b.Queue(`SELECT set_config('hnsw.ef_search', $1, true)`, strconv.Itoa(ef))
		b.Queue(ann, engBigScope, text, hnswK)
		br := pool.SendBatch(ctx, b)
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return 0, 0, 0, err
		}
		rows, err := br.Query()
		if err != nil {
			_ = br.Close()
			return 0, 0, 0, err
		}
		type hit struct {
			id string
			s  float32
		}
		var hits []hit
		for rows.Next() {
			var id string
			var v []float32
			if err := rows.Scan(&id, &v); err != nil {
				rows.Close()
				_ = br.Close()
				return 0, 0, 0, err
			}
			hits = append(hits, hit{id, dot(q, v)})
		}
		rows.Close()
		if err := br.Close(); err != nil {
			return 0, 0, 0, err
		}
		slices.SortFunc(hits, func(a, b hit) int {
			if a.s != b.s {
				if a.s > b.s {
					return -1
				}
				return 1
			}
			return strings.Compare(a.id, b.id)
		})
		times = append(times, time.Since(start))
		for _, h := range hits[:min(engTopK, len(hits))] {
			if slices.Contains(exact[i], h.id) {
				found++
			}
		}
	}
	slices.Sort(times)
	return times[len(times)/2], times[len(times)*99/100], float64(found) / float64(engTopK*len(queries)), nil
}
