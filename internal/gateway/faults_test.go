package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
)

func init() {
	// Pending index work is taken over by the drainer after this long in tests.
	drainMinAge = 300 * time.Millisecond
	drainEvery = 200 * time.Millisecond
	indexRetryAfter = time.Second
}

// TestPendingIndexSurvivesMilvusOutage: with Milvus stopped, writes are still
// acknowledged (stored in PostgreSQL, indexed false) and searches answer 503 with a
// clear code; once Milvus is back the gateway indexes every acknowledged write in the
// background, and deletes done meanwhile leave no vector behind.
func TestPendingIndexSurvivesMilvusOutage(t *testing.T) {
	mil := testutil.StartMilvusLite(t)
	k := newTestKey(t, "k", false, "*")
	logs := &syncBuffer{}
	e := newEnv(t, envOptions{engine: "Milvus", milvus: mil.Addr, keys: []testKey{k}, dedup: 0.9, logs: logs})
	defer checkLogs(t, logs, k.plain, "lisbon warehouse", "Porto")

	remember := func(n int) WriteResponse {
		var w WriteResponse
		e.must(201, k.plain, "POST", "/v1/memories", NewMemory{Scope: "user:9", MemoryType: memory.Episodic,
			Content: json.RawMessage(fmt.Sprintf(`{"event":"order %d shipped to lisbon warehouse %d"}`, n, n*7919))}, &w)
		return w
	}
	before := remember(1)
	if !before.Indexed {
		t.Fatalf("with Milvus up: %+v", before)
	}
	doomed := remember(2)
	doomedText := fmt.Sprintf(`event: order %d shipped to lisbon warehouse %d`, 2, 2*7919)

	mil.Stop()
	start := time.Now()
	defer func() { t.Logf("writes while Milvus was down took %s in all", time.Since(start)) }()
	var during []WriteResponse
	for n := 3; n < 8; n++ {
		w := remember(n)
		if w.Indexed {
			t.Fatalf("write %d reported indexed with Milvus down", n)
		}
		during = append(during, w)
	}
	var batch BatchResponse
	e.must(200, k.plain, "POST", "/v1/memories/batch", BatchRequest{Memories: []NewMemory{
		{Scope: "user:9", MemoryType: memory.Semantic, Key: "city", Content: json.RawMessage(`{"city":"Porto"}`)},
	}}, &batch)
	e.must(204, k.plain, "DELETE", "/v1/memories/"+doomed.MemoryID, nil, nil)
	t.Logf("6 writes and a delete acknowledged with Milvus down in %s", time.Since(start).Round(time.Millisecond))
	eb := e.wantError(503, CodeIndexDown, k.plain, "POST", "/v1/search", SearchRequest{Scope: "user:9", Query: "order shipped"})
	t.Logf("search while Milvus is down: %s", eb.Error.Message)
	// Reads that need only PostgreSQL still work.
	var l ListResponse
	e.must(200, k.plain, "GET", "/v1/scopes/user:9/memories", nil, &l)
	if len(l.Memories) != 7 {
		t.Fatalf("list while Milvus is down: %d memories, want 7", len(l.Memories))
	}
	if st, err := e.gw.Memory.Pending(context.Background()); err != nil || st.Count != 7 {
		t.Fatalf("pending index work = %+v, %v; want 7 (5 writes, the batch, the delete)", st, err)
	}

	mil.Start()
	want := map[string]bool{before.MemoryID: true, batch.Results[0].MemoryID: true}
	for _, w := range during {
		want[w.MemoryID] = true
	}
	waitFor(t, 90*time.Second, func() bool {
		st, err := e.gw.Memory.Pending(context.Background())
		return err == nil && st.Count == 0
	})
	// Every acknowledged write is searchable, the deleted one is not.
	var sr SearchResponse
	e.must(200, k.plain, "POST", "/v1/search", SearchRequest{Scope: "user:9", Query: "order shipped lisbon warehouse", TopK: 20}, &sr)
	got := map[string]bool{}
	for _, r := range sr.Results {
		got[r.Memory.MemoryID] = true
	}
	for id := range want {
		if !got[id] && id != batch.Results[0].MemoryID {
			t.Errorf("acknowledged memory %s is not searchable after Milvus came back", id)
		}
	}
	if got[doomed.MemoryID] {
		t.Errorf("memory %s deleted while Milvus was down is still returned", doomed.MemoryID)
	}
	e.must(200, k.plain, "POST", "/v1/search", SearchRequest{Scope: "user:9", Query: "city Porto"}, &sr)
	if len(sr.Results) == 0 || sr.Results[0].Memory.MemoryID != batch.Results[0].MemoryID {
		t.Errorf("the batch write made while Milvus was down is not found: %+v", sr.Results)
	}
	// And the vector of the deleted memory is gone from Milvus itself.
	hits, err := e.gw.index.Search(context.Background(), vectorQuery(t, "user:9", doomedText))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hits {
		if h.ID == doomed.MemoryID {
			t.Errorf("Milvus still holds the vector of %s", doomed.MemoryID)
		}
	}
}

// TestPostgresDown: with PostgreSQL unreachable the gateway starts, is not ready, and
// refuses every call with 503 and Retry-After: it never acknowledges what it did not
// store.
func TestPostgresDown(t *testing.T) {
	k := newTestKey(t, "k", false, "*")
	e := newEnv(t, envOptions{keys: []testKey{k}, noService: true})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	e.start("postgres://nobody:secret@" + dead + "/postgres?sslmode=disable&connect_timeout=2")
	code, _ := e.call("", "GET", "/readyz", nil, nil)
	if code != 503 {
		t.Fatalf("readyz with PostgreSQL down: %d", code)
	}
	eb := e.wantError(503, CodeDatabaseDown, k.plain, "POST", "/v1/memories", NewMemory{Scope: "user:1", MemoryType: memory.Semantic, Content: json.RawMessage(`{"a":1}`)})
	if eb.Error.Message == "" {
		t.Fatal("no message")
	}
	e.wantError(503, CodeDatabaseDown, k.plain, "GET", "/v1/scopes/user:1/memories", nil)
}

// TestRequestTimeWhileTheDatabaseWorks: a write that waits past the request's time
// for a lock another session holds is a timeout that says so, not a database "not
// answering": the database answered everything, the request ran out of time.
func TestRequestTimeWhileTheDatabaseWorks(t *testing.T) {
	k := newTestKey(t, "k", false, "*")
	e := newEnv(t, envOptions{keys: []testKey{k}, config: func(c *Config) { c.RequestTimeout = time.Second }})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.admin.URL(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE `+pgx.Identifier{e.names.Schema, "memories"}.Sanitize()+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	one := NewMemory{Scope: "user:1", MemoryType: memory.Semantic, Content: json.RawMessage(`{"a":1}`)}
	eb := e.wantError(503, CodeTimeout, k.plain, "POST", "/v1/memories", one)
	if !strings.Contains(eb.Error.Message, "did not finish in time") {
		t.Errorf("message: %q", eb.Error.Message)
	}
	eb = e.wantError(503, CodeTimeout, k.plain, "POST", "/v1/memories/batch", BatchRequest{Memories: []NewMemory{one}})
	if !strings.Contains(eb.Error.Message, "stored 0 of 1") {
		t.Errorf("batch message: %q", eb.Error.Message)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	e.must(201, k.plain, "POST", "/v1/memories", one, nil)
}

// vectorQuery embeds text as the gateway does and asks for everything of scope.
func vectorQuery(t *testing.T, scope, text string) vector.Query {
	t.Helper()
	v, err := embed.NewHashing(testDim).Embed(context.Background(), embed.Passage, []string{text})
	if err != nil {
		t.Fatal(err)
	}
	return vector.Query{Scope: scope, Vector: v[0], K: 100}
}

// checkLogs fails when the gateway's log holds a key or any of the memory contents
// given, and when it holds no lines at all (a check that cannot fail is none).
func checkLogs(t *testing.T, logs *syncBuffer, key string, contents ...string) {
	t.Helper()
	out := logs.String()
	if strings.Count(out, "\n") < 2 {
		t.Fatalf("the gateway logged almost nothing (%q): the log check would prove nothing", out)
	}
	if strings.Contains(out, key) || strings.Contains(out, key[len(KeyPrefix):]) {
		t.Errorf("the gateway's log holds an API key")
	}
	for _, c := range contents {
		if strings.Contains(out, c) {
			t.Errorf("the gateway's log holds memory content %q", c)
		}
	}
}

// TestFaultsAcknowledgedWritesHold: concurrent writers go on while Toxiproxy, between
// the gateway and PostgreSQL and Milvus, adds latency, cuts every PostgreSQL
// connection after some kilobytes, takes Milvus away and then PostgreSQL. The gateway
// never acknowledges a write it did not store and never loses one it acknowledged:
// afterwards every acknowledged memory is stored exactly once, readable and, once
// the pending index drains, searchable. Every refusal is a 503 or 429 with
// Retry-After. On each engine the gateway writes to: Milvus Lite, the Milvus server
// with authentication (logged in as the store's own user), and PGVector on the
// PostgreSQL 16 server, whose index is in PostgreSQL (its faults are PostgreSQL's).
func TestFaultsAcknowledgedWritesHold(t *testing.T) {
	for _, c := range []struct {
		name, engine string
		milvusAuth   bool
	}{
		{"MilvusLite", engine.Milvus, false},
		{"MilvusAuth", engine.Milvus, true},
		{"PGVector", engine.PGVector, false},
	} {
		t.Run(c.name, func(t *testing.T) { testAcknowledgedWritesHold(t, c.engine, c.milvusAuth) })
	}
}

func testAcknowledgedWritesHold(t *testing.T, eng string, milvusAuth bool) {
	faults := testutil.NewFaults(t)
	k := newTestKey(t, "k", false, "*")
	o := envOptions{engine: eng, keys: []testKey{k}, noService: true, milvusAuth: milvusAuth}
	var milvusProxy *toxiproxy.Proxy
	if eng == engine.Milvus {
		upstream := testutil.MilvusAddr(t)
		if milvusAuth {
			upstream = testutil.MilvusAuth(t).Addr
		}
		milvusProxy, o.milvus = faults.Proxy("milvus", upstream)
	}
	e := newEnv(t, o)
	pgProxy, pgAddr := faults.Proxy("pg", fmt.Sprintf("%s:%d", e.admin.Host, e.admin.Port))
	agent := e.agent
	host, port, _ := strings.Cut(pgAddr, ":")
	agent.Host = host
	agent.Port, _ = strconv.Atoi(port)
	e.start(agent.URL(nil))

	type ack struct{ id, text string }
	var (
		mu       sync.Mutex
		acked    []ack
		refusals = map[int]int{}
	)
	stop := make(chan struct{})
	// events carries every response's outcome (acknowledged or refused): the fault
	// phases last a number of responses, not a time.
	events := make(chan bool, 1024)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				text := fmt.Sprintf("writer %d note %d about parcel %d", w, n, w*100000+n)
				body, _ := json.Marshal(NewMemory{Scope: fmt.Sprintf("user:%d", w), MemoryType: memory.Episodic,
					Content: json.RawMessage(fmt.Sprintf(`{"note":%q}`, text))})
				req, _ := http.NewRequest(http.MethodPost, e.url+"/v1/memories", bytes.NewReader(body))
				req.Header.Set("x-api-key", k.plain)
				req.Header.Set("Content-Type", "application/json")
				resp, err := e.client.Do(req)
				if err != nil {
					t.Errorf("writer %d: %v", w, err)
					return
				}
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				mu.Lock()
				ok := resp.StatusCode == http.StatusCreated
				switch {
				case ok:
					var wr WriteResponse
					if err := json.Unmarshal(raw, &wr); err != nil || wr.MemoryID == "" {
						t.Errorf("an acknowledgement without a memory id: %s", raw)
					}
					acked = append(acked, ack{wr.MemoryID, text})
				case (resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests) && resp.Header.Get("Retry-After") != "":
					refusals[resp.StatusCode]++
				default:
					t.Errorf("writer %d: %d %s (only 503 or 429 with Retry-After may refuse a write)", w, resp.StatusCode, raw)
				}
				mu.Unlock()
				select {
				case events <- ok:
				case <-stop:
					return
				}
			}
		})
	}
	// phase injects a fault and lifts it once the writers have seen wantAcked
	// acknowledgements and wantRefused refusals under it.
	phase := func(what string, wantAcked, wantRefused int, on func(), off func()) {
		on()
		timeout := time.After(90 * time.Second)
		for a, r := 0, 0; a < wantAcked || r < wantRefused; {
			select {
			case ok := <-events:
				if ok {
					a++
				} else {
					r++
				}
			case <-timeout:
				t.Fatalf("%s: %d acknowledged and %d refused within 90s, want %d and %d", what, a, r, wantAcked, wantRefused)
			}
		}
		off()
		mu.Lock()
		t.Logf("%s: %d acknowledged so far, refusals %v", what, len(acked), refusals)
		mu.Unlock()
	}
	addToxic := func(p *toxiproxy.Proxy, typ, stream string, attrs toxiproxy.Attributes) func() {
		return func() {
			if _, err := p.AddToxic(typ+stream, typ, stream, 1, attrs); err != nil {
				t.Fatal(err)
			}
		}
	}
	removeToxic := func(p *toxiproxy.Proxy, name string) func() {
		return func() {
			if err := p.RemoveToxic(name); err != nil {
				t.Fatal(err)
			}
		}
	}
	enable := func(p *toxiproxy.Proxy, on bool) func() {
		return func() {
			p.Enabled = on
			if err := p.Save(); err != nil {
				t.Fatal(err)
			}
		}
	}
	none := func() {}
	phase("warm-up", 50, 0, none, none)
	phase("postgres latency", 100, 0, addToxic(pgProxy, "latency", "downstream", toxiproxy.Attributes{"latency": 30, "jitter": 20}), removeToxic(pgProxy, "latencydownstream"))
	phase("postgres connections cut after 24 KiB", 300, 0, addToxic(pgProxy, "limit_data", "downstream", toxiproxy.Attributes{"bytes": 24 << 10}), removeToxic(pgProxy, "limit_datadownstream"))
	phase("postgres away", 0, 200, enable(pgProxy, false), enable(pgProxy, true))
	phase("postgres back", 200, 0, none, none)
	if milvusProxy != nil {
		phase("milvus latency", 100, 0, addToxic(milvusProxy, "latency", "downstream", toxiproxy.Attributes{"latency": 50}), removeToxic(milvusProxy, "latencydownstream"))
		// Writes in flight when Milvus goes wait for their index call's bound (5 s),
		// then are acknowledged as pending; later ones skip the index until it answers
		// again.
		phase("milvus away", 200, 0, enable(milvusProxy, false), enable(milvusProxy, true))
	}
	phase("recovered", 200, 0, none, none)
	close(stop)
	wg.Wait()
	if len(acked) < 100 {
		t.Fatalf("only %d writes acknowledged", len(acked))
	}

	// Every acknowledged write is stored exactly once.
	pool, err := pgxpool.New(context.Background(), e.admin.URL(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ids := make([]string, len(acked))
	for i, a := range acked {
		ids[i] = a.id
	}
	var stored, distinct int
	if err := pool.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT memory_id) FROM `+pgx.Identifier{e.names.Schema, "memories"}.Sanitize()+
		` WHERE memory_id = ANY($1)`, ids).Scan(&stored, &distinct); err != nil {
		t.Fatal(err)
	}
	if stored != len(acked) || distinct != len(acked) {
		t.Fatalf("%d writes acknowledged; %d of them stored (%d distinct)", len(acked), stored, distinct)
	}
	// And indexed, once the pending work drains.
	waitFor(t, 90*time.Second, func() bool {
		st, err := e.gw.Memory.Pending(context.Background())
		return err == nil && st.Count == 0
	})
	missing := 0
	for i, a := range acked {
		if i%7 != 0 { // a sample: one search per seven writes keeps the test short
			continue
		}
		var sr SearchResponse
		scope := "user:" + a.text[len("writer "):len("writer ")+1]
		e.must(200, k.plain, "POST", "/v1/search", SearchRequest{Scope: scope, Query: a.text, TopK: 3}, &sr)
		if len(sr.Results) == 0 || sr.Results[0].Memory.MemoryID != a.id {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("%d acknowledged memories of the sample are not found first by their own text", missing)
	}
	t.Logf("%d writes acknowledged, all stored once and indexed; refusals %v", len(acked), refusals)
}
