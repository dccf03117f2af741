package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/amemory/memory-operator/internal/memory"
)

// Batch writes. A batch of new memories (the gateway's batch endpoint, through
// service.Memory.Write) is written in one transaction and a handful of round trips,
// whatever its size, instead of a transaction of its own per item:
//
//	BeginBatch: BEGIN; then one pipeline: the forget lock shared, the tombstones of
//	  every scope of the batch, and the stored memories the items could meet (by
//	  memory_id, by (scope, key), and key-less by (scope, content hash)).
//	Live: which near-duplicates the caller found are still live memories.
//	Commit: one pipeline: a multi-row INSERT of the new memories, a mark per scope
//	  that its postings are owed, their index work, and one UPDATE per reinforcement
//	  in item order; then COMMIT. CommitIndexed writes the vectors of an index kept
//	  in the store's own database in the transaction instead of recording index work.
//	WriteTerms: the postings, in a transaction of their own, which also clears the
//	  batch's marks.
//
// The postings are most of a batch's writing (some twelve rows a memory, each an
// entry of memory_terms' primary key), and nothing the batch's caller holds its
// near-duplicate locks for depends on them: the next writer's check reads the
// memories and the vector index.
// So Commit leaves them owed, as a restore does (lexical.go: a search of a marked
// scope makes them first), and the caller writes them after letting go of its locks.
// When WriteTerms fails, or the process dies before it, the marks stay and the next
// search of each scope catches it up: a memory is never without postings once a
// search can see it.
//
// The caller decides each item's outcome (Insert, Unchanged, Reinforce) from what
// BeginBatch found, as Put would decide it item by item in order. Only items that
// meet no stored memory by memory_id or (scope, key) slot can be inserted this way;
// the caller writes a batch holding any other item item by item instead.
//
// A concurrent writer may insert what the batch inserts (the same content, slot or
// memory_id) between BeginBatch and Commit; the INSERT then skips that row, and
// Commit rolls the whole transaction back with ErrBatchRaced, so the caller begins
// again and finds the other's row. A reinforced memory deleted or archived meanwhile
// does the same. Nothing of a batch is stored unless all of it is.

// ErrBatchRaced is returned by BatchTx.Commit when a concurrent writer changed what
// the batch was planned against; the transaction is rolled back and nothing of it
// is stored. Begin the batch again.
var ErrBatchRaced = errors.New("pgstore: a concurrent write changed what the batch was planned against; begin it again")

// BatchOpKind is what Commit does with one item.
type BatchOpKind int

// Batch operations.
const (
	// BatchUnchanged: nothing is written (the result names Target).
	BatchUnchanged BatchOpKind = iota
	// BatchInsert: the item is stored as a new memory under its memory_id.
	BatchInsert
	// BatchReinforce: Target is reinforced with the item (see ScopeLock.Reinforce).
	BatchReinforce
)

// BatchOp is the outcome the caller chose for one item.
type BatchOp struct {
	Kind BatchOpKind
	// Target is the memory an Unchanged or Reinforce names.
	Target string
	// Boost and At are a reinforcement's base score boost and time.
	Boost float64
	At    time.Time
}

// BatchTx is one batch write's transaction, from BeginBatch to Commit or Rollback.
type BatchTx struct {
	s     *Store
	tx    pgx.Tx
	items []memory.Item // normalised as Put normalises
	// hashes[i] is items[i]'s content hash; serverDated[i]: items[i] came undated.
	hashes      [][]byte
	serverDated []bool

	byHash map[scopeHash]string // stored key-less memories by (scope, content hash)
	ids    map[string]bool      // stored memory_ids among the items'
	slots  map[scopeHash]bool   // stored (scope, key) slots among the items'
	// readAt is, per scope, the earliest RecordedAt its items came with (see Put).
	readAt map[string]time.Time

	// After Commit: the postings owed for the inserted memories, and the token of
	// the marks that say so.
	docs  []termDoc
	token int64
}

// scopeHash is a (scope, content hash) or (scope, key) pair.
type scopeHash struct{ scope, value string }

// BeginBatch begins the transaction of a batch of items, on lock's connection (the
// near-duplicate locks of the batch's groups, held across the batch) or, when lock
// is nil, on one of the pool's. Each item is normalised and validated as Put does
// (an item that Put refuses refuses the batch, its index in the error); a scope
// whose tombstone lies ahead of the server's clock refuses it with ErrForgotten.
// On error nothing is left open.
func (s *Store) BeginBatch(ctx context.Context, lock *ScopeLock, items []memory.Item) (*BatchTx, error) {
	now := time.Now()
	b := &BatchTx{s: s, items: make([]memory.Item, len(items)), hashes: make([][]byte, len(items)), serverDated: make([]bool, len(items)),
		byHash: map[scopeHash]string{}, ids: map[string]bool{}, slots: map[scopeHash]bool{}, readAt: map[string]time.Time{}}
	var (
		ids, hashScopes, keyScopes, keys, scopes []string
		hashes                                   [][]byte
		seenScope                                = map[string]bool{}
	)
	for i, it := range items {
		b.serverDated[i] = it.CreatedAt.IsZero() && it.UpdatedAt.IsZero()
		it.SetDefaults(now)
		normalizeTimes(&it)
		if r := it.RecordedAt; !r.IsZero() && (b.readAt[it.Scope].IsZero() || r.Before(b.readAt[it.Scope])) {
			b.readAt[it.Scope] = r // as Put: a copy of content read then
		}
		it.RecordedAt = time.Time{} // the server's to set
		if err := it.Validate(); err != nil {
			return nil, fmt.Errorf("pgstore: batch item %d (%q): %w", i, it.MemoryID, err)
		}
		if err := it.CheckNotFuture(now); err != nil {
			return nil, fmt.Errorf("pgstore: batch item %d (%q): %w", i, it.MemoryID, err)
		}
		hash, err := it.ContentHash()
		if err != nil {
			return nil, fmt.Errorf("pgstore: batch item %d (%q): %w", i, it.MemoryID, err)
		}
		b.items[i], b.hashes[i] = it, hash
		ids = append(ids, it.MemoryID)
		if it.Key == "" {
			hashScopes, hashes = append(hashScopes, it.Scope), append(hashes, hash)
		} else {
			keyScopes, keys = append(keyScopes, it.Scope), append(keys, it.Key)
		}
		if !seenScope[it.Scope] {
			seenScope[it.Scope] = true
			scopes = append(scopes, it.Scope)
		}
	}
	var db beginner = s.pool
	if lock != nil {
		db = lock.conn
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: batch: %w", err)
	}
	b.tx = tx
	if err := b.begin(ctx, scopes, ids, hashScopes, hashes, keyScopes, keys); err != nil {
		b.Rollback()
		if errors.Is(err, ErrForgotten) {
			return nil, err
		}
		return nil, fmt.Errorf("pgstore: batch: %w", err)
	}
	return b, nil
}

func (b *BatchTx) begin(ctx context.Context, scopes, ids, hashScopes []string, hashes [][]byte, keyScopes, keys []string) error {
	s := b.s
	pl := &pgx.Batch{}
	// Each statement of a pipeline takes its snapshot when it starts, so the reads
	// below see every tombstone a forget committed before the forget lock was ours.
	//
	// The stored memories are looked up one item at a time (LATERAL, LIMIT 1: both
	// slots are unique, and the limit keeps the planner from flattening it into a
	// join). As a join, a store filling up faster than autovacuum analyzes it was
	// planned as a hash join over every stored memory: 55 ms a batch at 90,000
	// memories, growing with the store, while the lookups cost 4 ms.
	pl.Queue(`SELECT pg_advisory_xact_lock_shared($1)`, s.forgetLock())
	pl.Queue(`SELECT clock_timestamp(), u.scope, (SELECT max(forgotten_at) FROM `+s.t.tombstones+` t WHERE t.scope = u.scope)
		FROM unnest($1::text[]) AS u(scope)`, scopes)
	pl.Queue(`SELECT m.memory_id, m.scope, m.key, m.content_hash FROM `+s.t.memories+` m WHERE m.memory_id = ANY($1::text[])
		UNION ALL
		SELECT m.* FROM unnest($2::text[], $3::bytea[]) AS u(scope, hash) CROSS JOIN LATERAL (
			SELECT m.memory_id, m.scope, m.key, m.content_hash FROM `+s.t.memories+` m
			WHERE m.scope = u.scope AND m.content_hash = u.hash AND m.key IS NULL LIMIT 1) m
		UNION ALL
		SELECT m.* FROM unnest($4::text[], $5::text[]) AS u(scope, key) CROSS JOIN LATERAL (
			SELECT m.memory_id, m.scope, m.key, m.content_hash FROM `+s.t.memories+` m
			WHERE m.scope = u.scope AND m.key = u.key LIMIT 1) m`, ids, hashScopes, hashes, keyScopes, keys)
	res := b.tx.SendBatch(ctx, pl)
	defer res.Close()
	if _, err := res.Exec(); err != nil {
		return err
	}
	rows, err := res.Query()
	if err != nil {
		return err
	}
	var forgotten error
	for rows.Next() {
		var (
			now   time.Time
			scope string
			at    *time.Time
		)
		if err := rows.Scan(&now, &scope, &at); err != nil {
			rows.Close()
			return err
		}
		if forgotten == nil {
			forgotten = refusedByTombstone(scope, now, at, b.readAt[scope])
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if forgotten != nil {
		return forgotten
	}
	if rows, err = res.Query(); err != nil {
		return err
	}
	for rows.Next() {
		var (
			id, scope string
			key       *string
			hash      []byte
		)
		if err := rows.Scan(&id, &scope, &key, &hash); err != nil {
			rows.Close()
			return err
		}
		b.ids[id] = true
		if key == nil {
			b.byHash[scopeHash{scope, string(hash)}] = id
		} else {
			b.slots[scopeHash{scope, *key}] = true
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	return res.Close()
}

// Duplicate returns the stored key-less memory with items[i]'s scope and exact content
// (an exact duplicate: Put's Unchanged), when there is one and items[i] is key-less.
func (b *BatchTx) Duplicate(i int) (string, bool) {
	if b.items[i].Key != "" {
		return "", false
	}
	id, ok := b.byHash[scopeHash{b.items[i].Scope, string(b.hashes[i])}]
	return id, ok
}

// Fresh reports whether items[i] meets no stored memory by its memory_id, nor (when
// it has a key) by its (scope, key) slot: storing it inserts it.
func (b *BatchTx) Fresh(i int) bool {
	it := b.items[i]
	return !b.ids[it.MemoryID] && (it.Key == "" || !b.slots[scopeHash{it.Scope, it.Key}])
}

// ContentKey is a key equal for two items of the batch exactly when Put takes them
// for the same key-less content of the same scope.
func (b *BatchTx) ContentKey(i int) string {
	return b.items[i].Scope + "\x00" + string(b.hashes[i])
}

// Live returns which of ids name stored memories that are not archived (those a
// reinforcement may fold into).
func (b *BatchTx) Live(ctx context.Context, ids []string) (map[string]bool, error) {
	live := map[string]bool{}
	if len(ids) == 0 {
		return live, nil
	}
	rows, err := b.tx.Query(ctx, `SELECT memory_id FROM `+b.s.t.memories+` WHERE memory_id = ANY($1::text[]) AND archived_at IS NULL`, ids)
	if err != nil {
		return nil, fmt.Errorf("pgstore: batch: %w", err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("pgstore: batch: %w", err)
	}
	for _, id := range got {
		live[id] = true
	}
	return live, nil
}

// Commit carries out ops (ops[i] for items[i]) and commits: the inserted memories
// with their postings and index work, then the reinforcements in item order. It
// returns each item's result (Pending set for inserted ones; Reinforce and Unchanged
// items name their Target, with Outcome Unchanged, the caller's to restate). On
// ErrBatchRaced, or any error, the transaction is rolled back and nothing is stored.
func (b *BatchTx) Commit(ctx context.Context, ops []BatchOp) ([]PutResult, error) {
	return b.CommitIndexed(ctx, ops, nil)
}

// IndexInTx writes the vectors of a batch's inserted items (their indices in the
// batch) inside the batch's transaction: an index kept in the store's own database.
type IndexInTx func(ctx context.Context, tx pgx.Tx, inserted []int) error

// CommitIndexed is Commit with the inserted memories' vectors written by index in the
// same transaction, before it commits: a memory and its vector are stored together
// or not at all, so no index work is recorded for them (their Pending is 0). With a
// nil index it is Commit.
func (b *BatchTx) CommitIndexed(ctx context.Context, ops []BatchOp, index IndexInTx) ([]PutResult, error) {
	defer b.Rollback() // a no-op once committed
	results, err := b.commit(ctx, ops, index)
	if err != nil {
		if errors.Is(err, ErrBatchRaced) {
			return nil, err
		}
		return nil, fmt.Errorf("pgstore: batch: %w", err)
	}
	return results, nil
}

func (b *BatchTx) commit(ctx context.Context, ops []BatchOp, index IndexInTx) ([]PutResult, error) {
	if len(ops) != len(b.items) {
		return nil, fmt.Errorf("%d operations for %d items", len(ops), len(b.items))
	}
	s := b.s
	results := make([]PutResult, len(ops))
	var (
		ids, types, scopes, contents, sources []string
		keys                                  []*string
		scores                                []float64
		created, updated, expires, archived   []*time.Time
		histories                             []string
		hashes                                [][]byte
		docs                                  []termDoc
		reinforce                             [][]any
	)
	for i, op := range ops {
		it := b.items[i]
		switch op.Kind {
		case BatchUnchanged:
			results[i] = PutResult{MemoryID: op.Target, Outcome: Unchanged}
		case BatchReinforce:
			args, err := reinforceArgs(op.Target, it, op.Boost, op.At)
			if err != nil {
				return nil, err
			}
			reinforce = append(reinforce, args)
			results[i] = PutResult{MemoryID: op.Target, Outcome: Unchanged}
		case BatchInsert:
			history, err := historyJSON(it.History)
			if err != nil {
				return nil, err
			}
			var c, u *time.Time
			if !b.serverDated[i] {
				c, u = &it.CreatedAt, &it.UpdatedAt
			}
			var key *string
			if it.Key != "" {
				key = &it.Key
			}
			ids, types, scopes, keys = append(ids, it.MemoryID), append(types, string(it.MemoryType)), append(scopes, it.Scope), append(keys, key)
			contents, sources, scores = append(contents, string(it.Content)), append(sources, it.Source), append(scores, it.BaseScore)
			created, updated, expires, archived = append(created, c), append(updated, u), append(expires, it.ExpiresAt), append(archived, it.ArchivedAt)
			histories, hashes = append(histories, string(history)), append(hashes, b.hashes[i])
			docs = append(docs, makeTermDoc(it.MemoryID, &it, b.hashes[i]))
			results[i] = PutResult{MemoryID: it.MemoryID, Outcome: Inserted}
		default:
			return nil, fmt.Errorf("item %d: unknown batch operation %d", i, op.Kind)
		}
	}
	pl := &pgx.Batch{}
	if len(ids) > 0 {
		pl.Queue(`INSERT INTO `+s.t.memories+` (`+writeCols+`, content_hash)
			SELECT u.memory_id, u.memory_type, u.scope, u.key, u.content::jsonb, u.source, u.base_score,
				coalesce(u.created_at, statement_timestamp()), coalesce(u.updated_at, statement_timestamp()),
				u.expires_at, u.archived_at, u.history::jsonb, u.content_hash
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::float8[],
				$8::timestamptz[], $9::timestamptz[], $10::timestamptz[], $11::timestamptz[], $12::text[], $13::bytea[])
				AS u(memory_id, memory_type, scope, key, content, source, base_score, created_at, updated_at, expires_at, archived_at, history, content_hash)`,
			ids, types, scopes, keys, contents, sources, scores, created, updated, expires, archived, histories, hashes)
		// The postings are owed (term_pending, under this batch's token) rather than
		// written here: WriteTerms writes them after the caller has let go of its
		// near-duplicate locks (see the top of the file).
		b.token = batchToken()
		b.docs = docs
		pl.Queue(`INSERT INTO `+s.t.termPending+` (scope, batch) SELECT DISTINCT unnest($1::text[]), $2::bigint`, scopes, b.token)
		if index == nil {
			pl.Queue(`INSERT INTO `+s.t.indexPending+` (memory_id) SELECT unnest($1::text[])
				ON CONFLICT (memory_id) DO UPDATE SET seq = DEFAULT, enqueued_at = now(), attempts = 0,
					next_attempt_at = now(), last_error = ''
				RETURNING memory_id, seq`, ids)
		}
	}
	for _, args := range reinforce {
		pl.Queue(s.reinforceSQL(), args...)
	}
	if pl.Len() > 0 {
		res := b.tx.SendBatch(ctx, pl)
		err := readCommit(res, len(ids), index == nil, len(reinforce), results)
		if cerr := res.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
	}
	if index != nil && len(ids) > 0 {
		var inserted []int
		for i, op := range ops {
			if op.Kind == BatchInsert {
				inserted = append(inserted, i)
			}
		}
		if err := index(ctx, b.tx, inserted); err != nil {
			return nil, err
		}
	}
	if err := b.tx.Commit(ctx); err != nil {
		return nil, err
	}
	return results, nil
}

// readCommit reads Commit's pipeline: the insert of inserts memories (a unique
// violation is a race), the postings owed, the index work's sequence numbers (into
// results) when queued, and reinforcements updates of one row each (none is a race).
func readCommit(res pgx.BatchResults, inserts int, queued bool, reinforcements int, results []PutResult) error {
	if inserts > 0 {
		// A plain INSERT: BeginBatch found none of the rows' memory_ids, slots or
		// contents stored, so a unique violation is a concurrent writer's row (the
		// race; the transaction is rolled back either way). ON CONFLICT DO NOTHING
		// said the same at the cost of a speculative insertion per row: 57 ms against
		// 48 ms for a batch of 1,000 in the gateway benchmark.
		if _, err := res.Exec(); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "23505" { // unique_violation
				return ErrBatchRaced
			}
			return err
		}
		if _, err := res.Exec(); err != nil {
			return fmt.Errorf("marking postings owed: %w", err)
		}
		if queued {
			if err := readSeqs(res, inserts, results); err != nil {
				return err
			}
		}
	}
	for range reinforcements {
		tag, err := res.Exec()
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return ErrBatchRaced // deleted or archived since Live said otherwise
		}
	}
	return nil
}

// readSeqs reads the index work's sequence numbers into the inserted results.
func readSeqs(res pgx.BatchResults, inserts int, results []PutResult) error {
	rows, err := res.Query()
	if err != nil {
		return err
	}
	seqs := make(map[string]int64, inserts)
	var (
		id  string
		seq int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &seq}, func() error {
		seqs[id] = seq
		return nil
	}); err != nil {
		return err
	}
	for i := range results {
		if results[i].Outcome == Inserted {
			results[i].Pending = seqs[results[i].MemoryID]
		}
	}
	return nil
}

// Rollback ends the transaction without storing anything; after Commit it does
// nothing.
func (b *BatchTx) Rollback() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = b.tx.Rollback(ctx)
}

// WriteTerms writes the postings a committed batch owes (see the top of the file),
// in a transaction of its own on one of the pool's connections, and clears the
// batch's marks with them. Call it after Commit, once the near-duplicate locks are
// let go. On error the marks stay, and each scope's next search makes what is
// owed; the batch itself is stored either way.
//
// Only memories that still hold the content the batch stored get postings: the
// rows are read FOR KEY SHARE, so a delete (whose trigger drops postings) or a
// supersede (Put reads the row FOR UPDATE, then writes its own postings) waits for
// this transaction or has happened before it. A restore's overwrite, which takes
// neither lock, leaves a mark of its own, and the catch-up compares content
// hashes. The terms locks, shared, keep a catch-up of the same scopes out meanwhile.
func (b *BatchTx) WriteTerms(ctx context.Context) error {
	if len(b.docs) == 0 {
		return nil
	}
	s := b.s
	ids := make([]string, len(b.docs))
	var keys []int64
	for i, d := range b.docs {
		ids[i] = d.id
		keys = append(keys, s.termsLock(d.scope))
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT count(pg_advisory_xact_lock_shared(k)) FROM unnest($1::bigint[]) AS k`, keys); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT memory_id, content_hash FROM `+s.t.memories+` WHERE memory_id = ANY($1::text[]) FOR KEY SHARE`, ids)
		if err != nil {
			return err
		}
		current := make(map[string][]byte, len(ids))
		var (
			id   string
			hash []byte
		)
		_, err = pgx.ForEachRow(rows, []any{&id, &hash}, func() error {
			current[id] = slices.Clone(hash)
			return nil
		})
		if err != nil {
			return err
		}
		docs := slices.DeleteFunc(slices.Clone(b.docs), func(d termDoc) bool {
			h, ok := current[d.id]
			return !ok || string(h) != string(d.hash)
		})
		if err := s.writeTermDocs(ctx, tx, docs); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM `+s.t.termPending+` WHERE batch = $1`, b.token)
		return err
	})
	if err != nil {
		return fmt.Errorf("pgstore: batch: writing postings: %w", err)
	}
	b.docs = nil
	return nil
}

// batchToken is a random token naming one batch's marks in term_pending.
func batchToken() int64 {
	var buf [8]byte
	_, _ = rand.Read(buf[:]) // crypto/rand.Read never fails
	return int64(binary.BigEndian.Uint64(buf[:]) >> 1)
}
