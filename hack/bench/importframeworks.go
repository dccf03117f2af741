package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"

	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
)

// The frameworks' import benchmark (the import section, after LangGraph's): each
// framework's data at a size its users reach, written by the framework itself
// (test/importers/gen_*.py in bin/frameworks-venv/NAME; generated once and kept in
// bin/bench-data), imported with `memory-operator restore --import-kind=...` from
// MinIO into an empty store (hashing embedder, dimension 8, embedded index), side by
// side with a plain read of the same files (`sqlite3 FILE .dump` to a file), three
// rounds in rotating order, medians compared.

type frameworkBench struct {
	name      string   // the import kind
	venv      string   // bin/frameworks-venv/<venv>
	script    string   // test/importers/<script>
	genArgs   []string // the data set's size
	files     []string // the data's files, relative to its directory
	importArg func(objects []string) []string
	what      string // what the data set is, for the report
}

func frameworkBenches(mem0Users, mem0PerUser, liUsers, liSessions, liTurns, crewAICrews, crewAITasks int) []frameworkBench {
	return []frameworkBench{
		{name: "Mem0", venv: "mem0", script: "gen_mem0.py",
			genArgs: []string{"--users", strconv.Itoa(mem0Users), "--memories-per-user", strconv.Itoa(mem0PerUser), "--no-truth"},
			files:   []string{"chroma/chroma.sqlite3", "history.db"},
			importArg: func(o []string) []string {
				return []string{"--import-object=" + o[0], "--import-history-object=" + o[1]}
			},
			what: fmt.Sprintf("mem0 (Chroma + history), %d users x %d memories", mem0Users, mem0PerUser)},
		{name: "LlamaIndexChatStore", venv: "llamaindex", script: "gen_llamaindex.py",
			genArgs: []string{"--users", strconv.Itoa(liUsers), "--sessions", strconv.Itoa(liSessions), "--turns", strconv.Itoa(liTurns),
				"--stores", "sqlite", "--no-truth"},
			files: []string{"chat_store.db"},
			importArg: func(o []string) []string {
				return []string{"--import-object=" + o[0], `--import-user-pattern=^u-(?P<user>[^:]+):`}
			},
			what: fmt.Sprintf("LlamaIndex SQLiteChatStore, %d users x %d sessions x %d turns", liUsers, liSessions, liTurns)},
		{name: "CrewAI", venv: "crewai", script: "gen_crewai.py",
			genArgs: []string{"--bulk-crews", strconv.Itoa(crewAICrews), "--bulk-tasks", strconv.Itoa(crewAITasks)},
			files:   []string{"long_term_memory_storage.db", "chroma.sqlite3"},
			importArg: func(o []string) []string {
				return []string{"--import-object=" + o[0], "--import-chroma-object=" + o[1]}
			},
			what: fmt.Sprintf("CrewAI (long-term SQLite + Chroma), %d crews x %d tasks (a long-term row, a short-term record and an entity each)",
				crewAICrews, crewAITasks)},
	}
}

func (e *env) benchImportFrameworks(ctx context.Context, benches []frameworkBench) error {
	if _, err := exec.LookPath("sqlite3"); err != nil {
		return fmt.Errorf("the reference reads SQLite files with sqlite3: install Debian's sqlite3 (%v)", err)
	}
	_ = os.Setenv("MEMORY_PG_URI", e.dsn)
	_ = os.Setenv("MEMORY_SOURCE_S3_ACCESS_KEY", e.s3Access)
	_ = os.Setenv("MEMORY_SOURCE_S3_SECRET_KEY", e.s3Secret)
	for _, b := range benches {
		dir, err := e.frameworkData(ctx, b)
		if err != nil {
			return err
		}
		var objects []string
		var size int64
		for _, f := range b.files {
			key := "imports-bench/" + b.venv + "/" + f
			info, err := e.s3.FPutObject(ctx, "bench", key, filepath.Join(dir, f), minio.PutObjectOptions{})
			if err != nil {
				return err
			}
			objects, size = append(objects, key), size+info.Size
		}
		fmt.Printf("\nImport benchmark: %s (%.1f MiB of files), into an empty store (hashing embedder, embedded index)\n\n", b.what, float64(size)/(1<<20))
		var imports, refs []measurement
		var stored int64
		for round := range benchRounds {
			runImport := func() error {
				if err := e.freshSchemas(ctx, "bench_import"); err != nil {
					return err
				}
				if err := pgindex.Ensure(ctx, e.pool, "bench_import", vector.Spec{Dimension: 8, Metric: vector.Cosine}); err != nil {
					return err
				}
				args := append([]string{"restore", "--source-endpoint=" + e.s3Endpoint, "--source-insecure", "--source-bucket=bench",
					"--detail-key=imports/bench-" + time.Now().Format("150405.000") + "/detail.jsonl.zst",
					"--schema=bench_import", "--vector-engine=Postgres", "--embedding-model=memory-operator/hashing-v1",
					"--dimension=8", "--metric=COSINE", "--embedder=Hashing", "--unmapped=Keep", "--conflict-policy=KeepNewer",
					"--import-kind=" + b.name, "--import-dir=" + e.work}, b.importArg(objects)...)
				m, err := e.measure("memory-operator restore --import-kind="+b.name, e.bin, args...)
				imports = append(imports, m)
				return err
			}
			runRef := func() error {
				var script []string
				for i, f := range b.files {
					script = append(script, fmt.Sprintf("sqlite3 %q .dump > %q", filepath.Join(dir, f), filepath.Join(e.work, fmt.Sprintf("dump-%d.sql", i))))
				}
				m, err := e.measure("sqlite3 .dump of the same files", "sh", "-c", strings.Join(script, " && "))
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
		fmt.Printf("  ratio import / sqlite3 .dump: %.2fx, peak RSS %.0f MiB (target <= 256 MiB); %d memories stored\n",
			imp.wall.Seconds()/ref.wall.Seconds(), maxRSS(imports), stored)
	}
	return nil
}

// frameworkData generates b's data with the framework itself, once: it is kept in
// bin/bench-data/<venv>-<args> and reused by later runs.
func (e *env) frameworkData(ctx context.Context, b frameworkBench) (string, error) {
	dir, err := filepath.Abs(filepath.Join("bin", "bench-data", b.venv+"-"+strings.Join(b.genArgs, "_")))
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, "complete")); err == nil {
		return dir, nil
	}
	_ = os.RemoveAll(dir)
	fmt.Printf("generating %s with the real %s (once; kept in %s)...\n", b.what, b.venv, dir)
	start := time.Now()
	c := exec.CommandContext(ctx, filepath.Join("bin", "frameworks-venv", b.venv, "bin", "python"),
		append([]string{filepath.Join("test", "importers", b.script), "--path", dir}, b.genArgs...)...)
	c.Env = append(os.Environ(), "MEM0_TELEMETRY=False", "ANONYMIZED_TELEMETRY=False", "MEM0_DIR="+filepath.Join(dir, "home"))
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	if err := c.Run(); err != nil {
		return "", fmt.Errorf("generating %s data (run `hack/install-tools.sh frameworks`): %w", b.venv, err)
	}
	fmt.Printf("generated in %s\n", time.Since(start).Round(time.Second))
	return dir, os.WriteFile(filepath.Join(dir, "complete"), nil, 0o644)
}
