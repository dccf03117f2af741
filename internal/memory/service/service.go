// Package service is the memory layer agents use: remember, search, recall and forget,
// end to end across the system of record (PostgreSQL, package pgstore), a vector index
// (package vector: Milvus or the embedded pgindex) and an embedding model (package embed).
//
// PostgreSQL is always written first and is the truth; the vector index is derived
// from it. The rules that keep the two in step:
//
//   - Remember stores the item, then embeds item.EmbeddingText() and upserts the vector
//     under the memory_id the store returned, but only when the store actually changed
//     (Inserted or Superseded). A superseded slot keeps its memory_id, so its vector is
//     replaced and the old embedding never lingers. An Unchanged write costs no
//     embedding call. An archived memory is kept out of the index (its vector is
//     deleted instead).
//   - After writing vectors, Remember reads the rows back and re-indexes any that a
//     concurrent writer changed (or a concurrent Forget deleted) in the meantime, so the
//     last vector written for a memory always matches its stored value, whatever the
//     interleaving of writers in any number of processes.
//   - When the vector write fails after the row was stored, Remember returns the
//     PutResult together with an error wrapping ErrNotIndexed. A plain retry would see
//     Unchanged and skip the index, so the repair is an explicit retry with
//     RememberOptions{Reindex: true}, which re-embeds and re-upserts Unchanged memories
//     too. (The index has no "is this vector present" call to decide that cheaply.)
//   - Search (search.go) fuses two channels, the vector index and the lexical index
//     in PostgreSQL, each confined to one scope, and loads the candidates from
//     PostgreSQL in one query, dropping archived, expired and deleted memories, so a
//     stale vector can hide a result but never surface a forgotten or archived one.
//   - Archival (the archive worker) marks memories archived in PostgreSQL first and
//     deletes their vectors after; Search drops archived memories whatever the index
//     still holds. Rehydrate un-archives in place and then writes the vectors back.
//   - Forget deletes the rows, writes the tombstone and the audit record in one
//     transaction (pgstore.Forget), then deletes the scope from the index and writes
//     back the vectors of memories recorded since (a returning user's, which the
//     tombstone does not cover). If that fails the error wraps ErrVectorsNotDeleted;
//     calling Forget again finishes the job (every step is idempotent).
//   - A write after its scope was forgotten is recorded by the server's clock after
//     the tombstone, so it is stored (new consent), whatever its created_at; only a
//     tombstone ahead of the server's clock refuses it (pgstore.ErrForgotten).
package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/vector"
)

var (
	// ErrNotIndexed is wrapped by Remember and RememberBatch when the memories were
	// stored in PostgreSQL but their vectors could not be written. Retry with
	// RememberOptions{Reindex: true} to repair.
	ErrNotIndexed = errors.New("stored in PostgreSQL but not written to the vector index")
	// ErrVectorsNotDeleted is wrapped by Forget when the scope's rows were deleted and
	// its tombstone written, but its vectors could not be deleted from the index. Call
	// Forget again to finish.
	ErrVectorsNotDeleted = errors.New("memories deleted and tombstone written, but the vectors were not deleted from the index")
	// ErrIndexUnavailable is wrapped by Search, and by any call whose index write
	// failed: the memories in PostgreSQL are fine, the derived index is not answering.
	ErrIndexUnavailable = errors.New("the vector index is not answering")
	// ErrEmbedderUnavailable is wrapped by any call whose embedding call failed.
	ErrEmbedderUnavailable = errors.New("the embedding model is not answering")
)

// Search limits.
const (
	// DefaultSearchK is the number of results Search returns when K is not set.
	DefaultSearchK = 10
	// MaxSearchK is the largest K Search accepts (each channel reads a few times K
	// candidates; LangGraph's SearchRanked pages deeper).
	MaxSearchK = 100
)

// maxSyncRounds bounds how often Remember re-indexes memories that concurrent writers
// keep changing under it before giving up with an error.
const maxSyncRounds = 4

// Memory is the memory layer of one store. It is safe for concurrent use, also with
// other Memory values (in this or other processes) over the same store and index.
type Memory struct {
	store    *pgstore.Store
	index    vector.Index
	embedder embed.Embedder
	limit    embed.Limit
	// dedupSlots bounds the writers holding (or waiting for) a near-duplicate lock:
	// each holds a pool connection for it and needs another for its queries, so
	// unbounded they could take every connection and wait on each other forever.
	dedupSlots chan struct{}
	// txIndex, when set, is index itself, kept in the store's database: batches
	// write their vectors in the transaction that stores their memories.
	txIndex TxIndex
	// beforeLocks, when set (tests), runs after a batch's early near-duplicate
	// search and before it takes its locks.
	beforeLocks func()
}

// TxIndex is an index kept in the store's own PostgreSQL database (the Postgres and
// PGVector engines, whose tables live in the store's schema): it can write vectors
// inside a transaction of the store, so a batch's memories and their vectors commit
// together, with no index work to record, read back and clear.
type TxIndex interface {
	UpsertTx(ctx context.Context, tx pgx.Tx, entries []vector.Entry) error
}

// Options adjust the memory layer.
type Options struct {
	// InputLimit bounds the text of every input sent to the embedder: a memory's
	// EmbeddingText (writes, background indexing, near-duplicate checks) and a search
	// query. Over it, Write and Search refuse with an error wrapping
	// embed.ErrTextTooLong, or embed a truncation, as the limit's Overflow says. The
	// zero Limit is no limit.
	InputLimit embed.Limit
	// TxIndex is the index given to NewWith, when that is a wrapper around an index
	// kept in the store's own database (see TxIndex). An index given to NewWith that
	// implements TxIndex itself is used so without it.
	TxIndex TxIndex
}

// New returns the memory layer over a migrated store, its vector index and the
// embedder that produces the index's vectors. It refuses an embedder whose dimension
// differs from the index's (wrapping vector.ErrDimensionMismatch). It does not contact
// any service.
func New(store *pgstore.Store, index vector.Index, embedder embed.Embedder) (*Memory, error) {
	return NewWith(store, index, embedder, Options{})
}

// NewWith is New with options.
func NewWith(store *pgstore.Store, index vector.Index, embedder embed.Embedder, o Options) (*Memory, error) {
	if err := o.InputLimit.Validate(); err != nil {
		return nil, fmt.Errorf("memory service: %w", err)
	}
	switch {
	case store == nil:
		return nil, errors.New("memory service: store is nil")
	case index == nil:
		return nil, errors.New("memory service: vector index is nil")
	case embedder == nil:
		return nil, errors.New("memory service: embedder is nil")
	}
	if want, got := index.Spec().Dimension, embedder.Dimension(); want != got {
		return nil, fmt.Errorf("memory service: %w", vector.DimensionError("embedder "+embedder.Model(), want, got))
	}
	txIndex := o.TxIndex
	if t, ok := index.(TxIndex); ok && txIndex == nil {
		txIndex = t
	}
	return &Memory{store: store, index: index, embedder: embedder, limit: o.InputLimit, txIndex: txIndex,
		dedupSlots: make(chan struct{}, max(1, store.PoolSize()/2))}, nil
}

// RememberOptions adjust Remember.
type RememberOptions struct {
	// Reindex re-embeds and re-upserts the vector of memories the store reports as
	// Unchanged too. Use it to repair after an error wrapping ErrNotIndexed (and after
	// changing the embedding model); it costs an embedding call per item.
	Reindex bool
}

// Remember stores item (see pgstore.Store.Put for defaults, validation and the
// supersede rules) and brings its vector up to date. See RememberWith.
func (m *Memory) Remember(ctx context.Context, item memory.Item) (pgstore.PutResult, error) {
	return m.RememberWith(ctx, item, RememberOptions{})
}

// RememberWith stores item in PostgreSQL, then, when the outcome is Inserted or
// Superseded (or always, with opts.Reindex), embeds item.EmbeddingText() and upserts
// the vector under the returned memory_id. When the vector write fails, the PutResult
// is returned together with an error wrapping ErrNotIndexed.
func (m *Memory) RememberWith(ctx context.Context, item memory.Item, opts RememberOptions) (pgstore.PutResult, error) {
	res, err := m.store.Put(ctx, item)
	if err != nil {
		return pgstore.PutResult{}, fmt.Errorf("memory service: remember: %w", err)
	}
	if res.Outcome == pgstore.Unchanged && !opts.Reindex {
		return res, nil
	}
	if err := m.sync(ctx, []indexOp{opFor(res.MemoryID, item)}); err != nil {
		return res, fmt.Errorf("memory service: remember %q: %w: %w; retry with RememberOptions{Reindex: true}", res.MemoryID, ErrNotIndexed, err)
	}
	return res, nil
}

// RememberBatch stores items in order and brings their vectors up to date, with one
// embedding call and one index write for the whole batch. See RememberBatchWith.
func (m *Memory) RememberBatch(ctx context.Context, items []memory.Item) ([]pgstore.PutResult, error) {
	return m.RememberBatchWith(ctx, items, RememberOptions{})
}

// RememberBatchWith validates every item first (an invalid item stores nothing of the
// batch), then stores them one by one, in order, as Remember does; results[i] is the
// outcome of items[i]. Items that end up in the same memory (one slot written twice)
// are indexed once, with the last value. The memories whose vectors must change are
// embedded in one Embed call and written in one Upsert.
//
// Storing is not one transaction: when a write fails, the items stored before it are
// still indexed, their results returned, and the error names the failed item.
func (m *Memory) RememberBatchWith(ctx context.Context, items []memory.Item, opts RememberOptions) ([]pgstore.PutResult, error) {
	now := time.Now()
	for i, it := range items {
		it.SetDefaults(now)
		if err := it.Validate(); err != nil {
			return nil, fmt.Errorf("memory service: remember batch: item %d: %w", i, err)
		}
	}
	results := make([]pgstore.PutResult, 0, len(items))
	var ops []indexOp
	pos := map[string]int{} // memory_id -> index in ops
	var putErr error
	for i, it := range items {
		res, err := m.store.Put(ctx, it)
		if err != nil {
			putErr = fmt.Errorf("memory service: remember batch: item %d (stored %d of %d): %w", i, i, len(items), err)
			break
		}
		results = append(results, res)
		if res.Outcome == pgstore.Unchanged && !opts.Reindex {
			continue
		}
		op := opFor(res.MemoryID, it)
		if j, ok := pos[res.MemoryID]; ok {
			ops[j] = op // a later write to the same memory wins
			continue
		}
		pos[res.MemoryID] = len(ops)
		ops = append(ops, op)
	}
	if err := m.sync(ctx, ops); err != nil {
		err = fmt.Errorf("memory service: remember batch: %d memories %w: %w; retry with RememberOptions{Reindex: true}", len(ops), ErrNotIndexed, err)
		return results, errors.Join(putErr, err)
	}
	return results, putErr
}

// indexOp is the state the index must have for one memory: a vector of item, or no
// vector when item is nil (the memory is gone or archived).
type indexOp struct {
	id   string
	item *memory.Item
	// vec, when set, is item's embedding, already computed (the write path embeds
	// before storing, for its near-duplicate check).
	vec []float32
}

// opFor is the index state that matches item once stored under id.
func opFor(id string, item memory.Item) indexOp {
	if item.ArchivedAt != nil {
		return indexOp{id: id}
	}
	item.MemoryID = id
	return indexOp{id: id, item: &item}
}

// sync writes ops to the index, then reads the memories back and repeats for those
// that changed meanwhile. The last vector written for a memory is thus always checked
// against a later read of its row: a concurrent writer's own check comes after its
// store write, so whichever check runs last sees the final value.
func (m *Memory) sync(ctx context.Context, ops []indexOp) error {
	for round := 1; len(ops) > 0; round++ {
		if err := m.apply(ctx, ops); err != nil {
			return err
		}
		changed, err := m.recheck(ctx, ops)
		if err != nil {
			return fmt.Errorf("reading back indexed memories: %w", err)
		}
		if len(changed) > 0 && round == maxSyncRounds {
			ids := make([]string, len(changed))
			for i, op := range changed {
				ids[i] = op.id
			}
			return fmt.Errorf("memories %s kept changing while being indexed", strings.Join(ids, ", "))
		}
		ops = changed
	}
	return nil
}

// apply embeds and upserts the vectors of ops (one Embed call, one Upsert) and
// deletes the vectors of ops without an item.
func (m *Memory) apply(ctx context.Context, ops []indexOp) error {
	var (
		texts   []string
		missing []int // entries still to embed
		entries []vector.Entry
		deletes []string
	)
	for _, op := range ops {
		if op.item == nil {
			deletes = append(deletes, op.id)
			continue
		}
		if op.vec == nil {
			text, err := m.embedText(op.id, *op.item)
			if err != nil {
				return err
			}
			texts = append(texts, text)
			missing = append(missing, len(entries))
		}
		entries = append(entries, vector.Entry{ID: op.id, Scope: op.item.Scope, Type: string(op.item.MemoryType), Vector: op.vec})
	}
	if len(texts) > 0 {
		vecs, err := m.embed(ctx, embed.Passage, texts)
		if err != nil {
			return err
		}
		for i, e := range missing {
			entries[e].Vector = vecs[i]
		}
	}
	if len(entries) > 0 {
		if err := m.index.Upsert(ctx, entries); err != nil {
			return fmt.Errorf("%w: %w", ErrIndexUnavailable, err)
		}
	}
	if len(deletes) > 0 {
		if err := m.index.Delete(ctx, deletes); err != nil {
			return fmt.Errorf("%w: %w", ErrIndexUnavailable, err)
		}
	}
	return nil
}

// embedText is the text the embedder gets for item, stored under id: its
// EmbeddingText within the store's input limit (an error wrapping
// embed.ErrTextTooLong when the limit refuses it).
func (m *Memory) embedText(id string, item memory.Item) (string, error) {
	text, _, err := m.limit.Prepare(id, item.EmbeddingText())
	return text, err
}

// recheck reads the memories of ops and returns the ops that no longer match what is
// stored, with the stored state.
func (m *Memory) recheck(ctx context.Context, ops []indexOp) ([]indexOp, error) {
	ids := make([]string, len(ops))
	for i, op := range ops {
		ids[i] = op.id
	}
	var items []memory.Item
	var err error
	if len(ids) == 1 { // a single write keeps its primary-key lookup
		var it memory.Item
		if it, err = m.store.Get(ctx, ids[0]); err == nil {
			items = append(items, it)
		} else if errors.Is(err, pgstore.ErrNotFound) {
			err = nil
		}
	} else {
		items, err = m.store.GetMany(ctx, ids) // one query, however many
	}
	if err != nil {
		return nil, err
	}
	stored := make(map[string]memory.Item, len(items))
	for _, it := range items {
		stored[it.MemoryID] = it
	}
	var changed []indexOp
	for _, op := range ops {
		now := indexOp{id: op.id} // forgotten meanwhile: no vector
		if cur, ok := stored[op.id]; ok {
			now = opFor(op.id, cur)
		}
		if !sameIndexState(op, now) {
			changed = append(changed, now)
		}
	}
	return changed, nil
}

// sameIndexState reports whether two states give the same index entry.
func sameIndexState(a, b indexOp) bool {
	if a.item == nil || b.item == nil {
		return a.item == nil && b.item == nil
	}
	return a.item.Scope == b.item.Scope && a.item.MemoryType == b.item.MemoryType &&
		a.item.EmbeddingText() == b.item.EmbeddingText()
}

// embed calls the embedder for texts in role and checks that it kept its contract.
func (m *Memory) embed(ctx context.Context, role embed.Role, texts []string) ([][]float32, error) {
	vecs, err := m.embedder.Embed(ctx, role, texts)
	if err != nil {
		return nil, fmt.Errorf("%w: embedding with %s: %w", ErrEmbedderUnavailable, m.embedder.Model(), err)
	}
	if len(vecs) != len(texts) {
		return nil, fmt.Errorf("%w: embedding with %s: got %d vectors for %d texts", ErrEmbedderUnavailable, m.embedder.Model(), len(vecs), len(texts))
	}
	return vecs, nil
}

// load returns the stored memory, or nil when it no longer exists.
func (m *Memory) load(ctx context.Context, id string) (*memory.Item, error) {
	it, err := m.store.Get(ctx, id)
	if errors.Is(err, pgstore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &it, nil
}

// Recall ranks the live memories of a scope by effective score, without a query
// text; it is pgstore.Store.Recall.
func (m *Memory) Recall(ctx context.Context, q pgstore.RecallQuery) ([]pgstore.Scored, error) {
	res, err := m.store.Recall(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("memory service: %w", err)
	}
	return res, nil
}

// Rehydrate brings archived memories of scope back in place: pgstore.Store.Unarchive
// clears their archived_at and restarts their age (updated_at := now; the pending
// vector deletions of the archival no longer apply to them), then their
// vectors are embedded and upserted as Remember does, with the read-back check. Until
// then Search and Recall leave them out, as every archived memory.
//
// IDs that are already live memories of scope are re-indexed too, so that calling
// Rehydrate again after an error wrapping ErrNotIndexed repairs the index. IDs that
// are not memories of scope are ignored. It returns the memories that are live after
// the call (rehydrated now or before), in ID order.
func (m *Memory) Rehydrate(ctx context.Context, scope string, ids []string) ([]memory.Item, error) {
	items, err := m.store.Unarchive(ctx, scope, time.Now(), ids...)
	if err != nil {
		return nil, fmt.Errorf("memory service: rehydrate: %w", err)
	}
	done := make(map[string]bool, len(items))
	for _, it := range items {
		done[it.MemoryID] = true
	}
	for _, id := range ids {
		if done[id] {
			continue
		}
		done[id] = true
		it, err := m.load(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("memory service: rehydrate: %w", err)
		}
		if it != nil && it.Scope == scope && it.ArchivedAt == nil {
			items = append(items, *it)
		}
	}
	slices.SortFunc(items, func(a, b memory.Item) int { return strings.Compare(a.MemoryID, b.MemoryID) })
	ops := make([]indexOp, len(items))
	for i, it := range items {
		ops[i] = opFor(it.MemoryID, it)
	}
	if err := m.sync(ctx, ops); err != nil {
		return items, fmt.Errorf("memory service: rehydrate: %d memories %w: %w; call Rehydrate again", len(ops), ErrNotIndexed, err)
	}
	return items, nil
}

// Forget deletes every memory of scope, writes its tombstone and an audit record (one
// transaction, see pgstore.Store.Forget), then deletes the scope's vectors from the
// index. When the index delete fails, the result of the first step is returned with
// an error wrapping ErrVectorsNotDeleted: the scope is forgotten in the system of
// record and Search no longer returns its memories, but vectors remain; calling Forget
// again finishes the job (it deletes nothing more, refreshes the tombstone and writes
// another audit record).
func (m *Memory) Forget(ctx context.Context, scope, reason, actor string) (pgstore.ForgetResult, error) {
	res, err := m.store.Forget(ctx, scope, reason, actor)
	if err != nil {
		return pgstore.ForgetResult{}, fmt.Errorf("memory service: %w", err)
	}
	if err := m.index.DeleteScope(ctx, scope); err != nil {
		return res, fmt.Errorf("memory service: forget %q: %w: %w; call Forget again to finish", scope, ErrVectorsNotDeleted, err)
	}
	// A memory written after the forget (a user who came back) may have had its vector
	// written before the scope's were deleted: put back the vectors of what the scope
	// holds now, almost always nothing.
	var ops []indexOp
	err = m.store.Export(ctx, pgstore.ExportFilter{Scopes: []string{scope}}, func(it memory.Item) error {
		ops = append(ops, opFor(it.MemoryID, it))
		return nil
	})
	if err == nil {
		err = m.sync(ctx, ops)
	}
	if err != nil {
		return res, fmt.Errorf("memory service: forget %q: re-indexing the memories written since: %w: %w; call Forget again to finish", scope, ErrVectorsNotDeleted, err)
	}
	return res, nil
}
