package worker

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/memory/service"
	"github.com/amemory/memory-operator/internal/snapshot"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/vector/milvus"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
)

// These tests run the snapshot worker against the real PostgreSQL, MinIO and Milvus
// Lite, and read what it wrote back with the package reader.

var (
	testNow = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	testKey = strings.Repeat("ab", 32) // 32 bytes, hex
	spec8   = vector.Spec{Dimension: 8, Metric: vector.Cosine}
)

// fixtureEnv is a migrated store schema with memories, a tombstone, and a bucket.
type fixtureEnv struct {
	pool   *pgxpool.Pool
	schema string
	store  *pgstore.Store
	s3     *minio.Client
	bucket string
	sec    Secrets
	s3cfg  testutil.S3
}

func newFixture(t testing.TB) *fixtureEnv {
	t.Helper()
	ctx := context.Background()
	dsn := testutil.PostgresDSN(t)
	s3 := testutil.S3Config(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	schema := testutil.UniqueName("snap_")
	if _, err := pgstore.Migrate(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	})

	mc, err := minio.New(s3.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s3.AccessKey, s3.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	bucket := testutil.UniqueName("snap-")
	if err := mc.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	return &fixtureEnv{pool: pool, schema: schema, store: pgstore.New(pool, schema), s3: mc, bucket: bucket,
		s3cfg: s3, sec: Secrets{PostgresURI: dsn, S3AccessKey: s3.AccessKey, S3SecretKey: s3.SecretKey, EncryptionKey: testKey}}
}

func (f *fixtureEnv) config(prefix string) SnapshotConfig {
	return SnapshotConfig{
		StoreNamespace: "team-a", StoreName: "bot", Tenant: "acme", SnapshotName: "s1",
		Schema: f.schema, Vectors: engine.Vectors{VectorEngine: "Postgres"}, EmbeddingModel: "memory-operator/hashing-v1", Dimension: 8, Metric: "COSINE",
		Destination:      Destination{Endpoint: f.s3cfg.Endpoint, Insecure: true, Bucket: f.bucket, Prefix: prefix},
		Types:            []string{"episodic", "semantic", "procedural"},
		CompressionLevel: 1,
	}
}

func at(d time.Duration) time.Time { return testNow.Add(-d) }

func mem(id, scope string, typ memory.Type, key, text string, age time.Duration) memory.Item {
	c, _ := json.Marshal(map[string]string{"text": text})
	return memory.Item{MemoryID: id, MemoryType: typ, Scope: scope, Key: key, Content: c, Source: "test@1",
		BaseScore: 0.5, CreatedAt: at(age), UpdatedAt: at(age)}
}

// seed writes the fixture memories through the memory service (so vectors exist in
// index) and forgets user:3, leaving a tombstone.
func (f *fixtureEnv) seed(t *testing.T, index vector.Index) {
	t.Helper()
	ctx := context.Background()
	m, err := service.New(f.store, index, embed.NewHashing(8))
	if err != nil {
		t.Fatal(err)
	}
	expired := mem("u2-exp", "user:2", memory.Episodic, "", "expired last hour", time.Hour)
	expired.ExpiresAt = ptr(at(time.Minute))
	items := []memory.Item{
		mem("u1-coffee", "user:1", memory.Semantic, "preference.coffee", "flat white with oat milk", 48*time.Hour),
		mem("u1-trip", "user:1", memory.Episodic, "", "flew to Lisbon", 30*24*time.Hour),
		mem("u1-draft", "user:1", memory.Working, "", "drafting a reply", time.Minute),
		expired,
		mem("u2-city", "user:2", memory.Semantic, "address.city", "Berlin", 90*24*time.Hour),
		mem("s-abc", "session:abc", memory.Episodic, "", "asked about refunds", 2*time.Hour),
		mem("a-plan", "agent:planner", memory.Procedural, "deploy", "build, test, ship", 10*24*time.Hour),
		mem("u3-secret", "user:3", memory.Semantic, "", "to be forgotten", time.Hour),
	}
	for _, it := range items {
		if _, err := m.Remember(ctx, it); err != nil {
			t.Fatalf("remember %s: %v", it.MemoryID, err)
		}
	}
	if _, err := f.pool.Exec(ctx, `UPDATE `+pgx.Identifier{f.schema, "memories"}.Sanitize()+` SET archived_at = $1 WHERE memory_id = 'u2-city'`, at(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Forget(ctx, "user:3", "user asked", "test"); err != nil {
		t.Fatal(err)
	}
}

func (f *fixtureEnv) pgIndex(t *testing.T) vector.Index {
	t.Helper()
	if err := pgindex.Ensure(context.Background(), f.pool, f.schema, spec8); err != nil {
		t.Fatal(err)
	}
	return pgindex.New(f.pool, f.schema, spec8)
}

// open reads back the package at prefix, verifying it whole first.
func (f *fixtureEnv) open(t *testing.T, prefix string, key *snapshot.Key) (*snapshot.Reader, []memory.Item) {
	t.Helper()
	ctx := context.Background()
	r, err := snapshot.Open(ctx, snapshot.NewMinioObjects(f.s3, f.bucket), prefix, key)
	if err != nil {
		t.Fatalf("open %s: %v", prefix, err)
	}
	if err := r.Verify(ctx); err != nil {
		t.Fatalf("verify: %v", err)
	}
	var items []memory.Item
	if err := r.Items(ctx, func(it memory.Item) error { items = append(items, it); return nil }); err != nil {
		t.Fatal(err)
	}
	return r, items
}

func ids(items []memory.Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.MemoryID
	}
	return out
}

func key(t *testing.T) *snapshot.Key {
	t.Helper()
	k, err := snapshot.ParseKey([]byte(testKey))
	if err != nil {
		t.Fatal(err)
	}
	return &k
}

func ptr[T any](v T) *T { return &v }

func TestSnapshotRoundTrip(t *testing.T) {
	f := newFixture(t)
	f.seed(t, f.pgIndex(t))
	ctx := context.Background()

	m, err := RunSnapshot(ctx, f.config("snaps/one/"), f.sec, RunOptions{Version: "test", Now: testNow})
	if err != nil {
		t.Fatal(err)
	}
	r, items := f.open(t, "snaps/one/", key(t))
	// Default selection: no working memory, nothing expired, archived kept, in scope
	// order; the forgotten user is gone and its tombstone travels along.
	want := []string{"a-plan", "s-abc", "u1-coffee", "u1-trip", "u2-city"}
	if got := ids(items); !slices.Equal(got, want) {
		t.Fatalf("items = %v, want %v", got, want)
	}
	for _, it := range items {
		stored, err := f.store.Get(ctx, it.MemoryID)
		if err != nil {
			t.Fatal(err)
		}
		if it.Embedding != nil {
			t.Errorf("%s: embedding exported although not asked for", it.MemoryID)
		}
		gotJSON, _ := json.Marshal(it)
		wantJSON, _ := json.Marshal(stored)
		if string(gotJSON) != string(wantJSON) {
			t.Errorf("%s differs after the round trip:\n got %s\nwant %s", it.MemoryID, gotJSON, wantJSON)
		}
	}
	man := r.Manifest()
	if man.Counts.Items != 5 || man.Counts.Scopes != 4 || man.Counts.ByType[memory.Semantic] != 2 ||
		man.Counts.ByType[memory.Episodic] != 2 || man.Counts.ByType[memory.Procedural] != 1 || man.Counts.ByType[memory.Working] != 0 {
		t.Fatalf("counts = %+v", man.Counts)
	}
	if man.Tombstones.Count != 1 || man.Tombstones.Entries[0].Scope != "user:3" {
		t.Fatalf("tombstones = %+v", man.Tombstones)
	}
	if man.Source.Tenant != "acme" || man.Source.Name != "bot" || man.Encryption == nil || man.Encryption.KeyID != key(t).ID() {
		t.Fatalf("manifest source/encryption = %+v / %+v", man.Source, man.Encryption)
	}
	if m.PackageID != man.PackageID {
		t.Fatalf("RunSnapshot returned package %s, the bucket holds %s", m.PackageID, man.PackageID)
	}
	// Without the key nothing can be read.
	if _, err := snapshot.Open(ctx, snapshot.NewMinioObjects(f.s3, f.bucket), "snaps/one/", nil); !errors.Is(err, snapshot.ErrKeyRequired) {
		t.Fatalf("open without key: %v", err)
	}
}

func TestSnapshotSelection(t *testing.T) {
	f := newFixture(t)
	f.seed(t, f.pgIndex(t))
	cases := []struct {
		name   string
		mutate func(*SnapshotConfig)
		want   []string
	}{
		{"user prefix", func(c *SnapshotConfig) { c.Scopes = []string{"user:*"} }, []string{"u1-coffee", "u1-trip", "u2-city"}},
		{"exact scopes", func(c *SnapshotConfig) { c.Scopes = []string{"user:2", "agent:planner"} }, []string{"a-plan", "u2-city"}},
		{"working memory when asked", func(c *SnapshotConfig) { c.Types = []string{"working"} }, []string{"u1-draft"}},
		{"all types, expired still out", func(c *SnapshotConfig) { c.Types = nil }, []string{"a-plan", "s-abc", "u1-coffee", "u1-draft", "u1-trip", "u2-city"}},
		// agent:planner's newest memory is 10 days old: it goes. user:2 wrote an hour ago
		// (the expired memory), so it is active and its 90-day-old archived memory stays.
		{"active within a week", func(c *SnapshotConfig) { c.ActiveWithin = 7 * 24 * time.Hour }, []string{"s-abc", "u1-coffee", "u1-trip", "u2-city"}},
		// Only user:1 wrote within the minute (its draft); the whole scope comes along.
		{"active within a minute", func(c *SnapshotConfig) { c.ActiveWithin = time.Minute; c.Types = nil }, []string{"u1-coffee", "u1-draft", "u1-trip"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prefix := fmt.Sprintf("sel/%d/", i)
			cfg := f.config(prefix)
			tc.mutate(&cfg)
			if _, err := RunSnapshot(context.Background(), cfg, f.sec, RunOptions{Now: testNow}); err != nil {
				t.Fatal(err)
			}
			if _, items := f.open(t, prefix, key(t)); !slices.Equal(ids(items), tc.want) {
				t.Fatalf("items = %v, want %v", ids(items), tc.want)
			}
		})
	}
}

func TestSnapshotEmbeddings(t *testing.T) {
	ctx := context.Background()
	for _, engine := range []string{"Postgres", "Milvus"} {
		t.Run(engine, func(t *testing.T) {
			f := newFixture(t)
			cfg := f.config("emb/")
			cfg.IncludeEmbeddings = true
			var index vector.Index
			if engine == "Postgres" {
				index = f.pgIndex(t)
			} else {
				addr := testutil.MilvusAddr(t)
				c, err := milvus.Connect(ctx, milvus.Conn{Address: addr})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Close() })
				collection := testutil.UniqueName("snap_")
				if _, err := milvus.EnsureCollection(ctx, c, collection, spec8, milvus.Owner{ID: "test"}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = milvus.DropCollection(context.Background(), c, collection, milvus.Owner{ID: "test"}) })
				index = milvus.New(c, collection, spec8)
				cfg.VectorEngine, cfg.MilvusAddress, cfg.Collection = "Milvus", addr, collection
			}
			f.seed(t, index)
			if _, err := RunSnapshot(ctx, cfg, f.sec, RunOptions{Now: testNow}); err != nil {
				t.Fatal(err)
			}
			r, items := f.open(t, "emb/", key(t))
			if e := r.Manifest().Embedding; e == nil || e.Model != "memory-operator/hashing-v1" || e.Dimension != 8 {
				t.Fatalf("manifest embedding = %+v", e)
			}
			h := embed.NewHashing(8)
			for _, it := range items {
				want, err := h.Embed(ctx, embed.Passage, []string{it.EmbeddingText()})
				if err != nil {
					t.Fatal(err)
				}
				if !closeVec(it.Embedding, vector.Normalize(want[0])) {
					t.Errorf("%s: embedding %v, want %v", it.MemoryID, it.Embedding, want[0])
				}
			}
			if len(items) != 5 || r.Manifest().Counts.WithEmbedding != 5 {
				t.Fatalf("%d items, %d with embeddings", len(items), r.Manifest().Counts.WithEmbedding)
			}
		})
	}
}

func closeVec(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if d := a[i] - b[i]; d > 1e-5 || d < -1e-5 {
			return false
		}
	}
	return true
}

func TestSnapshotRefusesWithoutKeyUnlessUnencrypted(t *testing.T) {
	f := newFixture(t)
	f.seed(t, f.pgIndex(t))
	ctx := context.Background()
	noKey := f.sec
	noKey.EncryptionKey = ""
	if _, err := RunSnapshot(ctx, f.config("nokey/"), noKey, RunOptions{Now: testNow}); err == nil || !strings.Contains(err.Error(), EnvEncryptionKey) {
		t.Fatalf("without a key: %v", err)
	}
	short := f.sec
	short.EncryptionKey = hex.EncodeToString(make([]byte, 16))
	if _, err := RunSnapshot(ctx, f.config("short/"), short, RunOptions{Now: testNow}); err == nil || !strings.Contains(err.Error(), "16 bytes") {
		t.Fatalf("with a 16-byte key: %v", err)
	}
	for _, p := range []string{"nokey/", "short/"} {
		if names, _ := snapshot.NewMinioObjects(f.s3, f.bucket).List(ctx, p); len(names) != 0 {
			t.Fatalf("a refused run left objects under %s: %v", p, names)
		}
	}

	cfg := f.config("plain/")
	cfg.Unencrypted = true
	if _, err := RunSnapshot(ctx, cfg, noKey, RunOptions{Now: testNow}); err != nil {
		t.Fatal(err)
	}
	r, items := f.open(t, "plain/", nil)
	if r.Manifest().Encryption != nil || len(items) != 5 {
		t.Fatalf("plaintext package: encryption %+v, %d items", r.Manifest().Encryption, len(items))
	}
}

// TestSnapshotProcessKilledMidUploadLeavesNoManifest runs the real binary, kills it
// (SIGKILL, as an evicted pod) while it uploads, and checks that the prefix is an
// incomplete package; a second run then completes it.
func TestSnapshotProcessKilledMidUploadLeavesNoManifest(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and exports 250k memories")
	}
	f := newFixture(t)
	ctx := context.Background()
	const n = 250_000
	f.importGenerated(t, n)
	bin := buildBinary(t)
	cfg := f.config("crash/")
	cfg.ShardTargetBytes = 4 << 20 // several shards, so uploads are under way when killed
	run := func() *exec.Cmd {
		cmd := exec.Command(bin, append([]string{"snapshot"}, cfg.Args()...)...)
		cmd.Env = append(os.Environ(), EnvPostgresURI+"="+f.sec.PostgresURI, EnvS3AccessKey+"="+f.sec.S3AccessKey,
			EnvS3SecretKey+"="+f.sec.S3SecretKey, EnvEncryptionKey+"="+testKey)
		return cmd
	}

	// Kill it as soon as it reports progress: shards are being uploaded then.
	killOnProgress(t, run(), func(line string) bool { return strings.HasPrefix(line, "exported ") })

	objects := snapshot.NewMinioObjects(f.s3, f.bucket)
	if _, err := snapshot.Open(ctx, objects, "crash/", key(t)); !errors.Is(err, snapshot.ErrIncomplete) {
		t.Fatalf("after a crash: Open = %v, want ErrIncomplete", err)
	}

	// The Job's retry (a new pod) replaces the leftovers and completes the package.
	if out, err := run().CombinedOutput(); err != nil {
		t.Fatalf("second run: %v\n%s", err, out)
	}
	r, err := snapshot.Open(ctx, objects, "crash/", key(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	if got := r.Manifest().Counts.Items; got != n || len(r.Manifest().Shards) < 2 {
		t.Fatalf("items = %d in %d shards, want %d in several", got, len(r.Manifest().Shards), n)
	}
}

// importGenerated imports n generated memories, ten per user scope.
func (f *fixtureEnv) importGenerated(t *testing.T, n int) {
	t.Helper()
	i := 0
	if _, err := f.store.Import(context.Background(), func() (memory.Item, bool, error) {
		if i == n {
			return memory.Item{}, false, nil
		}
		i++
		return mem(fmt.Sprintf("m%07d", i), fmt.Sprintf("user:%06d", i/10), memory.Semantic, "",
			fmt.Sprintf("memory number %d about coffee and trains", i), time.Duration(i)*time.Second), true, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// killOnProgress starts cmd and kills it with SIGKILL (as an evicted pod) at the first
// line of its progress (stderr) that matches.
func killOnProgress(t *testing.T, cmd *exec.Cmd, match func(line string) bool) {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if match(sc.Text()) {
			break
		}
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
}

// buildBinary builds memory-operator for tests that run the real process.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "memory-operator")
	build := exec.Command("go", "build", "-o", bin, "github.com/amemory/memory-operator")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestSnapshotReportsUnusableDestinations(t *testing.T) {
	f := newFixture(t)
	f.seed(t, f.pgIndex(t))
	ctx := context.Background()

	missing := f.config("x/")
	missing.Destination.Bucket = "no-such-bucket-4711"
	if _, err := RunSnapshot(ctx, missing, f.sec, RunOptions{Now: testNow}); err == nil ||
		!strings.Contains(err.Error(), "bucket no-such-bucket-4711 does not exist") {
		t.Fatalf("missing bucket: %v", err)
	}

	unreachable := f.config("x/")
	unreachable.Destination.Endpoint = "127.0.0.1:1"
	if _, err := RunSnapshot(ctx, unreachable, f.sec, RunOptions{Now: testNow}); err == nil ||
		!strings.Contains(err.Error(), "object storage 127.0.0.1:1") {
		t.Fatalf("unreachable endpoint: %v", err)
	}

	wrongCreds := f.sec
	wrongCreds.S3SecretKey = "not-the-secret"
	if _, err := RunSnapshot(ctx, f.config("x/"), wrongCreds, RunOptions{Now: testNow}); err == nil ||
		strings.Contains(err.Error(), "not-the-secret") {
		t.Fatalf("wrong credentials: err = %v (must fail without echoing the secret)", err)
	}
	if names, err := snapshot.NewMinioObjects(f.s3, f.bucket).List(ctx, "x/"); err != nil || len(names) != 0 {
		t.Fatalf("failed runs left objects: %v, %v", names, err)
	}
}
