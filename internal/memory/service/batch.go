package service

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/vector"
)

// The batch path of Write (more than one item). Writing items one by one costs a
// transaction, a duplicate check and an index search per item; a batch of new
// memories costs instead, whatever its size:
//
//   - the near-duplicate locks of all its (scope, type) groups, taken at once
//     (pgstore.LockScopes) and held across check, store and index write, as for one
//     item;
//   - the groups' pending index work, in one query and one embedding call;
//   - one transaction (pgstore.BeginBatch, Commit): the stored memories the items
//     could meet in one pipeline, the rows and index work in another;
//   - one index search per foldable item, a few at a time. When other writers hold
//     some of the locks and the index can search only what was written after a
//     mark (vector.ChangeTracker: the Postgres engine), it is made while they hold
//     them, and under the locks only the vectors written since are searched
//     (searchLocked): a batch holds the locks for what changed, not for a scan;
//   - for an index in the store's own database (TxIndex), the vectors written in
//     that transaction; for another, one Upsert and one read-back after it;
//   - once the locks are let go, one transaction for the postings (WriteTerms),
//     which no later writer's check waits for.
//
// The decisions are those of writing the items one by one in order: the plan walks
// the items in order, and an item sees what the items before it stored (an exact
// duplicate of an earlier item is Unchanged; a near-duplicate of an earlier item,
// which the index would hold by then, reinforces it), with the index's order (higher
// score, then smaller memory_id) among the index's hit and the batch's own memories,
// and the pending memories after them, as nearest does.
//
// Only a batch of new memories goes this way: when an item names a stored memory by
// its memory_id or (scope, key) slot (a supersede, or a conflict), or two items name
// the same memory_id or slot, the batch is written item by item instead, as before.
// A batch that goes this way is atomic: on any error nothing of it is stored.

// batchAttempts bounds how often a batch is planned again after a concurrent writer
// changed what it was planned against; then it is written item by item.
const batchAttempts = 3

// batchSearches is how many index searches a batch's near-duplicate check runs at
// once (each holds a pool connection, with the embedded index, for a moment).
const batchSearches = 4

// foldable reports whether items[i] goes through the near-duplicate check.
func (w *writer) foldable(i int) bool {
	it := w.items[i]
	return w.opts.DedupThreshold > 0 && it.Key == "" && it.MemoryType.Foldable() && w.vecs[i] != nil && it.ArchivedAt == nil
}

// writeBatch writes the items as one batch (see the top of this file). It reports
// false, having stored nothing, when the batch must be written item by item.
func (w *writer) writeBatch(ctx context.Context) (bool, error) {
	b, done, err := w.writeBatchLocked(ctx)
	if b != nil {
		// After the locks: a failure leaves the postings owed, which the scope's
		// next search makes (pgstore.BatchTx.WriteTerms); the batch is stored.
		_ = b.WriteTerms(ctx)
	}
	return done, err
}

// writeBatchLocked is writeBatch up to the commit and the index write, under the
// near-duplicate locks; it returns the committed batch.
func (w *writer) writeBatchLocked(ctx context.Context) (*pgstore.BatchTx, bool, error) {
	var groups []pgstore.ScopeType
	seen := map[groupKey]bool{}
	for i, it := range w.items {
		if k := (groupKey{it.Scope, it.MemoryType}); w.foldable(i) && !seen[k] {
			seen[k] = true
			groups = append(groups, pgstore.ScopeType{Scope: k.scope, Type: k.typ})
		}
	}
	var (
		lock    *pgstore.ScopeLock
		pending map[groupKey][]knownVector
		early   *earlySearch
	)
	if len(groups) > 0 {
		var err error
		if lock, early, err = w.lockGroups(ctx, groups); err != nil {
			return nil, true, err
		}
		defer func() { lock.Unlock(); <-w.m.dedupSlots }()
		if pending, err = w.m.unindexedGroups(ctx, lock, groups); err != nil {
			return nil, true, err
		}
	}
	hits := make([]vector.Hit, len(w.items))
	searched := make([]bool, len(w.items))
	for range batchAttempts {
		b, err := w.m.store.BeginBatch(ctx, lock, w.items)
		if err != nil {
			return nil, true, fmt.Errorf("memory service: write: %w", err)
		}
		// The index is searched for the foldable items that are not exact duplicates
		// (those are Unchanged whatever it holds; a retried batch is all of them).
		var need []int
		for i := range w.items {
			if _, dup := b.Duplicate(i); w.foldable(i) && !dup && !searched[i] {
				need = append(need, i)
				searched[i] = true
			}
		}
		live, err := w.searchLocked(ctx, b, early, need, hits, pending)
		if err != nil {
			b.Rollback()
			return nil, true, err
		}
		early = nil // a retry searches what it has not searched under the locks
		ops, sims, ok := w.plan(b, hits, pending, live)
		if !ok {
			b.Rollback()
			return nil, false, nil
		}
		var inTx pgstore.IndexInTx
		if w.m.txIndex != nil && !w.embedFailed {
			inTx = w.vectorsInTx
		}
		res, err := b.CommitIndexed(ctx, ops, inTx)
		if errors.Is(err, pgstore.ErrBatchRaced) {
			continue
		}
		if err != nil {
			return nil, true, fmt.Errorf("memory service: write: %w", err)
		}
		// Indexed before the locks go, so the next writer's check finds them.
		w.finish(ctx, ops, sims, res, inTx != nil)
		return b, true, nil
	}
	return nil, false, nil
}

// lockGroups takes a near-duplicate slot and the locks of groups; the caller
// unlocks and frees the slot. When other writers hold some of the locks and the
// index can search what changed since a mark, it searches before it waits for them
// (searchEarly), without a slot, and returns that search.
func (w *writer) lockGroups(ctx context.Context, groups []pgstore.ScopeType) (*pgstore.ScopeLock, *earlySearch, error) {
	if err := w.takeSlot(ctx); err != nil {
		return nil, nil, err
	}
	var early *earlySearch
	if tracker, ok := w.m.index.(vector.ChangeTracker); ok {
		lock, err := w.m.store.TryLockScopes(ctx, groups)
		if lock != nil {
			return lock, nil, nil
		}
		<-w.m.dedupSlots
		if err != nil {
			return nil, nil, fmt.Errorf("memory service: write: %w", err)
		}
		early = w.searchEarly(ctx, tracker)
		if w.m.beforeLocks != nil {
			w.m.beforeLocks()
		}
		if err := w.takeSlot(ctx); err != nil {
			return nil, nil, err
		}
	}
	lock, err := w.m.store.LockScopes(ctx, groups)
	if err != nil {
		<-w.m.dedupSlots
		return nil, nil, fmt.Errorf("memory service: write: %w", err)
	}
	return lock, early, nil
}

// takeSlot waits for a near-duplicate slot.
func (w *writer) takeSlot(ctx context.Context) error {
	select {
	case w.m.dedupSlots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("memory service: write: %w", ctx.Err())
	}
}

// vectorsInTx writes the vectors of the inserted items in the batch's transaction
// (pgstore.BatchTx.CommitIndexed), as index would after it: an archived memory has
// none.
func (w *writer) vectorsInTx(ctx context.Context, tx pgx.Tx, inserted []int) error {
	entries := make([]vector.Entry, 0, len(inserted))
	for _, i := range inserted {
		if it := w.items[i]; it.ArchivedAt == nil {
			entries = append(entries, vector.Entry{ID: it.MemoryID, Scope: it.Scope, Type: string(it.MemoryType), Vector: w.vecs[i]})
		}
	}
	return w.m.txIndex.UpsertTx(ctx, tx, entries)
}

// finish records a committed batch's results and indexes what it inserted, unless
// its transaction did (indexed).
func (w *writer) finish(ctx context.Context, ops []pgstore.BatchOp, sims []float32, res []pgstore.PutResult, indexed bool) {
	var written []int
	var refs []pgstore.PendingRef
	for i, r := range res {
		if ops[i].Kind == pgstore.BatchReinforce {
			w.results[i] = WriteResult{MemoryID: r.MemoryID, Outcome: Reinforced, Indexed: true, Similarity: sims[i]}
			w.stored = append(w.stored, i)
			continue
		}
		w.record(i, r)
		if r.Outcome == pgstore.Inserted && !indexed {
			written = append(written, i)
			refs = append(refs, pgstore.PendingRef{MemoryID: r.MemoryID, Seq: r.Pending})
		}
	}
	w.index(ctx, written, refs)
}

// plan decides every item's outcome, in order, as writing them one by one would
// (see the top of this file), given which of the memories hits and pending name are
// live. ok is false when an item names a stored memory, or one an earlier item
// inserts: the batch is then written item by item.
func (w *writer) plan(b *pgstore.BatchTx, hits []vector.Hit, pending map[groupKey][]knownVector, live map[string]bool) (ops []pgstore.BatchOp, sims []float32, ok bool) {
	metric := w.m.index.Spec().Metric
	ops = make([]pgstore.BatchOp, len(w.items))
	sims = make([]float32, len(w.items))
	content := map[string]string{} // ContentKey -> the key-less memory an earlier item inserted
	inserted := map[string]bool{}
	slots := map[string]bool{}
	added := map[groupKey][]knownVector{} // earlier items' memories the index holds by then (prepared vectors)
	now := time.Now()
	for i, it := range w.items {
		if it.Key == "" {
			if id, dup := b.Duplicate(i); dup {
				ops[i] = pgstore.BatchOp{Kind: pgstore.BatchUnchanged, Target: id}
				continue
			}
			if id, dup := content[b.ContentKey(i)]; dup {
				ops[i] = pgstore.BatchOp{Kind: pgstore.BatchUnchanged, Target: id}
				continue
			}
		}
		g := groupKey{it.Scope, it.MemoryType}
		if w.foldable(i) {
			best, sim := nearestOf(metric, w.vecs[i], hits[i], added[g], pending[g])
			if best != "" && float64(sim) >= w.opts.DedupThreshold && (live[best] || inserted[best]) {
				ops[i] = pgstore.BatchOp{Kind: pgstore.BatchReinforce, Target: best, Boost: w.opts.DedupBoost, At: now}
				sims[i] = sim
				continue
			}
			// No near-duplicate, or one that is gone (forgotten, archived, a stale
			// vector): stored, as one by one.
		}
		if !b.Fresh(i) || inserted[it.MemoryID] {
			return nil, nil, false
		}
		if it.Key != "" {
			slot := it.Scope + "\x00" + it.Key
			if slots[slot] {
				return nil, nil, false
			}
			slots[slot] = true
		} else {
			content[b.ContentKey(i)] = it.MemoryID
		}
		ops[i] = pgstore.BatchOp{Kind: pgstore.BatchInsert}
		inserted[it.MemoryID] = true
		if w.vecs[i] != nil && it.ArchivedAt == nil && it.MemoryType.Foldable() {
			added[g] = append(added[g], knownVector{it.MemoryID, vector.Prepare(metric, w.vecs[i])})
		}
	}
	return ops, sims, true
}

// liveNamed returns which of the memories the index hits and the pending work name
// (those a reinforcement could fold into) are live.
func liveNamed(ctx context.Context, b *pgstore.BatchTx, hits []vector.Hit, pending map[groupKey][]knownVector) (map[string]bool, error) {
	var named []string
	for _, h := range hits {
		if h.ID != "" {
			named = append(named, h.ID)
		}
	}
	for _, p := range pending {
		for _, u := range p {
			named = append(named, u.id)
		}
	}
	live, err := b.Live(ctx, named)
	if err != nil {
		return nil, fmt.Errorf("memory service: write: %w", err)
	}
	return live, nil
}

// nearestOf is nearest for one item of a batch: the index's hit (searched before the
// batch stored anything), the memories earlier items of the batch added to the group
// (which the index would hold by then; prepared vectors), ranked as the index ranks
// (higher score, then smaller memory_id), then the group's pending memories, as
// nearest takes them.
func nearestOf(metric vector.Metric, vec []float32, hit vector.Hit, added, pending []knownVector) (string, float32) {
	best, sim := hit.ID, hit.Score
	if best == "" {
		sim = float32(math.Inf(-1))
	}
	q := vector.Prepare(metric, vec)
	for _, a := range added {
		if s := vector.Score(metric, a.vec, q); best == "" || s > sim || (s == sim && a.id < best) {
			best, sim = a.id, s
		}
	}
	for _, u := range pending {
		if s := vector.Score(metric, vector.Prepare(metric, u.vec), q); best == "" || s > sim {
			best, sim = u.id, s
		}
	}
	return best, sim
}

// earlySearch is the near-duplicate search of a batch's foldable items made while
// other writers hold its locks, on an index that can then search only what changed
// since (vector.ChangeTracker).
type earlySearch struct {
	tracker vector.ChangeTracker
	mark    vector.Mark
	hits    []vector.Hit // by item; the zero Hit where the index had none
}

// searchEarly searches every foldable item's group before the batch takes its
// locks, while their holders work. It returns nil, and the search is made under
// the locks as for any index, when the mark or the search fails.
func (w *writer) searchEarly(ctx context.Context, tracker vector.ChangeTracker) *earlySearch {
	// The mark comes first: whatever the search misses was written after it.
	mark, err := tracker.Mark(ctx)
	if err != nil {
		return nil
	}
	var idx []int
	for i := range w.items {
		if w.foldable(i) {
			idx = append(idx, i)
		}
	}
	hits := make([]vector.Hit, len(w.items))
	if err := w.searchInto(ctx, idx, hits); err != nil {
		return nil
	}
	return &earlySearch{tracker: tracker, mark: mark, hits: hits}
}

// searchLocked fills hits[i], for each i of need, with the index's nearest memory of
// items[i]'s group as a search under the locks would find it, and returns which of
// the memories hits and pending name are live. Without an early search it is that
// search. With one, it searches under the locks only what was written since the
// early search's mark, and takes the better of the two: every other vector is as
// the early search saw it. An item whose early hit changed since, or whose hit is
// no live memory (forgotten, deleted, archived meanwhile: the search under the locks
// would have found the next one), is searched again in full.
func (w *writer) searchLocked(ctx context.Context, b *pgstore.BatchTx, early *earlySearch, need []int, hits []vector.Hit, pending map[groupKey][]knownVector) (map[string]bool, error) {
	var (
		since   [][]vector.Hit
		changed map[string]bool
		err     error
	)
	if early != nil && len(need) > 0 {
		since, changed, err = early.tracker.SearchSince(ctx, early.mark, w.queries(need))
	}
	if early == nil || len(need) == 0 || err != nil { // err: as without an early search
		w.searchIndex(ctx, need, hits)
		return liveNamed(ctx, b, hits, pending)
	}
	for j, i := range need {
		hits[i] = early.hits[i]
		if len(since[j]) > 0 && (hits[i].ID == "" || vector.CompareHits(since[j][0], hits[i]) < 0) {
			hits[i] = since[j][0]
		}
	}
	live, err := liveNamed(ctx, b, hits, pending)
	if err != nil {
		return nil, err
	}
	var again []int
	for _, i := range need {
		if id := early.hits[i].ID; (id != "" && changed[id]) || (hits[i].ID != "" && !live[hits[i].ID]) {
			again = append(again, i)
			hits[i] = vector.Hit{}
		}
	}
	if len(again) == 0 {
		return live, nil
	}
	w.searchIndex(ctx, again, hits)
	var named []string
	for _, i := range again {
		if hits[i].ID != "" {
			named = append(named, hits[i].ID)
		}
	}
	more, err := b.Live(ctx, named)
	if err != nil {
		return nil, fmt.Errorf("memory service: write: %w", err)
	}
	maps.Copy(live, more)
	return live, nil
}

// queries are the near-duplicate searches of items idx: the nearest memory of each
// one's (scope, type) group.
func (w *writer) queries(idx []int) []vector.Query {
	qs := make([]vector.Query, len(idx))
	for j, i := range idx {
		it := w.items[i]
		qs[j] = vector.Query{Scope: it.Scope, Types: []string{string(it.MemoryType)}, Vector: w.vecs[i], K: 1}
	}
	return qs
}

// searchIndex fills hits[i], for each i of idx, with the index's nearest memory of
// items[i]'s group (none when the index has none or cannot answer, as nearest): in one
// call when the index answers many searches at once (vector.MultiSearcher), else
// batchSearches at a time.
func (w *writer) searchIndex(ctx context.Context, idx []int, hits []vector.Hit) {
	_ = w.searchInto(ctx, idx, hits)
}

// searchInto is searchIndex, reporting the index's failure.
func (w *writer) searchInto(ctx context.Context, idx []int, hits []vector.Hit) error {
	if len(idx) == 0 {
		return nil
	}
	found, err := vector.SearchMany(ctx, w.m.index, w.queries(idx), batchSearches)
	if err != nil {
		return err
	}
	for j, i := range idx {
		if len(found[j]) > 0 {
			hits[i] = found[j][0]
		}
	}
	return nil
}

// unindexedGroups is unindexed for several groups: one query, one embedding call.
func (m *Memory) unindexedGroups(ctx context.Context, lock *pgstore.ScopeLock, groups []pgstore.ScopeType) (map[groupKey][]knownVector, error) {
	pending, err := lock.PendingInGroups(ctx, groups)
	if err != nil {
		return nil, fmt.Errorf("memory service: write: %w", err)
	}
	var (
		texts []string
		ids   []string
		keys  []groupKey
	)
	for g, items := range pending {
		for _, it := range items {
			if text, err := m.embedText(it.MemoryID, it); err == nil { // one the limit refuses is never indexed
				texts, ids, keys = append(texts, text), append(ids, it.MemoryID), append(keys, groupKey{g.Scope, g.Type})
			}
		}
	}
	out := map[groupKey][]knownVector{}
	if len(texts) == 0 {
		return out, nil
	}
	ectx, cancel := embedBudget(ctx)
	defer cancel()
	vecs, err := m.embed(ectx, embed.Passage, texts)
	if err != nil {
		return out, nil // best effort, as unindexed
	}
	for i, id := range ids {
		out[keys[i]] = append(out[keys[i]], knownVector{id, vecs[i]})
	}
	return out, nil
}
