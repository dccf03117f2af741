package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/vector"
)

// The write path the gateway uses (seed 003, sections 4.3, 5.3 and 7.4):
//
//  1. Every item is validated first; an invalid item stores nothing of the batch.
//  2. The items are embedded in one call (needed for the near-duplicate check, and
//     reused for the index). When the embedder fails the items are still stored: they
//     are indexed later, without a near-duplicate check.
//  3. A key-less item is checked for duplicates under the (scope, type) lock of
//     pgstore.LockScope, held across check, store and index write, so concurrent
//     writers in any number of gateway replicas never both add the same memory: an
//     exact duplicate (same content hash) is Unchanged; a memory at least
//     DedupThreshold similar (in the index, or still pending indexing) is reinforced
//     (base score + DedupBoost, updated_at = now) instead of copied.
//  4. Each stored change records its index work in the same transaction
//     (pgstore.PutQueued): once Write returns, the write is durable and will be
//     searchable, whatever happens to the index or this process.
//  5. The vectors are written; on success the index work is marked done. When the
//     index fails the write is still acknowledged (Indexed false) and DrainPending
//     finishes it.

// Outcomes of Write beyond pgstore's.
const (
	// Reinforced: a near-duplicate of an existing memory; that memory's base score
	// and updated_at were raised instead of storing a copy.
	Reinforced pgstore.Outcome = "reinforced"
)

// DefaultDedupBoost is how much a near-duplicate write raises the existing memory's
// base score (seed 003, 5.3).
const DefaultDedupBoost = 0.1

// WriteOptions adjust Write.
type WriteOptions struct {
	// DedupThreshold > 0 turns on the near-duplicate check for key-less items: a
	// similarity (as the index scores it; cosine for COSINE) at or above it reinforces.
	DedupThreshold float64
	// DedupBoost is added to a reinforced memory's base score (0: DefaultDedupBoost).
	DedupBoost float64
}

// WriteResult is the outcome of one written item.
type WriteResult struct {
	MemoryID string
	Outcome  pgstore.Outcome
	// Indexed is false when the vector write failed: the index work is pending and
	// DrainPending finishes it.
	Indexed bool
	// Similarity is the near-duplicate's similarity, for Reinforced.
	Similarity float32
}

// Write stores items as described at the top of this file; results[i] is items[i]'s
// outcome. An error means nothing after the failed item was stored (results holds
// what was); an index failure is not an error (see WriteResult.Indexed).
func (m *Memory) Write(ctx context.Context, items []memory.Item, opts WriteOptions) ([]WriteResult, error) {
	now := time.Now()
	for i := range items {
		items[i].SetDefaults(now)
		if err := items[i].Validate(); err != nil {
			return nil, fmt.Errorf("memory service: write: item %d: %w", i, err)
		}
	}
	if opts.DedupBoost == 0 {
		opts.DedupBoost = DefaultDedupBoost
	}
	texts := make([]string, len(items))
	for i, it := range items {
		texts[i] = it.EmbeddingText()
	}
	vecs, embedErr := m.embed(ctx, texts)
	if embedErr != nil {
		vecs = make([][]float32, len(items)) // indexed later, by the drainer
	}

	w := &writer{m: m, opts: opts, items: items, vecs: vecs, results: make([]WriteResult, len(items))}
	// Key-less items with a vector go through the near-duplicate check, one (scope,
	// type) group at a time (one lock held at a time: no lock-order deadlocks).
	var plain []int
	groups := map[groupKey][]int{}
	for i, it := range items {
		if opts.DedupThreshold > 0 && it.Key == "" && vecs[i] != nil && it.ArchivedAt == nil {
			k := groupKey{it.Scope, it.MemoryType}
			groups[k] = append(groups[k], i)
		} else {
			plain = append(plain, i)
		}
	}
	keys := make([]groupKey, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b groupKey) int {
		return cmp.Or(cmp.Compare(a.scope, b.scope), cmp.Compare(a.typ, b.typ))
	})
	for _, k := range keys {
		if err := w.dedupGroup(ctx, k, groups[k]); err != nil {
			return w.done(), err
		}
	}
	if err := w.storePlain(ctx, plain); err != nil {
		return w.done(), err
	}
	return w.done(), nil
}

type groupKey struct {
	scope string
	typ   memory.Type
}

// writer is one Write call's state.
type writer struct {
	m       *Memory
	opts    WriteOptions
	items   []memory.Item
	vecs    [][]float32
	results []WriteResult
	stored  []int // indices of results that are final
}

func (w *writer) done() []WriteResult {
	out := make([]WriteResult, 0, len(w.stored))
	slices.Sort(w.stored)
	for _, i := range w.stored {
		out = append(out, w.results[i])
	}
	return out
}

// storePlain stores items without the near-duplicate check and indexes them together.
func (w *writer) storePlain(ctx context.Context, idx []int) error {
	var written []int
	var refs []pgstore.PendingRef
	for _, i := range idx {
		res, err := w.m.store.PutQueued(ctx, w.items[i])
		if err != nil {
			w.index(ctx, written, refs)
			return fmt.Errorf("memory service: write: item %d: %w", i, err)
		}
		w.record(i, res)
		if res.Outcome != pgstore.Unchanged {
			written = append(written, i)
			refs = append(refs, pgstore.PendingRef{MemoryID: res.MemoryID, Seq: res.Pending})
		}
	}
	w.index(ctx, written, refs)
	return nil
}

func (w *writer) record(i int, res pgstore.PutResult) {
	w.results[i] = WriteResult{MemoryID: res.MemoryID, Outcome: res.Outcome, Indexed: true}
	w.stored = append(w.stored, i)
}

// index writes the vectors of the written items and marks their index work done;
// on failure their results say Indexed false and the work stays pending.
func (w *writer) index(ctx context.Context, written []int, refs []pgstore.PendingRef) {
	if len(written) == 0 {
		return
	}
	ops := make([]indexOp, 0, len(written))
	pos := map[string]int{}
	for _, i := range written {
		op := opFor(w.results[i].MemoryID, w.items[i])
		if op.item != nil {
			op.vec = w.vecs[i]
		}
		if j, ok := pos[op.id]; ok {
			ops[j] = op // a later write to the same memory wins
			continue
		}
		pos[op.id] = len(ops)
		ops = append(ops, op)
	}
	err := w.m.sync(ctx, ops)
	if err == nil {
		err = w.m.store.IndexDone(ctx, refs)
	}
	if err != nil {
		for _, i := range written {
			w.results[i].Indexed = false
		}
	}
}

// dedupGroup writes the key-less items of one (scope, type) under its lock.
func (w *writer) dedupGroup(ctx context.Context, k groupKey, idx []int) error {
	select {
	case w.m.dedupSlots <- struct{}{}:
		defer func() { <-w.m.dedupSlots }()
	case <-ctx.Done():
		return fmt.Errorf("memory service: write: %w", ctx.Err())
	}
	lock, err := w.m.store.LockScope(ctx, k.scope, k.typ)
	if err != nil {
		return fmt.Errorf("memory service: write: %w", err)
	}
	defer lock.Unlock()

	unindexed, err := w.m.unindexed(ctx, lock, k)
	if err != nil {
		return err
	}
	var written []int
	var refs []pgstore.PendingRef
	for _, i := range idx {
		it := w.items[i]
		if id, ok, err := lock.Duplicate(ctx, it); err != nil {
			w.index(ctx, written, refs)
			return fmt.Errorf("memory service: write: item %d: %w", i, err)
		} else if ok {
			w.record(i, pgstore.PutResult{MemoryID: id, Outcome: pgstore.Unchanged})
			continue
		}
		best, sim := w.m.nearest(ctx, k, w.vecs[i], unindexed)
		if best != "" && float64(sim) >= w.opts.DedupThreshold {
			if _, err := lock.Reinforce(ctx, best, w.opts.DedupBoost, time.Now()); err == nil {
				w.results[i] = WriteResult{MemoryID: best, Outcome: Reinforced, Indexed: true, Similarity: sim}
				w.stored = append(w.stored, i)
				continue
			} else if !errors.Is(err, pgstore.ErrNotFound) {
				w.index(ctx, written, refs)
				return fmt.Errorf("memory service: write: item %d: %w", i, err)
			}
			// The near-duplicate is gone (forgotten, archived, stale vector): store.
		}
		res, err := lock.PutQueued(ctx, it)
		if err != nil {
			w.index(ctx, written, refs)
			return fmt.Errorf("memory service: write: item %d: %w", i, err)
		}
		w.record(i, res)
		if res.Outcome != pgstore.Unchanged {
			written = append(written, i)
			refs = append(refs, pgstore.PendingRef{MemoryID: res.MemoryID, Seq: res.Pending})
			// Later items of this batch see it whether or not the index write below works.
			unindexed = append(unindexed, knownVector{res.MemoryID, w.vecs[i]})
		}
	}
	// Indexed before the lock goes, so the next writer's check finds them.
	w.index(ctx, written, refs)
	return nil
}

// knownVector is a memory's vector that the index may not have yet.
type knownVector struct {
	id  string
	vec []float32
}

// unindexed returns what the index cannot show yet: the vectors of the group's
// memories whose index work is pending (another writer's failed index write, or a
// crash). Without the embedder they are left out (the check is best effort then).
func (m *Memory) unindexed(ctx context.Context, lock *pgstore.ScopeLock, k groupKey) ([]knownVector, error) {
	pending, err := lock.PendingIn(ctx, k.scope, k.typ)
	if err != nil || len(pending) == 0 {
		if err != nil {
			err = fmt.Errorf("memory service: write: %w", err)
		}
		return nil, err
	}
	texts := make([]string, len(pending))
	for i, it := range pending {
		texts[i] = it.EmbeddingText()
	}
	vecs, err := m.embed(ctx, texts)
	if err != nil {
		return nil, nil
	}
	out := make([]knownVector, len(pending))
	for i, it := range pending {
		out[i] = knownVector{it.MemoryID, vecs[i]}
	}
	return out, nil
}

// nearest is the memory of the group most similar to vec, in the index or among
// unindexed ("" when there is none, or the index cannot answer).
func (m *Memory) nearest(ctx context.Context, k groupKey, vec []float32, unindexed []knownVector) (string, float32) {
	best, sim := "", float32(-1)
	hits, err := m.index.Search(ctx, vector.Query{Scope: k.scope, Types: []string{string(k.typ)}, Vector: vec, K: 1})
	if err == nil && len(hits) > 0 {
		best, sim = hits[0].ID, hits[0].Score
	}
	metric := m.index.Spec().Metric
	q := vector.Prepare(metric, vec)
	for _, u := range unindexed {
		if s := vector.Score(metric, vector.Prepare(metric, u.vec), q); s > sim {
			best, sim = u.id, s
		}
	}
	return best, sim
}

// Delete deletes one memory and its vector. The vector deletion is recorded as index
// work in the same transaction, so it happens even if the index is down now.
func (m *Memory) Delete(ctx context.Context, id, actor string) (memory.Item, error) {
	it, ref, err := m.store.DeleteQueued(ctx, id, actor)
	if err != nil {
		return memory.Item{}, fmt.Errorf("memory service: %w", err)
	}
	if err := m.index.Delete(ctx, []string{id}); err == nil {
		_ = m.store.IndexDone(ctx, []pgstore.PendingRef{ref}) // else the drainer does it
	}
	return it, nil
}

// DrainResult counts what DrainPending did.
type DrainResult struct {
	Done, Failed int
}

// DrainPending finishes up to batch pieces of pending index work older than minAge:
// each memory's vector is brought in line with its row (written, or deleted when the
// row is gone or archived). Work that fails again is postponed with backoff.
func (m *Memory) DrainPending(ctx context.Context, batch int, minAge time.Duration, backoff func(int) time.Duration) (DrainResult, error) {
	refs, err := m.store.DuePending(ctx, minAge, batch)
	if err != nil || len(refs) == 0 {
		return DrainResult{}, err
	}
	ops := make([]indexOp, 0, len(refs))
	for _, r := range refs {
		it, err := m.load(ctx, r.MemoryID)
		if err != nil {
			return DrainResult{}, fmt.Errorf("memory service: drain: %w", err)
		}
		if it == nil {
			ops = append(ops, indexOp{id: r.MemoryID})
		} else {
			ops = append(ops, opFor(r.MemoryID, *it))
		}
	}
	if err := m.sync(ctx, ops); err != nil {
		if ferr := m.store.IndexFailed(ctx, refs, err.Error(), backoff); ferr != nil {
			return DrainResult{}, errors.Join(err, ferr)
		}
		return DrainResult{Failed: len(refs)}, err
	}
	if err := m.store.IndexDone(ctx, refs); err != nil {
		return DrainResult{}, err
	}
	return DrainResult{Done: len(refs)}, nil
}

// Pending reports the pending index work (the backlog DrainPending works off).
func (m *Memory) Pending(ctx context.Context) (pgstore.PendingStats, error) {
	return m.store.Pending(ctx)
}

// Store is the memory layer's system of record, for reads the service does not wrap.
func (m *Memory) Store() *pgstore.Store { return m.store }

// IndexSpec is the vector index's dimension and metric.
func (m *Memory) IndexSpec() vector.Spec { return m.index.Spec() }
