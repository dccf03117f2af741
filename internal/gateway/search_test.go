package gateway

import (
	"strings"
	"testing"

	"github.com/amemory/memory-operator/internal/memory"
)

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
