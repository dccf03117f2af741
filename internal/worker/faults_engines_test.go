package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/minio/minio-go/v7"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/service"
	"github.com/amemory/memory-operator/internal/snapshot"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/vector/pgvector"
)

// The fault tables of the engines that keep vectors outside the schema's vectors
// table: a restore of a package with vectors into, and a snapshot with vectors out
// of, a PGVector store (through a proxy to the PostgreSQL 16 server; a package above
// bulkLoadMin into an empty store loads without the HNSW index and builds it after)
// and a Milvus store (through proxies to the Milvus server with authentication, the
// worker logged in as the store's own Milvus user).

const (
	// engineFaultItems is the package's size: above bulkLoadMin.
	engineFaultItems = 20_000
	// bigScope holds bigScopeItems of them, so its searches walk the HNSW graph
	// (above engineExactBelow); the rest are scopes of ten, searched exactly.
	bigScope         = "user:big"
	bigScopeItems    = 2_000
	engineExactBelow = 200
	// goneScope is forgotten before the snapshot: its tombstone travels.
	goneScope = "user:gone"
)

// enginePackage is the package every engine table restores: its prefix and the
// vectors it carries.
type enginePackage struct {
	prefix  string
	vectors map[string][]float32
	ids     []string // the memories' IDs, sorted
	gone    []string // the forgotten scope's former IDs
}

// writeEnginePackage fills the fixture's store (Postgres engine) with
// engineFaultItems memories and their vectors, forgets goneScope, and snapshots it
// with the vectors.
func (f *fixtureEnv) writeEnginePackage(t *testing.T) enginePackage {
	t.Helper()
	ctx := context.Background()
	pkg := enginePackage{prefix: "engines/pkg/", vectors: map[string][]float32{}}
	var items []memory.Item
	for i := range engineFaultItems {
		scope := fmt.Sprintf("user:%06d", i/10)
		if i < bigScopeItems {
			scope = bigScope
		}
		items = append(items, mem(fmt.Sprintf("e%07d", i), scope, memory.Semantic, "",
			fmt.Sprintf("memory %d about %s", i, moveWords[i%len(moveWords)]), time.Duration(i)*time.Second))
	}
	for i := range 10 {
		items = append(items, mem(fmt.Sprintf("g%07d", i), goneScope, memory.Episodic, "", fmt.Sprintf("forgotten %d", i), time.Hour))
	}
	next := 0
	if _, err := f.store.Import(ctx, func() (memory.Item, bool, error) {
		if next == len(items) {
			return memory.Item{}, false, nil
		}
		next++
		return items[next-1], true, nil
	}); err != nil {
		t.Fatal(err)
	}
	index := f.pgIndex(t)
	hashing := embed.NewHashing(spec8.Dimension)
	for start := 0; start < len(items); start += 1000 {
		batch := items[start:min(start+1000, len(items))]
		texts := make([]string, len(batch))
		for i, it := range batch {
			texts[i] = string(it.Content)
		}
		vecs, err := hashing.Embed(ctx, embed.Passage, texts)
		if err != nil {
			t.Fatal(err)
		}
		entries := make([]vector.Entry, len(batch))
		for i, it := range batch {
			entries[i] = vector.Entry{ID: it.MemoryID, Scope: it.Scope, Type: string(it.MemoryType), Vector: vecs[i]}
		}
		if err := index.Upsert(ctx, entries); err != nil {
			t.Fatal(err)
		}
	}
	m, err := service.New(f.store, index, hashing)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Forget(ctx, goneScope, "asked to", "test"); err != nil {
		t.Fatal(err)
	}
	cfg := f.config(pkg.prefix)
	cfg.IncludeEmbeddings = true
	if _, err := RunSnapshot(ctx, cfg, f.sec, RunOptions{Version: "test", Now: testNow}); err != nil {
		t.Fatal(err)
	}
	// What the package holds is what every restore must bring.
	_, got := f.open(t, pkg.prefix, key(t))
	for _, it := range got {
		if len(it.Embedding) != spec8.Dimension {
			t.Fatalf("the package's memory %s has no vector", it.MemoryID)
		}
		pkg.vectors[it.MemoryID] = it.Embedding
		pkg.ids = append(pkg.ids, it.MemoryID)
	}
	slices.Sort(pkg.ids)
	if len(pkg.ids) != engineFaultItems {
		t.Fatalf("the package holds %d memories, want %d", len(pkg.ids), engineFaultItems)
	}
	for i := range 10 {
		pkg.gone = append(pkg.gone, fmt.Sprintf("g%07d", i))
	}
	return pkg
}

// engineProxies puts proxies between a worker and s's PostgreSQL server, the
// fixture's object storage and, on Milvus, the Milvus server. It returns them with
// the worker role's URI and the store's vectors, both through the proxies.
func (f *fixtureEnv) engineProxies(t *testing.T, s *engineStore) (proxied, string, engine.Vectors) {
	t.Helper()
	faults := testutil.NewFaults(t)
	u, err := url.Parse(s.workerURI)
	if err != nil {
		t.Fatal(err)
	}
	var p proxied
	var pgAddr string
	p.pg, pgAddr = faults.Proxy("pg", u.Host)
	p.s3, p.s3Address = faults.Proxy("s3", f.s3cfg.Endpoint)
	u.Host = pgAddr
	vectors := s.vectors
	if s.engine == engine.Milvus {
		p.milvus, vectors.MilvusAddress = faults.Proxy("milvus", s.vectors.MilvusAddress)
	}
	return p, u.String(), vectors
}

// engineScenarios are the faults of an engine's restore (or snapshot) table. On
// PGVector, where the vectors are in PostgreSQL: every network fault. On Milvus: the
// faults between the worker and Milvus, and PostgreSQL's (a snapshot: its cut
// mid-stream). Object storage faults meet a restore before it writes anything (it
// verifies the package whole first) and a snapshot's upload the same way on every
// engine: PGVector's table and TestFaultsRestore/TestFaultsSnapshot run them, and the
// Milvus table stays short (each reset of Milvus costs the SDK's 20 s of retries).
func engineScenarios(eng string, forSnapshot bool) []scenario {
	if eng != engine.Milvus {
		return networkScenarios
	}
	var out []scenario
	for _, sc := range networkScenarios {
		if strings.HasPrefix(sc.name, "postgres ") && (!forSnapshot || sc.name == "postgres reset mid-stream") {
			out = append(out, sc)
		}
	}
	for _, sc := range milvusScenarios {
		// milvusScenarios' PostgreSQL cut is sized for an archival run, which moves
		// little: a restore or snapshot moves more.
		if strings.HasPrefix(sc.name, "milvus ") {
			out = append(out, sc)
		}
	}
	return out
}

func (f *fixtureEnv) engineRestoreConfig(s *engineStore, pkg enginePackage) RestoreConfig {
	cfg := f.restoreConfig(s.names.Schema, pkg.prefix)
	cfg.Vectors = s.vectors
	return cfg
}

func (f *fixtureEnv) engineRestoreSecrets(s *engineStore) RestoreSecrets {
	sec := f.restoreSecrets()
	sec.PostgresURI, sec.Milvus = s.workerURI, s.login
	return sec
}

// newEngineTargets provisions n empty stores on eng for restores.
func newEngineTargets(t *testing.T, eng string, n int) []*engineStore {
	t.Helper()
	out := provisionEngineStores(t, eng, spec8.Dimension, n)
	for _, s := range out {
		if eng == engine.PGVector {
			s.vectors.ExactBelow = engineExactBelow
		}
	}
	return out
}

// TestFaultsEngines: the restore and snapshot tables on PGVector and on a Milvus
// server with authentication. A restore under each fault completes with the
// undisturbed result or fails clearly; either way a rerun without the fault leaves
// the target exactly as an undisturbed restore leaves a fresh store: the same
// memories and tombstones, every vector of the package in the engine (read back
// through it) and none of the forgotten scope, on PGVector the HNSW index built and
// no load marked as holding it back, and searches returning exactly min(K, matches).
// A snapshot of that store with vectors under each fault writes the undisturbed
// package or fails and leaves no manifest; its rerun writes the undisturbed package.
func TestFaultsEngines(t *testing.T) {
	defer func(d time.Duration) { engine.DialTimeout = d }(engine.DialTimeout)
	engine.DialTimeout = 3 * time.Second
	f := newFixture(t)
	pkg := f.writeEnginePackage(t)
	for _, eng := range []string{engine.PGVector, engine.Milvus} {
		t.Run(eng, func(t *testing.T) {
			ctx := context.Background()
			scenarios := engineScenarios(eng, false)
			// The baseline, the corrupt package's target and one per scenario.
			targets := newEngineTargets(t, eng, 2+len(scenarios))
			baseline := targets[0]
			var progress bytes.Buffer
			sum, err := RunRestore(ctx, f.engineRestoreConfig(baseline, pkg), f.engineRestoreSecrets(baseline), RunOptions{Version: "test", Now: testNow, Progress: &progress})
			if err != nil {
				t.Fatal(err)
			}
			if sum.Restored != engineFaultItems || sum.Vectors != engineFaultItems {
				t.Fatalf("the undisturbed restore: %d memories, %d vectors; want %d of each", sum.Restored, sum.Vectors, engineFaultItems)
			}
			if bulk := strings.Contains(progress.String(), "building the search index"); bulk != (eng == engine.PGVector) {
				t.Fatalf("the undisturbed restore loaded without the search index: %v (progress %q)", bulk, progress.String())
			}
			want := baseline.data(t)
			baseline.checkTarget(t, pkg)
			if eng == engine.PGVector {
				t.Run("corrupt package", func(t *testing.T) {
					// A restore that writes nothing (the package fails verification:
					// final, the controller stalls and never retries) leaves the store
					// as it was, its HNSW index in place.
					s := targets[1]
					cfg := f.engineRestoreConfig(s, pkg)
					cfg.Source.Prefix = f.corruptCopy(t, pkg.prefix)
					if _, err := RunRestore(ctx, cfg, f.engineRestoreSecrets(s), RunOptions{Version: "test", Now: testNow}); !errors.Is(err, snapshot.ErrCorrupt) {
						t.Fatalf("restoring a corrupt package: %v, want ErrCorrupt", err)
					}
					s.checkUntouched(t)
				})
			}

			t.Run("restore", func(t *testing.T) {
				for i, sc := range scenarios {
					t.Run(sc.name, func(t *testing.T) {
						s := targets[2+i]
						p, workerURI, vectors := f.engineProxies(t, s)
						cfg := f.engineRestoreConfig(s, pkg)
						cfg.Source.Endpoint, cfg.Vectors = p.s3Address, vectors
						sec := f.engineRestoreSecrets(s)
						sec.PostgresURI = workerURI
						sc.inject(t, p)
						var sum RestoreSummary
						took, err := runFaulted(t, func(ctx context.Context) error {
							var err error
							sum, err = RunRestore(ctx, cfg, sec, RunOptions{Version: "test", Now: testNow})
							return err
						})
						t.Logf("under the fault: %v after %s", err, took.Round(time.Millisecond))
						if err == nil && sc.mustFail {
							t.Fatal("the restore completed although the fault leaves it no way to")
						}
						if errors.Is(err, snapshot.ErrCorrupt) {
							t.Fatalf("a network fault reads as a corrupt package: %v", err)
						}
						if err != nil && errors.Is(err, context.DeadlineExceeded) && !sc.mustFail {
							t.Fatalf("a fault it should ride out made the restore time out: %v", err)
						}
						if err != nil {
							if sum.ManifestSHA256 == "" { // it stopped before writing
								s.checkUntouched(t)
							}
							s.checkIndexState(t)
							clearFaults(t, p)
							if _, err := RunRestore(ctx, cfg, sec, RunOptions{Version: "test", Now: testNow}); err != nil {
								t.Fatalf("the rerun after the fault: %v", err)
							}
						}
						if got := s.data(t); !slices.Equal(got, want) {
							t.Fatalf("the target differs from an undisturbed restore's: %d rows vs %d%s", len(got), len(want), firstDiff(got, want))
						}
						s.checkTarget(t, pkg)
					})
				}
			})

			t.Run("snapshot", func(t *testing.T) {
				snapCfg := func(prefix string, vectors engine.Vectors) SnapshotConfig {
					cfg := f.config(prefix)
					cfg.Schema, cfg.Vectors, cfg.IncludeEmbeddings = baseline.names.Schema, vectors, true
					return cfg
				}
				snapSec := Secrets{PostgresURI: baseline.workerURI, S3AccessKey: f.s3cfg.AccessKey, S3SecretKey: f.s3cfg.SecretKey,
					EncryptionKey: testKey, Milvus: baseline.login}
				prefix := "engines/" + eng + "/baseline/"
				if _, err := RunSnapshot(ctx, snapCfg(prefix, baseline.vectors), snapSec, RunOptions{Version: "test", Now: testNow}); err != nil {
					t.Fatal(err)
				}
				_, items := f.open(t, prefix, key(t))
				wantJSON := itemsJSON(t, items)
				checkPackageVectors(t, items, pkg)
				for i, sc := range engineScenarios(eng, true) {
					t.Run(sc.name, func(t *testing.T) {
						p, workerURI, vectors := f.engineProxies(t, baseline)
						prefix := fmt.Sprintf("engines/%s/%d/", eng, i)
						cfg := snapCfg(prefix, vectors)
						cfg.Destination.Endpoint = p.s3Address
						sec := snapSec
						sec.PostgresURI = workerURI
						sc.inject(t, p)
						took, err := runFaulted(t, func(ctx context.Context) error {
							_, err := RunSnapshot(ctx, cfg, sec, RunOptions{Version: "test", Now: testNow})
							return err
						})
						t.Logf("under the fault: %v after %s", err, took.Round(time.Millisecond))
						if err == nil && sc.mustFail {
							t.Fatal("the snapshot completed although the fault leaves it no way to")
						}
						if err != nil {
							if _, serr := f.s3.StatObject(ctx, f.bucket, prefix+"manifest.json", minio.StatObjectOptions{}); serr == nil {
								t.Fatal("a failed snapshot left a manifest")
							} else if minio.ToErrorResponse(serr).Code != "NoSuchKey" {
								t.Fatalf("stat manifest: %v", serr)
							}
							clearFaults(t, p)
							if _, err := RunSnapshot(ctx, cfg, sec, RunOptions{Version: "test", Now: testNow}); err != nil {
								t.Fatalf("the rerun after the fault: %v", err)
							}
						}
						_, got := f.open(t, prefix, key(t))
						if !slices.Equal(itemsJSON(t, got), wantJSON) {
							t.Fatalf("the package differs from the undisturbed one (%d vs %d items)", len(got), len(wantJSON))
						}
					})
				}
			})
		})
	}
}

// adminPool is an admin's pool on s's PostgreSQL server.
func (s *engineStore) adminPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), s.adminURI)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// data is the store's memories and tombstones, sorted (what the system of record
// holds; the vectors are the engine's, read by checkTarget).
func (s *engineStore) data(t *testing.T) []string {
	t.Helper()
	q := func(table string) string { return pgx.Identifier{s.names.Schema, table}.Sanitize() }
	rows, err := s.adminPool(t).Query(context.Background(), `
		SELECT 'memory ' || to_jsonb(m)::text FROM `+q("memories")+` m
		UNION ALL SELECT 'tombstone ' || scope || ' ' || forgotten_at::text FROM `+q("tombstones"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// index opens the store's engine as its gateway does (the agents' role, its Milvus
// user), directly.
func (s *engineStore) index(t *testing.T) vector.Index {
	t.Helper()
	ix, closeIx, err := s.vectors.Open(context.Background(), s.agent, s.names.Schema, s.spec, s.login)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeIx)
	return ix
}

// checkTarget: every vector of the package is in the engine, as the package has it;
// the forgotten scope has none; on PGVector the HNSW index is built and nothing holds
// it back; searches return exactly min(K, matches).
func (s *engineStore) checkTarget(t *testing.T, pkg enginePackage) {
	t.Helper()
	ctx := context.Background()
	ix := s.index(t)
	fetcher, ok := ix.(engine.Fetcher)
	if !ok {
		t.Fatalf("the %s engine cannot read its vectors back", s.engine)
	}
	got, err := fetcher.Fetch(ctx, append(slices.Clone(pkg.ids), pkg.gone...))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(pkg.ids) {
		t.Fatalf("the engine holds %d of the package's %d vectors (and the forgotten scope's)", len(got), len(pkg.ids))
	}
	for _, id := range pkg.gone {
		if _, ok := got[id]; ok {
			t.Fatalf("the engine holds the vector of %s, of the forgotten scope", id)
		}
	}
	for id, want := range pkg.vectors {
		if !vectorsClose(got[id], want) {
			t.Fatalf("the vector of %s is %v, the package's %v", id, got[id], want)
		}
	}
	if s.engine == engine.PGVector {
		pool := s.adminPool(t)
		var rows int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{s.names.Schema, pgvector.Table}.Sanitize()).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if rows != len(pkg.ids) {
			t.Fatalf("the engine's table holds %d vectors, want %d", rows, len(pkg.ids))
		}
		if !s.hnswBuilt(t) {
			t.Fatal("the HNSW index is missing after the restore")
		}
		if since, err := pgvector.SearchIndexDeferred(ctx, pool, s.names.Schema); err != nil || since != "" {
			t.Fatalf("a load still holds the HNSW index back: %q, %v", since, err)
		}
	}
	probe := pkg.vectors[pkg.ids[0]]
	for _, c := range []struct {
		scope   string
		k, want int
	}{
		{bigScope, 10, 10}, {bigScope, 100, 100}, {bigScope, bigScopeItems + 50, bigScopeItems},
		{"user:000500", 20, 10}, {"user:001999", 3, 3}, {goneScope, 10, 0},
	} {
		hits, err := ix.Search(ctx, vector.Query{Scope: c.scope, Vector: probe, K: c.k})
		if err != nil {
			t.Fatal(err)
		}
		if len(hits) != c.want {
			t.Fatalf("search of %s for %d: %d hits, want %d", c.scope, c.k, len(hits), c.want)
		}
	}
}

// hnswBuilt reports whether the PGVector store's HNSW index exists.
func (s *engineStore) hnswBuilt(t *testing.T) bool {
	t.Helper()
	var n int
	if err := s.adminPool(t).QueryRow(context.Background(), `SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND tablename = $2 AND indexdef ILIKE '%USING hnsw%'`,
		s.names.Schema, pgvector.Table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// checkIndexState: after a failed restore the PGVector store's HNSW index is either
// in place or marked as held back by a load (so the rerun, and Ensure, know to build
// it), never missing unmarked.
func (s *engineStore) checkIndexState(t *testing.T) {
	t.Helper()
	if s.engine != engine.PGVector {
		return
	}
	since, err := pgvector.SearchIndexDeferred(context.Background(), s.adminPool(t), s.names.Schema)
	if err != nil {
		t.Fatal(err)
	}
	built := s.hnswBuilt(t)
	t.Logf("after the failed run: HNSW index built %v, held back since %q", built, since)
	if built == (since != "") {
		t.Fatalf("HNSW index built %v while a load marks it held back since %q", built, since)
	}
}

// checkUntouched: a PGVector store that a restore wrote nothing into has its HNSW
// index, and no load holds it back.
func (s *engineStore) checkUntouched(t *testing.T) {
	t.Helper()
	if s.engine != engine.PGVector {
		return
	}
	since, err := pgvector.SearchIndexDeferred(context.Background(), s.adminPool(t), s.names.Schema)
	if err != nil {
		t.Fatal(err)
	}
	if !s.hnswBuilt(t) || since != "" {
		t.Fatalf("a restore that wrote nothing took the store's HNSW index away (built %v, held back since %q)", s.hnswBuilt(t), since)
	}
}

// corruptCopy copies the package at prefix to a new prefix with one byte of its
// first shard changed, and returns the new prefix.
func (f *fixtureEnv) corruptCopy(t *testing.T, prefix string) string {
	t.Helper()
	ctx := context.Background()
	to := testutil.UniqueName("engines/corrupt-") + "/"
	corrupted := false
	for obj := range f.s3.ListObjects(ctx, f.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		o, err := f.s3.GetObject(ctx, f.bucket, obj.Key, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(o)
		_ = o.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !corrupted && strings.Contains(obj.Key, "shards/") {
			b[len(b)/2] ^= 0xff
			corrupted = true
		}
		if _, err := f.s3.PutObject(ctx, f.bucket, to+strings.TrimPrefix(obj.Key, prefix), bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if !corrupted {
		t.Fatal("the package has no shard to corrupt")
	}
	return to
}

// vectorsClose compares two vectors within float32 rounding (an engine may
// normalise on the way in).
func vectorsClose(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(float64(a[i]-b[i])) > 1e-5 {
			return false
		}
	}
	return true
}

// checkPackageVectors: a snapshot of an engine store carries every vector the
// restored package carried.
func checkPackageVectors(t *testing.T, items []memory.Item, pkg enginePackage) {
	t.Helper()
	if len(items) != len(pkg.ids) {
		t.Fatalf("the snapshot holds %d memories, want %d", len(items), len(pkg.ids))
	}
	for _, it := range items {
		if !vectorsClose(it.Embedding, pkg.vectors[it.MemoryID]) {
			b, _ := json.Marshal(it.Embedding)
			t.Fatalf("the snapshot's vector of %s is %s", it.MemoryID, b)
		}
	}
}
