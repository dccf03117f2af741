package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"
	"github.com/minio/minio-go/v7"

	"github.com/amemory/memory-operator/internal/langgraphns"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/snapshot"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/test/importers"
)

// The fault tables: each worker runs with Toxiproxy between it and PostgreSQL and
// MinIO while a scenario injects latency, bandwidth limits, connection resets after N
// bytes, timeouts or an outage. Every run either completes correctly or fails with an
// error within its deadline (never hangs), never leaves a half-written result, and a
// rerun without the fault converges to exactly what an undisturbed run gives.

// faultDeadline bounds every run under a fault: a worker that hangs fails the test
// instead of blocking it.
const faultDeadline = 45 * time.Second

// proxied is a fixture's backends behind proxies.
type proxied struct {
	pg, s3           *toxiproxy.Proxy
	milvus           *toxiproxy.Proxy // only where a test sets one up
	pgURI, s3Address string
}

func (f *fixtureEnv) proxies(t *testing.T) proxied {
	t.Helper()
	faults := testutil.NewFaults(t)
	u, err := url.Parse(f.sec.PostgresURI)
	if err != nil {
		t.Fatal(err)
	}
	pg, pgAddr := faults.Proxy("pg", u.Host)
	s3, s3Addr := faults.Proxy("s3", f.s3cfg.Endpoint)
	u.Host = pgAddr
	return proxied{pg: pg, s3: s3, pgURI: u.String(), s3Address: s3Addr}
}

// scenario is one fault: inject adds toxics (or disables a proxy) before the run.
// mustFail says the fault leaves the run no way to complete; for a reset after N bytes
// (perConnection) only when the run moves more than that over one connection.
type scenario struct {
	name          string
	inject        func(t *testing.T, p proxied)
	mustFail      bool
	perConnection bool
}

func toxic(t *testing.T, p *toxiproxy.Proxy, typ, stream string, attrs toxiproxy.Attributes) {
	t.Helper()
	if _, err := p.AddToxic("", typ, stream, 1, attrs); err != nil {
		t.Fatalf("toxic %s: %v", typ, err)
	}
}

func clearFaults(t *testing.T, p proxied) {
	t.Helper()
	for _, px := range []*toxiproxy.Proxy{p.pg, p.s3, p.milvus} {
		if px == nil {
			continue
		}
		toxics, err := px.Toxics()
		if err != nil {
			t.Fatal(err)
		}
		for _, tx := range toxics {
			if err := px.RemoveToxic(tx.Name); err != nil {
				t.Fatal(err)
			}
		}
		px.Enabled = true
		if err := px.Save(); err != nil {
			t.Fatal(err)
		}
	}
}

// networkScenarios are the faults every worker meets.
var networkScenarios = []scenario{
	{name: "postgres latency and jitter", inject: func(t *testing.T, p proxied) {
		toxic(t, p.pg, "latency", "downstream", toxiproxy.Attributes{"latency": 15, "jitter": 10})
	}},
	{name: "object storage latency", inject: func(t *testing.T, p proxied) {
		toxic(t, p.s3, "latency", "upstream", toxiproxy.Attributes{"latency": 40, "jitter": 20})
	}},
	{name: "object storage bandwidth limit", inject: func(t *testing.T, p proxied) {
		toxic(t, p.s3, "bandwidth", "upstream", toxiproxy.Attributes{"rate": 512}) // KB/s
		toxic(t, p.s3, "bandwidth", "downstream", toxiproxy.Attributes{"rate": 512})
	}},
	{name: "object storage reset mid-transfer", mustFail: true, perConnection: true, inject: func(t *testing.T, p proxied) {
		// Every connection is cut after 64 KiB: retries meet the same fate.
		toxic(t, p.s3, "limit_data", "upstream", toxiproxy.Attributes{"bytes": 64 << 10})
		toxic(t, p.s3, "limit_data", "downstream", toxiproxy.Attributes{"bytes": 64 << 10})
	}},
	{name: "postgres reset mid-stream", mustFail: true, perConnection: true, inject: func(t *testing.T, p proxied) {
		toxic(t, p.pg, "limit_data", "downstream", toxiproxy.Attributes{"bytes": 256 << 10})
		toxic(t, p.pg, "limit_data", "upstream", toxiproxy.Attributes{"bytes": 256 << 10})
	}},
	{name: "object storage stops answering", mustFail: true, inject: func(t *testing.T, p proxied) {
		toxic(t, p.s3, "timeout", "downstream", toxiproxy.Attributes{"timeout": 2000})
	}},
	{name: "postgres stops answering", mustFail: true, inject: func(t *testing.T, p proxied) {
		toxic(t, p.pg, "timeout", "downstream", toxiproxy.Attributes{"timeout": 2000})
	}},
	{name: "postgres away", mustFail: true, inject: func(t *testing.T, p proxied) {
		p.pg.Enabled = false
		if err := p.pg.Save(); err != nil {
			t.Fatal(err)
		}
	}},
	{name: "object storage away", mustFail: true, inject: func(t *testing.T, p proxied) {
		p.s3.Enabled = false
		if err := p.s3.Save(); err != nil {
			t.Fatal(err)
		}
	}},
}

// runFaulted runs fn under the deadline and reports how long it took and its error.
func runFaulted(t *testing.T, fn func(ctx context.Context) error) (time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), faultDeadline)
	defer cancel()
	start := time.Now()
	err := fn(ctx)
	took := time.Since(start)
	if took > faultDeadline+5*time.Second {
		t.Fatalf("the run took %s: it ignored its deadline", took)
	}
	return took, err
}

func itemsJSON(t *testing.T, items []memory.Item) []string {
	t.Helper()
	out := make([]string, len(items))
	for i, it := range items {
		b, err := json.Marshal(it)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = string(b)
	}
	return out
}

// TestFaultsSnapshot: a snapshot under each fault completes with the undisturbed
// package, or fails clearly and leaves no manifest; the rerun's package holds exactly
// the undisturbed run's memories.
func TestFaultsSnapshot(t *testing.T) {
	f := newFixture(t)
	f.importGenerated(t, 20_000)
	if _, err := RunSnapshot(context.Background(), f.config("faults/baseline/"), f.sec, RunOptions{Version: "test", Now: testNow}); err != nil {
		t.Fatal(err)
	}
	_, want := f.open(t, "faults/baseline/", key(t))
	wantJSON := itemsJSON(t, want)
	for i, sc := range networkScenarios {
		t.Run(sc.name, func(t *testing.T) {
			p := f.proxies(t)
			prefix := "faults/" + string(rune('a'+i)) + "/"
			cfg := f.config(prefix)
			cfg.Destination.Endpoint = p.s3Address
			sec := f.sec
			sec.PostgresURI = p.pgURI
			sc.inject(t, p)
			took, err := runFaulted(t, func(ctx context.Context) error {
				_, err := RunSnapshot(ctx, cfg, sec, RunOptions{Version: "test", Now: testNow})
				return err
			})
			t.Logf("under the fault: %v after %s", err, took.Round(time.Millisecond))
			switch {
			case err == nil && sc.mustFail:
				t.Fatal("the snapshot completed although the fault leaves it no way to")
			case err == nil:
				_, got := f.open(t, prefix, key(t))
				if !slices.Equal(itemsJSON(t, got), wantJSON) {
					t.Fatalf("the package written under the fault differs from the undisturbed one (%d vs %d items)", len(got), len(want))
				}
				return
			}
			// A failed snapshot leaves no manifest: nothing reads as a package.
			if _, serr := f.s3.StatObject(context.Background(), f.bucket, prefix+"manifest.json", minio.StatObjectOptions{}); serr == nil {
				t.Fatal("a failed snapshot left a manifest")
			} else if minio.ToErrorResponse(serr).Code != "NoSuchKey" {
				t.Fatalf("stat manifest: %v", serr)
			}
			clearFaults(t, p)
			if _, err := RunSnapshot(context.Background(), cfg, sec, RunOptions{Version: "test", Now: testNow}); err != nil {
				t.Fatalf("the rerun after the fault: %v", err)
			}
			_, got := f.open(t, prefix, key(t))
			if !slices.Equal(itemsJSON(t, got), wantJSON) {
				t.Fatalf("the rerun's package differs from the undisturbed one (%d vs %d items)", len(got), len(want))
			}
		})
	}
}

// TestFaultsRestore: a restore under each fault completes with the undisturbed
// result, or fails clearly; either way a rerun without the fault leaves the target
// exactly as an undisturbed restore leaves a fresh one: no memory lost, none applied
// twice.
func TestFaultsRestore(t *testing.T) {
	f := newFixture(t)
	f.importGenerated(t, 20_000)
	if _, err := RunSnapshot(context.Background(), f.config("faults/pkg/"), f.sec, RunOptions{Version: "test", Now: testNow}); err != nil {
		t.Fatal(err)
	}
	baseline := f.targetSchema(t)
	if _, err := RunRestore(context.Background(), f.restoreConfig(baseline, "faults/pkg/"), f.restoreSecrets(), RunOptions{Version: "test", Now: testNow}); err != nil {
		t.Fatal(err)
	}
	want := f.targetData(t, baseline)
	if len(want) < 20_000 {
		t.Fatalf("the baseline restore wrote %d rows", len(want))
	}
	for _, sc := range networkScenarios {
		t.Run(sc.name, func(t *testing.T) {
			p := f.proxies(t)
			schema := f.targetSchema(t)
			cfg := f.restoreConfig(schema, "faults/pkg/")
			cfg.Source.Endpoint = p.s3Address
			sec := f.restoreSecrets()
			sec.PostgresURI = p.pgURI
			sc.inject(t, p)
			took, err := runFaulted(t, func(ctx context.Context) error {
				_, err := RunRestore(ctx, cfg, sec, RunOptions{Version: "test", Now: testNow})
				return err
			})
			t.Logf("under the fault: %v after %s", err, took.Round(time.Millisecond))
			if err == nil && sc.mustFail {
				t.Fatal("the restore completed although the fault leaves it no way to")
			}
			// A network fault is never a corrupt package: that verdict is final (the
			// controller stalls on it), a retry cures the fault.
			if errors.Is(err, snapshot.ErrCorrupt) {
				t.Fatalf("a network fault reads as a corrupt package: %v", err)
			}
			if err != nil && errors.Is(err, context.DeadlineExceeded) && !sc.mustFail {
				t.Fatalf("a fault it should ride out made the restore time out: %v", err)
			}
			if err != nil {
				clearFaults(t, p)
				if _, err := RunRestore(context.Background(), cfg, sec, RunOptions{Version: "test", Now: testNow}); err != nil {
					t.Fatalf("the rerun after the fault: %v", err)
				}
			}
			if got := f.targetData(t, schema); !slices.Equal(got, want) {
				t.Fatalf("the target differs from an undisturbed restore's: %d rows vs %d%s", len(got), len(want), firstDiff(got, want))
			}
		})
	}
}

// targetData is a target's memories, vectors and tombstones, sorted (storeState
// without the audit log, whose entries record each run).
func (f *fixtureEnv) targetData(t *testing.T, schema string) []string {
	t.Helper()
	var out []string
	for _, s := range f.storeState(t, schema) {
		if len(s) >= 6 && s[:6] == "audit " {
			continue
		}
		out = append(out, s)
	}
	return out
}

func firstDiff(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return "; first difference:\n got " + got[i] + "\nwant " + want[i]
		}
	}
	return ""
}

// milvusScenarios are the faults between the archive worker and Milvus, and a
// PostgreSQL connection cut within the run's first kilobytes (a run moves little).
var milvusScenarios = []scenario{
	{name: "postgres reset within the run", mustFail: true, inject: func(t *testing.T, p proxied) {
		toxic(t, p.pg, "limit_data", "downstream", toxiproxy.Attributes{"bytes": 12 << 10})
	}},
	{name: "milvus latency", inject: func(t *testing.T, p proxied) {
		toxic(t, p.milvus, "latency", "downstream", toxiproxy.Attributes{"latency": 20, "jitter": 10})
	}},
	{name: "milvus reset mid-transfer", mustFail: true, perConnection: true, inject: func(t *testing.T, p proxied) {
		toxic(t, p.milvus, "limit_data", "upstream", toxiproxy.Attributes{"bytes": 4 << 10})
	}},
	{name: "milvus stops answering", mustFail: true, inject: func(t *testing.T, p proxied) {
		toxic(t, p.milvus, "timeout", "downstream", toxiproxy.Attributes{"timeout": 1000})
	}},
	{name: "milvus away", mustFail: true, inject: func(t *testing.T, p proxied) {
		p.milvus.Enabled = false
		if err := p.milvus.Save(); err != nil {
			t.Fatal(err)
		}
	}},
}

// TestFaultsArchive: an archival run (Milvus index, cold package) under each fault
// completes, or fails within its deadline; a rerun without the fault (the Job's retry:
// same clock, same place) leaves exactly the archived set an undisturbed run makes, no
// vector of it in the index, no deletion pending, and the cold package complete. In
// particular a run cut between PostgreSQL and Milvus is finished by the next.
func TestFaultsArchive(t *testing.T) {
	defer func(d time.Duration) { engine.DialTimeout = d }(engine.DialTimeout)
	engine.DialTimeout = 3 * time.Second
	for _, sc := range append(slices.Clone(networkScenarios), milvusScenarios...) {
		t.Run(sc.name, func(t *testing.T) {
			e := newArchiveEnv(t, "Milvus", 300)
			ctx := context.Background()
			want := e.expect(t, testNow)
			if len(want.archived) == 0 {
				t.Fatal("nothing to archive")
			}
			p := e.proxies(t)
			milvus, milvusAddr := testutil.NewFaults(t).Proxy("milvus", e.milvus)
			p.milvus = milvus
			cfg := e.config("run-1")
			cfg.MilvusAddress, cfg.Cold.Endpoint = milvusAddr, p.s3Address
			sec := e.job
			u, _ := url.Parse(sec.PostgresURI)
			pu, _ := url.Parse(p.pgURI)
			u.Host = pu.Host // the worker role's login, through the proxy
			sec.PostgresURI = u.String()
			sc.inject(t, p)
			took, err := runFaulted(t, func(ctx context.Context) error {
				_, err := RunArchive(ctx, cfg, sec, RunOptions{})
				return err
			})
			t.Logf("under the fault: %v after %s", err, took.Round(time.Millisecond))
			// A run archives a few hundred memories: less than a reset's budget per
			// connection may pass.
			if err == nil && sc.mustFail && !sc.perConnection {
				t.Fatal("the run completed although the fault leaves it no way to")
			}
			if err != nil {
				clearFaults(t, p)
				if _, err := RunArchive(ctx, cfg, sec, RunOptions{}); err != nil {
					t.Fatalf("the rerun after the fault: %v", err)
				}
			}
			if got := e.archivedAt(t, testNow); !slices.Equal(got, want.archived) {
				t.Fatalf("%d memories archived, an undisturbed run archives %d", len(got), len(want.archived))
			}
			if v := e.vectors(t, want.archived); len(v) != 0 {
				t.Fatalf("%d vectors of archived memories are still in the index", len(v))
			}
			if n, err := e.store.PendingIndexDeletions(ctx); err != nil || n != 0 {
				t.Fatalf("pending index deletions: %d, %v", n, err)
			}
			_, items := e.open(t, cfg.Cold.Prefix, key(t))
			if got := sorted(ids(items)); !slices.Equal(got, want.archived) {
				t.Fatalf("the cold package holds %d memories, want %d", len(got), len(want.archived))
			}
			e.assertInvisible(t, want.archived)
		})
	}
}

// TestFaultsImport: an import from LangGraph's PostgreSQL checkpointer, with the
// source database, the target and object storage behind the proxies, under each
// fault completes with the undisturbed result or fails within its deadline; a rerun
// without the fault leaves the target exactly as an undisturbed import leaves it.
func TestFaultsImport(t *testing.T) {
	exp := importers.Generate(t, importers.Options{})
	f := newFixture(t)
	importCfg := func(schema, detail string) RestoreConfig {
		cfg := f.restoreConfig(schema, "")
		cfg.DetailKey = "imports/" + detail + "/detail.jsonl.zst"
		cfg.AllowRepeat = true
		cfg.Import = &ImportConfig{Kind: ImportLangGraphPostgres, UserMetadataKey: "user_id", UserPattern: `^u-(?P<user>[^:]+):`,
			InactiveAfter: 7 * 24 * time.Hour, SkipZombies: true, Dir: t.TempDir(),
			Namespaces: []langgraphns.Rule{{Namespace: []string{"memories", "{user}", "*"}, Scope: "user:{user}"},
				{Namespace: []string{"procedures", "{agent}"}, Scope: "agent:{agent}"}}}
		return cfg
	}
	baseline := f.targetSchema(t)
	sec := f.restoreSecrets()
	sec.SourceKey, sec.ImportPostgresURI = "", exp.DSN
	if _, err := RunRestore(context.Background(), importCfg(baseline, "baseline"), sec, RunOptions{Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	want := f.targetData(t, baseline)
	for i, sc := range networkScenarios {
		t.Run(sc.name, func(t *testing.T) {
			p := f.proxies(t)
			schema := f.targetSchema(t)
			cfg := importCfg(schema, fmt.Sprintf("run-%d", i))
			cfg.Source.Endpoint = p.s3Address
			src, _ := url.Parse(exp.DSN)
			pu, _ := url.Parse(p.pgURI)
			src.Host = pu.Host
			psec := sec
			psec.PostgresURI, psec.ImportPostgresURI = p.pgURI, src.String()
			sc.inject(t, p)
			took, err := runFaulted(t, func(ctx context.Context) error {
				_, err := RunRestore(ctx, cfg, psec, RunOptions{Now: time.Now()})
				return err
			})
			t.Logf("under the fault: %v after %s", err, took.Round(time.Millisecond))
			if err == nil && sc.mustFail && !sc.perConnection {
				t.Fatal("the import completed although the fault leaves it no way to")
			}
			if err != nil {
				clearFaults(t, p)
				if _, err := RunRestore(context.Background(), cfg, psec, RunOptions{Now: time.Now()}); err != nil {
					t.Fatalf("the rerun after the fault: %v", err)
				}
			}
			if got := f.targetData(t, schema); !slices.Equal(got, want) {
				t.Fatalf("the target differs from an undisturbed import's: %d rows vs %d%s", len(got), len(want), firstDiff(got, want))
			}
		})
	}
}
