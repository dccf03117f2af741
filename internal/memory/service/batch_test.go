package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/memory/service"
	"github.com/amemory/memory-operator/internal/vector"
)

// batchWords are few, so random texts share words and many are near-duplicates (the
// hashing embedder scores shared words).
var batchWords = strings.Fields(`coffee tea hot iced refund order shipped address window seat`)

// randomItems makes n items over a few scopes and every type, many near-duplicates of
// each other (few words, small changes), some exact duplicates, some keyed.
func randomItems(r *mrand.Rand, n int, prefix string) []memory.Item {
	var texts []string
	items := make([]memory.Item, n)
	for i := range items {
		var text string
		switch {
		case len(texts) > 0 && r.IntN(4) == 0: // an exact repeat
			text = texts[r.IntN(len(texts))]
		case len(texts) > 0 && r.IntN(3) == 0: // a restatement: one word more
			text = texts[r.IntN(len(texts))] + " " + batchWords[r.IntN(len(batchWords))]
		default:
			w := make([]string, 2+r.IntN(3))
			for j := range w {
				w[j] = batchWords[r.IntN(len(batchWords))]
			}
			text = strings.Join(w, " ")
		}
		texts = append(texts, text)
		items[i] = memory.Item{Scope: fmt.Sprintf("user:%d", r.IntN(3)), MemoryType: memory.AllTypes()[r.IntN(4)],
			Content: json.RawMessage(fmt.Sprintf(`{"text":%q}`, text)), Source: "test", BaseScore: 0.5,
			CreatedAt: now, UpdatedAt: now}
		if r.IntN(10) == 0 {
			items[i].Key = fmt.Sprintf("%s-k%d", prefix, i) // a fresh slot
		}
		items[i].MemoryID = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return items
}

// TestGuaranteeBatchDecidesAsOneByOne: a batch written in one call gets, item for
// item, the outcome, memory and similarity that writing its items one by one in order
// gets, and leaves the same memories (content, score, history) behind: on random
// data with exact and near-duplicates inside the batch and against stored memories,
// for the foldable types and the others, at thresholds that fold often and rarely.
func TestGuaranteeBatchDecidesAsOneByOne(t *testing.T) {
	for _, threshold := range []float64{0.5, 0.8, 0.95} {
		for seed := range uint64(4) {
			// Odd seeds: one item rewrites a stored memory (its memory_id), which
			// sends the batch item by item.
			t.Run(fmt.Sprintf("threshold=%v/seed=%d", threshold, seed), func(t *testing.T) {
				r := mrand.New(mrand.NewPCG(seed, uint64(threshold*100)))
				stored := randomItems(r, 60, "old")
				batch := randomItems(r, 120, "new")
				if seed%2 == 1 {
					stored[0].Key = ""
					batch[60].MemoryID, batch[60].Scope, batch[60].Key = stored[0].MemoryID, stored[0].Scope, ""
					batch[60].Content = json.RawMessage(`{"text":"rewritten"}`)
				}
				opts := service.WriteOptions{DedupThreshold: threshold}
				one, batched := newEnv(t, backends[0], nil), newEnv(t, backends[0], nil)
				for _, e := range []*env{one, batched} {
					if _, err := e.mem.Write(t.Context(), clone(stored), opts); err != nil {
						t.Fatal(err)
					}
				}
				var want []service.WriteResult
				for _, it := range clone(batch) {
					res, err := one.mem.Write(t.Context(), []memory.Item{it}, opts)
					if err != nil {
						t.Fatal(err)
					}
					want = append(want, res...)
				}
				got, err := batched.mem.Write(t.Context(), clone(batch), opts)
				if err != nil {
					t.Fatal(err)
				}
				folded := 0
				for i := range batch {
					w, g := want[i], got[i]
					if w.Outcome != g.Outcome || w.MemoryID != g.MemoryID || w.Similarity != g.Similarity || !g.Indexed {
						t.Errorf("item %d (%s %s %s): batch %+v, one by one %+v", i, batch[i].Scope, batch[i].MemoryType, batch[i].Content, g, w)
					}
					if w.Outcome == service.Reinforced {
						folded++
					}
				}
				if folded == 0 && threshold < 0.9 {
					t.Fatalf("nothing folded at %v: the data tests nothing", threshold)
				}
				if a, b := dump(t, one), dump(t, batched); a != b {
					t.Errorf("stored memories differ:\none by one:\n%s\nbatch:\n%s", a, b)
				}
			})
		}
	}
}

func clone(items []memory.Item) []memory.Item { return append([]memory.Item(nil), items...) }

// dump lists every memory of the store with what writes decide (not times).
func dump(t *testing.T, e *env) string {
	t.Helper()
	var b strings.Builder
	err := e.store.Export(t.Context(), pgstore.ExportFilter{}, func(it memory.Item) error {
		fmt.Fprintf(&b, "%s %s %s %s %.2f %s history:", it.MemoryID, it.Scope, it.MemoryType, it.Key, it.BaseScore, it.Content)
		for _, h := range it.History {
			fmt.Fprintf(&b, " %s", h.Content)
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestGuaranteeConcurrentBatchesFoldOnce: batches written at once into one scope,
// each holding restatements of the same facts, leave one memory per fact, as the
// same writes one after another would: each batch's near-duplicate check sees what
// the others stored.
func TestGuaranteeConcurrentBatchesFoldOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		facts := []string{"allergic to peanuts and shellfish", "prefers window seats on long flights", "lives in porto near the river"}
		const writers = 6
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for i := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var items []memory.Item
				for j, f := range facts {
					items = append(items, memory.Item{Scope: "user:shared", MemoryType: memory.Semantic, BaseScore: 0.5,
						Content: json.RawMessage(fmt.Sprintf(`{"fact":%q}`, f+strings.Repeat("!", 1+i)))})
					// and an episode each, never folded
					items = append(items, memory.Item{Scope: "user:shared", MemoryType: memory.Episodic, BaseScore: 0.5,
						Content: json.RawMessage(fmt.Sprintf(`{"event":"writer %d said fact %d"}`, i, j))})
				}
				if _, err := e.mem.Write(context.Background(), items, service.WriteOptions{DedupThreshold: 0.9}); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		l, err := e.store.List(t.Context(), pgstore.ListQuery{Scope: "user:shared", Types: []memory.Type{memory.Semantic}, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(l) != len(facts) {
			t.Fatalf("%d concurrent batches of %d restated facts left %d semantic memories, want %d", writers, len(facts), len(l), len(facts))
		}
		if n, err := e.store.Count(t.Context()); err != nil || n != int64(len(facts)+writers*len(facts)) {
			t.Fatalf("memories = %d, %v; want %d facts and %d episodes", n, err, len(facts), writers*len(facts))
		}
	})
}

// TestGuaranteeFailedBatchStoresNothing: a batch of new memories is one transaction.
// When an item in the middle cannot be stored (its scope's tombstone lies ahead of
// the server's clock), the error says why and nothing of the batch is stored, not
// even the items before it; without that item the same batch stores every item.
func TestGuaranteeFailedBatchStoresNothing(t *testing.T) {
	e := newEnv(t, backends[0], nil)
	ctx := t.Context()
	if _, err := e.pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{e.store.Schema(), "tombstones"}.Sanitize()+` (scope, forgotten_at)
		VALUES ('user:ahead', now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	var items []memory.Item
	for i := range 20 {
		scope, typ := "user:ok", memory.Episodic
		if i == 10 {
			scope = "user:ahead"
		}
		if i%2 == 1 {
			typ = memory.Semantic
		}
		items = append(items, memory.Item{Scope: scope, MemoryType: typ, BaseScore: 0.5,
			Content: json.RawMessage(fmt.Sprintf(`{"text":"item %d of a batch about something %d"}`, i, i*7))})
	}
	res, err := e.mem.Write(ctx, clone(items), service.WriteOptions{DedupThreshold: 0.9})
	if !errors.Is(err, pgstore.ErrForgotten) || len(res) != 0 {
		t.Fatalf("batch with a scope forgotten ahead of the clock: %d results, %v; want none and ErrForgotten", len(res), err)
	}
	if n, err := e.store.Count(ctx); err != nil || n != 0 {
		t.Fatalf("memories stored by the failed batch = %d, %v; want 0", n, err)
	}
	if p, err := e.store.Pending(ctx); err != nil || p.Count != 0 {
		t.Fatalf("index work left by the failed batch = %+v, %v", p, err)
	}
	items = append(items[:10], items[11:]...)
	if res, err := e.mem.Write(ctx, clone(items), service.WriteOptions{DedupThreshold: 0.9}); err != nil || len(res) != len(items) {
		t.Fatalf("the batch without it: %d results, %v", len(res), err)
	}
	if n, err := e.store.Count(ctx); err != nil || n != int64(len(items)) {
		t.Fatalf("memories = %d, %v; want %d", n, err, len(items))
	}
}

// failingTxIndex is an index in the store's database whose in-transaction writes fail.
type failingTxIndex struct{ vector.Index }

func (failingTxIndex) UpsertTx(context.Context, pgx.Tx, []vector.Entry) error { return errInjected }

// TestBatchIndexesInItsTransaction: with an index in the store's own database, a
// batch's vectors are written in the transaction that stores its memories: nothing is
// left as index work, every inserted memory but an archived one has its vector, and a
// failed vector write stores nothing at all.
func TestBatchIndexesInItsTransaction(t *testing.T) {
	e := newEnv(t, backends[0], nil)
	ctx := t.Context()
	var items []memory.Item
	for i := range 40 {
		typ := []memory.Type{memory.Episodic, memory.Semantic}[i%2]
		items = append(items, memory.Item{Scope: fmt.Sprintf("user:%d", i%3), MemoryType: typ, BaseScore: 0.5,
			Content: json.RawMessage(fmt.Sprintf(`{"text":"distinct item %d about topic %d"}`, i, i*13))})
	}
	archivedAt := now
	items[5].ArchivedAt = &archivedAt
	res, err := e.mem.Write(ctx, clone(items), service.WriteOptions{DedupThreshold: 0.99})
	if err != nil || len(res) != len(items) {
		t.Fatalf("write: %d results, %v", len(res), err)
	}
	for i, r := range res {
		if r.Outcome != pgstore.Inserted || !r.Indexed {
			t.Fatalf("item %d: %+v, want inserted and indexed", i, r)
		}
	}
	if p, err := e.store.Pending(ctx); err != nil || p.Count != 0 {
		t.Fatalf("index work after an in-transaction batch = %+v, %v; want none", p, err)
	}
	var vectors int
	for sc := range 3 {
		ids := vectorsOf(t, e.index, fmt.Sprintf("user:%d", sc))
		vectors += len(ids)
		for _, id := range ids {
			if id == res[5].MemoryID {
				t.Fatal("the archived memory got a vector")
			}
		}
	}
	if vectors != len(items)-1 {
		t.Fatalf("%d vectors for %d memories (one archived)", vectors, len(items))
	}

	f := newEnv(t, backends[0], func(ix vector.Index) vector.Index { return failingTxIndex{ix} })
	if res, err := f.mem.Write(ctx, clone(items), service.WriteOptions{DedupThreshold: 0.99}); !errors.Is(err, errInjected) || len(res) != 0 {
		t.Fatalf("a batch whose vectors fail to write: %d results, %v; want none and the failure", len(res), err)
	}
	if n, err := f.store.Count(ctx); err != nil || n != 0 {
		t.Fatalf("memories stored by the batch whose vectors failed = %d, %v; want 0", n, err)
	}
}

// TestBatchSeesWhatChangedWhileItSearched: a batch that finds its locks held, on an
// index that can search what changed since a mark (pgindex, a
// vector.ChangeTracker), searches while it waits, and decides as a search under the
// locks would, whatever another writer does between that search and the locks: a
// near-duplicate stored meanwhile is reinforced, not copied; when the memory the
// early search found is deleted or rewritten meanwhile, the next nearest one is
// reinforced, with its similarity. A batch whose locks are free searches under them.
func TestBatchSeesWhatChangedWhileItSearched(t *testing.T) {
	ctx := t.Context()
	fact := func(id, scope, text string) memory.Item {
		return memory.Item{MemoryID: id, Scope: scope, MemoryType: memory.Semantic, BaseScore: 0.5, Source: "test",
			Content: json.RawMessage(fmt.Sprintf(`{"text":%q}`, text)), CreatedAt: now, UpdatedAt: now}
	}
	// X is nearest to A, then to B; the threshold folds X into either.
	a, b := fact("a", "user:1", "coffee tea hot iced refund"), fact("b", "user:1", "coffee tea hot window seat")
	x, other := fact("x", "user:1", "coffee tea hot iced refund order"), fact("y", "user:2", "shipped address")
	vecs, err := embed.NewHashing(dim).Embed(ctx, embed.Passage, []string{x.EmbeddingText(), a.EmbeddingText(), b.EmbeddingText()})
	if err != nil {
		t.Fatal(err)
	}
	simA := vector.Score(vector.Cosine, vector.Prepare(vector.Cosine, vecs[1]), vector.Prepare(vector.Cosine, vecs[0]))
	simB := vector.Score(vector.Cosine, vector.Prepare(vector.Cosine, vecs[2]), vector.Prepare(vector.Cosine, vecs[0]))
	if simA <= simB+0.05 || simB < 0.3 {
		t.Fatalf("the texts do not test it: similarity to A %.3f, to B %.3f", simA, simB)
	}
	opts := service.WriteOptions{DedupThreshold: float64(simB) - 0.01}

	for _, tc := range []struct {
		name      string
		stored    []memory.Item
		meanwhile func(e *env) error
		want      string // the memory x is folded into
		sim       float32
	}{
		{"a near-duplicate stored meanwhile", nil, func(e *env) error {
			_, err := e.mem.Write(ctx, []memory.Item{a}, opts)
			return err
		}, "a", simA},
		{"the nearest deleted meanwhile", []memory.Item{a, b}, func(e *env) error {
			_, err := e.mem.Delete(ctx, "a", "test")
			return err
		}, "b", simB},
		{"the nearest rewritten meanwhile", []memory.Item{a, b}, func(e *env) error {
			_, err := e.mem.Write(ctx, []memory.Item{fact("a", "user:1", "shipped order address")}, opts)
			return err
		}, "b", simB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, backends[0], nil)
			if len(tc.stored) > 0 { // A and B are alike too: stored without the check
				if _, err := e.mem.Write(ctx, clone(tc.stored), service.WriteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			// Another writer holds x's lock while the batch starts.
			held, err := e.store.LockScope(ctx, x.Scope, x.MemoryType)
			if err != nil {
				t.Fatal(err)
			}
			ran := false
			service.SetBeforeLocks(e.mem, func() {
				if !ran {
					ran = true
					held.Unlock()
					if err := tc.meanwhile(e); err != nil {
						t.Error(err)
					}
				}
			})
			res, err := e.mem.Write(ctx, []memory.Item{x, other}, opts)
			if err != nil {
				t.Fatal(err)
			}
			if !ran {
				t.Fatal("the batch made no early search")
			}
			if got := res[0]; got.Outcome != service.Reinforced || got.MemoryID != tc.want || got.Similarity != tc.sim {
				t.Fatalf("x: %+v, want reinforced into %s at %.4f", got, tc.want, tc.sim)
			}
			if got := res[1]; got.Outcome != pgstore.Inserted {
				t.Fatalf("y: %+v, want inserted", got)
			}
		})
	}
	t.Run("free locks", func(t *testing.T) {
		e := newEnv(t, backends[0], nil)
		service.SetBeforeLocks(e.mem, func() { t.Error("an early search although the locks were free") })
		if _, err := e.mem.Write(ctx, []memory.Item{a}, opts); err != nil {
			t.Fatal(err)
		}
		res, err := e.mem.Write(ctx, []memory.Item{x, other}, opts)
		if err != nil {
			t.Fatal(err)
		}
		if got := res[0]; got.Outcome != service.Reinforced || got.MemoryID != "a" {
			t.Fatalf("x: %+v, want reinforced into a", got)
		}
	})
}
