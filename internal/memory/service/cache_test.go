package service_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/memory/service"
	"github.com/amemory/memory-operator/internal/querycache"
	"github.com/amemory/memory-operator/internal/testutil"
)

// cachedSearch runs q through c and checks the outcome.
func cachedSearch(t *testing.T, c *service.SearchCache, q service.SearchQuery, want querycache.Outcome) []service.Result {
	t.Helper()
	res, got, err := c.Search(t.Context(), q)
	if err != nil {
		t.Fatalf("Search(%q): %v", q.Text, err)
	}
	if got != want {
		t.Fatalf("Search(%q) outcome %s, want %s", q.Text, got, want)
	}
	return res
}

// TestSearchCache: a repeated query (white space aside) is served from the cache,
// exactly as searched and without an embedding call; a write in its scope makes it
// a miss, and leaves the cache of other scopes alone.
func TestSearchCache(t *testing.T) {
	e := newEnv(t, backends[0], nil)
	c := service.NewSearchCache(e.mem, querycache.New(querycache.NewMemory(0, nil), querycache.Options{}))
	remember(t, e.mem, fact("user:1", "home", "the user lives in Lisbon"), pgstore.Inserted)
	remember(t, e.mem, fact("user:2", "home", "the user lives in Porto"), pgstore.Inserted)
	q := service.SearchQuery{Scope: "user:1", Text: "where does the user live", Now: now}
	first := cachedSearch(t, c, q, querycache.Miss)
	calls := e.emb.calls.Load()
	q.Text = "  where does\tthe user   live "
	if again := cachedSearch(t, c, q, querycache.Hit); !reflect.DeepEqual(again, first) {
		t.Fatalf("served %+v, searched %+v", again, first)
	}
	if e.emb.calls.Load() != calls {
		t.Fatal("a hit called the embedder")
	}
	other := service.SearchQuery{Scope: "user:2", Text: "where does the user live", Now: now}
	cachedSearch(t, c, other, querycache.Miss)
	cachedSearch(t, c, other, querycache.Hit)
	// Other parameters are another entry.
	cachedSearch(t, c, service.SearchQuery{Scope: "user:1", Text: "where does the user live", K: 3, Now: now}, querycache.Miss)

	remember(t, e.mem, fact("user:1", "home", "the user lives in Madrid"), pgstore.Superseded)
	res := cachedSearch(t, c, q, querycache.Miss)
	if len(res) != 1 || textOf(t, res[0].Item) != "the user lives in Madrid" {
		t.Fatalf("after the update: %+v", res)
	}
	cachedSearch(t, c, q, querycache.Hit)
	cachedSearch(t, c, other, querycache.Hit)
	if st := c.Stats(); st.Hits != 4 || st.Misses != 4 || st.Invalidations != 1 {
		t.Fatalf("stats %+v", st)
	}
	// A query Search refuses is refused the same way.
	if _, _, err := c.Search(t.Context(), service.SearchQuery{Scope: "user:1", Text: "  "}); err == nil {
		t.Fatal("an empty query was accepted")
	}
}

// TestSearchCacheDirectWritesInvalidate: what a Job writes straight into the store's
// tables (a restore overwriting a memory, an import, an archival mark, not through
// the memory service) makes the cached result a miss, and the next search sees it.
func TestSearchCacheDirectWritesInvalidate(t *testing.T) {
	e := newEnv(t, backends[0], nil)
	c := service.NewSearchCache(e.mem, querycache.New(querycache.NewMemory(0, nil), querycache.Options{}))
	id := remember(t, e.mem, fact("user:1", "home", "the user lives in Lisbon"), pgstore.Inserted)
	q := service.SearchQuery{Scope: "user:1", Text: "where does the user live", Mode: service.Lexical, Now: now}
	cachedSearch(t, c, q, querycache.Miss)
	cachedSearch(t, c, q, querycache.Hit)

	// A restore overwriting the memory (pgstore.Merge, the restore Job's path).
	over := fact("user:1", "home", "the user lives in Rome")
	over.MemoryID, over.UpdatedAt = id, now
	if _, err := e.store.Merge(t.Context(), []memory.Item{over}, pgstore.MergeOptions{Policy: pgstore.Overwrite}); err != nil {
		t.Fatal(err)
	}
	res := cachedSearch(t, c, q, querycache.Miss)
	if len(res) != 1 || textOf(t, res[0].Item) != "the user lives in Rome" {
		t.Fatalf("after the restore: %+v", res)
	}
	cachedSearch(t, c, q, querycache.Hit)

	// An archival mark, in plain SQL as the archival Job's statement is.
	if _, err := e.pool.Exec(t.Context(), `UPDATE `+pgx.Identifier{e.store.Schema(), "memories"}.Sanitize()+
		` SET archived_at = now() WHERE memory_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if res := cachedSearch(t, c, q, querycache.Miss); len(res) != 0 {
		t.Fatalf("the archived memory was served: %+v", res)
	}
}

// TestSearchCacheExpiry: a cached result is served until the first of its memories
// expires, not a moment longer, whatever the TTL.
func TestSearchCacheExpiry(t *testing.T) {
	e := newEnv(t, backends[0], nil)
	var mu sync.Mutex
	clock := now
	tick := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	set := func(t time.Time) { mu.Lock(); defer mu.Unlock(); clock = t }
	c := service.NewSearchCache(e.mem, querycache.New(querycache.NewMemory(0, tick), querycache.Options{Now: tick, TTL: time.Hour}))
	brief := fact("user:1", "", "the user is in a meeting about apples")
	brief.ExpiresAt = ptrTime(now.Add(10 * time.Minute))
	briefID := remember(t, e.mem, brief, pgstore.Inserted)
	remember(t, e.mem, fact("user:1", "", "the user likes apples"), pgstore.Inserted)

	q := service.SearchQuery{Scope: "user:1", Text: "apples", Now: now}
	if res := cachedSearch(t, c, q, querycache.Miss); len(res) != 2 {
		t.Fatalf("results %v", resultIDs(res))
	}
	set(now.Add(10*time.Minute - time.Second))
	q.Now = tick()
	cachedSearch(t, c, q, querycache.Hit)
	set(now.Add(10 * time.Minute))
	q.Now = tick()
	res := cachedSearch(t, c, q, querycache.Miss)
	for _, r := range res {
		if r.Item.MemoryID == briefID {
			t.Fatalf("the expired memory was served: %v", resultIDs(res))
		}
	}
	if len(res) != 1 {
		t.Fatalf("results %v", resultIDs(res))
	}
	// The new entry holds no expiring memory: it lives the TTL.
	set(now.Add(10*time.Minute + 59*time.Minute))
	q.Now = tick()
	cachedSearch(t, c, q, querycache.Hit)
}

func ptrTime(t time.Time) *time.Time { return &t }

// TestSearchCacheSemantic: with a threshold, a query close enough in meaning to a
// cached one of the same scope and parameters takes its result; one that is not is
// searched with the embedding the comparison made, not a second one.
func TestSearchCacheSemantic(t *testing.T) {
	e := newEnv(t, backends[0], nil)
	const stored, near, far = "where does the user live", "where does the user live now", "what food does the user like"
	sim := cosine(t, stored, near)
	if s := cosine(t, stored, far); s >= sim {
		t.Fatalf("the test's texts: %v >= %v", s, sim)
	}
	c := service.NewSearchCache(e.mem, querycache.New(querycache.NewMemory(0, nil), querycache.Options{SemanticThreshold: float64(sim) - 0.01}))
	remember(t, e.mem, fact("user:1", "home", "the user lives in Lisbon"), pgstore.Inserted)
	remember(t, e.mem, fact("user:1", "food", "the user likes grilled sardines"), pgstore.Inserted)

	first := cachedSearch(t, c, service.SearchQuery{Scope: "user:1", Text: stored, Now: now}, querycache.Miss)
	calls := e.emb.calls.Load()
	if got := cachedSearch(t, c, service.SearchQuery{Scope: "user:1", Text: near, Now: now}, querycache.SemanticHit); !reflect.DeepEqual(got, first) {
		t.Fatalf("semantic hit served %v, want %v", resultIDs(got), resultIDs(first))
	}
	if n := e.emb.calls.Load() - calls; n != 1 {
		t.Fatalf("a semantic hit embedded %d times, want 1", n)
	}
	calls = e.emb.calls.Load()
	cachedSearch(t, c, service.SearchQuery{Scope: "user:1", Text: far, Now: now}, querycache.Miss)
	if n := e.emb.calls.Load() - calls; n != 1 {
		t.Fatalf("a semantic miss embedded %d times, want once (the lookup's embedding is the search's)", n)
	}
	// Other parameters never reuse it.
	cachedSearch(t, c, service.SearchQuery{Scope: "user:1", Text: near, K: 1, Now: now}, querycache.Miss)
	if st := c.Stats(); st.SemanticHits != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestSearchCacheNeverServesForgotten races forgets, deletes, new memories and
// updates that supersede against cached searches of the same scopes for a few
// seconds, then checks every result served against what had been acknowledged when
// its search started: a search that started after a forget, a delete or an update
// was acknowledged never returns the forgotten memory, the deleted one or the
// superseded value. Run on both backends.
func TestSearchCacheNeverServesForgotten(t *testing.T) {
	for _, name := range []string{"memory", "redis"} {
		t.Run(name, func(t *testing.T) {
			var b querycache.Backend = querycache.NewMemory(0, nil)
			if name == "redis" {
				srv := testutil.RedisServer(t)
				rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: srv.User, Password: srv.Password})
				t.Cleanup(func() { _ = rdb.Close() })
				b = querycache.NewRedis(rdb, testutil.UniqueName("race"), querycache.RedisOptions{Timeout: time.Second})
			}
			raceCachedSearches(t, b, 3*time.Second)
		})
	}
}

// seen is one memory a search returned.
type seen struct {
	scope, id, key string
	n              int // the update's number, for the keyed slot
	recordedAt     time.Time
}

type forgetAck struct {
	ack         int64
	forgottenAt time.Time
}

type updateAck struct {
	ack int64
	n   int
}

func raceCachedSearches(t *testing.T, backend querycache.Backend, d time.Duration) {
	e := newEnv(t, backends[0], nil)
	c := service.NewSearchCache(e.mem, querycache.New(backend, querycache.Options{}))
	ctx := t.Context()
	scopes := []string{"user:r0", "user:r1", "user:r2"}

	// seq orders acknowledgements and search starts: an ack taken before a start
	// happened before that search began.
	var (
		seq      atomic.Int64
		mu       sync.Mutex
		forgets  = map[string][]forgetAck{}
		updates  = map[string][]updateAck{}
		deletes  = map[string]int64{} // memory_id -> ack
		searches []struct {
			start int64
			got   []seen
		}
		outcomes = map[querycache.Outcome]int{}
	)
	content := func(v any) json.RawMessage {
		b, _ := json.Marshal(v)
		return b
	}
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	fail := func(err error) {
		t.Error(err)
	}
	// A writer per scope: new memories, an update of the keyed slot (numbers only
	// ever grow), and now and then a delete of one of its new memories.
	for _, scope := range scopes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				items := []memory.Item{
					{MemoryType: memory.Episodic, Scope: scope, Content: content(map[string]any{"text": fmt.Sprintf("apple note %d", i)}), BaseScore: 0.5},
					{MemoryType: memory.Semantic, Scope: scope, Key: "fav", Content: content(map[string]any{"text": "apple favourite", "n": i}), BaseScore: 0.5},
				}
				res, err := e.mem.Write(ctx, items, service.WriteOptions{})
				if err != nil {
					fail(fmt.Errorf("write: %w", err))
					return
				}
				ack := seq.Add(1)
				mu.Lock()
				updates[scope] = append(updates[scope], updateAck{ack, i})
				mu.Unlock()
				if i%3 == 2 && len(res) > 0 {
					if _, err := e.mem.Delete(ctx, res[0].MemoryID, "race"); err != nil {
						continue // forgotten meanwhile
					}
					ack := seq.Add(1)
					mu.Lock()
					deletes[res[0].MemoryID] = ack
					mu.Unlock()
				}
			}
		}()
	}
	// A forgetter going round the scopes.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; time.Now().Before(deadline); i++ {
			scope := scopes[i%len(scopes)]
			res, err := e.mem.Forget(ctx, scope, "race", "test")
			if err != nil {
				fail(fmt.Errorf("forget: %w", err))
				return
			}
			ack := seq.Add(1)
			mu.Lock()
			forgets[scope] = append(forgets[scope], forgetAck{ack, res.ForgottenAt})
			mu.Unlock()
		}
	}()
	// Searchers, several per scope so that they meet each other's entries.
	for w := range 3 * len(scopes) {
		scope := scopes[w%len(scopes)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				start := seq.Add(1)
				res, outcome, err := c.Search(ctx, service.SearchQuery{Scope: scope, Text: "apple", K: 100})
				if err != nil {
					fail(fmt.Errorf("search: %w", err))
					return
				}
				got := make([]seen, len(res))
				for i, r := range res {
					var v struct{ N int }
					_ = json.Unmarshal(r.Item.Content, &v)
					got[i] = seen{scope: r.Item.Scope, id: r.Item.MemoryID, key: r.Item.Key, n: v.N, recordedAt: r.Item.RecordedAt}
				}
				mu.Lock()
				searches = append(searches, struct {
					start int64
					got   []seen
				}{start, got})
				outcomes[outcome]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	violations := 0
	report := func(format string, args ...any) {
		if violations++; violations <= 10 {
			t.Errorf(format, args...)
		}
	}
	for _, s := range searches {
		for _, m := range s.got {
			// Forgotten: a forget acknowledged before the search started deleted
			// everything its scope had recorded up to its tombstone.
			for _, f := range forgets[m.scope] {
				if f.ack < s.start && !m.recordedAt.After(f.forgottenAt) {
					report("search %d served %s (recorded %s), forgotten at %s by a forget acknowledged at %d",
						s.start, m.id, m.recordedAt.Format(time.RFC3339Nano), f.forgottenAt.Format(time.RFC3339Nano), f.ack)
				}
			}
			if ack, ok := deletes[m.id]; ok && ack < s.start {
				report("search %d served %s, deleted at %d", s.start, m.id, ack)
			}
			// Superseded: the slot's numbers only grow, so a value below one
			// acknowledged before the search started was superseded.
			if m.key == "fav" {
				for _, u := range updates[m.scope] {
					if u.ack < s.start && u.n > m.n {
						report("search %d served %s's value %d, superseded by %d at %d", s.start, m.id, m.n, u.n, u.ack)
						break
					}
				}
			}
		}
	}
	nf := 0
	for _, f := range forgets {
		nf += len(f)
	}
	t.Logf("%d searches (%v), %d forgets, %d deletes, %d violations", len(searches), outcomes, nf, len(deletes), violations)
	if outcomes[querycache.Hit] == 0 || nf == 0 {
		t.Fatalf("the race did not race: %v, %d forgets", outcomes, nf)
	}
}

// TestSearchQueryVector: a search given its query's embedding (SearchQuery.Vector)
// returns what it returns without, and does not embed the query again; a vector of
// another dimension is refused.
func TestSearchQueryVector(t *testing.T) {
	e := newEnv(t, backends[0], nil)
	remember(t, e.mem, fact("user:1", "home", "the user lives in Lisbon"), pgstore.Inserted)
	remember(t, e.mem, fact("user:1", "food", "the user likes grilled sardines"), pgstore.Inserted)
	q := service.SearchQuery{Scope: "user:1", Text: "where does the user live", Now: now}
	want := search(t, e.mem, q)
	vec, err := e.mem.QueryVector(t.Context(), q.Text)
	if err != nil {
		t.Fatal(err)
	}
	calls := e.emb.calls.Load()
	q.Vector = vec
	if got := search(t, e.mem, q); !reflect.DeepEqual(got, want) {
		t.Fatalf("with the vector %v, without %v", resultIDs(got), resultIDs(want))
	}
	if e.emb.calls.Load() != calls {
		t.Fatal("the query was embedded again")
	}
	q.Vector = vec[:dim-1]
	if _, err := e.mem.Search(t.Context(), q); err == nil {
		t.Fatal("a vector of the wrong dimension was accepted")
	}
}
