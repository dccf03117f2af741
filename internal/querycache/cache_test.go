package querycache_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/querycache"
)

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func TestCacheVersionsAndStats(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	c := querycache.New(querycache.NewMemory(0, clk.now), querycache.Options{Now: clk.now})
	q := querycache.Query{Scope: "user:1", Key: querycache.Key("where do I live", querycache.Params{Mode: "hybrid", TopK: 10}), Version: 7}
	if res, _ := c.Lookup(ctx, q); res.Outcome != querycache.Miss {
		t.Fatalf("empty cache: %v", res.Outcome)
	}
	c.Put(ctx, q, nil, []byte("r7"), time.Time{})
	if res, _ := c.Lookup(ctx, q); res.Outcome != querycache.Hit || string(res.Data) != "r7" {
		t.Fatalf("after Put: %+v", res)
	}
	q.Version = 8
	if res, _ := c.Lookup(ctx, q); res.Outcome != querycache.Miss {
		t.Fatalf("a newer version: %v", res.Outcome)
	}
	want := querycache.Stats{Hits: 1, Misses: 2, Invalidations: 1}
	if st := c.Stats(); st != want {
		t.Fatalf("stats %+v, want %+v", st, want)
	}
	if r := c.Stats().HitRate(); r < 0.33 || r > 0.34 {
		t.Fatalf("hit rate %v", r)
	}
}

// TestCacheExpiry: an entry lives the TTL at most, and never past the expiry the
// caller gives (its results' earliest).
func TestCacheExpiry(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	c := querycache.New(querycache.NewMemory(0, clk.now), querycache.Options{TTL: time.Minute, Now: clk.now})
	a := querycache.Query{Scope: "user:1", Key: "a", Version: 1}
	b := querycache.Query{Scope: "user:1", Key: "b", Version: 1}
	c.Put(ctx, a, nil, []byte("a"), time.Time{})
	c.Put(ctx, b, nil, []byte("b"), clk.now().Add(10*time.Second))
	c.Put(ctx, querycache.Query{Scope: "user:1", Key: "gone", Version: 1}, nil, []byte("x"), clk.now())
	hit := func(q querycache.Query) bool { res, _ := c.Lookup(ctx, q); return res.Outcome == querycache.Hit }
	if !hit(a) || !hit(b) || hit(querycache.Query{Scope: "user:1", Key: "gone", Version: 1}) {
		t.Fatal("fresh entries")
	}
	clk.add(10 * time.Second)
	if !hit(a) || hit(b) {
		t.Fatal("at b's expiry: a kept, b gone")
	}
	clk.add(50 * time.Second)
	if hit(a) {
		t.Fatal("a outlived the TTL")
	}
	if d := querycache.New(querycache.NewMemory(0, nil), querycache.Options{}).TTL(); d != 300*time.Second {
		t.Fatalf("default TTL %v", d)
	}
}

// TestCacheSemantic: on an exact miss the query is embedded once and a cached query
// of the same scope, version and group at least the threshold similar gives its
// result; a less similar one, another group, scope or version never does.
func TestCacheSemantic(t *testing.T) {
	ctx := context.Background()
	c := querycache.New(querycache.NewMemory(0, nil), querycache.Options{SemanticThreshold: 0.95})
	params := querycache.Params{Mode: "hybrid", TopK: 5}
	group := querycache.GroupKey(params)
	stored := querycache.Query{Scope: "user:1", Key: querycache.Key("where do I live", params), Group: group, Version: 3}
	c.Put(ctx, stored, []float32{1, 0, 0}, []byte("home"), time.Time{})

	embeds := 0
	lookup := func(scope, group string, version int64, vec []float32) querycache.Result {
		t.Helper()
		res, err := c.Lookup(ctx, querycache.Query{Scope: scope, Key: "other text", Group: group, Version: version,
			Vector: func(context.Context) ([]float32, error) { embeds++; return vec, nil }})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	near := []float32{0.99, 0.1, 0} // cosine 0.995
	if res := lookup("user:1", group, 3, near); res.Outcome != querycache.SemanticHit || string(res.Data) != "home" || embeds != 1 {
		t.Fatalf("a close query: %+v after %d embeddings", res, embeds)
	}
	far := []float32{0.9, 0.43, 0} // cosine 0.902
	if res := lookup("user:1", group, 3, far); res.Outcome != querycache.Miss || len(res.Vector) != 3 {
		t.Fatalf("a farther query: %+v (the vector is handed back for the search)", res)
	}
	for name, res := range map[string]querycache.Result{
		"another group":   lookup("user:1", querycache.GroupKey(querycache.Params{Mode: "dense", TopK: 5}), 3, near),
		"another scope":   lookup("user:2", group, 3, near),
		"a newer version": lookup("user:1", group, 4, near),
	} {
		if res.Outcome != querycache.Miss {
			t.Errorf("%s: %v", name, res.Outcome)
		}
	}
	// The newer version dropped the group's older queries.
	if res := lookup("user:1", group, 3, near); res.Outcome != querycache.Miss {
		t.Fatalf("after a newer version was seen: %v", res.Outcome)
	}
	// An exact hit embeds nothing.
	embeds = 0
	c.Put(ctx, stored, []float32{1, 0, 0}, []byte("home"), time.Time{})
	res, _ := c.Lookup(ctx, querycache.Query{Scope: stored.Scope, Key: stored.Key, Group: group, Version: 3,
		Vector: func(context.Context) ([]float32, error) { embeds++; return near, nil }})
	if res.Outcome != querycache.Hit || embeds != 0 {
		t.Fatalf("exact: %v after %d embeddings", res.Outcome, embeds)
	}
	// An embedder failure is a miss with its error.
	boom := errors.New("boom")
	res, err := c.Lookup(ctx, querycache.Query{Scope: "user:1", Key: "x", Group: group, Version: 3,
		Vector: func(context.Context) ([]float32, error) { return nil, boom }})
	if !errors.Is(err, boom) || res.Outcome != querycache.Miss {
		t.Fatalf("embedder failure: %+v, %v", res, err)
	}
	if st := c.Stats(); st.SemanticHits != 1 || st.Hits != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestKey(t *testing.T) {
	p := querycache.Params{Mode: "hybrid", Types: []string{"semantic", "episodic"}, TopK: 10}
	same := querycache.Params{Mode: "hybrid", Types: []string{"episodic", "semantic", "semantic"}, TopK: 10}
	if querycache.Key("  Where do\tI\n live? ", p) != querycache.Key("Where do I live?", same) {
		t.Fatal("white space or type order changed the key")
	}
	// NFC: a precomposed é and e + combining acute are one query.
	if querycache.Key("caf\u00e9", p) != querycache.Key("cafe\u0301", p) {
		t.Fatal("normalisation forms differ")
	}
	if got := querycache.NormalizeQuery(" a \u00a0 b\u3000c "); got != "a b c" {
		t.Fatalf("NormalizeQuery = %q", got)
	}
	half, none := 0.5, 0.0
	distinct := []querycache.Params{
		p,
		{Mode: "dense", Types: p.Types, TopK: 10},
		{Mode: "hybrid", Types: []string{"semantic"}, TopK: 10},
		{Mode: "hybrid", Types: p.Types, TopK: 11},
		{Mode: "hybrid", Types: p.Types, TopK: 10, MinSimilarity: &half},
		{Mode: "hybrid", Types: p.Types, TopK: 10, MinSimilarity: &none},
		{Mode: "hybrid", Types: p.Types, TopK: 10, Extra: "x"},
	}
	seen := map[string]int{}
	for i, d := range distinct {
		k := querycache.Key("q", d)
		if j, ok := seen[k]; ok {
			t.Fatalf("params %d and %d share a key", j, i)
		}
		seen[k] = i
		if querycache.GroupKey(d) == k {
			t.Fatal("a group key equals a query key")
		}
	}
	if querycache.Key("q", p) == querycache.Key("Q", p) {
		t.Fatal("case is not white space")
	}
}
