package restore_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/milvus-io/milvus-sdk-go/v2/client"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/restore"
	"github.com/amemory/memory-operator/internal/snapshot"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/milvus"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
)

// These tests run restores against the real PostgreSQL, MinIO and Milvus Lite, with
// packages written by the snapshot package's Writer (as the snapshot worker does).

var (
	testNow  = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	testKey  = mustKey(strings.Repeat("5a", 32))
	otherKey = mustKey(strings.Repeat("a5", 32))
)

const (
	hashingModel = embed.HashingModel
	dim          = 16
)

var spec16 = vector.Spec{Dimension: dim, Metric: vector.Cosine}

func mustKey(s string) *snapshot.Key {
	k, err := snapshot.ParseKey([]byte(s))
	if err != nil {
		panic(err)
	}
	return &k
}

// env is the shared services of one test: a pool and a bucket of its own.
type env struct {
	pool *pgxpool.Pool
	s3   *minio.Client
	obj  *snapshot.MinioObjects
}

func newEnv(t testing.TB) *env {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testutil.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	s3 := testutil.S3Config(t)
	mc, err := minio.New(s3.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s3.AccessKey, s3.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	bucket := testutil.UniqueName("restore-")
	ctx := context.Background()
	if err := mc.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for o := range mc.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
			if o.Err == nil {
				_ = mc.RemoveObject(ctx, bucket, o.Key, minio.RemoveObjectOptions{})
			}
		}
		_ = mc.RemoveBucket(ctx, bucket)
	})
	return &env{pool: pool, s3: mc, obj: snapshot.NewMinioObjects(mc, bucket)}
}

// store is a migrated store schema with its embedded vector index.
type store struct {
	*pgstore.Store
	schema string
	index  vector.Index
	db     *pgxpool.Pool
}

func (e *env) newStore(t testing.TB) *store { return e.newStoreSpec(t, spec16) }

func (e *env) newStoreSpec(t testing.TB, spec vector.Spec) *store {
	t.Helper()
	ctx := context.Background()
	schema := testutil.UniqueName("rs_")
	t.Cleanup(func() {
		_, _ = e.pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	})
	if _, err := pgstore.Migrate(ctx, e.pool, schema); err != nil {
		t.Fatal(err)
	}
	if err := pgindex.Ensure(ctx, e.pool, schema, spec); err != nil {
		t.Fatal(err)
	}
	return &store{Store: pgstore.New(e.pool, schema), schema: schema, index: pgindex.New(e.pool, schema, spec), db: e.pool}
}

func milvusClient(t testing.TB) client.Client {
	t.Helper()
	c, err := milvus.Connect(context.Background(), milvus.Conn{Address: testutil.MilvusAddr(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newMilvusIndex(t testing.TB, c client.Client, spec vector.Spec) *milvus.Index {
	t.Helper()
	name := testutil.UniqueName("restore_")
	t.Cleanup(func() { _ = milvus.DropCollection(context.Background(), c, name, milvus.Owner{ID: "test"}) })
	if _, err := milvus.EnsureCollection(context.Background(), c, name, spec, milvus.Owner{ID: "test"}); err != nil {
		t.Fatal(err)
	}
	return milvus.New(c, name, spec)
}

// pkgOptions shape a package written by writePackage.
type pkgOptions struct {
	key        *snapshot.Key // nil: unencrypted
	tombstones []memory.Tombstone
	embedding  *snapshot.EmbeddingInfo
	shardBytes int64
	source     *snapshot.SourceInfo // nil: a store named "source"
	// now is the package's cut (createdAt); zero: testNow.
	now time.Time
}

// writePackage writes items (sorted here by scope, then memory_id) as a package at
// prefix and opens it.
func (e *env) writePackage(t testing.TB, prefix string, items []memory.Item, o pkgOptions) *snapshot.Reader {
	t.Helper()
	ctx := context.Background()
	items = slices.Clone(items)
	source := snapshot.SourceInfo{Name: "source", Store: "test"}
	if o.source != nil {
		source = *o.source
	}
	slices.SortStableFunc(items, func(a, b memory.Item) int {
		return cmp.Or(strings.Compare(a.Scope, b.Scope), strings.Compare(a.MemoryID, b.MemoryID))
	})
	w, err := snapshot.NewWriter(ctx, e.obj, snapshot.WriterOptions{
		Prefix: prefix, Key: o.key, Unencrypted: o.key == nil, CompressionLevel: 1, ShardTargetBytes: o.shardBytes,
		Source:    source,
		Selection: snapshot.Selection{IncludeEmbeddings: o.embedding != nil}, Embedding: o.embedding,
		Now: func() time.Time { return cmp.Or(o.now, testNow) },
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if err := w.Add(ctx, it); err != nil {
			t.Fatalf("add %s: %v", it.MemoryID, err)
		}
	}
	ts := slices.Clone(o.tombstones)
	slices.SortFunc(ts, func(a, b memory.Tombstone) int { return strings.Compare(a.Scope, b.Scope) })
	for _, tb := range ts {
		if err := w.AddTombstone(tb); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return e.open(t, prefix, o.key)
}

// tamperFirstShard flips one bit near the end of the package's first shard.
func (e *env) tamperFirstShard(t testing.TB, pkg *snapshot.Reader) {
	t.Helper()
	ctx := context.Background()
	name := pkg.Prefix() + pkg.Manifest().Shards[0].Name
	rc, err := e.obj.Get(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(rc)
	_ = rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-20] ^= 1
	if _, err := e.obj.Put(ctx, name, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
}

func (e *env) open(t testing.TB, prefix string, key *snapshot.Key) *snapshot.Reader {
	t.Helper()
	r, err := snapshot.Open(context.Background(), e.obj, prefix, key)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// snapshotStore exports a store as the snapshot worker does (archived included,
// expired too — a restore decides about those), with its vectors: from the store's
// vectors table, or fetched from Milvus.
func (e *env) snapshotStore(t testing.TB, s *store, prefix string, fetch *milvus.Index) *snapshot.Reader {
	t.Helper()
	ctx := context.Background()
	var items []memory.Item
	err := s.Export(ctx, pgstore.ExportFilter{IncludeArchived: true, IncludeEmbeddings: fetch == nil}, func(it memory.Item) error {
		items = append(items, it)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fetch != nil {
		ids := make([]string, len(items))
		for i, it := range items {
			ids[i] = it.MemoryID
		}
		vecs, err := fetch.Fetch(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		for i := range items {
			items[i].Embedding = vecs[items[i].MemoryID]
		}
	}
	tombs, err := s.Tombstones(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The cut of a live store is now: it holds what was recorded before it.
	return e.writePackage(t, prefix, items, pkgOptions{key: testKey, tombstones: tombs, now: time.Now(),
		embedding: &snapshot.EmbeddingInfo{Model: hashingModel, Dimension: dim, Metric: "cosine"}})
}

// dump is the full state of a store: every memory column, tombstones, vectors.
type dump struct {
	memories, tombstones, vectors []string
}

func (s *store) dump(t testing.TB) dump {
	t.Helper()
	q := func(sql string) []string {
		rows, err := s.db.Query(context.Background(), sql)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	tbl := func(name string) string { return pgx.Identifier{s.schema, name}.Sanitize() }
	return dump{
		memories:   q(`SELECT row(m.*)::text FROM ` + tbl("memories") + ` m ORDER BY memory_id`),
		tombstones: q(`SELECT row(t.*)::text FROM ` + tbl("tombstones") + ` t ORDER BY scope`),
		// Every column but xact, which names the transaction that wrote the row.
		vectors: q(`SELECT row(v.memory_id, v.scope, v.memory_type, v.embedding)::text FROM ` + tbl("vectors") + ` v ORDER BY memory_id`),
	}
}

func assertSameDump(t testing.TB, got, want dump) {
	t.Helper()
	for _, c := range []struct {
		what      string
		got, want []string
	}{{"memories", got.memories, want.memories}, {"tombstones", got.tombstones, want.tombstones}, {"vectors", got.vectors, want.vectors}} {
		if !slices.Equal(c.got, c.want) {
			t.Fatalf("%s differ:\ngot  %d rows %s\nwant %d rows %s", c.what, len(c.got), firstDiff(c.got, c.want), len(c.want), firstDiff(c.want, c.got))
		}
	}
}

func firstDiff(a, b []string) string {
	for i := range a {
		if i >= len(b) || a[i] != b[i] {
			return fmt.Sprintf("[%d] %s", i, a[i])
		}
	}
	return "(prefix of the other)"
}

// exportAll returns every memory of a store (archived too) with its embedding.
func (s *store) exportAll(t testing.TB) []memory.Item {
	t.Helper()
	var out []memory.Item
	if err := s.Export(context.Background(), pgstore.ExportFilter{IncludeArchived: true, IncludeEmbeddings: true}, func(it memory.Item) error {
		out = append(out, it)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// vectorsOf returns the stored vectors of a store's pgindex.
func (s *store) vectorsOf(t testing.TB) map[string][]float32 {
	t.Helper()
	out := map[string][]float32{}
	for _, it := range s.exportAll(t) {
		if it.Embedding != nil {
			out[it.MemoryID] = it.Embedding
		}
	}
	return out
}

func (s *store) count(t testing.TB) int64 {
	t.Helper()
	n, err := s.Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// dryThenReal restores with opts twice into dst: a dry run, which must leave dst as it
// was (afterDry checks more, when set), then the real run, whose result and detail
// the dry run must have predicted exactly. It returns the real run's result.
func dryThenReal(t testing.TB, dst *store, opts restore.Options, afterDry func()) *restore.Result {
	t.Helper()
	before := dst.dump(t)
	var dryDetail, realDetail bytes.Buffer
	opts.DryRun, opts.Detail = true, &dryDetail
	dry := run(t, opts)
	assertSameDump(t, dst.dump(t), before)
	if afterDry != nil {
		afterDry()
	}
	opts.DryRun, opts.Detail = false, &realDetail
	full := run(t, opts)
	dry.DryRun = false
	assertResult(t, dry, *full)
	if dryDetail.String() != realDetail.String() {
		t.Fatalf("detail differs:\n%s\n%s", dryDetail.String(), realDetail.String())
	}
	return full
}

func run(t testing.TB, o restore.Options) *restore.Result {
	t.Helper()
	if o.Now.IsZero() {
		o.Now = testNow
	}
	res, err := restore.Run(context.Background(), o)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if got := res.Restored + res.Unchanged + res.Skipped.Total(); got != res.Read {
		t.Fatalf("restored %d + unchanged %d + skipped %d != read %d", res.Restored, res.Unchanged, res.Skipped.Total(), res.Read)
	}
	return res
}

// mapItems returns items as a restore with m should store them: scopes mapped.
func mapItems(t testing.TB, m *restore.Mapper, items []memory.Item) []memory.Item {
	t.Helper()
	out := make([]memory.Item, 0, len(items))
	for _, it := range items {
		to, keep, err := m.Map(it.Scope)
		if err != nil || !keep {
			t.Fatalf("map %s: %v %v", it.Scope, keep, err)
		}
		it.Scope = to
		out = append(out, it)
	}
	slices.SortFunc(out, func(a, b memory.Item) int { return strings.Compare(a.MemoryID, b.MemoryID) })
	return out
}

// assertSameItems compares items field by field (content and history as JSON values,
// times as instants, embeddings within float32 rounding).
func assertSameItems(t testing.TB, got, want []memory.Item) {
	t.Helper()
	byID := func(items []memory.Item) []memory.Item {
		items = slices.Clone(items)
		slices.SortFunc(items, func(a, b memory.Item) int { return strings.Compare(a.MemoryID, b.MemoryID) })
		return items
	}
	got, want = byID(got), byID(want)
	if len(got) != len(want) {
		t.Fatalf("got %d items, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := canon(t, got[i]), canon(t, want[i])
		if !vectorsClose(g.Embedding, w.Embedding) {
			t.Fatalf("%s: embedding %v, want %v", g.MemoryID, g.Embedding, w.Embedding)
		}
		g.Embedding, w.Embedding = nil, nil
		gb, _ := json.Marshal(g)
		wb, _ := json.Marshal(w)
		if !bytes.Equal(gb, wb) {
			t.Fatalf("item %d differs:\ngot  %s\nwant %s", i, gb, wb)
		}
	}
}

func canon(t testing.TB, it memory.Item) memory.Item {
	t.Helper()
	c := func(raw json.RawMessage) json.RawMessage {
		b, err := memory.CanonicalJSON(raw)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	it.Content = c(it.Content)
	h := make([]memory.Revision, len(it.History))
	for i, r := range it.History {
		r.Content = c(r.Content)
		r.UpdatedAt, r.SupersededAt = r.UpdatedAt.UTC(), r.SupersededAt.UTC()
		h[i] = r
	}
	if len(h) == 0 {
		h = nil
	}
	it.History = h
	it.CreatedAt, it.UpdatedAt = it.CreatedAt.UTC(), it.UpdatedAt.UTC()
	return it
}

func vectorsClose(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(float64(a[i])-float64(b[i])) > 1e-6 {
			return false
		}
	}
	return true
}

// countingEmbedder counts texts embedded, and can pose as another model.
type countingEmbedder struct {
	embed.Embedder
	model string
	texts atomic.Int64
}

func (c *countingEmbedder) Model() string {
	if c.model != "" {
		return c.model
	}
	return c.Embedder.Model()
}

func (c *countingEmbedder) Embed(ctx context.Context, role embed.Role, texts []string) ([][]float32, error) {
	c.texts.Add(int64(len(texts)))
	return c.Embedder.Embed(ctx, role, texts)
}

// dataset builds realistic memories for users (and their sessions and an agent):
// keyed preferences with history, keyless facts and events, procedures, working
// memory with a TTL, some expired, some archived. Deterministic for a seed.
func dataset(users int, seed uint64) []memory.Item {
	r := rand.New(rand.NewPCG(seed, 7))
	drinks := []string{"flat white", "espresso", "green tea", "oat latte", "cold brew", "chai"}
	cities := []string{"Berlin", "Lisbon", "Osaka", "Nairobi", "Montreal", "Hangzhou", "Oslo"}
	topics := []string{"refund for order", "password reset", "flight change", "invoice copy", "delivery delay", "account upgrade"}
	foods := []string{"vegetarian", "no peanuts", "spicy food", "gluten free", "sushi"}
	var items []memory.Item
	id := 0
	add := func(scope string, typ memory.Type, key string, content map[string]any, age time.Duration) *memory.Item {
		id++
		c, _ := json.Marshal(content)
		at := testNow.Add(-age)
		items = append(items, memory.Item{MemoryID: fmt.Sprintf("m%06d-%d", id, seed), MemoryType: typ, Scope: scope, Key: key,
			Content: c, Source: "redis-agent@1.4", BaseScore: float64(1+r.IntN(9)) / 10, CreatedAt: at.Add(-time.Hour), UpdatedAt: at})
		return &items[len(items)-1]
	}
	days := func(n int) time.Duration { return time.Duration(n) * 24 * time.Hour }
	for u := range users {
		scope := fmt.Sprintf("user:%d", 1000+u)
		it := add(scope, memory.Semantic, "preference.coffee", map[string]any{"drink": drinks[r.IntN(len(drinks))], "sugar": r.IntN(2) == 0}, days(r.IntN(30)))
		if r.IntN(2) == 0 {
			old, _ := json.Marshal(map[string]any{"drink": drinks[r.IntN(len(drinks))]})
			it.History = []memory.Revision{{Content: old, Source: "redis-agent@1.3", BaseScore: 0.5,
				UpdatedAt: it.UpdatedAt.Add(-days(40)), SupersededAt: it.UpdatedAt}}
		}
		add(scope, memory.Semantic, "address.city", map[string]any{"city": cities[r.IntN(len(cities))]}, days(r.IntN(200)))
		add(scope, memory.Semantic, "", map[string]any{"fact": "diet: " + foods[r.IntN(len(foods))]}, days(r.IntN(90)))
		for e := range 1 + r.IntN(3) {
			add(scope, memory.Episodic, "", map[string]any{"event": topics[r.IntN(len(topics))], "ticket": 5000 + u*10 + e,
				"city": cities[r.IntN(len(cities))]}, days(r.IntN(60)))
		}
		if r.IntN(3) == 0 {
			w := add(scope, memory.Working, "", map[string]any{"draft": "reply about " + topics[r.IntN(len(topics))]}, time.Hour)
			w.ExpiresAt = ptr(testNow.Add(12 * time.Hour))
		}
		if r.IntN(5) == 0 {
			x := add(scope, memory.Episodic, "", map[string]any{"event": "temporary hold on " + topics[r.IntN(len(topics))]}, days(3))
			x.ExpiresAt = ptr(testNow.Add(-time.Hour)) // expired
		}
		if r.IntN(6) == 0 {
			a := add(scope, memory.Episodic, "", map[string]any{"event": "old " + topics[r.IntN(len(topics))], "year": 2019}, days(700))
			a.ArchivedAt = ptr(testNow.Add(-days(10)))
		}
		if u%4 == 0 {
			add(fmt.Sprintf("session:s%d", u), memory.Episodic, "", map[string]any{"asked": topics[r.IntN(len(topics))]}, time.Duration(1+r.IntN(48))*time.Hour)
		}
	}
	add("agent:support", memory.Procedural, "refund", map[string]any{"steps": []string{"verify order", "check policy", "issue refund"}}, days(20))
	add("agent:support", memory.Procedural, "escalate", map[string]any{"steps": []string{"collect logs", "open ticket"}}, days(25))
	return items
}

func ptr[T any](v T) *T { return &v }

// exactMapper maps every scope of items to a new name (user:1024 -> user:<uuid-ish>),
// the way a migration to a framework with new IDs does.
func exactMapper(t testing.TB, items []memory.Item, unmapped restore.UnmappedPolicy) *restore.Mapper {
	t.Helper()
	m, err := restore.NewMapper(unmapped)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		kind, id, _ := strings.Cut(it.Scope, ":")
		if err := m.AddExact(it.Scope, fmt.Sprintf("%s:%x-new", kind, []byte(id))); err != nil {
			t.Fatal(err)
		}
	}
	return m
}
