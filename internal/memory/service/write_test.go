package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/memory/service"
)

// TestGuaranteeDedupWritersNeverExhaustThePool: many more concurrent near-duplicate
// writers than the pool has connections all finish. Each holds a connection for its
// (scope, type) lock and needs another for its queries; without a bound on lock
// holders they took every connection and waited on each other forever.
func TestGuaranteeDedupWritersNeverExhaustThePool(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		writers := 8 * e.store.PoolSize()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for i := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range 3 {
					it := memory.Item{Scope: fmt.Sprintf("user:%d", i), MemoryType: memory.Semantic, BaseScore: 0.5,
						Content: json.RawMessage(fmt.Sprintf(`{"fact":"writer %d fact %d about something else entirely %d"}`, i, j, i*j))}
					if _, err := e.mem.Write(ctx, []memory.Item{it}, service.WriteOptions{DedupThreshold: 0.9}); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("%d writers over a pool of %d: %v", writers, e.store.PoolSize(), err)
		}
	})
}

// TestGuaranteeEpisodesNeverFold: near-duplicate folding is for facts and procedures
// restated. Two episodes (or working memories) that differ only in one character are
// two events and both stay, at every threshold, however low; the same pair as
// semantic memories folds at a low threshold (so the test can see folding at all),
// the folded write returns the memory it reinforced, and that memory keeps the folded
// text in its history, once per distinct wording.
func TestGuaranteeEpisodesNeverFold(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		ctx := t.Context()
		writeContent := func(scope string, typ memory.Type, content string, threshold float64) service.WriteResult {
			t.Helper()
			it := memory.Item{Scope: scope, MemoryType: typ, BaseScore: 0.5, Content: json.RawMessage(content)}
			res, err := e.mem.Write(ctx, []memory.Item{it}, service.WriteOptions{DedupThreshold: threshold})
			if err != nil || len(res) != 1 {
				t.Fatalf("write %s %s: %v, %v", typ, content, res, err)
			}
			return res[0]
		}
		write := func(scope string, typ memory.Type, text string, threshold float64) service.WriteResult {
			t.Helper()
			return writeContent(scope, typ, fmt.Sprintf(`{"text":%q}`, text), threshold)
		}
		for i, threshold := range []float64{0.01, 0.5, 0.9, 0.95, 1} {
			for _, typ := range []memory.Type{memory.Episodic, memory.Working} {
				scope := fmt.Sprintf("user:ep-%d-%s", i, typ)
				a := write(scope, typ, "the parcel arrived late again today", threshold)
				b := write(scope, typ, "the parcel arrived late again today!", threshold)
				if a.Outcome != pgstore.Inserted || b.Outcome != pgstore.Inserted || a.MemoryID == b.MemoryID {
					t.Errorf("threshold %v, %s: %+v then %+v; want two inserted memories", threshold, typ, a, b)
				}
			}
		}

		first := write("user:facts", memory.Semantic, "I live in Beijing", 0.01)
		folded := write("user:facts", memory.Semantic, "I live in Beijing!", 0.01)
		if folded.Outcome != service.Reinforced || folded.MemoryID != first.MemoryID {
			t.Fatalf("semantic restatement at 0.01: %+v; want reinforced %s", folded, first.MemoryID)
		}
		write("user:facts", memory.Semantic, "I live in Beijing!", 0.01) // a folded wording again: reinforced, nothing added
		again := write("user:facts", memory.Semantic, "i live in beijing", 0.01)
		if again.Outcome != service.Reinforced {
			t.Fatalf("second restatement: %+v", again)
		}
		write("user:facts", memory.Semantic, "i live in beijing", 0.01) // again: no new entry
		// Content that holds a folded one's fields and more is another wording, and so is
		// the reverse: each is kept (equality, not containment, decides).
		writeContent("user:facts", memory.Semantic, `{"text":"home is Beijing","since":"2020"}`, 0.01)
		writeContent("user:facts", memory.Semantic, `{"text":"home is Beijing"}`, 0.01)
		got, err := e.store.Get(ctx, first.MemoryID)
		if err != nil {
			t.Fatal(err)
		}
		var texts []string
		for _, r := range got.History {
			var c struct{ Text string }
			if err := json.Unmarshal(r.Content, &c); err != nil {
				t.Fatal(err)
			}
			texts = append(texts, c.Text)
		}
		if want := []string{"I live in Beijing!", "i live in beijing", "home is Beijing", "home is Beijing"}; !slices.Equal(texts, want) {
			t.Fatalf("history of the reinforced memory = %q, want %q (every folded wording, once)", texts, want)
		}
		if n, err := e.store.Count(ctx); err != nil || n != 21 {
			t.Fatalf("memories stored = %d, %v; want 20 episodes/working + 1 fact", n, err)
		}
	})
}
