package gateway

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/amemory/memory-operator/internal/memory"
)

// TestFilter: LangGraph's filter semantics, exact match and the comparison operators.
func TestFilter(t *testing.T) {
	doc := json.RawMessage(`{"kind":"pref","n":3,"tags":["a"],"nested":{"x":1}}`)
	for filter, want := range map[string]bool{
		`{}`:                       true,
		`{"kind":"pref"}`:          true,
		`{"kind":"fact"}`:          false,
		`{"n":3}`:                  true,
		`{"n":{"$gt":2,"$lte":3}}`: true,
		`{"n":{"$lt":3}}`:          false,
		`{"n":{"$ne":4}}`:          true,
		`{"kind":{"$gte":"p"}}`:    true,
		`{"missing":1}`:            false,
		`{"tags":["a"]}`:           true,
		`{"nested":{"x":1}}`:       true,
		`{"nested":{"x":2}}`:       false,
		`{"n":{"$gt":"a string"}}`: false,
	} {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(filter), &m); err != nil {
			t.Fatal(err)
		}
		f, err := compileFilter(m)
		if err != nil {
			t.Fatalf("%s: %v", filter, err)
		}
		if got := f(doc); got != want {
			t.Errorf("filter %s = %v, want %v", filter, got, want)
		}
	}
}

// TestRanking: relevance leads, importance and age adjust. With similarities as
// compressed as multilingual-e5's, one reinforcement of a wrong memory must not
// outrank the right one; a strong match that has decayed away ranks below a fresh,
// slightly weaker one.
func TestRanking(t *testing.T) {
	res := func(id string, sim float32, eff float64) SearchResult {
		return SearchResult{Memory: memory.Item{MemoryID: id}, Similarity: sim, EffectiveScore: eff}
	}
	order := func(rs ...SearchResult) string {
		rankResults(rs)
		var ids []string
		for _, r := range rs {
			ids = append(ids, r.Memory.MemoryID)
		}
		return strings.Join(ids, ",")
	}
	if got := order(res("reinforced-wrong", 0.862, 0.6), res("right", 0.915, 0.5), res("other", 0.83, 0.5)); got != "right,reinforced-wrong,other" {
		t.Errorf("e5-like similarities: %s", got)
	}
	if got := order(res("decayed", 0.90, 0.02), res("fresh", 0.85, 0.5), res("unrelated", 0.10, 0.9)); got != "fresh,decayed,unrelated" {
		t.Errorf("decay: %s", got)
	}
	if got := order(res("only", 0.4, 0.3)); got != "only" {
		t.Errorf("one result: %s", got)
	}
}
