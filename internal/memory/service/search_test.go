package service_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/memory/service"
)

func textItem(scope string, typ memory.Type, text string, base float64, at time.Time) memory.Item {
	return memory.Item{Scope: scope, MemoryType: typ, BaseScore: base, CreatedAt: at, UpdatedAt: at,
		Content: json.RawMessage(fmt.Sprintf(`{"text":%q}`, text))}
}

// TestGuaranteeRelevanceDecides: an old, unimportant memory that says what was
// asked outranks fresh, important ones that do not, in every mode: the effective
// score only orders near-ties. (The ranking before this guarantee multiplied the
// similarity by the effective score and buried it.)
func TestGuaranteeRelevanceDecides(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		old := remember(t, e.mem, textItem("user:1", memory.Episodic, "we moved the kayak trip to the lake district in september", 0.05, now.Add(-2*365*24*time.Hour)), pgstore.Inserted)
		for i := range 12 {
			remember(t, e.mem, textItem("user:1", memory.Episodic, fmt.Sprintf("fresh chat %d about the weather and the trip home", i), 1, now.Add(-time.Minute)), pgstore.Inserted)
		}
		for _, mode := range []service.SearchMode{service.Dense, service.Hybrid, service.Lexical} {
			res := search(t, e.mem, service.SearchQuery{Scope: "user:1", Text: "kayak trip lake district", Mode: mode, K: 5})
			if len(res) == 0 || res[0].Item.MemoryID != old {
				t.Errorf("%s: first result %v, want the old relevant memory %s", mode, resultIDs(res), old)
				continue
			}
			if w := res[0].Why; w.EffectiveScore > 0.01 || w.Score < w.Relevance || w.Score > w.Relevance*(1+service.RecencyWeight) {
				t.Errorf("%s: why of the old memory: %+v", mode, w)
			}
		}
	})
}

// TestSearchRanksDeterministically: two memories the channels cannot tell apart
// (keyed slots with the same text, same age and importance) come back in memory_id
// order, on every call, in every mode; and each result's ranks and relevance agree
// with reciprocal-rank fusion.
func TestSearchRanksDeterministically(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		var twins []string
		for _, key := range []string{"a", "b", "c"} {
			it := textItem("user:1", memory.Semantic, "allergic to hazelnuts", 0.5, now.Add(-time.Hour))
			it.Key = key
			twins = append(twins, remember(t, e.mem, it, pgstore.Inserted))
		}
		remember(t, e.mem, textItem("user:1", memory.Semantic, "likes hazelnut spread on toast", 0.5, now.Add(-time.Hour)), pgstore.Inserted)
		slices.Sort(twins)
		for _, mode := range []service.SearchMode{service.Dense, service.Hybrid, service.Lexical} {
			var first []string
			for range 3 {
				res := search(t, e.mem, service.SearchQuery{Scope: "user:1", Text: "allergic to hazelnuts", Mode: mode})
				ids := resultIDs(res)
				if first == nil {
					first = ids
				} else if !slices.Equal(ids, first) {
					t.Fatalf("%s: order changed between calls: %v then %v", mode, first, ids)
				}
				if len(ids) < 3 || !slices.Equal(ids[:3], twins) {
					t.Fatalf("%s: the three indistinguishable memories come first in memory_id order: got %v, want %v first", mode, ids, twins)
				}
				for _, r := range res {
					w := r.Why
					want := 0.0
					if w.DenseRank > 0 {
						want += 1 / float64(service.RRFK+w.DenseRank)
					}
					if w.LexicalRank > 0 {
						want += 1 / float64(service.RRFK+w.LexicalRank)
					}
					if w.Relevance != want || (mode == service.Dense && w.LexicalRank != 0) || (mode == service.Lexical && w.DenseRank != 0) {
						t.Errorf("%s: why %+v does not match its ranks", mode, w)
					}
				}
			}
		}
	})
}

// TestSearchSkipsStaleCandidates: a memory deleted, archived or expired after both
// channels indexed it is never returned, and the search still returns K live ones.
func TestSearchSkipsStaleCandidates(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		var ids []string
		for i := range 8 {
			ids = append(ids, remember(t, e.mem, textItem("user:1", memory.Episodic, fmt.Sprintf("note %d about the garden shed roof", i), 0.5, now.Add(-time.Hour)), pgstore.Inserted))
		}
		// Deleted in PostgreSQL behind the index's back: its vector stays.
		if _, err := e.pool.Exec(t.Context(), `DELETE FROM `+e.store.Schema()+`.memories WHERE memory_id = ANY($1)`, ids[:3]); err != nil {
			t.Fatal(err)
		}
		for _, mode := range []service.SearchMode{service.Dense, service.Hybrid, service.Lexical} {
			res := search(t, e.mem, service.SearchQuery{Scope: "user:1", Text: "garden shed roof", Mode: mode, K: 5})
			got := resultIDs(res)
			if len(got) != 5 || slices.ContainsFunc(got, func(id string) bool { return slices.Contains(ids[:3], id) }) {
				t.Errorf("%s: results %v; want 5 live memories, none of the deleted %v", mode, got, ids[:3])
			}
		}
	})
}
