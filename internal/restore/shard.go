package restore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"io"
	"slices"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/snapshot"
	"github.com/amemory/memory-operator/internal/vector"
)

// reason is why an item was skipped.
type reason uint8

const (
	reasonTombstoned reason = iota + 1
	reasonDenylisted
	reasonUnmapped
	reasonExpired
	reasonType
	reasonConflict
	reasonInvalid
	reasonIDInOtherScope
	reasonTextTooLong
)

func (s *Skipped) inc(r reason) {
	switch r {
	case reasonTombstoned:
		s.Tombstoned++
	case reasonDenylisted:
		s.Denylisted++
	case reasonUnmapped:
		s.Unmapped++
	case reasonExpired:
		s.Expired++
	case reasonType:
		s.Type++
	case reasonConflict:
		s.Conflict++
	case reasonInvalid:
		s.Invalid++
	case reasonIDInOtherScope:
		s.IDInUseByOtherScope++
	case reasonTextTooLong:
		s.TextTooLong++
	}
}

var scopeSkipReason = [...]reason{skipDenylisted: reasonDenylisted, skipUnmapped: reasonUnmapped}

// scopeStat counts what happened to one package scope.
type scopeStat struct {
	source, target      string
	skip                skipReason
	restored, unchanged int64
	skipped             Skipped
}

// shardRun restores one shard: it reads the items, applies the item rules, and
// merges them in batches. Batches are merged in their own goroutines (up to
// Parallelism at once, each in its own transaction) while the next ones are read, so
// decoding overlaps the database's work and one large shard can use every
// connection. Batches end at scope boundaries (unless one scope alone exceeds
// maxBatchFactor batches), and a batch whose target scopes overlap a batch in flight
// waits for it, so items that meet the same memory still merge in package order.
// Everything but the merge itself (counting, scope bookkeeping) happens in the
// goroutine that reads, in batch order. Its counters cover committed batches only.
type shardRun struct {
	r   *runner
	idx int

	scopes     []*scopeStat // scopes not yet handed to a batch to finalize; the last is the current one
	batch      []pgstore.PreparedItem
	batchBytes int64        // the batch's items' size (itemSize)
	owner      []*scopeStat // owner[i] is batch[i]'s scope
	inflight   []*mergeBatch
	// inflightTargets counts, per target scope, the batches in flight writing to it.
	inflightTargets map[string]int

	read, inserted, replaced, unchanged, historyRecorded, idConflicts, mapped int64
	skipped                                                                   Skipped
	byType                                                                    map[memory.Type]int64
	scopesIn, mappedScopes                                                    int64
	vectors, embedded, vectorsDeleted, batches, rehydrated                    int64
	firstInvalid                                                              string
	detail                                                                    bytes.Buffer
	reported                                                                  struct{ read, restored, skipped int64 }
}

// mergeBatch is one batch on its way into the target.
type mergeBatch struct {
	items  []pgstore.PreparedItem
	owner  []*scopeStat
	closed []*scopeStat // scopes complete once this batch is: finalized after it
	// targets are the distinct target scopes of items; renames the package scopes
	// among them written under another name.
	targets []string
	renames []pgstore.ScopeRename
	done    chan struct{}
	res     *pgstore.MergeResult
	err     error
	// Vector counts, set by writeVectors (which runs again when the merge retries).
	vectors, embedded, deleted int64
	// rehydrated counts memories un-archived after the commit (Options.Rehydrate), and
	// rehydratedVectors, rehydratedEmbedded the vectors written for them.
	rehydrated, rehydratedVectors, rehydratedEmbedded int64
}

func (sh *shardRun) run(ctx context.Context, info snapshot.ShardInfo) error {
	add := func(it memory.Item) error { return sh.add(ctx, pgstore.PrepareItemAt(it, sh.r.cut)) }
	var err error
	if sh.r.pins != nil {
		err = sh.r.o.Reader.(verifiablePackage).ShardItemsPinned(ctx, info, sh.r.pins, add)
	} else { // Options.Written: the package was not read before
		err = sh.r.o.Reader.ShardItems(ctx, info, add)
	}
	if err == nil {
		err = sh.flush(ctx, true)
	}
	// Every batch in flight is waited for, even after an error: none may outlive the run.
	for len(sh.inflight) > 0 {
		if werr := sh.wait(); err == nil {
			err = werr
		}
	}
	if err != nil {
		return fmt.Errorf("restore: shard %s: %w", info.Name, err)
	}
	if d := sh.r.detail; d != nil {
		sh.r.mu.Lock()
		defer sh.r.mu.Unlock()
		if err := d.done(sh.idx, sh.detail.Bytes()); err != nil {
			return fmt.Errorf("restore: writing the per-scope detail: %w", err)
		}
	}
	return nil
}

// add applies the item rules and queues the item for the next batch.
func (sh *shardRun) add(ctx context.Context, p pgstore.PreparedItem) error {
	it := &p.Item
	sh.read++
	if n := len(sh.scopes); n == 0 || sh.scopes[n-1].source != it.Scope {
		d, err := sh.r.decide(it.Scope)
		if err != nil {
			return err // cannot happen: every scope was mapped before writing
		}
		sh.scopes = append(sh.scopes, &scopeStat{source: it.Scope, target: d.target, skip: d.skip})
	}
	sc := sh.scopes[len(sh.scopes)-1]
	// A full batch is cut where a scope ends, so that consecutive batches (usually)
	// write disjoint scopes and can be merged at once.
	if sh.full(1) && sh.owner[len(sh.owner)-1] != sc {
		if err := sh.flush(ctx, false); err != nil {
			return err
		}
	}
	switch {
	case sc.skip != noSkip:
		sh.skip(sc, scopeSkipReason[sc.skip])
		return nil
	case !sh.r.types[it.MemoryType]:
		sh.skip(sc, reasonType)
		return nil
	case it.ExpiresAt != nil && !it.ExpiresAt.After(sh.r.o.Now):
		sh.skip(sc, reasonExpired)
		return nil
	case p.Err() == nil && sh.r.refusesText(it):
		sh.skip(sc, reasonTextTooLong)
		return nil
	}
	it.Scope = sc.target
	sh.batch = append(sh.batch, p)
	sh.batchBytes += itemSize(it)
	sh.owner = append(sh.owner, sc)
	if sh.full(maxBatchFactor) {
		return sh.flush(ctx, false) // one scope larger than a batch
	}
	return nil
}

// maxBatchFactor bounds a batch that waits for its scope to end, in batch sizes.
const maxBatchFactor = 2

// full reports whether the batch holds factor batches' worth of items, by count or
// by size.
func (sh *shardRun) full(factor int) bool {
	return len(sh.batch) >= factor*sh.r.o.BatchSize || sh.batchBytes >= int64(factor)*sh.r.o.BatchBytes
}

// itemSize estimates the memory an item takes while its batch is merged: its
// strings, content and history (held decoded and again as the COPY rows are
// encoded) and embedding.
func itemSize(it *memory.Item) int64 {
	n := 256 + len(it.MemoryID) + len(it.Scope) + len(it.Key) + len(it.Source) + len(it.Content) + 4*len(it.Embedding)
	for _, h := range it.History {
		n += 128 + len(h.Content) + len(h.Source)
	}
	return int64(n)
}

func (sh *shardRun) skip(sc *scopeStat, r reason) {
	sc.skipped.inc(r)
	sh.skipped.inc(r)
}

// flush hands the batch to a merge goroutine (one transaction, vectors written
// before it commits). Every scope but the current one (all of them at the end of the
// shard) is complete when this batch is. It first waits for the oldest batches in
// flight while Parallelism of them are, or while one writes a target scope of this
// batch.
func (sh *shardRun) flush(ctx context.Context, last bool) error {
	n := len(sh.scopes) - 1
	if last {
		n = len(sh.scopes)
	}
	b := &mergeBatch{items: sh.batch, owner: sh.owner, closed: slices.Clone(sh.scopes[:max(n, 0)]), done: make(chan struct{})}
	sh.scopes = append(sh.scopes[:0], sh.scopes[max(n, 0):]...)
	sh.batch, sh.owner, sh.batchBytes = make([]pgstore.PreparedItem, 0, sh.r.o.BatchSize), make([]*scopeStat, 0, sh.r.o.BatchSize), 0
	if len(b.items) == 0 {
		// Nothing to merge: the closed scopes are finalized after every batch before.
		for len(sh.inflight) > 0 {
			if err := sh.wait(); err != nil {
				return err
			}
		}
		return sh.finalize(b.closed)
	}
	for i, o := range b.owner {
		if i == 0 || o != b.owner[i-1] {
			b.targets = append(b.targets, o.target)
			if o.target != o.source {
				b.renames = append(b.renames, pgstore.ScopeRename{Source: o.source, Target: o.target})
			}
		}
	}
	// Planning the batch here (its items were validated and hashed as they were
	// added), before waiting for batches in flight, overlaps it with the database's
	// work on them.
	prepared := pgstore.PrepareMergeItems(b.items)
	for len(sh.inflight) > 0 && (len(sh.inflight) >= sh.r.o.Parallelism || sh.overlapsInflight(b)) {
		if err := sh.wait(); err != nil {
			return err
		}
	}
	sh.inflight = append(sh.inflight, b)
	if sh.inflightTargets == nil {
		sh.inflightTargets = map[string]int{}
	}
	for _, t := range b.targets {
		sh.inflightTargets[t]++
	}
	go func() {
		defer close(b.done)
		select {
		case sh.r.merging <- struct{}{}:
			defer func() { <-sh.r.merging }()
		case <-ctx.Done():
			b.err = ctx.Err()
			return
		}
		opts := pgstore.MergeOptions{
			Policy: sh.r.o.Conflict, DryRun: sh.r.o.DryRun, Renames: b.renames, RenameSource: sh.r.source,
			BeforeCommit: func(ctx context.Context, res *pgstore.MergeResult) error { return sh.r.writeVectors(ctx, b, res) },
		}
		if sh.r.dryTombs != nil {
			opts.Tombstones = sh.r.dryTombs.lookup(b.targets)
		}
		b.res, b.err = sh.r.o.Target.MergePrepared(ctx, prepared, opts)
		if b.err == nil && sh.r.o.Rehydrate {
			b.err = sh.r.rehydrate(ctx, b)
		}
	}()
	return nil
}

func (sh *shardRun) overlapsInflight(b *mergeBatch) bool {
	for _, t := range b.targets {
		if sh.inflightTargets[t] > 0 {
			return true
		}
	}
	return false
}

// wait waits for the oldest batch in flight and counts it.
func (sh *shardRun) wait() error {
	b := sh.inflight[0]
	sh.inflight = sh.inflight[1:]
	<-b.done
	for _, t := range b.targets {
		if sh.inflightTargets[t]--; sh.inflightTargets[t] == 0 {
			delete(sh.inflightTargets, t)
		}
	}
	if b.err != nil {
		return b.err
	}
	sh.tally(b)
	if err := sh.finalize(b.closed); err != nil {
		return err
	}
	restored := sh.inserted + sh.replaced
	sh.r.report(sh.read-sh.reported.read, restored-sh.reported.restored, sh.skipped.Total()-sh.reported.skipped)
	sh.reported.read, sh.reported.restored, sh.reported.skipped = sh.read, restored, sh.skipped.Total()
	return nil
}

// tally counts a merged batch.
func (sh *shardRun) tally(b *mergeBatch) {
	for i, o := range b.res.Outcomes {
		sc, it := b.owner[i], &b.items[i].Item
		switch o {
		case pgstore.MergeInserted, pgstore.MergeReplaced:
			if o == pgstore.MergeInserted {
				sh.inserted++
			} else {
				sh.replaced++
			}
			sh.byType[it.MemoryType]++
			sc.restored++
		case pgstore.MergeUnchanged:
			sh.unchanged++
			sc.unchanged++
		case pgstore.MergeKept:
			sh.historyRecorded++
			sh.skip(sc, reasonConflict)
		case pgstore.MergeSkipped:
			sh.skip(sc, reasonConflict)
		case pgstore.MergeIDInUse:
			sh.idConflicts++
			sh.skip(sc, reasonConflict)
		case pgstore.MergeIDInOtherScope:
			sh.skip(sc, reasonIDInOtherScope)
		case pgstore.MergeTombstoned:
			sh.skip(sc, reasonTombstoned)
		case pgstore.MergeInvalid:
			sh.skip(sc, reasonInvalid)
			if sh.firstInvalid == "" {
				sh.firstInvalid = b.res.Errs[i].Error()
			}
		}
		if sc.target != sc.source && o != pgstore.MergeInvalid && o != pgstore.MergeTombstoned {
			sh.mapped++
		}
	}
	sh.vectors += b.vectors + b.rehydratedVectors
	sh.embedded += b.embedded + b.rehydratedEmbedded
	sh.rehydrated += b.rehydrated
	sh.vectorsDeleted += b.deleted
	sh.batches++
}

// finalize counts complete scopes and renders their detail.
func (sh *shardRun) finalize(scopes []*scopeStat) error {
	for _, sc := range scopes {
		if sc.restored+sc.unchanged > 0 {
			sh.scopesIn++ // one target scope each, unless merging is allowed
			if sc.target != sc.source {
				sh.mappedScopes++
			}
			if t := sh.r.targets; t != nil {
				sh.r.mu.Lock()
				t[maphash.String(sh.r.seed, sc.target)] = struct{}{}
				sh.r.mu.Unlock()
			}
		}
		if sh.r.detail != nil {
			b, err := json.Marshal(ScopeDetail{Scope: sc.source, MappedTo: sc.target, Restored: sc.restored,
				Unchanged: sc.unchanged, SkippedByReason: sc.skipped})
			if err != nil {
				return err
			}
			sh.detail.Write(b)
			sh.detail.WriteByte('\n')
		}
	}
	return nil
}

// writeVectors brings the index up to date for a batch's written memories; Merge
// calls it before the batch commits. A dry run plans the same work and checks it as
// the index would (vector.ValidateEntries, which every index's Upsert applies), then
// writes nothing: what the real run's index would refuse, the dry run refuses too. It
// runs in the batch's merge goroutine and touches only the batch and read-only runner
// state.
func (r *runner) writeVectors(ctx context.Context, b *mergeBatch, res *pgstore.MergeResult) error {
	b.vectors, b.embedded, b.deleted = 0, 0, 0
	if r.o.Index == nil {
		return nil
	}
	w := r.vectorWork(b, res)
	b.vectors, b.embedded, b.deleted = int64(len(w.entries)), int64(len(w.texts)), int64(len(w.deletes))
	if r.o.DryRun {
		return r.checkVectorWork(w)
	}
	return r.applyVectors(ctx, w)
}

// checkVectorWork validates planned vector work as the index validates an upsert.
// Vectors still to be embedded stand in as a unit vector of the index's dimension:
// the embedder's output is checked when it exists.
func (r *runner) checkVectorWork(w vectorWork) error {
	if len(w.entries) == 0 {
		return nil
	}
	spec := r.o.Index.Spec()
	entries := slices.Clone(w.entries)
	var unit []float32
	for _, i := range w.embedAt {
		if unit == nil {
			unit = make([]float32, spec.Dimension)
			unit[0] = 1
		}
		entries[i].Vector = unit
	}
	if err := vector.ValidateEntries(spec, entries); err != nil {
		return fmt.Errorf("writing vectors: %w", err)
	}
	return nil
}

// vectorWork is what a batch asks of the index.
type vectorWork struct {
	entries []vector.Entry
	texts   []string // to embed, for entries[embedAt[i]]
	embedAt []int
	deletes []string // memory IDs whose vector is stale
}

// finalValues returns, in batch order, the positions of the items whose value a
// memory holds once the batch has merged: for each memory the batch wrote, the last
// item written to it. Several items meet one memory when the mapping merges package
// scopes (AllowMerge) or a package repeats a slot: each is merged in turn (pgstore's
// rounds), and only the value that stays gets its vector, as restoring them one after
// the other would leave it. An index takes one entry per memory in a batch.
func finalValues(res *pgstore.MergeResult, eligible func(i int) bool) []int {
	seen := make(map[string]struct{}, len(res.Outcomes))
	var out []int
	for i := len(res.Outcomes) - 1; i >= 0; i-- {
		if !eligible(i) {
			continue
		}
		if _, dup := seen[res.IDs[i]]; dup {
			continue
		}
		seen[res.IDs[i]] = struct{}{}
		out = append(out, i)
	}
	slices.Reverse(out)
	return out
}

// refusesText reports whether the item's vector would be computed here from a text
// the target's embedder input limit refuses (overflow Refuse): such an item is not
// restored, in the run and the dry run alike. Archived items get no vector; items
// whose package vector is reused send no text.
func (r *runner) refusesText(it *memory.Item) bool {
	l := r.o.EmbedLimit
	if l.MaxInputBytes <= 0 || l.Overflow == embed.Truncate || r.o.Index == nil || r.plan.fallback == Defer || it.ArchivedAt != nil {
		return false
	}
	if r.plan.reuse && usableVector(r.o.Index.Spec(), it.Embedding) {
		return false
	}
	_, _, err := l.Prepare(it.MemoryID, it.EmbeddingText())
	return err != nil
}

// usableVector reports whether a package vector can go into the index as it is: the
// index's dimension and, under COSINE, not the zero vector (which has no direction).
// Items are validated, so its components are finite. Any other vector is computed
// again, as for an item without one.
func usableVector(spec vector.Spec, v []float32) bool {
	return len(v) == spec.Dimension && (spec.Metric != vector.Cosine || vector.Norm(v) > 0)
}

func (r *runner) vectorWork(b *mergeBatch, res *pgstore.MergeResult) vectorWork {
	var w vectorWork
	spec := r.o.Index.Spec()
	for _, i := range finalValues(res, func(i int) bool { return res.Outcomes[i].Written() }) {
		it, o, id := &b.items[i].Item, res.Outcomes[i], res.IDs[i]
		method := r.plan.fallback
		if r.plan.reuse && usableVector(spec, it.Embedding) {
			method = Reuse
		}
		switch {
		case it.ArchivedAt != nil || method == Defer:
			// Archived memories stay out of the index; under Defer the memory's old
			// vector, if any, no longer matches it.
			if o == pgstore.MergeReplaced {
				w.deletes = append(w.deletes, id)
			}
		case method == Reuse:
			w.entries = append(w.entries, vector.Entry{ID: id, Scope: it.Scope, Type: string(it.MemoryType), Vector: it.Embedding, New: o == pgstore.MergeInserted})
		default:
			w.embedAt = append(w.embedAt, len(w.entries))
			w.texts = append(w.texts, it.EmbeddingText())
			w.entries = append(w.entries, vector.Entry{ID: id, Scope: it.Scope, Type: string(it.MemoryType), New: o == pgstore.MergeInserted})
		}
	}
	return w
}

func (r *runner) applyVectors(ctx context.Context, w vectorWork) error {
	ix, emb := r.o.Index, r.o.Embedder
	for i, text := range w.texts {
		// Under Truncate, the embedder sees the text's first MaxInputBytes bytes
		// (refused texts never got here: refusesText).
		prepared, _, err := r.o.EmbedLimit.Prepare(w.entries[w.embedAt[i]].ID, text)
		if err != nil {
			return fmt.Errorf("embedding with %s: %w", emb.Model(), err)
		}
		w.texts[i] = prepared
	}
	for start := 0; start < len(w.texts); start += maxEmbedTexts {
		end := min(start+maxEmbedTexts, len(w.texts))
		vecs, err := emb.Embed(ctx, embed.Passage, w.texts[start:end])
		if err != nil {
			return fmt.Errorf("embedding with %s: %w", emb.Model(), err)
		}
		if len(vecs) != end-start {
			return fmt.Errorf("embedding with %s: got %d vectors for %d texts", emb.Model(), len(vecs), end-start)
		}
		for j, v := range vecs {
			w.entries[w.embedAt[start+j]].Vector = v
		}
	}
	if len(w.entries) > 0 {
		if err := ix.Upsert(ctx, w.entries); err != nil {
			return fmt.Errorf("writing vectors: %w", err)
		}
	}
	if len(w.deletes) > 0 {
		if err := ix.Delete(ctx, w.deletes); err != nil {
			return fmt.Errorf("deleting stale vectors: %w", err)
		}
	}
	return nil
}

// addTo adds the shard's counts to the run's result.
func (sh *shardRun) addTo(res *Result) {
	res.Read += sh.read
	res.Inserted += sh.inserted
	res.Replaced += sh.replaced
	res.Restored += sh.inserted + sh.replaced
	res.Unchanged += sh.unchanged
	res.Skipped.add(sh.skipped)
	res.HistoryRecorded += sh.historyRecorded
	res.IDConflicts += sh.idConflicts
	if res.FirstInvalid == "" {
		res.FirstInvalid = sh.firstInvalid
	}
	res.Mapped += sh.mapped
	res.Scopes += sh.scopesIn
	res.MappedScopes += sh.mappedScopes
	res.Vectors += sh.vectors
	res.Embedded += sh.embedded
	res.VectorsDeleted += sh.vectorsDeleted
	res.Rehydrated += sh.rehydrated
	res.Batches += sh.batches
	for t, n := range sh.byType {
		if res.RestoredByType == nil {
			res.RestoredByType = map[memory.Type]int64{}
		}
		res.RestoredByType[t] += n
	}
}

// detailWriter writes the shards' detail lines in shard order (so in scope order)
// whatever order the shards finish in. Callers hold runner.mu.
type detailWriter struct {
	w       io.Writer
	next    int
	pending map[int][]byte
	err     error
}

func (d *detailWriter) done(idx int, b []byte) error {
	d.pending[idx] = b
	for {
		b, ok := d.pending[d.next]
		if !ok {
			return d.err
		}
		delete(d.pending, d.next)
		d.next++
		if d.err == nil && len(b) > 0 {
			_, d.err = d.w.Write(b)
		}
	}
}

// rehydrate brings the batch's package-archived memories back live once the batch has
// committed (Options.Rehydrate): those the target holds with the package's value are
// un-archived in place, then indexed. Indexing all of them, not only those
// un-archived now, repairs the index when an earlier attempt stopped in between, and
// un-archiving first means an archival run in progress no longer deletes the vectors
// written here. In a dry run it only counts.
func (r *runner) rehydrate(ctx context.Context, b *mergeBatch) error {
	res := b.res
	byScope := map[string][]string{}
	var scopes []string
	// The value each memory holds after the batch decides, as for its vector.
	var eligible []int
	for _, i := range finalValues(res, func(i int) bool { o := res.Outcomes[i]; return o.Written() || o == pgstore.MergeUnchanged }) {
		if b.items[i].Item.ArchivedAt != nil {
			eligible = append(eligible, i)
		}
	}
	for _, i := range eligible {
		sc := b.items[i].Item.Scope
		if _, ok := byScope[sc]; !ok {
			scopes = append(scopes, sc)
		}
		byScope[sc] = append(byScope[sc], res.IDs[i])
	}
	if r.o.DryRun {
		b.rehydrated = int64(len(eligible))
		return nil
	}
	for _, sc := range scopes {
		back, err := r.o.Target.Unarchive(ctx, sc, r.o.Now, byScope[sc]...)
		if err != nil {
			return fmt.Errorf("rehydrating: %w", err)
		}
		b.rehydrated += int64(len(back))
	}
	if r.o.Index == nil || len(eligible) == 0 {
		return nil
	}
	var w vectorWork
	spec := r.o.Index.Spec()
	for _, i := range eligible {
		it := &b.items[i].Item
		e := vector.Entry{ID: res.IDs[i], Scope: it.Scope, Type: string(it.MemoryType)}
		switch {
		case r.plan.reuse && usableVector(spec, it.Embedding):
			e.Vector = it.Embedding
		case r.plan.fallback == Defer:
			continue
		default:
			w.embedAt = append(w.embedAt, len(w.entries))
			w.texts = append(w.texts, it.EmbeddingText())
		}
		w.entries = append(w.entries, e)
	}
	b.rehydratedVectors, b.rehydratedEmbedded = int64(len(w.entries)), int64(len(w.texts))
	if err := r.applyVectors(ctx, w); err != nil {
		return fmt.Errorf("rehydrating: %w", err)
	}
	return nil
}
