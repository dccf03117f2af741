package pgstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/memory"
)

// Pending index work (table index_pending, migration 5) is how the gateway keeps its
// promise that an acknowledged write becomes searchable: the transaction that changes
// a memory also records that the memory's vector must be brought in line with its
// row. The writer indexes right after committing and then removes the record
// (IndexDone); if it cannot (the index is down, the process dies), the record stays
// and a background drainer (DuePending) finishes the work. The work is idempotent:
// "make the index match the row", so doing it twice, or after a later change, is
// harmless.

// PendingRef names one recorded piece of index work: a memory and the sequence number
// of its latest record. IndexDone removes a record only when the number still
// matches, so work recorded by a later change of the same memory is never dropped by
// the writer of an earlier one.
type PendingRef struct {
	MemoryID string
	Seq      int64
}

// enqueue records index work for id in tx, replacing any older record of id.
func (s *Store) enqueue(ctx context.Context, tx pgx.Tx, id string) (int64, error) {
	var seq int64
	err := tx.QueryRow(ctx, `INSERT INTO `+s.t.indexPending+` (memory_id) VALUES ($1)
		ON CONFLICT (memory_id) DO UPDATE SET seq = DEFAULT, enqueued_at = now(), attempts = 0,
			next_attempt_at = now(), last_error = ''
		RETURNING seq`, id).Scan(&seq)
	return seq, err
}

// PutQueued is Put that also records the index work a changed row owes, in the same
// transaction (result.Pending; nothing for an Unchanged write).
func (s *Store) PutQueued(ctx context.Context, item memory.Item) (PutResult, error) {
	return s.putVia(ctx, s.pool, item, true)
}

// DeleteQueued deletes one memory, records the index work that removes its vector and
// an audit record (action "delete", never content), in one transaction. It returns
// the deleted memory, or ErrNotFound.
func (s *Store) DeleteQueued(ctx context.Context, id, actor string) (memory.Item, PendingRef, error) {
	var (
		it  memory.Item
		ref = PendingRef{MemoryID: id}
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		it, err = scanItem(tx.QueryRow(ctx, `DELETE FROM `+s.t.memories+` WHERE memory_id = $1 RETURNING `+memoryCols, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %q", ErrNotFound, id)
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM `+s.t.vectors+` WHERE memory_id = $1`, id); err != nil {
			return err
		}
		if ref.Seq, err = s.enqueue(ctx, tx, id); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO `+s.t.auditLog+` (action, scope, detail) VALUES ('delete', $1, jsonb_build_object('memory_id', $2::text, 'actor', $3::text))`,
			it.Scope, id, actor)
		return err
	})
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return memory.Item{}, ref, err
		}
		return memory.Item{}, ref, fmt.Errorf("pgstore: delete %q: %w", id, err)
	}
	return it, ref, nil
}

// IndexDone removes the records of refs whose sequence number still matches.
func (s *Store) IndexDone(ctx context.Context, refs []PendingRef) error {
	if len(refs) == 0 {
		return nil
	}
	ids, seqs := splitRefs(refs)
	_, err := s.pool.Exec(ctx, `DELETE FROM `+s.t.indexPending+` p WHERE `+refsMatch, pgx.QueryExecModeExec, ids, seqs)
	if err != nil {
		return fmt.Errorf("pgstore: index done: %w", err)
	}
	return nil
}

// refsMatch is the condition on index_pending p of the records named by refs ($1 the
// memory_ids, $2 the sequence numbers; splitRefs). A sequence number comes from the
// identity column and is never given to two records, so the record holding one of $2
// is the one that ref names, and comparing the two lists apart is comparing the
// pairs.
//
// Why not join the pairs (USING unnest($1, $2)): index_pending is a queue, empty
// whenever autovacuum looks at it, so the planner takes it for one row and loops
// over the array for each of its rows; a batch of 1,000 then compared a million
// pairs (420 ms a batch, most of a gateway batch write). Here the primary key finds
// the memory_ids, and the statements run unprepared (pgx.QueryExecModeExec) so that
// the server plans them with the arrays' values: a long list in a filter is then
// looked up in a hash table, whatever the plan. Linear in the refs either way.
const refsMatch = `p.memory_id = ANY($1::text[]) AND p.seq = ANY($2::bigint[])`

// RetryPolicy decides when failed index work is tried again, and when it is parked.
type RetryPolicy struct {
	// Backoff is the wait before the next attempt after attempts failed ones.
	Backoff func(attempts int) time.Duration
	// MaxAttempts: work that failed this many times is parked; 0 means never.
	MaxAttempts int
}

// IndexFailed records a failed attempt at refs (those whose sequence number still
// matches): attempts += 1 and the error kept for inspection (operators see why; it
// never holds content). Work that reached p.MaxAttempts, or all of refs when
// permanent (it can never succeed as it is), is parked; the rest is due again after
// p.Backoff(attempts). It returns how many were parked.
func (s *Store) IndexFailed(ctx context.Context, refs []PendingRef, cause string, p RetryPolicy, permanent bool) (int, error) {
	if len(refs) == 0 {
		return 0, nil
	}
	ids, seqs := splitRefs(refs)
	rows, err := s.pool.Query(ctx, `SELECT p.memory_id, p.attempts FROM `+s.t.indexPending+` p WHERE `+refsMatch,
		pgx.QueryExecModeExec, ids, seqs)
	if err != nil {
		return 0, fmt.Errorf("pgstore: index failed: %w", err)
	}
	// The records to update, by their next delay in seconds (-1: park): attempts
	// take few distinct values, so a handful of statements update them all.
	var (
		byDelay = map[float64][]string{}
		parked  int
	)
	for rows.Next() {
		var id string
		var attempts int
		if err := rows.Scan(&id, &attempts); err != nil {
			rows.Close()
			return 0, fmt.Errorf("pgstore: index failed: %w", err)
		}
		if permanent || (p.MaxAttempts > 0 && attempts+1 >= p.MaxAttempts) {
			byDelay[-1] = append(byDelay[-1], id)
			parked++
			continue
		}
		d := max(0, p.Backoff(attempts+1).Seconds())
		byDelay[d] = append(byDelay[d], id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("pgstore: index failed: %w", err)
	}
	// One statement per delay, each on the primary key (see refsMatch for why not a
	// join with the list); the records were read above, so the ids are enough.
	for delay, ids := range byDelay {
		_, err = s.pool.Exec(ctx, `UPDATE `+s.t.indexPending+` p SET attempts = p.attempts + 1,
				next_attempt_at = CASE WHEN $2::float8 < 0 THEN 'infinity'::timestamptz ELSE now() + make_interval(secs => $2::float8) END,
				last_error = left($3, 500)
			WHERE p.memory_id = ANY($1::text[])`, pgx.QueryExecModeExec, ids, delay, cause)
		if err != nil {
			return 0, fmt.Errorf("pgstore: index failed: %w", err)
		}
	}
	return parked, nil
}

// DuePending returns up to limit records due for another attempt whose change is at
// least minAge old (younger ones are still being indexed by their writer), oldest
// first.
func (s *Store) DuePending(ctx context.Context, minAge time.Duration, limit int) ([]PendingRef, error) {
	rows, err := s.pool.Query(ctx, `SELECT memory_id, seq FROM `+s.t.indexPending+`
		WHERE next_attempt_at <= now() AND enqueued_at <= now() - make_interval(secs => $1)
		ORDER BY next_attempt_at, memory_id LIMIT $2`, minAge.Seconds(), limit)
	if err != nil {
		return nil, fmt.Errorf("pgstore: due pending: %w", err)
	}
	refs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PendingRef, error) {
		var p PendingRef
		return p, r.Scan(&p.MemoryID, &p.Seq)
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: due pending: %w", err)
	}
	return refs, nil
}

// PendingStats is the size of the pending index work.
type PendingStats struct {
	// Count is the work still being tried (parked work not included).
	Count int64
	// Oldest is when the oldest of it was recorded (zero when there is none).
	Oldest time.Time
	// Parked is the work that failed for good and waits for RetryParked.
	Parked int64
}

// Pending reports the pending index work.
func (s *Store) Pending(ctx context.Context) (PendingStats, error) {
	var st PendingStats
	var oldest *time.Time
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE NOT parked), min(enqueued_at) FILTER (WHERE NOT parked),
			count(*) FILTER (WHERE parked)
		FROM (SELECT enqueued_at, next_attempt_at = 'infinity' AS parked FROM `+s.t.indexPending+`) p`).Scan(&st.Count, &oldest, &st.Parked); err != nil {
		return st, fmt.Errorf("pgstore: pending: %w", err)
	}
	if oldest != nil {
		st.Oldest = oldest.UTC()
	}
	return st, nil
}

// PendingQuery selects pending index work.
type PendingQuery struct {
	// Scope, when set, keeps the work of that scope's memories; "" keeps all of it,
	// including the work of memories no longer stored (their vectors' deletion).
	Scope string
	// ParkedOnly keeps parked work only.
	ParkedOnly bool
	// After is a cursor: the memory_id of the last entry of the previous page.
	After string
	// Limit is the page size, 1..MaxListLimit.
	Limit int
}

// PendingEntry is one memory's pending index work.
type PendingEntry struct {
	MemoryID string
	// Scope is the memory's scope ("" when the memory is no longer stored).
	Scope      string
	EnqueuedAt time.Time
	// Attempts is how many attempts failed; LastError says why the last one did.
	Attempts  int
	LastError string
	// Parked: failed for good, never tried again until RetryParked.
	Parked bool
	// NextAttemptAt is when it is due (nil when parked).
	NextAttemptAt *time.Time
}

// ListPending returns a page of pending index work in memory_id order.
func (s *Store) ListPending(ctx context.Context, q PendingQuery) ([]PendingEntry, error) {
	if q.Limit < 1 || q.Limit > MaxListLimit {
		return nil, fmt.Errorf("pgstore: list pending: limit %d outside [1, %d]", q.Limit, MaxListLimit)
	}
	rows, err := s.pool.Query(ctx, `SELECT p.memory_id, coalesce(m.scope, ''), p.enqueued_at, p.attempts, p.last_error,
			p.next_attempt_at = 'infinity', CASE WHEN p.next_attempt_at = 'infinity' THEN NULL ELSE p.next_attempt_at END
		FROM `+s.t.indexPending+` p LEFT JOIN `+s.t.memories+` m ON m.memory_id = p.memory_id
		WHERE ($1 = '' OR m.scope = $1) AND (NOT $2 OR p.next_attempt_at = 'infinity') AND p.memory_id > $3
		ORDER BY p.memory_id LIMIT $4`, q.Scope, q.ParkedOnly, q.After, q.Limit)
	if err != nil {
		return nil, fmt.Errorf("pgstore: list pending: %w", err)
	}
	entries, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PendingEntry, error) {
		var e PendingEntry
		err := r.Scan(&e.MemoryID, &e.Scope, &e.EnqueuedAt, &e.Attempts, &e.LastError, &e.Parked, &e.NextAttemptAt)
		e.EnqueuedAt = e.EnqueuedAt.UTC()
		if e.NextAttemptAt != nil {
			t := e.NextAttemptAt.UTC()
			e.NextAttemptAt = &t
		}
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: list pending: %w", err)
	}
	return entries, nil
}

// RetryParked puts parked work back in the queue, due now with its attempts reset:
// the work of ids (all parked work when ids is empty), limited to scope's memories
// when scope is set. It returns how much it re-queued.
func (s *Store) RetryParked(ctx context.Context, scope string, ids []string) (int64, error) {
	if ids == nil {
		ids = []string{}
	}
	tag, err := s.pool.Exec(ctx, `UPDATE `+s.t.indexPending+` p SET attempts = 0, next_attempt_at = now(), last_error = ''
		WHERE p.next_attempt_at = 'infinity' AND (cardinality($2::text[]) = 0 OR p.memory_id = ANY($2))
			AND ($1 = '' OR EXISTS (SELECT 1 FROM `+s.t.memories+` m WHERE m.memory_id = p.memory_id AND m.scope = $1))`, scope, ids)
	if err != nil {
		return 0, fmt.Errorf("pgstore: retry parked: %w", err)
	}
	return tag.RowsAffected(), nil
}

func splitRefs(refs []PendingRef) ([]string, []int64) {
	ids := make([]string, len(refs))
	seqs := make([]int64, len(refs))
	for i, r := range refs {
		ids[i], seqs[i] = r.MemoryID, r.Seq
	}
	return ids, seqs
}

// ScopeLock serialises near-duplicate checks within one (scope, type) across every
// process using the store: a session advisory lock on a connection of its own, on
// which the locked writer also does its writes (so a pool full of lock holders never
// waits for itself).
type ScopeLock struct {
	s    *Store
	conn *pgxpool.Conn
	keys []int64 // one per (scope, type), ascending
}

// scopeLockKey is the advisory lock key of (scope, typ).
func (s *Store) scopeLockKey(scope string, typ memory.Type) int64 {
	h := fnv.New64a()
	for _, p := range []string{"memory-operator/pgstore/dedup", s.schema, scope, string(typ)} {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return int64(h.Sum64())
}

// LockScope takes the near-duplicate lock of (scope, typ), waiting for its holder.
// Release it with Unlock.
func (s *Store) LockScope(ctx context.Context, scope string, typ memory.Type) (*ScopeLock, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: lock scope: %w", err)
	}
	l := &ScopeLock{s: s, conn: conn, keys: []int64{s.scopeLockKey(scope, typ)}}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, l.keys[0]); err != nil {
		conn.Release()
		return nil, fmt.Errorf("pgstore: lock scope: %w", err)
	}
	return l, nil
}

// ScopeType is one (scope, memory type): the unit of the near-duplicate lock.
type ScopeType struct {
	Scope string
	Type  memory.Type
}

// LockScopes takes the near-duplicate locks of every group at once, on one connection
// and in one statement, waiting for their holders: a batch pays one round trip for
// them, not one per group. The locks are taken in ascending key order, so two
// batches (or a batch and single writers, which hold one lock) never wait on each
// other in a cycle. Release them with Unlock.
func (s *Store) LockScopes(ctx context.Context, groups []ScopeType) (*ScopeLock, error) {
	keys := s.scopeLockKeys(groups)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: lock scopes: %w", err)
	}
	l := &ScopeLock{s: s, conn: conn, keys: keys}
	// unnest yields the array in order, and the aggregate takes the locks row by row.
	if _, err := conn.Exec(ctx, `SELECT count(pg_advisory_lock(k)) FROM unnest($1::bigint[]) AS k`, keys); err != nil {
		return nil, abandonLocks(conn, err)
	}
	return l, nil
}

// abandonLocks closes a session that may hold some of the locks it was taking
// (closing it releases them) and wraps err.
func abandonLocks(conn *pgxpool.Conn, err error) error {
	_ = conn.Conn().Close(context.Background())
	conn.Release()
	return fmt.Errorf("pgstore: lock scopes: %w", err)
}

// scopeLockKeys are the lock keys of groups, ascending, each once.
func (s *Store) scopeLockKeys(groups []ScopeType) []int64 {
	keys := make([]int64, len(groups))
	for i, g := range groups {
		keys[i] = s.scopeLockKey(g.Scope, g.Type)
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// TryLockScopes is LockScopes without waiting: it takes every lock that is free in
// one statement and, when all were, returns them held; when any was held by
// another, it lets go of those it took and returns nil, having held them for a
// moment only. It never waits, so it cannot take part in a cycle.
func (s *Store) TryLockScopes(ctx context.Context, groups []ScopeType) (*ScopeLock, error) {
	keys := s.scopeLockKeys(groups)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: lock scopes: %w", err)
	}
	var taken []int64
	err = conn.QueryRow(ctx, `SELECT coalesce(array_agg(k), '{}') FROM unnest($1::bigint[]) AS k WHERE pg_try_advisory_lock(k)`, keys).Scan(&taken)
	if err == nil && len(taken) == len(keys) {
		return &ScopeLock{s: s, conn: conn, keys: keys}, nil
	}
	if err == nil && len(taken) > 0 {
		_, err = conn.Exec(ctx, `SELECT count(pg_advisory_unlock(k)) FROM unnest($1::bigint[]) AS k`, taken)
	}
	if err != nil {
		return nil, abandonLocks(conn, err)
	}
	conn.Release()
	return nil, nil
}

// Unlock releases the lock. If the unlock statement fails the connection is closed,
// which releases the lock too.
func (l *ScopeLock) Unlock() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var err error
	if len(l.keys) == 1 {
		_, err = l.conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, l.keys[0])
	} else {
		_, err = l.conn.Exec(ctx, `SELECT count(pg_advisory_unlock(k)) FROM unnest($1::bigint[]) AS k`, l.keys)
	}
	if err != nil {
		_ = l.conn.Conn().Close(ctx)
	}
	l.conn.Release()
}

// PutQueued is Store.PutQueued on the lock's connection.
func (l *ScopeLock) PutQueued(ctx context.Context, item memory.Item) (PutResult, error) {
	return l.s.putVia(ctx, l.conn, item, true)
}

// PendingIn returns the live memories of scope and typ whose index work is still
// pending: the ones a near-duplicate check cannot find in the index yet.
func (l *ScopeLock) PendingIn(ctx context.Context, scope string, typ memory.Type) ([]memory.Item, error) {
	rows, err := l.conn.Query(ctx, `SELECT `+prefixed("m.", memoryCols)+` FROM `+l.s.t.memories+` m
		JOIN `+l.s.t.indexPending+` p ON p.memory_id = m.memory_id
		WHERE m.scope = $1 AND m.memory_type = $2 AND m.archived_at IS NULL
		ORDER BY m.memory_id LIMIT 1000`, scope, string(typ))
	if err != nil {
		return nil, fmt.Errorf("pgstore: pending in scope: %w", err)
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (memory.Item, error) { return scanItem(r) })
	if err != nil {
		return nil, fmt.Errorf("pgstore: pending in scope: %w", err)
	}
	return items, nil
}

// pendingDriveLimit is how many memories may owe index work for PendingInGroups to
// start from them rather than from the groups' memories.
const pendingDriveLimit = "10000"

// PendingInGroups is PendingIn for several groups in one query (at most 1000 a
// group, as PendingIn).
func (l *ScopeLock) PendingInGroups(ctx context.Context, groups []ScopeType) (map[ScopeType][]memory.Item, error) {
	scopes := make([]string, len(groups))
	types := make([]string, len(groups))
	for i, g := range groups {
		scopes[i], types[i] = g.Scope, string(g.Type)
	}
	// Index work is usually owed for a handful of memories, while a batch's groups
	// hold tens of thousands: reading the pending rows and looking their memories up
	// costs a fraction of walking the groups' memories. When the work piled up (an
	// embedder outage) the groups are walked instead. The gate is evaluated once, so
	// only one of the two branches runs.
	rows, err := l.conn.Query(ctx, `WITH pend AS MATERIALIZED (
			SELECT memory_id FROM `+l.s.t.indexPending+` LIMIT `+pendingDriveLimit+` + 1
		), few AS MATERIALIZED (
			SELECT count(*) <= `+pendingDriveLimit+` AS yes FROM pend
		)
		SELECT `+memoryCols+` FROM (
			SELECT m.*, row_number() OVER (PARTITION BY m.scope, m.memory_type ORDER BY m.memory_id) AS n FROM (
				SELECT m.* FROM pend
				JOIN `+l.s.t.memories+` m ON m.memory_id = pend.memory_id
				JOIN unnest($1::text[], $2::text[]) AS g(scope, typ) ON m.scope = g.scope AND m.memory_type = g.typ
				WHERE (SELECT yes FROM few) AND m.archived_at IS NULL
				UNION ALL
				SELECT m.* FROM unnest($1::text[], $2::text[]) AS g(scope, typ)
				JOIN `+l.s.t.memories+` m ON m.scope = g.scope AND m.memory_type = g.typ
				JOIN `+l.s.t.indexPending+` p ON p.memory_id = m.memory_id
				WHERE NOT (SELECT yes FROM few) AND m.archived_at IS NULL) m) x
		WHERE n <= 1000 ORDER BY scope, memory_type, memory_id`, scopes, types)
	if err != nil {
		return nil, fmt.Errorf("pgstore: pending in scopes: %w", err)
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (memory.Item, error) { return scanItem(r) })
	if err != nil {
		return nil, fmt.Errorf("pgstore: pending in scopes: %w", err)
	}
	out := map[ScopeType][]memory.Item{}
	for _, it := range items {
		k := ScopeType{it.Scope, it.MemoryType}
		out[k] = append(out[k], it)
	}
	return out, nil
}

// Reinforce raises a memory's base score by boost (capped at 1) and sets its
// updated_at to now: a near-duplicate write counts as the memory being mentioned
// again (its age restarts). The near-duplicate's own content goes to the memory's
// history (as a revision superseded at now), unless the memory already holds that
// content there or as its value: whatever was said stays recoverable, and a fact
// restated a thousand times in the same words adds one entry. The memory's content,
// and so its vector, is unchanged.
func (l *ScopeLock) Reinforce(ctx context.Context, id string, folded memory.Item, boost float64, now time.Time) (memory.Item, error) {
	args, err := reinforceArgs(id, folded, boost, now)
	if err != nil {
		return memory.Item{}, fmt.Errorf("pgstore: reinforce %q: %w", id, err)
	}
	it, err := scanItem(l.conn.QueryRow(ctx, l.s.reinforceSQL()+` RETURNING `+memoryCols, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return memory.Item{}, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	if err != nil {
		return memory.Item{}, fmt.Errorf("pgstore: reinforce %q: %w", id, err)
	}
	return it, nil
}

// reinforceSQL is Reinforce's statement ($1 id, $2 boost, $3 now, $4 the revision),
// without its RETURNING clause.
func (s *Store) reinforceSQL() string {
	return `UPDATE ` + s.t.memories + `
		SET base_score = least(1.0, base_score + $2), updated_at = greatest(updated_at, $3),
			history = CASE WHEN content = $4::jsonb->0->'content'
				OR EXISTS (SELECT 1 FROM jsonb_array_elements(history) h WHERE h->'content' = $4::jsonb->0->'content')
				THEN history ELSE history || $4::jsonb END
		WHERE memory_id = $1 AND archived_at IS NULL`
}

// reinforceArgs are reinforceSQL's arguments for folding folded into id.
func reinforceArgs(id string, folded memory.Item, boost float64, now time.Time) ([]any, error) {
	at := now.UTC().Truncate(time.Microsecond)
	updated := folded.UpdatedAt
	if updated.IsZero() {
		updated = at
	}
	rev, err := historyJSON([]memory.Revision{{Content: folded.Content, Source: folded.Source, BaseScore: folded.BaseScore,
		UpdatedAt: updated.UTC().Truncate(time.Microsecond), SupersededAt: at}})
	if err != nil {
		return nil, err
	}
	return []any{id, boost, at, rev}, nil
}

// Duplicate returns the ID of the key-less memory of item's scope with item's exact
// content (see memory.Item.ContentHash), if there is one: an exact duplicate is
// idempotent (Unchanged), never a reinforcement.
func (l *ScopeLock) Duplicate(ctx context.Context, item memory.Item) (string, bool, error) {
	hash, err := item.ContentHash()
	if err != nil {
		return "", false, err
	}
	var id string
	err = l.conn.QueryRow(ctx, `SELECT memory_id FROM `+l.s.t.memories+` WHERE scope = $1 AND key IS NULL AND content_hash = $2`, item.Scope, hash).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("pgstore: duplicate check: %w", err)
	}
	return id, true, nil
}
