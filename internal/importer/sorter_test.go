package importer

import (
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
)

// TestScopeSorterSpills: items come out by scope and, within a scope, in arrival
// order, whether they fit in memory or spill to many runs; the runs are removed.
func TestScopeSorterSpills(t *testing.T) {
	for _, budget := range []int{1 << 30, 4 << 10} {
		dir := t.TempDir()
		s := newScopeSorter(dir, budget)
		r := mrand.New(mrand.NewPCG(1, 2))
		const n = 5000
		orig := map[string]memory.Item{}
		base := time.Date(2026, 11, 20, 8, 0, 0, 123456789, time.UTC)
		for i := range n {
			it := memory.Item{MemoryID: fmt.Sprint(i), MemoryType: memory.Episodic, Scope: fmt.Sprintf("user:%d", r.IntN(97)),
				Content: json.RawMessage(fmt.Sprintf(`{"n":%d,"text":"ü %d"}`, i, r.IntN(1000))), Source: "langgraph", BaseScore: r.Float64(),
				CreatedAt: base.Add(time.Duration(i) * time.Second), UpdatedAt: base.Add(time.Duration(i) * time.Minute)}
			if i%3 == 0 {
				it.Key = fmt.Sprintf("k%d", i)
				exp := base.Add(time.Hour)
				it.ExpiresAt = &exp
			}
			for j := range i % 4 { // mem0's updates: 0 to 3 earlier values
				it.History = append(it.History, memory.Revision{Content: json.RawMessage(fmt.Sprintf(`{"text":"was %d"}`, j)), Source: "mem0",
					BaseScore: 0.5, UpdatedAt: base.Add(time.Duration(j) * time.Hour), SupersededAt: base.Add(time.Duration(j+1) * time.Hour)})
			}
			orig[it.MemoryID] = it
			if err := s.add(it); err != nil {
				t.Fatal(err)
			}
		}
		if budget < 1<<20 && len(s.runs) < 10 {
			t.Fatalf("budget %d: only %d runs", budget, len(s.runs))
		}
		var prevScope string
		prevID := map[string]int{}
		count := 0
		if err := s.each(func(it memory.Item) error {
			var id int
			if _, err := fmt.Sscan(it.MemoryID, &id); err != nil {
				return err
			}
			if it.Scope < prevScope {
				return fmt.Errorf("scope %s after %s", it.Scope, prevScope)
			}
			if p, ok := prevID[it.Scope]; ok && id < p {
				return fmt.Errorf("scope %s: item %d after %d", it.Scope, id, p)
			}
			prevScope, prevID[it.Scope] = it.Scope, id
			if !reflect.DeepEqual(it, orig[it.MemoryID]) {
				return fmt.Errorf("item %s came back as %+v, was %+v", it.MemoryID, it, orig[it.MemoryID])
			}
			count++
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if count != n {
			t.Fatalf("%d items out of %d", count, n)
		}
		s.close()
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Fatalf("%d run files left", len(left))
		}
	}
}
