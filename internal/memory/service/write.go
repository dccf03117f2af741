package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/vector"
)

// The write path the gateway uses (seed 003, sections 4.3, 5.3 and 7.4):
//
//  1. Every item is validated first; an invalid item stores nothing of the batch.
//  2. The items are embedded in one call (needed for the near-duplicate check, and
//     reused for the index), each within the store's input limit (Options.InputLimit:
//     an item over it refuses the whole call, or is embedded truncated). The embedder
//     gets two thirds of the time left before ctx's deadline, so a slow one leaves
//     the rest for storing. When the embedder fails the items are still stored and
//     not embedded again in this call: they are indexed later (DrainPending), without
//     a near-duplicate check.
//  3. A key-less fact or procedure (memory.Type.Foldable: semantic and procedural
//     memories, never an episode or working memory) is checked for duplicates under
//     the (scope, type) lock of pgstore.LockScope, held across check, store and index
//     write, so concurrent writers in any number of gateway replicas never both add
//     the same memory: an exact duplicate (same content hash) is Unchanged; a memory
//     at least DedupThreshold similar (in the index, or still pending indexing) is
//     reinforced (base score + DedupBoost, updated_at = now, the write's content kept
//     in its history) instead of copied. "I live in Beijing" said three times is one
//     fact mentioned three times (seed 003, 5.3); two episodes are two events however
//     alike a model finds them, so episodes and working memories are only ever
//     checked for exact duplicates (pgstore's unique content hash).
//  4. Each stored change records its index work in the same transaction
//     (pgstore.PutQueued): once Write returns, the write is durable and will be
//     searchable, whatever happens to the index or this process.
//  5. The vectors are written; on success the index work is marked done. When the
//     index fails the write is still acknowledged (Indexed false) and DrainPending
//     finishes it.
//
// A batch of new memories (more than one item, none naming a stored memory by
// memory_id or key) takes the batch path of batch.go: the same decisions as writing
// its items one by one in order, in one transaction and a handful of round trips.

// Outcomes of Write beyond pgstore's.
const (
	// Reinforced: a near-duplicate of an existing fact or procedure; that memory's
	// base score and updated_at were raised instead of storing a copy, and the
	// write's content was added to its history (WriteResult.MemoryID names it).
	Reinforced pgstore.Outcome = "reinforced"
)

// DefaultDedupBoost is how much a near-duplicate write raises the existing memory's
// base score (seed 003, 5.3).
const DefaultDedupBoost = 0.1

// WriteOptions adjust Write.
type WriteOptions struct {
	// DedupThreshold > 0 turns on the near-duplicate check for key-less items of the
	// foldable types (memory.Type.Foldable): a similarity (as the index scores it;
	// cosine for COSINE) at or above it reinforces. Calibrate it to the model: a
	// threshold below what the model scores distinct texts folds different facts.
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
// outcome. An error means nothing of a batch of new memories was stored (it is one
// transaction), and for any other batch nothing after the failed item (results
// holds what was); an index failure is not an error (see WriteResult.Indexed).
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
		text, err := m.embedText(it.MemoryID, it)
		if err != nil {
			return nil, fmt.Errorf("memory service: write: item %d: %w", i, err)
		}
		texts[i] = text
	}
	ectx, cancel := embedBudget(ctx)
	vecs, embedErr := m.embed(ectx, embed.Passage, texts)
	cancel()
	if embedErr != nil {
		vecs = make([][]float32, len(items)) // indexed later, by the drainer
	}

	w := &writer{m: m, opts: opts, items: items, vecs: vecs, embedFailed: embedErr != nil, results: make([]WriteResult, len(items))}
	if len(items) > 1 {
		if done, err := w.writeBatch(ctx); done {
			return w.done(), err
		}
		// The batch names stored memories (by memory_id or key). With near-duplicate
		// checks each item is written as if alone, in order, so that each sees what
		// the ones before it stored and indexed; without, below (in order too).
		for i := range items {
			if w.foldable(i) {
				return w.oneByOne(ctx)
			}
		}
	}
	// Key-less items with a vector go through the near-duplicate check, one (scope,
	// type) group at a time (one lock held at a time: no lock-order deadlocks).
	var plain []int
	groups := map[groupKey][]int{}
	for i, it := range items {
		if w.foldable(i) {
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

// oneByOne writes the items one at a time, in order, each as Write writes one item.
func (w *writer) oneByOne(ctx context.Context) ([]WriteResult, error) {
	for i, it := range w.items {
		var err error
		if w.foldable(i) {
			err = w.dedupGroup(ctx, groupKey{it.Scope, it.MemoryType}, []int{i})
		} else {
			err = w.storePlain(ctx, []int{i})
		}
		if err != nil {
			return w.done(), err
		}
	}
	return w.done(), nil
}

type groupKey struct {
	scope string
	typ   memory.Type
}

// embedBudget is the context a write embeds with: two thirds of the time left
// before ctx's deadline (none: ctx itself), the rest kept for storing.
func embedBudget(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, time.Now().Add(time.Until(deadline)*2/3))
}

// writer is one Write call's state.
type writer struct {
	m     *Memory
	opts  WriteOptions
	items []memory.Item
	vecs  [][]float32
	// embedFailed: the embedder failed for this call; its writes are left to the
	// drainer rather than embedded again.
	embedFailed bool
	results     []WriteResult
	stored      []int // indices of results that are final
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
	if w.embedFailed {
		for _, i := range written {
			w.results[i].Indexed = false
		}
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
			if _, err := lock.Reinforce(ctx, best, it, w.opts.DedupBoost, time.Now()); err == nil {
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
	var texts []string
	var ids []string
	for _, it := range pending {
		if text, err := m.embedText(it.MemoryID, it); err == nil { // one the limit refuses is never indexed
			texts = append(texts, text)
			ids = append(ids, it.MemoryID)
		}
	}
	if len(texts) == 0 {
		return nil, nil
	}
	ectx, cancel := embedBudget(ctx)
	defer cancel()
	vecs, err := m.embed(ectx, embed.Passage, texts)
	if err != nil {
		return nil, nil
	}
	out := make([]knownVector, len(ids))
	for i, id := range ids {
		out[i] = knownVector{id, vecs[i]}
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

// DrainOptions adjust DrainPending.
type DrainOptions struct {
	// Batch is how much due work one call takes.
	Batch int
	// MinAge leaves younger work to its writer, which indexes right after committing.
	MinAge time.Duration
	// Retry decides when failed work is tried again and when it is parked.
	Retry pgstore.RetryPolicy
}

// DrainResult counts what DrainPending did.
type DrainResult struct {
	// Done: brought in line with its row. Failed: postponed with backoff. Parked:
	// failed for good (past Retry.MaxAttempts, or a text the input limit refuses),
	// never tried again until retried by hand (RetryParked) or changed.
	Done, Failed, Parked int
}

// DrainPending finishes up to o.Batch pieces of due pending index work older than
// o.MinAge: each memory's vector is brought in line with its row (written, or deleted
// when the row is gone or archived).
//
// One memory whose work fails never holds up the others: when the batch fails and the
// failure is the memories' own (the embedder refuses or chokes on an input while
// still answering a probe, or the input limit refuses a text), the batch is split in
// halves until each failing memory stands alone; the others are done, and each
// failing one is postponed with o.Retry's backoff and parked after
// o.Retry.MaxAttempts (at once for a text the limit refuses). When the failure is the
// backends' (the index or PostgreSQL down, the embedder not answering at all), the
// work is left as it is, no attempt counted, and the error returned: the caller waits
// and calls again.
func (m *Memory) DrainPending(ctx context.Context, o DrainOptions) (DrainResult, error) {
	refs, err := m.store.DuePending(ctx, o.MinAge, o.Batch)
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
	// A text the input limit refuses can never be indexed as it is: parked at once,
	// without costing the batch an attempt.
	var res DrainResult
	keep := 0
	for i, op := range ops {
		if op.item != nil {
			if _, err := m.embedText(op.id, *op.item); errors.Is(err, embed.ErrTextTooLong) {
				parked, ferr := m.store.IndexFailed(ctx, refs[i:i+1], err.Error(), o.Retry, true)
				if ferr != nil {
					return res, fmt.Errorf("memory service: drain: %w", ferr)
				}
				res.Parked += parked
				continue
			}
		}
		refs[keep], ops[keep] = refs[i], op
		keep++
	}
	refs, ops = refs[:keep], ops[:keep]
	if len(ops) == 0 {
		return res, nil
	}
	err = m.sync(ctx, ops)
	if err != nil && !m.ownFailure(ctx, err) {
		return res, fmt.Errorf("memory service: drain: %w", err)
	}
	if err := m.drainGroup(ctx, refs, ops, err, o, &res); err != nil {
		return res, fmt.Errorf("memory service: drain: %w", err)
	}
	return res, nil
}

// ownFailure reports whether a failed sync failed because of its memories rather
// than a backend: a text the input limit refuses, or an embedder failure while the
// embedder embeds a probe text fine.
func (m *Memory) ownFailure(ctx context.Context, err error) bool {
	switch {
	case errors.Is(err, embed.ErrTextTooLong):
		return true
	case errors.Is(err, ErrEmbedderUnavailable):
		_, perr := m.embed(ctx, embed.Passage, []string{"probe"})
		return perr == nil
	}
	return false
}

// drainGroup finishes the work of refs (whose index states are ops); syncErr, when
// set, is the result of syncing them already. A failing group is split in halves
// down to single memories, which are postponed or parked.
func (m *Memory) drainGroup(ctx context.Context, refs []pgstore.PendingRef, ops []indexOp, syncErr error, o DrainOptions, res *DrainResult) error {
	if syncErr == nil {
		syncErr = m.sync(ctx, ops)
	}
	if syncErr == nil {
		if err := m.store.IndexDone(ctx, refs); err != nil {
			return err
		}
		res.Done += len(refs)
		return nil
	}
	if ctx.Err() != nil {
		return syncErr
	}
	if len(refs) == 1 {
		permanent := errors.Is(syncErr, embed.ErrTextTooLong)
		parked, err := m.store.IndexFailed(ctx, refs, syncErr.Error(), o.Retry, permanent)
		if err != nil {
			return errors.Join(syncErr, err)
		}
		res.Parked += parked
		res.Failed += len(refs) - parked
		return nil
	}
	if errors.Is(syncErr, ErrIndexUnavailable) {
		return syncErr // the index went away meanwhile: nothing to learn by splitting
	}
	half := len(refs) / 2
	if err := m.drainGroup(ctx, refs[:half], ops[:half], nil, o, res); err != nil {
		return err
	}
	return m.drainGroup(ctx, refs[half:], ops[half:], nil, o, res)
}

// Pending reports the pending index work (the backlog DrainPending works off).
func (m *Memory) Pending(ctx context.Context) (pgstore.PendingStats, error) {
	return m.store.Pending(ctx)
}

// PendingWork lists pending index work, parked work included (see
// pgstore.Store.ListPending).
func (m *Memory) PendingWork(ctx context.Context, q pgstore.PendingQuery) ([]pgstore.PendingEntry, error) {
	entries, err := m.store.ListPending(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("memory service: %w", err)
	}
	return entries, nil
}

// RetryParked puts parked index work back in the queue (see
// pgstore.Store.RetryParked), once what made it fail is fixed.
func (m *Memory) RetryParked(ctx context.Context, scope string, ids []string) (int64, error) {
	n, err := m.store.RetryParked(ctx, scope, ids)
	if err != nil {
		return 0, fmt.Errorf("memory service: %w", err)
	}
	return n, nil
}

// Store is the memory layer's system of record, for reads the service does not wrap.
func (m *Memory) Store() *pgstore.Store { return m.store }

// IndexSpec is the vector index's dimension and metric.
func (m *Memory) IndexSpec() vector.Spec { return m.index.Spec() }
