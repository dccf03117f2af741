package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/gateway"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/vector/milvus"
)

// TestPendingListAndRetry: memoryctl shows a store's parked index work through a real
// gateway and puts it back in the queue. The work is a memory whose text is over the
// store's embedder input limit (overflow Refuse), stored past the gateway's door as a
// restore of an older package stores it: the background indexer parks it at once.
func TestPendingListAndRetry(t *testing.T) {
	ctx := context.Background()
	pg := testutil.PostgresParts(t)
	admin := provision.PostgresConn{Host: pg.Host, Port: pg.PortNumber, Database: "postgres", SSLMode: "disable", User: pg.User, Password: pg.Password}
	names, err := provision.NamesFor(testutil.UniqueName("ctl-"), "")
	if err != nil {
		t.Fatal(err)
	}
	pw := provision.Passwords{Agent: "agent-" + testutil.UniqueName("pw"), Worker: "worker-" + testutil.UniqueName("pw")}
	owner := "test/" + names.Tenant
	if _, err := provision.EnsurePostgres(ctx, admin, names, owner, pw); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = provision.DeletePostgres(context.Background(), admin, names, owner) })
	spec := vector.Spec{Dimension: 64, Metric: vector.Cosine}
	if _, err := provision.EnsureVectors(ctx, admin, nil, names, milvus.Owner{ID: owner}, spec); err != nil {
		t.Fatal(err)
	}
	key, err := gateway.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	keysFile := filepath.Join(t.TempDir(), gateway.KeysFileName)
	kb, _ := json.Marshal(gateway.KeyFile{Keys: []gateway.KeyEntry{{Name: "ops", SHA256: gateway.HashKey(key), Scopes: []string{"*"}}}})
	if err := os.WriteFile(keysFile, kb, 0o600); err != nil {
		t.Fatal(err)
	}
	agent := admin
	agent.User, agent.Password = names.Role, pw.Agent
	cfg := gateway.Config{StoreNamespace: "test", StoreName: names.Tenant, Listen: "127.0.0.1:0", Schema: names.Schema,
		Vectors: engine.Vectors{VectorEngine: "Postgres"}, Dimension: spec.Dimension, Metric: "COSINE", Embedder: "Hashing", KeysFile: keysFile,
		RateLimit: 1000, RateBurst: 1000, MaxBodyBytes: 1 << 20, ShutdownGrace: time.Second,
		MaxInputBytes: 256, InputOverflow: embed.Refuse, QueryCache: gateway.QueryCache{QueryCacheTTL: time.Minute}}
	g, err := gateway.Open(ctx, cfg, gateway.Secrets{PostgresURI: agent.URL(nil)}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Serve(sctx, ln) }()
	t.Cleanup(func() { stop(); <-done; g.Close() })

	// Two memories over the limit, in the scope the docs show (user:1024).
	var parkedIDs []string
	for _, word := range []string{"long ", "longer "} {
		res, err := g.Memory.Store().PutQueued(ctx, memory.Item{Scope: "user:1024", MemoryType: memory.Semantic, Source: "restore",
			BaseScore: 0.5, Content: json.RawMessage(`{"text":"` + strings.Repeat(word, 200) + `"}`)})
		if err != nil {
			t.Fatal(err)
		}
		parkedIDs = append(parkedIDs, res.MemoryID)
	}
	res := struct{ MemoryID string }{parkedIDs[0]}
	NewWithT(t).Eventually(func() (int64, error) {
		st, err := g.Memory.Pending(ctx)
		return st.Parked, err
	}, 90*time.Second, 200*time.Millisecond).Should(Equal(int64(2)), "the memories over the limit were not parked")

	t.Setenv(envGatewayURL, "http://"+ln.Addr().String())
	t.Setenv(envGatewayKey, key)
	var out, errOut bytes.Buffer
	if err := runPending(ctx, []string{"list", "--parked", "-o", "json"}, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	var work []gateway.PendingWork
	if err := json.Unmarshal(out.Bytes(), &work); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(work) != 2 || !slices.ContainsFunc(work, func(w gateway.PendingWork) bool { return w.MemoryID == res.MemoryID }) {
		t.Fatalf("parked work: %+v", work)
	}
	for _, w := range work {
		if !w.Parked || w.Scope != "user:1024" || !strings.Contains(w.LastError, "over the store's limit of 256") {
			t.Fatalf("parked work: %+v", work)
		}
	}
	out.Reset()
	// Flags after the memory ids, as before them.
	if err := runPending(ctx, []string{"list", "--scope", "user:1024"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 3 || !strings.Contains(out.String(), res.MemoryID) || !strings.Contains(lines[1], "parked") {
		t.Fatalf("table:\n%s", out.String())
	}
	out.Reset()
	if err := runPending(ctx, []string{"retry", res.MemoryID, "--scope", "user:1024"}, &out, &errOut); err != nil || strings.TrimSpace(out.String()) != "requeued 1" {
		t.Fatalf("retry: %v %q", err, out.String())
	}

	// The documented pending commands, as written, against this gateway.
	runSnippets(t, func(string, snippet) {}, documentedSnippets(t, "pending"),
		"https://acme-gateway.agents:8080", "http://"+ln.Addr().String(),
		"MEMORYCTL_GATEWAY_KEY=…", "MEMORYCTL_GATEWAY_KEY="+key,
		"06h37…", parkedIDs[0], "06h38…", parkedIDs[1])
	// memoryctl status: the query cache's hit rate after a search made twice.
	for range 2 {
		c := gatewayClient{base: "http://" + ln.Addr().String(), key: key}
		if err := c.do(ctx, "POST", "/v1/search", gateway.SearchRequest{Scope: "user:1024", Query: "order"}, &gateway.SearchResponse{}); err != nil {
			t.Fatal(err)
		}
	}
	out.Reset()
	err = runStatus(ctx, nil, &out, &errOut)
	if words := strings.Join(strings.Fields(out.String()), " "); err != nil || !strings.Contains(words, "hit rate 50.0%") ||
		!strings.Contains(words, "query cache in-process, ttl 60s") || !strings.Contains(words, "short-term PostgreSQL") {
		t.Fatalf("status: %v\n%s", err, out.String())
	}
	runSnippets(t, func(string, snippet) {}, documentedSnippets(t, "status"),
		"https://acme-gateway.agents:8080", "http://"+ln.Addr().String(), "MEMORYCTL_GATEWAY_KEY=…", "MEMORYCTL_GATEWAY_KEY="+key)
	// The gateway's refusals come back as errors with its code; a missing key is said.
	if err := runPending(ctx, []string{"list", "--scope", "tenant:x"}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "invalid_scope") {
		t.Fatalf("a bad scope: %v", err)
	}
	t.Setenv(envGatewayKey, "")
	if err := runPending(ctx, []string{"list"}, &out, &errOut); err == nil || !strings.Contains(err.Error(), envGatewayKey) {
		t.Fatalf("no key: %v", err)
	}
}
