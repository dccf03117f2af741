// Integration tests against the real PostgreSQL and Milvus Lite (testutil). Every
// behaviour runs against both vector indexes: pgindex (in the store's schema) and
// Milvus, each test in its own schema and collection.
package service_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/memory/service"
	"github.com/amemory/memory-operator/internal/vector"
)

func TestTenantIsolation(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		texts := map[string][]string{
			"user:a": {"prefers oat milk flat white", "lives in Berlin", "allergic to peanuts",
				"likes jazz and coffee", "works as a nurse in Berlin"},
			"user:b": {"prefers oat milk cappuccino", "lives in Berlin too", "allergic to peanuts",
				"likes jazz and coffee", "works as a nurse in Hamburg", "has a cat named Oat"},
		}
		ids := map[string][]string{}
		for _, scope := range []string{"user:a", "user:b"} {
			for i, text := range texts[scope] {
				it := fact(scope, "", text)
				if i == 0 {
					it.Key = "preference.coffee" // the same slot name in both scopes
				}
				ids[scope] = append(ids[scope], remember(t, e.mem, it, pgstore.Inserted))
			}
		}

		// Every text of either user, plus mixtures, as queries in both scopes: the
		// results are always exactly the scope's own memories.
		var queries []string
		for _, scope := range []string{"user:a", "user:b"} {
			queries = append(queries, texts[scope]...)
		}
		queries = append(queries, "what does she drink", "cat named Oat in Hamburg", "Berlin nurse peanuts jazz")
		for _, scope := range []string{"user:a", "user:b"} {
			own := sorted(ids[scope])
			for _, q := range queries {
				got := search(t, e.mem, service.SearchQuery{Scope: scope, Text: q, K: 20})
				for _, r := range got {
					if r.Item.Scope != scope {
						t.Fatalf("search %q in %s returned %s of %s", q, scope, r.Item.MemoryID, r.Item.Scope)
					}
				}
				if g := sorted(resultIDs(got)); !slices.Equal(g, own) {
					t.Fatalf("search %q in %s = %v, want exactly the scope's memories %v", q, scope, g, own)
				}
			}
			// A text stored verbatim in the other scope only: the best hit is still
			// one's own memory.
			got := search(t, e.mem, service.SearchQuery{Scope: "user:a", Text: "has a cat named Oat", K: 1})
			if len(got) != 1 || got[0].Item.Scope != "user:a" {
				t.Fatalf("K=1 search in user:a = %+v", got)
			}
		}
		// A scope with no memories finds nothing, even for texts others stored.
		if got := search(t, e.mem, service.SearchQuery{Scope: "user:c", Text: "prefers oat milk flat white"}); len(got) != 0 {
			t.Fatalf("search in empty scope user:c = %v, want nothing", resultIDs(got))
		}
	})
}

func TestRelevance(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		const scope = "user:ana"
		marathon := fact(scope, "", "ran the Berlin marathon in 2023")
		marathon.MemoryType = memory.Episodic
		flights := fact(scope, "", "book flights with aisle seats")
		flights.MemoryType = memory.Procedural
		ids := map[string]string{
			"coffee":   remember(t, e.mem, fact(scope, "preference.coffee", "prefers oat milk flat white"), pgstore.Inserted),
			"address":  remember(t, e.mem, fact(scope, "address", "lives in Berlin, Kreuzberg"), pgstore.Inserted),
			"allergy":  remember(t, e.mem, fact(scope, "health.allergy", "allergic to peanuts and tree nuts"), pgstore.Inserted),
			"music":    remember(t, e.mem, fact(scope, "preference.music", "listens to jazz and bossa nova"), pgstore.Inserted),
			"marathon": remember(t, e.mem, marathon, pgstore.Inserted),
			"flights":  remember(t, e.mem, flights, pgstore.Inserted),
		}
		for _, tc := range []struct {
			query string
			types []memory.Type
			want  string
		}{
			{"what coffee does she like with oat milk", nil, "coffee"},
			{"is she allergic to peanuts", nil, "allergy"},
			{"which music does she like, jazz?", nil, "music"},
			{"what is her address in Berlin", nil, "address"},
			{"when did she run the marathon", nil, "marathon"},
			{"how should I book her flights", nil, "flights"},
			{"Berlin", []memory.Type{memory.Episodic}, "marathon"},
			{"what is her address in Berlin", []memory.Type{memory.Episodic, memory.Procedural}, "marathon"},
		} {
			got := search(t, e.mem, service.SearchQuery{Scope: scope, Text: tc.query, Types: tc.types, K: 3})
			if len(got) == 0 || got[0].Item.MemoryID != ids[tc.want] {
				var desc []string
				for _, r := range got {
					desc = append(desc, fmt.Sprintf("%q (%.3f)", textOf(t, r.Item), r.Similarity))
				}
				t.Errorf("search %q types %v: got %v, want %q first", tc.query, tc.types, desc, tc.want)
				continue
			}
			top := got[0]
			if want := cosine(t, top.Item.EmbeddingText(), tc.query); !closeTo(top.Similarity, want) {
				t.Errorf("search %q: similarity %v, want %v (cosine of the hashing embeddings)", tc.query, top.Similarity, want)
			}
			for i := 1; i < len(got); i++ {
				if got[i].Similarity > got[i-1].Similarity {
					t.Errorf("search %q: results not in index order: %v", tc.query, got)
				}
			}
			if len(tc.types) > 0 {
				for _, r := range got {
					if !slices.Contains(tc.types, r.Item.MemoryType) {
						t.Errorf("search %q types %v returned a %s memory", tc.query, tc.types, r.Item.MemoryType)
					}
				}
			}
		}
		// K limits the results; the default K covers all six.
		if got := search(t, e.mem, service.SearchQuery{Scope: scope, Text: "Berlin", K: 2}); len(got) != 2 {
			t.Errorf("K=2 returned %d results", len(got))
		}
		if got := search(t, e.mem, service.SearchQuery{Scope: scope, Text: "Berlin"}); len(got) != 6 {
			t.Errorf("default K returned %d results, want all 6", len(got))
		}
	})
}

func TestSupersedeReplacesVector(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		const scope = "user:ana"
		const oldText, newText = "prefers oat milk flat white", "switched to black espresso"
		id := remember(t, e.mem, fact(scope, "preference.coffee", oldText), pgstore.Inserted)
		other := remember(t, e.mem, fact(scope, "address", "lives in Berlin"), pgstore.Inserted)

		later := fact(scope, "preference.coffee", newText)
		later.MemoryID = memory.NewID() // a different ID: the slot keeps its own
		later.UpdatedAt = now.Add(-time.Minute)
		if got := remember(t, e.mem, later, pgstore.Superseded); got != id {
			t.Fatalf("superseding write returned memory_id %s, want the slot's %s", got, id)
		}
		if n := e.emb.calls.Load(); n != 3 {
			t.Fatalf("embedding calls = %d, want 3 (two inserts, one supersede)", n)
		}

		// One vector per memory, the slot's under its old ID.
		if got, want := vectorsOf(t, e.index, scope), sorted([]string{id, other}); !slices.Equal(got, want) {
			t.Fatalf("index holds %v for %s, want %v", got, scope, want)
		}
		// The new content is found, once, with the similarity of the new embedding.
		item, err := e.store.Get(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		got := search(t, e.mem, service.SearchQuery{Scope: scope, Text: newText})
		if len(got) != 2 || got[0].Item.MemoryID != id || textOf(t, got[0].Item) != newText {
			t.Fatalf("search %q = %+v, want %s with the new content first", newText, got, id)
		}
		if want := cosine(t, item.EmbeddingText(), newText); !closeTo(got[0].Similarity, want) {
			t.Fatalf("similarity to the new text = %v, want %v", got[0].Similarity, want)
		}
		// Searching the old text scores against the new embedding: the old one is gone.
		got = search(t, e.mem, service.SearchQuery{Scope: scope, Text: oldText})
		var hits int
		for _, r := range got {
			if r.Item.MemoryID == id {
				hits++
				if textOf(t, r.Item) != newText {
					t.Fatalf("search %q returned stale content %s", oldText, r.Item.Content)
				}
				if want := cosine(t, item.EmbeddingText(), oldText); !closeTo(r.Similarity, want) {
					t.Fatalf("similarity of %s to the old text = %v, want %v (new embedding); the old embedding lingers",
						id, r.Similarity, want)
				}
				if stale := cosine(t, "preference.coffee.text: "+oldText, oldText); closeTo(r.Similarity, stale) {
					t.Fatalf("similarity %v is that of the old embedding", r.Similarity)
				}
			}
		}
		if hits != 1 {
			t.Fatalf("search %q returned %s %d times, want once", oldText, id, hits)
		}
		// History keeps the old value.
		if len(item.History) != 1 || !strings.Contains(string(item.History[0].Content), oldText) {
			t.Fatalf("history = %+v, want the old value", item.History)
		}
	})
}

func TestRememberIdempotent(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		const scope = "user:ana"
		keyless := fact(scope, "", "allergic to peanuts")
		keyed := fact(scope, "preference.coffee", "prefers oat milk flat white")
		id1 := remember(t, e.mem, keyless, pgstore.Inserted)
		id2 := remember(t, e.mem, keyed, pgstore.Inserted)
		if n := e.emb.calls.Load(); n != 2 {
			t.Fatalf("embedding calls after two inserts = %d, want 2", n)
		}

		// The same items again (the keyless one with a fresh ID, the keyed one with
		// re-ordered JSON): unchanged, same IDs, no embedding call.
		keyless.MemoryID = memory.NewID()
		keyed.Content = []byte(`{ "text" : "prefers oat milk flat white" }`)
		if got := remember(t, e.mem, keyless, pgstore.Unchanged); got != id1 {
			t.Fatalf("repeat of the keyless item returned %s, want %s", got, id1)
		}
		if got := remember(t, e.mem, keyed, pgstore.Unchanged); got != id2 {
			t.Fatalf("repeat of the keyed item returned %s, want %s", got, id2)
		}
		if n := e.emb.calls.Load(); n != 2 {
			t.Fatalf("embedding calls after unchanged writes = %d, want still 2", n)
		}
		if n, err := e.store.Count(t.Context()); err != nil || n != 2 {
			t.Fatalf("store count = %d, %v; want 2", n, err)
		}
		if got, want := vectorsOf(t, e.index, scope), sorted([]string{id1, id2}); !slices.Equal(got, want) {
			t.Fatalf("index holds %v, want %v", got, want)
		}
	})
}

func TestRememberBatch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		const scope = "user:ana"
		v2 := fact(scope, "preference.coffee", "switched to black espresso")
		v2.UpdatedAt = now.Add(-time.Minute)
		items := []memory.Item{
			fact(scope, "preference.coffee", "prefers oat milk flat white"),
			fact(scope, "", "lives in Berlin"),
			fact(scope, "health.allergy", "allergic to peanuts"),
			v2,                                 // the same slot as item 0
			fact(scope, "", "lives in Berlin"), // the same memory as item 1
		}
		res, err := e.mem.RememberBatch(t.Context(), items)
		if err != nil {
			t.Fatalf("RememberBatch: %v", err)
		}
		wantOutcomes := []pgstore.Outcome{pgstore.Inserted, pgstore.Inserted, pgstore.Inserted, pgstore.Superseded, pgstore.Unchanged}
		if len(res) != len(items) {
			t.Fatalf("got %d results for %d items", len(res), len(items))
		}
		for i, r := range res {
			if r.Outcome != wantOutcomes[i] {
				t.Errorf("item %d: outcome %s, want %s", i, r.Outcome, wantOutcomes[i])
			}
		}
		if res[3].MemoryID != res[0].MemoryID || res[4].MemoryID != res[1].MemoryID {
			t.Fatalf("results %+v: items 0/3 and 1/4 must share a memory", res)
		}
		if c, n := e.emb.calls.Load(), e.emb.texts.Load(); c != 1 || n != 3 {
			t.Fatalf("embedding: %d calls for %d texts, want 1 call for the 3 distinct memories", c, n)
		}
		want := sorted([]string{res[0].MemoryID, res[1].MemoryID, res[2].MemoryID})
		if got := vectorsOf(t, e.index, scope); !slices.Equal(got, want) {
			t.Fatalf("index holds %v, want %v", got, want)
		}
		// The slot's vector is the last value's.
		got := search(t, e.mem, service.SearchQuery{Scope: scope, Text: "switched to black espresso", K: 1})
		if len(got) != 1 || got[0].Item.MemoryID != res[0].MemoryID ||
			!closeTo(got[0].Similarity, cosine(t, v2.EmbeddingText(), "switched to black espresso")) {
			t.Fatalf("search for the slot's last value = %+v", got)
		}

		// Re-sending stored items embeds nothing.
		calls := e.emb.calls.Load()
		res, err = e.mem.RememberBatch(t.Context(), items[1:3])
		if err != nil || len(res) != 2 || res[0].Outcome != pgstore.Unchanged || res[1].Outcome != pgstore.Unchanged {
			t.Fatalf("repeat batch = %+v, %v; want two unchanged", res, err)
		}
		if c := e.emb.calls.Load(); c != calls {
			t.Fatalf("embedding calls after an unchanged batch = %d, want still %d", c, calls)
		}

		// An invalid item stores nothing of its batch.
		bad := fact(scope, "", "x")
		bad.Content = []byte(`"not an object"`)
		res, err = e.mem.RememberBatch(t.Context(), []memory.Item{fact(scope, "", "new fact"), bad})
		if err == nil || !strings.Contains(err.Error(), "item 1") || res != nil {
			t.Fatalf("batch with an invalid item = %+v, %v; want an error naming item 1", res, err)
		}
		if n, _ := e.store.Count(t.Context()); n != 3 {
			t.Fatalf("store count after the rejected batch = %d, want 3", n)
		}
	})
}

func TestSearchExcludesArchivedAndExpired(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		const scope = "user:ana"
		live := remember(t, e.mem, fact(scope, "", "coffee oat milk live"), pgstore.Inserted)
		archived := remember(t, e.mem, fact(scope, "", "coffee oat milk archived"), pgstore.Inserted)
		expired := fact(scope, "", "coffee oat milk expired")
		expired.MemoryType = memory.Working
		expired.ExpiresAt = new(now.Add(-time.Second))
		expiredID := remember(t, e.mem, expired, pgstore.Inserted)
		atNow := fact(scope, "", "coffee oat milk expires now")
		atNow.ExpiresAt = new(now) // expires_at <= Now is expired
		atNowID := remember(t, e.mem, atNow, pgstore.Inserted)
		soon := fact(scope, "", "coffee oat milk expires soon")
		soon.ExpiresAt = new(now.Add(time.Hour))
		soonID := remember(t, e.mem, soon, pgstore.Inserted)

		// Archive one behind the service's back: its vector stays in the index.
		table := pgx.Identifier{e.store.Schema(), "memories"}.Sanitize()
		if _, err := e.pool.Exec(t.Context(), `UPDATE `+table+` SET archived_at = $2 WHERE memory_id = $1`, archived, now); err != nil {
			t.Fatal(err)
		}
		if got := vectorsOf(t, e.index, scope); len(got) != 5 {
			t.Fatalf("index holds %d vectors, want all 5", len(got))
		}

		q := service.SearchQuery{Scope: scope, Text: "coffee oat milk"}
		if got, want := sorted(resultIDs(search(t, e.mem, q))), sorted([]string{live, soonID}); !slices.Equal(got, want) {
			t.Fatalf("search at now = %v, want only the live ones %v (archived %s, expired %s, %s)", got, want, archived, expiredID, atNowID)
		}
		q.Now = now.Add(2 * time.Hour)
		if got := resultIDs(search(t, e.mem, q)); !slices.Equal(got, []string{live}) {
			t.Fatalf("search two hours later = %v, want only %s", got, live)
		}
		q.Now = now.Add(-time.Hour) // before every expiry
		if got, want := sorted(resultIDs(search(t, e.mem, q))), sorted([]string{live, expiredID, atNowID, soonID}); !slices.Equal(got, want) {
			t.Fatalf("search an hour earlier = %v, want %v", got, want)
		}

		// A memory remembered as archived gets no vector.
		arch := fact(scope, "", "coffee oat milk stored archived")
		arch.ArchivedAt = new(now)
		archID := remember(t, e.mem, arch, pgstore.Inserted)
		if got := vectorsOf(t, e.index, scope); slices.Contains(got, archID) {
			t.Fatalf("index holds a vector for the archived memory %s", archID)
		}
	})
}

// TestSearchRefillsPastStaleHits: expired memories that are the best matches do not
// crowd out live ones.
func TestSearchRefillsPastStaleHits(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		const scope = "user:ana"
		for i := range 10 {
			it := fact(scope, "", fmt.Sprintf("coffee oat milk flat white order %d", i))
			it.MemoryType = memory.Working
			it.ExpiresAt = new(now.Add(-time.Minute))
			remember(t, e.mem, it, pgstore.Inserted)
		}
		a := remember(t, e.mem, fact(scope, "", "coffee with oat milk"), pgstore.Inserted)
		bID := remember(t, e.mem, fact(scope, "", "flat white"), pgstore.Inserted)
		remember(t, e.mem, fact(scope, "", "lives in Berlin"), pgstore.Inserted)

		got := search(t, e.mem, service.SearchQuery{Scope: scope, Text: "coffee oat milk flat white order", K: 2})
		if ids := sorted(resultIDs(got)); !slices.Equal(ids, sorted([]string{a, bID})) {
			t.Fatalf("K=2 search = %v, want the two live coffee memories %s, %s", ids, a, bID)
		}
		if got[0].Similarity < got[1].Similarity {
			t.Fatalf("results out of order: %+v", got)
		}
	})
}

func TestForget(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		texts := []string{"prefers oat milk flat white", "lives in Berlin", "allergic to peanuts"}
		var bIDs []string
		for _, text := range texts {
			remember(t, e.mem, fact("user:a", "", text), pgstore.Inserted)
			bIDs = append(bIDs, remember(t, e.mem, fact("user:b", "", text), pgstore.Inserted))
		}

		res, err := e.mem.Forget(t.Context(), "user:a", "user request", "alice@example.com")
		if err != nil {
			t.Fatalf("Forget: %v", err)
		}
		if res.Deleted != 3 || res.ForgottenAt.IsZero() {
			t.Fatalf("Forget = %+v, want 3 deleted and a time", res)
		}
		for _, q := range texts {
			if got := search(t, e.mem, service.SearchQuery{Scope: "user:a", Text: q}); len(got) != 0 {
				t.Fatalf("search %q in the forgotten scope = %v", q, resultIDs(got))
			}
			if got := search(t, e.mem, service.SearchQuery{Scope: "user:b", Text: q}); !slices.Equal(sorted(resultIDs(got)), sorted(bIDs)) {
				t.Fatalf("search %q in user:b = %v, want %v", q, resultIDs(got), bIDs)
			}
		}
		if got := vectorsOf(t, e.index, "user:a"); len(got) != 0 {
			t.Fatalf("index still holds %v for user:a", got)
		}
		if got := vectorsOf(t, e.index, "user:b"); !slices.Equal(got, sorted(bIDs)) {
			t.Fatalf("index holds %v for user:b, want %v", got, sorted(bIDs))
		}
		if rec, err := e.mem.Recall(t.Context(), pgstore.RecallQuery{Scope: "user:a", Now: now}); err != nil || len(rec) != 0 {
			t.Fatalf("recall of the forgotten scope = %v, %v", rec, err)
		}
		ts, err := e.store.Tombstones(t.Context())
		if err != nil || len(ts) != 1 || ts[0].Scope != "user:a" || ts[0].Reason != "user request" {
			t.Fatalf("tombstones = %+v, %v; want one for user:a", ts, err)
		}
		if n := auditForgets(t, e, "user:a"); n != 1 {
			t.Fatalf("audit records for forgetting user:a = %d, want 1", n)
		}
	})
}

func TestForgetFinishesOnRetry(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		var fi *faultyIndex
		e := newEnv(t, b, func(ix vector.Index) vector.Index {
			fi = &faultyIndex{Index: ix}
			return fi
		})
		var ids []string
		for _, text := range []string{"prefers oat milk flat white", "lives in Berlin"} {
			ids = append(ids, remember(t, e.mem, fact("user:a", "", text), pgstore.Inserted))
		}
		other := remember(t, e.mem, fact("user:b", "", "lives in Berlin"), pgstore.Inserted)

		fi.failDeleteScope = 1
		res, err := e.mem.Forget(t.Context(), "user:a", "gdpr", "ops")
		if !errors.Is(err, service.ErrVectorsNotDeleted) || !errors.Is(err, errInjected) {
			t.Fatalf("Forget with a failing index: err = %v, want ErrVectorsNotDeleted wrapping the index error", err)
		}
		if res.Deleted != 2 {
			t.Fatalf("first Forget result = %+v, want 2 deleted", res)
		}
		// The system of record is done: rows gone, tombstone written, nothing found.
		if ok, err := e.store.IsForgotten(t.Context(), "user:a"); err != nil || !ok {
			t.Fatalf("IsForgotten = %v, %v; want true", ok, err)
		}
		if got := search(t, e.mem, service.SearchQuery{Scope: "user:a", Text: "lives in Berlin"}); len(got) != 0 {
			t.Fatalf("search after the half-done Forget = %v, want nothing", resultIDs(got))
		}
		// The vectors are left over in Milvus; pgindex lost them with the rows.
		wantLeft := sorted(ids)
		if b.sharesStore {
			wantLeft = []string{}
		}
		if got := vectorsOf(t, e.index, "user:a"); !slices.Equal(got, wantLeft) {
			t.Fatalf("vectors after the half-done Forget = %v, want %v", got, wantLeft)
		}

		res, err = e.mem.Forget(t.Context(), "user:a", "gdpr", "ops")
		if err != nil {
			t.Fatalf("second Forget: %v", err)
		}
		if res.Deleted != 0 {
			t.Fatalf("second Forget deleted %d memories, want 0", res.Deleted)
		}
		if got := vectorsOf(t, e.index, "user:a"); len(got) != 0 {
			t.Fatalf("vectors after the second Forget = %v, want none", got)
		}
		if got := vectorsOf(t, e.index, "user:b"); !slices.Equal(got, []string{other}) {
			t.Fatalf("user:b vectors = %v, want [%s]", got, other)
		}
		if n := auditForgets(t, e, "user:a"); n != 2 {
			t.Fatalf("audit records = %d, want 2 (one per Forget call)", n)
		}
	})
}

func TestRememberRepairsAfterIndexFailure(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		var fi *faultyIndex
		e := newEnv(t, b, func(ix vector.Index) vector.Index {
			fi = &faultyIndex{Index: ix}
			return fi
		})
		const scope = "user:ana"
		it := fact(scope, "preference.coffee", "prefers oat milk flat white")

		fi.failUpsert = 1
		res, err := e.mem.Remember(t.Context(), it)
		if !errors.Is(err, service.ErrNotIndexed) || !errors.Is(err, errInjected) {
			t.Fatalf("Remember with a failing index: err = %v, want ErrNotIndexed wrapping the index error", err)
		}
		if !strings.Contains(err.Error(), "Reindex") {
			t.Errorf("error %q does not say how to repair", err)
		}
		if res.Outcome != pgstore.Inserted || res.MemoryID == "" {
			t.Fatalf("result with the failed index write = %+v, want the insert", res)
		}
		if _, err := e.store.Get(t.Context(), res.MemoryID); err != nil {
			t.Fatalf("the memory is not in PostgreSQL: %v", err)
		}
		if got := vectorsOf(t, e.index, scope); len(got) != 0 {
			t.Fatalf("index holds %v after the failed write", got)
		}

		// A plain retry is Unchanged and, by design, leaves the index alone.
		if got := remember(t, e.mem, it, pgstore.Unchanged); got != res.MemoryID {
			t.Fatalf("retry returned %s, want %s", got, res.MemoryID)
		}
		if got := vectorsOf(t, e.index, scope); len(got) != 0 {
			t.Fatalf("a plain retry wrote vectors %v", got)
		}
		calls := e.emb.calls.Load()

		// The retry with Reindex repairs it.
		res2, err := e.mem.RememberWith(t.Context(), it, service.RememberOptions{Reindex: true})
		if err != nil || res2 != (pgstore.PutResult{MemoryID: res.MemoryID, Outcome: pgstore.Unchanged}) {
			t.Fatalf("RememberWith(Reindex) = %+v, %v; want unchanged %s", res2, err, res.MemoryID)
		}
		if n := e.emb.calls.Load() - calls; n != 1 {
			t.Fatalf("Reindex made %d embedding calls, want 1", n)
		}
		if got := vectorsOf(t, e.index, scope); !slices.Equal(got, []string{res.MemoryID}) {
			t.Fatalf("index holds %v after the repair, want [%s]", got, res.MemoryID)
		}
		got := search(t, e.mem, service.SearchQuery{Scope: scope, Text: "oat milk"})
		if len(got) != 1 || got[0].Item.MemoryID != res.MemoryID {
			t.Fatalf("search after the repair = %v", resultIDs(got))
		}

		// The batch form reports the same and repairs the same way.
		items := []memory.Item{fact(scope, "", "lives in Berlin"), fact(scope, "", "allergic to peanuts")}
		fi.failUpsert = 1
		results, err := e.mem.RememberBatch(t.Context(), items)
		if !errors.Is(err, service.ErrNotIndexed) || len(results) != 2 {
			t.Fatalf("RememberBatch with a failing index = %+v, %v", results, err)
		}
		if _, err := e.mem.RememberBatchWith(t.Context(), items, service.RememberOptions{Reindex: true}); err != nil {
			t.Fatal(err)
		}
		want := sorted([]string{res.MemoryID, results[0].MemoryID, results[1].MemoryID})
		if got := vectorsOf(t, e.index, scope); !slices.Equal(got, want) {
			t.Fatalf("index after the batch repair = %v, want %v", got, want)
		}
	})
}

// TestConcurrentSupersede: a writer whose vector write lands after a newer writer's
// must not leave its (older) embedding behind.
func TestConcurrentSupersede(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		var fi *faultyIndex
		e := newEnv(t, b, func(ix vector.Index) vector.Index {
			fi = &faultyIndex{Index: ix}
			return fi
		})
		other, err := service.New(e.store, e.index, e.emb) // a second agent, same store
		if err != nil {
			t.Fatal(err)
		}
		const scope = "user:ana"
		const v1, v2 = "prefers oat milk flat white", "switched to black espresso"
		newer := fact(scope, "preference.coffee", v2)
		newer.UpdatedAt = now.Add(-time.Minute)
		var newerRes pgstore.PutResult
		fi.beforeUpsert = func() {
			// Runs after the first writer stored v1 and before its vector lands.
			var err error
			newerRes, err = other.Remember(t.Context(), newer)
			if err != nil {
				t.Errorf("concurrent Remember: %v", err)
			}
		}
		id := remember(t, e.mem, fact(scope, "preference.coffee", v1), pgstore.Inserted)
		if newerRes.MemoryID != id || newerRes.Outcome != pgstore.Superseded {
			t.Fatalf("concurrent write = %+v, want a supersede of %s", newerRes, id)
		}
		// v1 embedded, v2 embedded by the other writer, v2 re-embedded on the recheck.
		if n := e.emb.calls.Load(); n != 3 {
			t.Errorf("embedding calls = %d, want 3", n)
		}
		stored, err := e.store.Get(t.Context(), id)
		if err != nil || textOf(t, stored) != v2 {
			t.Fatalf("stored = %+v, %v; want %q", stored, err, v2)
		}
		got := search(t, e.mem, service.SearchQuery{Scope: scope, Text: v1})
		if len(got) != 1 || got[0].Item.MemoryID != id {
			t.Fatalf("search = %+v", got)
		}
		if want := cosine(t, stored.EmbeddingText(), v1); !closeTo(got[0].Similarity, want) {
			t.Fatalf("similarity to %q = %v, want %v: the index holds the older embedding", v1, got[0].Similarity, want)
		}
	})
}

// TestRememberRacingForget: a Forget that lands between a Remember's row write and
// its vector write leaves no orphan vector.
func TestRememberRacingForget(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		var fi *faultyIndex
		e := newEnv(t, b, func(ix vector.Index) vector.Index {
			fi = &faultyIndex{Index: ix}
			return fi
		})
		other, err := service.New(e.store, e.index, e.emb)
		if err != nil {
			t.Fatal(err)
		}
		fi.beforeUpsert = func() {
			if _, err := other.Forget(t.Context(), "user:ana", "user request", "ops"); err != nil {
				t.Errorf("concurrent Forget: %v", err)
			}
		}
		remember(t, e.mem, fact("user:ana", "", "prefers oat milk flat white"), pgstore.Inserted)
		if n, _ := e.store.Count(t.Context()); n != 0 {
			t.Fatalf("store holds %d memories after the Forget", n)
		}
		if got := vectorsOf(t, e.index, "user:ana"); len(got) != 0 {
			t.Fatalf("orphan vectors %v left in the index", got)
		}
	})
}

func TestRecall(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		const scope = "user:ana"
		low := fact(scope, "", "inferred: may like tea")
		low.BaseScore = 0.2
		high := fact(scope, "", "said: prefers oat milk flat white")
		high.BaseScore = 0.9
		lowID := remember(t, e.mem, low, pgstore.Inserted)
		highID := remember(t, e.mem, high, pgstore.Inserted)
		remember(t, e.mem, fact("user:other", "", "said: prefers oat milk flat white"), pgstore.Inserted)
		got, err := e.mem.Recall(t.Context(), pgstore.RecallQuery{Scope: scope, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].MemoryID != highID || got[1].MemoryID != lowID || got[0].Score <= got[1].Score {
			t.Fatalf("recall = %+v, want %s then %s", got, highID, lowID)
		}
		if _, err := e.mem.Recall(t.Context(), pgstore.RecallQuery{}); err == nil {
			t.Fatal("recall without a scope succeeded")
		}
	})
}

// auditForgets counts the store's audit records of forgetting scope.
func auditForgets(t *testing.T, e *env, scope string) int {
	t.Helper()
	var n int
	table := pgx.Identifier{e.store.Schema(), "audit_log"}.Sanitize()
	if err := e.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+table+` WHERE action = 'forget' AND scope = $1`, scope).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
