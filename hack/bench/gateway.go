package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/gateway"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/memory/service"
	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/vector/milvus"
)

// The gateway benchmark: the same calls through `memory-operator gateway` (a real
// process, over HTTP on loopback) and in-process on service.Memory, against one store
// (embedded PostgreSQL index, hashing embedder), at 1, 8 and 32 concurrent clients.
// The ratios say what the HTTP hop, JSON and the key check cost.

const (
	gwDim         = 256
	gwScopes      = 1000
	gwBatch       = 1000
	gwRounds      = 1500 // calls per client count for search and single writes
	gwWarmup      = 100  // untimed calls per way before the timed ones (connections, caches)
	gwBatchCalls  = 6    // batch calls per client count, at least gwBatchRounds a client
	gwBatchRounds = 3
)

var gwWords = strings.Fields(`coffee tea hot iced refund order shipped address delivery window seat flight
	peanuts allergy lisbon porto berlin tokyo invoice payment card support agent ticket email phone
	weekend morning evening birthday gift discount coupon return warranty repair battery screen`)

func gwText(r *mrand.Rand, n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = gwWords[r.IntN(len(gwWords))]
	}
	return strings.Join(w, " ")
}

// gwClient is one way of making the calls: through the gateway or in-process.
type gwClient interface {
	search(ctx context.Context, scope, query string) error
	write(ctx context.Context, items []gateway.NewMemory) error
}

type inProcess struct{ mem *service.Memory }

func (c inProcess) search(ctx context.Context, scope, query string) error {
	_, err := c.mem.Search(ctx, service.SearchQuery{Scope: scope, Text: query, K: 10})
	return err
}

func (c inProcess) write(ctx context.Context, in []gateway.NewMemory) error {
	items := make([]memory.Item, len(in))
	for i, n := range in {
		items[i] = memory.Item{Scope: n.Scope, MemoryType: n.MemoryType, Content: n.Content, Source: "bench", BaseScore: 0.5}
	}
	_, err := c.mem.Write(ctx, items, service.WriteOptions{DedupThreshold: seedDedup})
	return err
}

type overHTTP struct {
	url, key string
	hc       *http.Client
}

func (c overHTTP) post(ctx context.Context, path string, body any) error {
	return (&gwCaller{url: c.url, key: c.key, hc: c.hc}).call(ctx, "POST", path, body, nil)
}

func (c overHTTP) search(ctx context.Context, scope, query string) error {
	return c.post(ctx, "/v1/search", gateway.SearchRequest{Scope: scope, Query: query, TopK: 10})
}

func (c overHTTP) write(ctx context.Context, items []gateway.NewMemory) error {
	if len(items) == 1 {
		return c.post(ctx, "/v1/memories", items[0])
	}
	return c.post(ctx, "/v1/memories/batch", gateway.BatchRequest{Memories: items})
}

// gwResult is one workload at one client count.
type gwResult struct {
	p50, p99 time.Duration
	perSec   float64 // calls (or memories, for batches) per second
}

// runLoad makes calls calls from clients goroutines and measures each.
func runLoad(ctx context.Context, clients, calls, perCall int, f func(ctx context.Context, r *mrand.Rand) error) (gwResult, error) {
	lat := make([]time.Duration, calls)
	var next atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := mrand.New(mrand.NewPCG(uint64(c), uint64(time.Now().UnixNano())))
			for {
				i := int(next.Add(1)) - 1
				if i >= calls {
					return
				}
				t0 := time.Now()
				if err := f(ctx, r); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	if p := firstErr.Load(); p != nil {
		return gwResult{}, *p
	}
	total := time.Since(start)
	slices.Sort(lat)
	return gwResult{p50: lat[len(lat)/2], p99: lat[len(lat)*99/100], perSec: float64(calls*perCall) / total.Seconds()}, nil
}

// gatewayOptions configure the gateway section.
type gatewayOptions struct {
	items  int      // memories in the store
	rows   []string // workloads to run (all when empty)
	engine string   // the store's vector engine: Postgres (the default) or PGVector
}

func (e *env) benchGateway(ctx context.Context, opt gatewayOptions) error {
	items := opt.items
	if opt.engine == "" {
		opt.engine = engine.Postgres
	}
	fmt.Printf("\nGateway benchmark: %d memories over %d scopes, hashing embedder (dim %d), %s engine;\n", items, gwScopes, gwDim, opt.engine)
	fmt.Printf("the same calls through `memory-operator gateway` over HTTP and in-process on service.Memory\n\n")
	st, mem, cleanup, err := e.seededGwStore(ctx, opt.engine, items)
	if err != nil {
		return err
	}
	defer cleanup()

	gw, err := e.startGateway(ctx, st)
	if err != nil {
		return err
	}
	defer gw.stop()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}, Timeout: time.Minute}
	via := map[string]gwClient{"gateway": overHTTP{url: gw.url, key: gw.key, hc: hc}, "in-process": inProcess{mem: mem}}

	type row struct {
		name     string
		clients  int
		gw, proc gwResult
	}
	var rows []row
	var seq atomic.Int64
	newMem := func(r *mrand.Rand) gateway.NewMemory {
		// Distinct text each time: a write, not an exact or near duplicate.
		return gateway.NewMemory{Scope: fmt.Sprintf("user:%d", r.IntN(gwScopes)), MemoryType: memory.Episodic,
			Content: json.RawMessage(fmt.Sprintf(`{"event":%q,"n":%d}`, gwText(r, 8), seq.Add(1)))}
	}
	// facts is a batch call of gwBatch semantic memories over scopes random scopes, or
	// over any scopes when scopes is 0.
	facts := func(scopes int) func(c gwClient) func(context.Context, *mrand.Rand) error {
		return func(c gwClient) func(context.Context, *mrand.Rand) error {
			return func(ctx context.Context, r *mrand.Rand) error {
				picked := make([]string, scopes)
				for i := range picked {
					picked[i] = fmt.Sprintf("user:%d", r.IntN(gwScopes))
				}
				b := make([]gateway.NewMemory, gwBatch)
				for i := range b {
					b[i] = newMem(r)
					b[i].MemoryType = memory.Semantic
					if scopes > 0 {
						b[i].Scope = picked[i%scopes]
					}
				}
				return c.write(ctx, b)
			}
		}
	}
	type workload struct {
		name           string
		calls, perCall int
		f              func(c gwClient) func(ctx context.Context, r *mrand.Rand) error
	}
	workloads := []workload{
		{"search", gwRounds, 1, func(c gwClient) func(context.Context, *mrand.Rand) error {
			return func(ctx context.Context, r *mrand.Rand) error {
				return c.search(ctx, fmt.Sprintf("user:%d", r.IntN(gwScopes)), gwText(r, 3))
			}
		}},
		{"write", gwRounds, 1, func(c gwClient) func(context.Context, *mrand.Rand) error {
			return func(ctx context.Context, r *mrand.Rand) error { return c.write(ctx, []gateway.NewMemory{newMem(r)}) }
		}},
		{"batch 1000", gwBatchCalls, gwBatch, func(c gwClient) func(context.Context, *mrand.Rand) error {
			return func(ctx context.Context, r *mrand.Rand) error {
				b := make([]gateway.NewMemory, gwBatch)
				for i := range b {
					b[i] = newMem(r)
				}
				return c.write(ctx, b)
			}
		}},
		// Facts, which the near-duplicate check applies to: each memory is searched
		// against its scope's facts before it is stored.
		{"batch facts", gwBatchCalls, gwBatch, facts(0)},
		// The same facts, a call's thousand over ten scopes (a pipeline extracting the
		// facts of a few users' conversations): concurrent calls rarely wait for one
		// another's near-duplicate locks, which a call over most scopes always does.
		{"facts 10 sc", gwBatchCalls, gwBatch, facts(10)},
	}
	for _, name := range opt.rows {
		if !slices.ContainsFunc(workloads, func(w workload) bool { return w.name == name }) {
			return fmt.Errorf("-gateway-rows: no workload %q", name)
		}
	}
	for _, c := range via {
		if _, err := runLoad(ctx, 8, gwWarmup, 1, workloads[0].f(c)); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		if _, err := runLoad(ctx, 8, gwWarmup, 1, workloads[1].f(c)); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	// The RSS target is for the single calls at 32 clients; batches (8 clients at most,
	// each holding 1000 memories and their vectors in one transaction) are reported
	// apart.
	var peakRSS, hwmSingle, batchRSS int64
	for _, w := range workloads {
		if len(opt.rows) > 0 && !slices.Contains(opt.rows, w.name) {
			continue
		}
		for _, clients := range []int{1, 8, 32} {
			if w.perCall > 1 && clients == 32 {
				continue // 32 concurrent 1000-memory batches is a bulk load, not an agent's traffic
			}
			calls := w.calls
			if w.perCall > 1 {
				// Every client makes several calls, so that the row measures clients
				// that keep writing, not one call each started at once (whose last
				// one to finish would be the row's time).
				calls = max(calls, gwBatchRounds*clients)
			}
			res, err := bothWays(ctx, via, clients, calls, w.perCall, w.f)
			if err != nil {
				return fmt.Errorf("%s at %d clients: %w", w.name, clients, err)
			}
			rows = append(rows, row{w.name, clients, res["gateway"], res["in-process"]})
			switch rss := gw.rssKB(); {
			case w.perCall > 1:
				batchRSS = max(batchRSS, rss)
			case clients == 32:
				peakRSS, hwmSingle = max(peakRSS, rss), gw.hwmKB()
			}
		}
	}
	hwm := gw.hwmKB()

	fmt.Printf("%-11s %7s | %10s %10s %12s | %10s %10s %12s | %7s %7s %9s\n", "call", "clients",
		"gw p50", "gw p99", "gw /s", "proc p50", "proc p99", "proc /s", "p50 x", "p99 x", "thru %")
	for _, r := range rows {
		fmt.Printf("%-11s %7d | %10s %10s %12.0f | %10s %10s %12.0f | %7.2f %7.2f %8.0f%%\n", r.name, r.clients,
			r.gw.p50.Round(time.Microsecond), r.gw.p99.Round(time.Microsecond), r.gw.perSec,
			r.proc.p50.Round(time.Microsecond), r.proc.p99.Round(time.Microsecond), r.proc.perSec,
			ratio(r.gw.p50, r.proc.p50), ratio(r.gw.p99, r.proc.p99), 100*r.gw.perSec/r.proc.perSec)
	}
	fmt.Printf("\n(per second: calls; for batches, memories; batch 1000 is episodic memories over any scopes, batch facts semantic ones, which the near-duplicate check searches, over any scopes, facts 10 sc the same over ten scopes a call)\n")
	fmt.Printf("targets: gateway p50 <= 1.3x and p99 <= 2x of in-process; batch throughput >= 50%%; gateway RSS <= 128 MiB at 32 clients\n")
	if peakRSS > 0 { // not when -gateway-rows left the 32-client runs out
		fmt.Printf("gateway RSS: %d MiB after the 32-client runs (peak resident %d MiB until then)\n", peakRSS>>10, hwmSingle>>10)
	}
	fmt.Printf("gateway RSS: %d MiB after the batches (peak resident %d MiB over the whole run)\n", batchRSS>>10, hwm>>10)
	return nil
}

// bothWays runs the same load through each client of via, alternating which goes
// first with the client count so neither always meets a warmer cache.
func bothWays(ctx context.Context, via map[string]gwClient, clients, calls, perCall int,
	f func(c gwClient) func(context.Context, *mrand.Rand) error) (map[string]gwResult, error) {
	order := []string{"gateway", "in-process"}
	if clients == 8 {
		order = []string{"in-process", "gateway"}
	}
	res := map[string]gwResult{}
	for _, name := range order {
		r, err := runLoad(ctx, clients, calls, perCall, f(via[name]))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		res[name] = r
	}
	return res, nil
}

// seededGwStore is gwStore with items memories over gwScopes scopes, analysed as
// autovacuum would within a minute of the seeding (without statistics the planner
// takes the 100k-row tables for small ones).
func (e *env) seededGwStore(ctx context.Context, en string, items int) (*engStore, *service.Memory, func(), error) {
	st, mem, cleanup, err := e.gwStore(ctx, en)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := gwSeed(ctx, mem, items); err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	if err := analyzeSchema(ctx, st.adminDSN, st.names.Schema); err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	return st, mem, cleanup, nil
}

// gwStore provisions the benchmark's store on engine en (Postgres or PGVector) as the
// operator does and opens the memory layer over it as the store's agent role.
func (e *env) gwStore(ctx context.Context, en string) (*engStore, *service.Memory, func(), error) {
	if en != engine.Postgres && en != engine.PGVector {
		return nil, nil, nil, fmt.Errorf("-gateway-engine %q: want %s or %s", en, engine.Postgres, engine.PGVector)
	}
	if en == engine.PGVector && os.Getenv("MEMORY_TEST_PGVECTOR_DSN") == "" {
		return nil, nil, nil, errors.New("-gateway-engine PGVector: MEMORY_TEST_PGVECTOR_DSN unset: run through `make bench` (SERVICES with pgvector)")
	}
	st, err := e.engineStore(ctx, en, gwDim)
	if err != nil {
		return nil, nil, nil, err
	}
	acfg, err := pgxpool.ParseConfig(st.agentURI)
	if err != nil {
		st.drop()
		return nil, nil, nil, err
	}
	acfg.MaxConns = 32 // as the gateway's pool
	pool, err := pgxpool.NewWithConfig(ctx, acfg)
	if err != nil {
		st.drop()
		return nil, nil, nil, err
	}
	cleanup := func() { pool.Close(); st.drop() }
	spec := vector.Spec{Dimension: gwDim, Metric: vector.Cosine}
	ix, closeIx, err := st.vectors.Open(ctx, pool, st.names.Schema, spec, engine.Login{})
	if err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	mem, err := service.New(pgstore.New(pool, st.names.Schema), ix, embed.NewHashing(gwDim))
	if err != nil {
		closeIx()
		cleanup()
		return nil, nil, nil, err
	}
	return st, mem, func() { closeIx(); cleanup() }, nil
}

// provisionStore creates a fresh store for tenant (dropping one left from an earlier
// run) with an embedded PostgreSQL vector index, as the operator does, and returns
// its names, the agent role's connection URI and a function that drops it.
func (e *env) provisionStore(ctx context.Context, tenant string, spec vector.Spec) (provision.Names, string, func(), error) {
	cfg, err := pgxpool.ParseConfig(e.dsn)
	if err != nil {
		return provision.Names{}, "", nil, err
	}
	admin := provision.PostgresConn{Host: cfg.ConnConfig.Host, Port: int(cfg.ConnConfig.Port), Database: cfg.ConnConfig.Database,
		SSLMode: "disable", User: cfg.ConnConfig.User, Password: cfg.ConnConfig.Password}
	names, err := provision.NamesFor(tenant, "")
	if err != nil {
		return provision.Names{}, "", nil, err
	}
	owner := "bench/" + tenant
	pw := provision.Passwords{Agent: "bench-agent-pw", Worker: "bench-worker-pw"}
	_ = provision.DeletePostgres(ctx, admin, names, owner)
	if _, err := provision.EnsurePostgres(ctx, admin, names, owner, pw); err != nil {
		return provision.Names{}, "", nil, err
	}
	drop := func() { _ = provision.DeletePostgres(context.Background(), admin, names, owner) }
	if _, err := provision.EnsureVectors(ctx, admin, nil, names, milvus.Owner{ID: owner}, spec); err != nil {
		drop()
		return provision.Names{}, "", nil, err
	}
	agent := admin
	agent.User, agent.Password = names.Role, pw.Agent
	return names, agent.URL(nil), drop, nil
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// gwSeed writes n memories over gwScopes scopes through the memory layer.
func gwSeed(ctx context.Context, mem *service.Memory, n int) error {
	start := time.Now()
	r := mrand.New(mrand.NewPCG(1, 2))
	for done := 0; done < n; done += gwBatch {
		items := make([]memory.Item, min(gwBatch, n-done))
		for i := range items {
			items[i] = memory.Item{Scope: fmt.Sprintf("user:%d", (done+i)%gwScopes), MemoryType: memory.AllTypes()[r.IntN(4)],
				Content: json.RawMessage(fmt.Sprintf(`{"text":%q,"n":%d}`, gwText(r, 10), done+i)), Source: "bench", BaseScore: r.Float64()}
		}
		if _, err := mem.Write(ctx, items, service.WriteOptions{}); err != nil {
			return err
		}
	}
	fmt.Printf("seeded %d memories in %s\n", n, time.Since(start).Round(time.Second))
	return nil
}

type gwProcess struct {
	cmd      *exec.Cmd
	url, key string
	started  time.Time
}

// startGateway runs `memory-operator gateway` over the store, as its Deployment does.
func (e *env) startGateway(ctx context.Context, st *engStore) (*gwProcess, error) {
	return e.startGatewayProcess(ctx, st.agentURI, gateway.Config{StoreNamespace: "bench", StoreName: st.names.Tenant, Schema: st.names.Schema,
		Vectors: st.vectors, Dimension: gwDim, Metric: "COSINE", Embedder: "Hashing",
		DedupThreshold: seedDedup, RateLimit: 1e9, RateBurst: 1 << 30, MaxBodyBytes: gateway.DefaultMaxBodyBytes, ShutdownGrace: 5 * time.Second})
}

// startGatewayProcess runs the gateway with cfg on a free loopback port, with one API
// key for every scope (cfg.Listen and cfg.KeysFile are filled in), connecting with
// uri, and waits until it is ready. The flags named in omit (e.g. "--dedup-threshold")
// are left out, so the binary's own defaults apply.
func (e *env) startGatewayProcess(ctx context.Context, uri string, cfg gateway.Config, omit ...string) (*gwProcess, error) {
	return e.startGatewayProcessEnv(ctx, uri, nil, cfg, omit...)
}

// startGatewayProcessEnv is startGatewayProcess with more environment (the store's
// Milvus login, which the gateway reads from there, never from flags).
func (e *env) startGatewayProcessEnv(ctx context.Context, uri string, environ []string, cfg gateway.Config, omit ...string) (*gwProcess, error) {
	key, err := gateway.GenerateKey()
	if err != nil {
		return nil, err
	}
	cfg.KeysFile = filepath.Join(e.work, cfg.StoreNamespace+"-gateway-keys.json")
	b, _ := json.Marshal(gateway.KeyFile{Keys: []gateway.KeyEntry{{Name: cfg.StoreNamespace, SHA256: gateway.HashKey(key), Scopes: []string{"*"}}}})
	if err := os.WriteFile(cfg.KeysFile, b, 0o600); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	cfg.Listen = ln.Addr().String()
	_ = ln.Close()
	args := []string{"gateway"}
	for _, a := range cfg.Args() {
		name, _, _ := strings.Cut(a, "=")
		if !slices.Contains(omit, name) {
			args = append(args, a)
		}
	}
	cmd := exec.CommandContext(ctx, e.bin, args...)
	cmd.Env = append(append(os.Environ(), environ...), gateway.EnvPostgresURI+"="+uri)
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	g := &gwProcess{cmd: cmd, url: "http://" + cfg.Listen, key: key, started: time.Now()}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(g.url + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == 200 {
				return g, nil
			}
		}
		if time.Now().After(deadline) {
			g.stop()
			return nil, errors.New("the gateway did not become ready within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (g *gwProcess) stop() {
	_ = g.cmd.Process.Signal(os.Interrupt)
	_ = g.cmd.Wait()
}

func (g *gwProcess) status(field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", g.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

func (g *gwProcess) rssKB() int64 { return g.status("VmRSS") }
func (g *gwProcess) hwmKB() int64 { return g.status("VmHWM") }

// seedDedup is the seeds' near-duplicate threshold, which the gateway no longer
// defaults to (it calibrates one per model, embed.Calibrate); kept here so this
// benchmark measures what it measured.
const seedDedup = 0.9

// analyzeSchema runs ANALYZE on every table of schema, as the admin, and prints the
// server's shared_buffers beside the schema's size.
func analyzeSchema(ctx context.Context, dsn, schema string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(ctx) }()
	rows, err := conn.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = $1`, schema)
	if err != nil {
		return err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, t := range tables {
		if _, err := conn.Exec(ctx, `ANALYZE `+pgx.Identifier{schema, t}.Sanitize()); err != nil {
			return fmt.Errorf("analyze %s.%s: %w", schema, t, err)
		}
	}
	// The rows that read many scopes depend on whether the store's tables stay in
	// shared_buffers (PostgreSQL scans a table over a quarter of it through a small
	// ring), so the run says how the two compare.
	var buffers, schemaSize string
	if err := conn.QueryRow(ctx, `SELECT current_setting('shared_buffers'),
		pg_size_pretty(sum(pg_total_relation_size(c.oid))) FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'`,
		schema).Scan(&buffers, &schemaSize); err != nil {
		return err
	}
	fmt.Printf("PostgreSQL shared_buffers %s; the store's tables with their indexes: %s\n", buffers, schemaSize)
	return nil
}
