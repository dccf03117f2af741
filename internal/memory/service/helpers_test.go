package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/memory/service"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/milvus"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
)

// now is the fixed clock of these tests.
var now = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// dim is the embedding dimension: large enough that the hashing embedder's features
// rarely share a bucket.
const dim = 512

var spec = vector.Spec{Dimension: dim, Metric: vector.Cosine}

// backend builds the vector index of a store whose schema is already migrated.
type backend struct {
	name string
	// sharesStore: the index lives in the store's schema, so pgstore.Forget already
	// deletes its vectors.
	sharesStore bool
	newIndex    func(t testing.TB, pool *pgxpool.Pool, schema string) vector.Index
}

var backends = []backend{
	{
		name:        "pgindex",
		sharesStore: true,
		newIndex: func(t testing.TB, pool *pgxpool.Pool, schema string) vector.Index {
			if err := pgindex.Ensure(t.Context(), pool, schema, spec); err != nil {
				t.Fatalf("pgindex.Ensure: %v", err)
			}
			return pgindex.New(pool, schema, spec)
		},
	},
	{
		name: "milvus",
		newIndex: func(t testing.TB, _ *pgxpool.Pool, _ string) vector.Index {
			c, err := milvus.Connect(context.Background(), milvus.Conn{Address: testutil.MilvusAddr(t)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			name := testutil.UniqueName("svc_")
			t.Cleanup(func() {
				if err := milvus.DropCollection(context.Background(), c, name, milvus.Owner{ID: "test"}); err != nil {
					t.Errorf("drop collection %s: %v", name, err)
				}
			})
			if _, err := milvus.EnsureCollection(t.Context(), c, name, spec, milvus.Owner{ID: "test"}); err != nil {
				t.Fatalf("milvus.EnsureCollection: %v", err)
			}
			return milvus.New(c, name, spec)
		},
	},
}

// forEachBackend runs fn as one subtest per vector index implementation.
func forEachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { fn(t, b) })
	}
}

// env is one store with its index and a Memory over them.
type env struct {
	pool  *pgxpool.Pool // superuser pool
	store *pgstore.Store
	index vector.Index // the real index, never wrapped
	emb   *countingEmbedder
	mem   *service.Memory
}

// newEnv creates a migrated store in a schema of its own and the backend's index,
// all removed when the test ends. wrap, when not nil, wraps the index the Memory uses.
func newEnv(t testing.TB, b backend, wrap func(vector.Index) vector.Index) *env {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), testutil.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	schema := testutil.UniqueName("svc_")
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	if _, err := pgstore.Migrate(t.Context(), pool, schema); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	e := &env{pool: pool, store: pgstore.New(pool, schema), emb: &countingEmbedder{Embedder: embed.NewHashing(dim)}}
	e.index = b.newIndex(t, pool, schema)
	idx := e.index
	if wrap != nil {
		idx = wrap(idx)
	}
	e.mem, err = service.New(e.store, idx, e.emb)
	if err != nil {
		t.Fatalf("service.New: %v", err)
	}
	return e
}

// countingEmbedder counts Embed calls and the texts embedded.
type countingEmbedder struct {
	embed.Embedder
	calls, texts atomic.Int64
}

func (c *countingEmbedder) Embed(ctx context.Context, role embed.Role, texts []string) ([][]float32, error) {
	c.calls.Add(1)
	c.texts.Add(int64(len(texts)))
	return c.Embedder.Embed(ctx, role, texts)
}

var errInjected = errors.New("injected index failure")

// faultyIndex wraps an index: the next failUpsert Upserts and failDeleteScope
// DeleteScopes fail without touching the index, and beforeUpsert, when set, runs
// once before the next Upsert is passed on.
type faultyIndex struct {
	vector.Index
	mu              sync.Mutex
	failUpsert      int
	failDeleteScope int
	beforeUpsert    func()
}

func (f *faultyIndex) Upsert(ctx context.Context, entries []vector.Entry) error {
	f.mu.Lock()
	fail := f.failUpsert > 0
	if fail {
		f.failUpsert--
	}
	hook := f.beforeUpsert
	f.beforeUpsert = nil
	f.mu.Unlock()
	if fail {
		return errInjected
	}
	if hook != nil {
		hook()
	}
	return f.Index.Upsert(ctx, entries)
}

func (f *faultyIndex) DeleteScope(ctx context.Context, scope string) error {
	f.mu.Lock()
	fail := f.failDeleteScope > 0
	if fail {
		f.failDeleteScope--
	}
	f.mu.Unlock()
	if fail {
		return errInjected
	}
	return f.Index.DeleteScope(ctx, scope)
}

// fact is a semantic memory of scope with content {"text": text}.
func fact(scope, key, text string) memory.Item {
	c, err := json.Marshal(map[string]string{"text": text})
	if err != nil {
		panic(err)
	}
	at := now.Add(-time.Hour)
	return memory.Item{
		MemoryType: memory.Semantic,
		Scope:      scope,
		Key:        key,
		Content:    c,
		Source:     "test@1",
		BaseScore:  0.8,
		CreatedAt:  at,
		UpdatedAt:  at,
	}
}

func textOf(t *testing.T, it memory.Item) string {
	t.Helper()
	var c struct{ Text string }
	if err := json.Unmarshal(it.Content, &c); err != nil {
		t.Fatalf("content of %s: %v", it.MemoryID, err)
	}
	return c.Text
}

func remember(t *testing.T, m *service.Memory, it memory.Item, want pgstore.Outcome) string {
	t.Helper()
	res, err := m.Remember(t.Context(), it)
	if err != nil {
		t.Fatalf("Remember(%s): %v", it.EmbeddingText(), err)
	}
	if res.Outcome != want {
		t.Fatalf("Remember(%s) outcome = %s, want %s", it.EmbeddingText(), res.Outcome, want)
	}
	if res.MemoryID == "" {
		t.Fatalf("Remember(%s) returned no memory_id", it.EmbeddingText())
	}
	return res.MemoryID
}

func search(t *testing.T, m *service.Memory, q service.SearchQuery) []service.Result {
	t.Helper()
	if q.Now.IsZero() {
		q.Now = now
	}
	res, err := m.Search(t.Context(), q)
	if err != nil {
		t.Fatalf("Search(%+v): %v", q, err)
	}
	return res
}

func resultIDs(rs []service.Result) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Item.MemoryID
	}
	return out
}

func sorted(ids []string) []string {
	out := append([]string(nil), ids...)
	sort.Strings(out)
	return out
}

// vectorsOf returns the IDs of every vector the index holds for scope, read straight
// from the index (not through the service, which filters by PostgreSQL).
func vectorsOf(t *testing.T, idx vector.Index, scope string) []string {
	t.Helper()
	q := make([]float32, dim)
	q[0] = 1
	hits, err := idx.Search(t.Context(), vector.Query{Scope: scope, Vector: q, K: 1000})
	if err != nil {
		t.Fatalf("index search in %s: %v", scope, err)
	}
	ids := make([]string, len(hits))
	for i, h := range hits {
		ids[i] = h.ID
	}
	sort.Strings(ids)
	return ids
}

// embedding returns the hashing embedder's vector of text.
func embedding(t *testing.T, text string) []float32 {
	t.Helper()
	v, err := embed.NewHashing(dim).Embed(t.Context(), embed.Passage, []string{text})
	if err != nil {
		t.Fatal(err)
	}
	return v[0]
}

// cosine is the similarity the index reports between the stored embedding of
// storedText and the query text.
func cosine(t *testing.T, storedText, queryText string) float32 {
	return vector.Dot(embedding(t, storedText), embedding(t, queryText))
}

func closeTo(a, b float32) bool { return math.Abs(float64(a-b)) < 1e-4 }
