package service_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/memory/service"
	"github.com/amemory/memory-operator/internal/vector"
)

// TestSearchRankedExact: SearchRanked returns exactly the page of the exact ranking of
// what it admits, on both index engines: past stale vectors that outrank every live
// memory (the index is asked again, deeper), under a key prefix and a filter (the
// candidates are chosen before ranking), at offsets past the end, and without an
// embedding call when nothing is admitted. A memory whose vector is not written yet
// is ranked by neither path.
func TestSearchRankedExact(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		fi := &faultyIndex{}
		e := newEnv(t, b, func(ix vector.Index) vector.Index { fi.Index = ix; return fi })
		const scope = "user:ranked"
		query := "garden tomatoes watering"
		type want struct {
			id, key, text string
			score         float32
		}
		var live []want
		add := func(key, text string, expires *time.Time) string {
			it := fact(scope, key, text)
			it.ExpiresAt = expires
			id := remember(t, e.mem, it, pgstore.Inserted)
			return id
		}
		// 40 memories that match the query best, expired by the time of the search:
		// their vectors stay in the index (stale) and outrank every live memory.
		soon := now.Add(time.Hour)
		for i := range 40 {
			add(fmt.Sprintf("stale.%02d", i), fmt.Sprintf("garden tomatoes watering schedule %d", i), &soon)
		}
		for i := range 30 {
			key := fmt.Sprintf("a.%02d", i)
			if i%2 == 1 {
				key = fmt.Sprintf("b.%02d", i)
			}
			text := fmt.Sprintf("note %d about the garden and %s", i, []string{"tomatoes", "roses", "taxes"}[i%3])
			id := add(key, text, nil)
			live = append(live, want{id: id, key: key, text: text})
		}
		// One live memory whose vector was never written: pending index work.
		fi.mu.Lock()
		fi.failUpsert = 1
		fi.mu.Unlock()
		if _, err := e.mem.Remember(t.Context(), fact(scope, "a.pending", "garden tomatoes watering pending")); err == nil {
			t.Fatal("the injected index failure did not fail Remember")
		}
		later := now.Add(2 * time.Hour)
		ranking := func(admit func(want) bool) []want {
			var out []want
			for _, w := range live {
				if admit == nil || admit(w) {
					w.score = vector.Dot(vector.Prepare(vector.Cosine, embedding(t, memory.Item{Key: w.key, Content: mustContent(w.text)}.EmbeddingText())),
						vector.Prepare(vector.Cosine, embedding(t, query)))
					out = append(out, w)
				}
			}
			slices.SortFunc(out, func(a, b want) int { return cmp.Or(cmp.Compare(b.score, a.score), strings.Compare(a.id, b.id)) })
			return out
		}
		check := func(name string, q service.RankedQuery, all []want) {
			t.Helper()
			q.Scope, q.Text, q.Now = scope, query, later
			got, err := e.mem.SearchRanked(t.Context(), q)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			end := min(len(all), q.Offset+q.Limit)
			var exp []want
			if q.Offset < len(all) {
				exp = all[q.Offset:end]
			}
			if len(got) != len(exp) {
				t.Fatalf("%s: %d results %v, want %d", name, len(got), resultIDs(got), len(exp))
			}
			// Position by position, the memory there must score as the expected one
			// does: equal scores may come in either order when engines round them
			// differently (Milvus scores in float32).
			exact := map[string]float32{}
			for _, w := range all {
				exact[w.id] = w.score
			}
			seen := map[string]bool{}
			for i := range got {
				id := got[i].Item.MemoryID
				s, ok := exact[id]
				if seen[id] || !ok || !closeTo(s, exp[i].score) || !closeTo(got[i].Similarity, exp[i].score) {
					t.Errorf("%s: result %d is %s (%v), want %s (%v)", name, i, got[i].Item.Key, got[i].Similarity, exp[i].key, exp[i].score)
				}
				seen[id] = true
			}
		}
		all := ranking(nil)
		check("whole scope past 40 stale vectors", service.RankedQuery{Limit: 5}, all)
		check("whole scope, offset", service.RankedQuery{Offset: 8, Limit: 5}, all)
		check("whole scope, everything", service.RankedQuery{Limit: 1000}, all)
		check("whole scope, past the end", service.RankedQuery{Offset: 30, Limit: 5}, all)
		bOnly := ranking(func(w want) bool { return strings.HasPrefix(w.key, "b.") })
		check("key prefix", service.RankedQuery{KeyPrefix: "b.", Limit: 4}, bOnly)
		check("key prefix, offset", service.RankedQuery{KeyPrefix: "b.", Offset: 12, Limit: 10}, bOnly)
		roses := func(c pgstore.Candidate) bool { return strings.Contains(string(c.Content), "roses") }
		check("filter", service.RankedQuery{Admit: roses, Content: true, Limit: 3},
			ranking(func(w want) bool { return strings.Contains(w.text, "roses") }))
		check("key prefix and filter", service.RankedQuery{KeyPrefix: "a.", Admit: roses, Content: true, Limit: 10},
			ranking(func(w want) bool { return strings.HasPrefix(w.key, "a.") && strings.Contains(w.text, "roses") }))
		check("the filter's view of keys", service.RankedQuery{Admit: func(c pgstore.Candidate) bool { return strings.HasSuffix(c.Key, "7") }, Limit: 10},
			ranking(func(w want) bool { return strings.HasSuffix(w.key, "7") }))

		calls := e.emb.calls.Load()
		check("nothing admitted", service.RankedQuery{KeyPrefix: "zzz", Limit: 10}, nil)
		check("offset past the admitted", service.RankedQuery{KeyPrefix: "b.", Offset: 15, Limit: 10}, nil)
		if got := e.emb.calls.Load() - calls; got != 0 {
			t.Errorf("%d embedding calls for searches that admit nothing", got)
		}
		for _, bad := range []service.RankedQuery{
			{Scope: scope, Text: query, Limit: 0},
			{Scope: scope, Text: query, Limit: service.MaxRankedLimit + 1},
			{Scope: scope, Text: query, Limit: 1, Offset: -1},
			{Scope: scope, Text: " ", Limit: 1},
			{Scope: "", Text: query, Limit: 1},
		} {
			if _, err := e.mem.SearchRanked(t.Context(), bad); err == nil {
				t.Errorf("SearchRanked(%+v) accepted", bad)
			}
		}
	})
}

// ScoreIDs passes the exact scoring on: the wrapper fails only what it is told to.
func (f *faultyIndex) ScoreIDs(ctx context.Context, q vector.Query, ids []string) ([]vector.Hit, error) {
	return f.Index.(vector.Scorer).ScoreIDs(ctx, q, ids)
}

func mustContent(text string) []byte { return []byte(`{"text":` + fmt.Sprintf("%q", text) + `}`) }
