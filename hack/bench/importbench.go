package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
)

// The import benchmark: `memory-operator restore --import-kind=LangGraphPostgres` of a
// real LangGraph database (the seed's size: 500 users, about 800k messages), hashing
// embedder, into an empty store, against a plain \copy of the same checkpoint blobs
// (each thread's latest messages blob, what the import reads) out of PostgreSQL.

// benchImport measures the import of the LangGraph database at dsn (generated with
// test/importers/gen_langgraph.py when dsn is empty: about 11 minutes on 2 cores).
func (e *env) benchImport(ctx context.Context, dsn string, users, threads int, dims []int) error {
	if dsn == "" {
		var err error
		if dsn, err = e.generateLangGraph(ctx, users, threads); err != nil {
			return err
		}
	}
	src, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer src.Close()
	var threadsN int64
	if err := src.QueryRow(ctx, `SELECT count(DISTINCT thread_id) FROM checkpoints WHERE checkpoint_ns = ''`).Scan(&threadsN); err != nil {
		return fmt.Errorf("the import source is not a LangGraph database: %w", err)
	}
	fmt.Printf("\nImport benchmark: LangGraph PostgreSQL checkpointer, %d threads, into an empty store (hashing embedder, embedded index)\n\n", threadsN)

	// The reference reads every thread's latest messages blob, finding the latest
	// checkpoint the way the importer does (through the primary key): what a
	// hand-written export of the same data would do at best.
	latest := `SELECT b.blob FROM (SELECT DISTINCT thread_id FROM checkpoints WHERE checkpoint_ns = '') t
		CROSS JOIN LATERAL (SELECT checkpoint FROM checkpoints c WHERE c.thread_id = t.thread_id AND c.checkpoint_ns = '' ORDER BY checkpoint_id DESC LIMIT 1) l
		JOIN checkpoint_blobs b ON b.thread_id = t.thread_id AND b.checkpoint_ns = '' AND b.channel = 'messages' AND b.version = l.checkpoint->'channel_versions'->>'messages'`
	dump := filepath.Join(e.work, "blobs.copy")
	_ = os.Setenv("MEMORY_IMPORT_PG_URI", dsn)
	_ = os.Setenv("MEMORY_PG_URI", e.dsn)
	_ = os.Setenv("MEMORY_SOURCE_S3_ACCESS_KEY", e.s3Access)
	_ = os.Setenv("MEMORY_SOURCE_S3_SECRET_KEY", e.s3Secret)
	for _, dim := range dims {
		var imports, refs []measurement
		var stored int64
		for round := range benchRounds {
			runImport := func() error {
				if err := e.freshSchemas(ctx, "bench_import"); err != nil {
					return err
				}
				if err := pgindex.Ensure(ctx, e.pool, "bench_import", vector.Spec{Dimension: dim, Metric: vector.Cosine}); err != nil {
					return err
				}
				m, err := e.measure(fmt.Sprintf("memory-operator restore --import-kind=LangGraphPostgres, dim %d", dim), e.bin, "restore",
					"--source-endpoint="+e.s3Endpoint, "--source-insecure", "--source-bucket=bench",
					"--detail-key=imports/bench-"+time.Now().Format("150405.000")+"/detail.jsonl.zst",
					"--schema=bench_import", "--vector-engine=Postgres", "--embedding-model=memory-operator/hashing-v1",
					"--dimension="+strconv.Itoa(dim), "--metric=COSINE", "--embedder=Hashing", "--unmapped=Keep", "--conflict-policy=KeepNewer",
					"--import-kind=LangGraphPostgres", "--import-user-metadata-key=user_id", `--import-user-pattern=^u-(?P<user>[^:]+):`,
					"--import-inactive-after=168h", "--import-dir="+e.work)
				imports = append(imports, m)
				return err
			}
			runRef := func() error {
				m, err := e.measure(`psql "\copy (latest messages blobs) to file"`, "psql", dsn, "-X", "-q", "-c", `\copy (`+latest+`) TO `+dump)
				refs = append(refs, m)
				return err
			}
			order := []func() error{runImport, runRef}
			if round%2 == 1 {
				order[0], order[1] = order[1], order[0]
			}
			for _, f := range order {
				if err := f(); err != nil {
					return err
				}
			}
		}
		_ = e.pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{"bench_import", "memories"}.Sanitize()).Scan(&stored)
		imp, ref := medianMeasurement(imports), medianMeasurement(refs)
		fmt.Printf("%-60s %9.2fs %9.1f MiB\n", ref.name, ref.wall.Seconds(), ref.rssMiB)
		fmt.Printf("%-60s %9.2fs %9.1f MiB\n", imp.name, imp.wall.Seconds(), maxRSS(imports))
		fmt.Printf("  ratio import / \\copy of the same blobs: %.2fx (target <= 3x), peak RSS %.0f MiB (target <= 256 MiB); %d memories from %d threads (the seed's migration took 3 hours)\n",
			imp.wall.Seconds()/ref.wall.Seconds(), maxRSS(imports), stored, threadsN)
	}
	return nil
}

// maxRSS is the highest peak RSS of the runs.
func maxRSS(ms []measurement) float64 {
	peak := 0.0
	for _, m := range ms {
		peak = max(peak, m.rssMiB)
	}
	return peak
}

// generateLangGraph runs the real LangGraph generator into a fresh database.
func (e *env) generateLangGraph(ctx context.Context, users, threads int) (string, error) {
	const db = "bench_langgraph"
	if _, err := e.pool.Exec(ctx, `DROP DATABASE IF EXISTS `+db); err != nil {
		return "", err
	}
	if _, err := e.pool.Exec(ctx, `CREATE DATABASE `+db); err != nil {
		return "", err
	}
	cfg, err := pgx.ParseConfig(e.dsn)
	if err != nil {
		return "", err
	}
	dsn := fmt.Sprintf("postgres://%s:%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Password, cfg.Host, cfg.Port, db)
	fmt.Printf("generating %d users x %d threads with the real langgraph (about 11 minutes at the seed's size)...\n", users, threads)
	start := time.Now()
	c := exec.CommandContext(ctx, "bin/clients-venv/bin/python", "test/importers/gen_langgraph.py", "--postgres-dsn", dsn,
		"--users", strconv.Itoa(users), "--threads-per-user", strconv.Itoa(threads), "--turns", "13-25",
		"--durability", "exit", "--workers", "2", "--no-messages", "--out", filepath.Join(e.work, "expected.json"))
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	if err := c.Run(); err != nil {
		return "", fmt.Errorf("generating LangGraph data: %w", err)
	}
	fmt.Printf("generated in %s\n", time.Since(start).Round(time.Second))
	return dsn, nil
}
