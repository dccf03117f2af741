package pgstore

// Forgetting.
//
// A tombstone (scope, forgotten_at) forgets what its scope held up to forgotten_at:
// every memory of the scope recorded at or before that time (recorded_at, the
// server's clock when the store took the memory's value in; never created_at, which
// is the writer's word). A memory recorded later is new consent (a user who came
// back) and is kept. This is the one meaning of a tombstone on every path:
//
//   - Forget deletes every memory of the scope and records a tombstone, stamped by
//     the server's clock under the forget lock, at least as late as every recorded_at
//     it deleted, so what it deleted is covered;
//   - Put (the write path, and so the gateway) records its memory by the server's
//     clock under the lock, so a write after a forget is always later than its
//     tombstone: it is stored. A write that copies content read earlier (an item
//     with RecordedAt set: an update of a memory read before, a session's turns
//     promoted) is refused when a tombstone at or after that read exists, so a copy
//     of what a forget removed never comes back as new consent;
//   - Merge (restores) and Import never write a covered memory (outcome
//     MergeTombstoned); a restored memory keeps the recorded_at its source gave it;
//   - ApplyTombstones (a restore bringing a package's tombstones) forgets, as Forget
//     does, what the target holds that they cover; a tombstone later than the
//     server's clock is applied at the clock's time;
//   - archival scores, archives and purges later memories like any other;
//   - snapshots carry the tombstones read in the same database snapshot as the
//     memories (ReadCut), taken while no write or forget is between its lock and
//     its commit.
//
// Tombstones are append-only: forgetting a scope again adds a row, and a scope's
// tombstone is its latest row. Nothing in this package updates or deletes one, and
// the agent role may only insert them, so no one but the operator can un-forget.
//
// Writers and forgetters are serialised per store by an advisory lock: Put, Merge and
// Import take it shared for their transaction, Forget and ApplyTombstones exclusive.
// A write therefore either commits before a forget (which then deletes it) or starts
// after it (and sees its tombstone): a memory written concurrently with a forget never
// survives it uncovered.

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/amemory/memory-operator/internal/memory"
)

// Tombstone records a forgotten scope.
type Tombstone = memory.Tombstone

// ErrForgotten is returned by Put when its scope's tombstone is later than the
// server's clock (see checkNotForgotten): the write would be covered by it.
var ErrForgotten = errors.New("pgstore: the scope was forgotten after this memory was created")

// forgetLock is the advisory lock key of the store's write/forget lock.
func (s *Store) forgetLock() int64 {
	h := fnv.New64a()
	h.Write([]byte("memory-operator/pgstore/forget\x00"))
	h.Write([]byte(s.schema))
	return int64(h.Sum64())
}

// lockForWrite takes the forget lock shared: forgets wait for this transaction, and
// it waits for forgets in progress. Call it first in the transaction, before any
// statement whose snapshot must see tombstones committed by those forgets.
func (s *Store) lockForWrite(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared($1)`, s.forgetLock())
	return err
}

// lockForForget takes the forget lock exclusively.
func (s *Store) lockForForget(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, s.forgetLock())
	return err
}

// covered is the SQL condition "the memory row m is covered by a tombstone".
func (s *Store) covered(m string) string {
	return `EXISTS (SELECT 1 FROM ` + s.t.tombstones + ` tb WHERE tb.scope = ` + m + `.scope AND tb.forgotten_at >= ` + m + `.recorded_at)`
}

// ForgetResult counts what Forget deleted.
type ForgetResult struct {
	// Deleted is the number of memories deleted.
	Deleted int64
	// VectorsDeleted is the number of vectors rows deleted.
	VectorsDeleted int64
	// ForgottenAt is the tombstone's time.
	ForgottenAt time.Time
}

// Forget deletes every memory of scope and its vectors, records a tombstone and
// writes an audit_log record (action "forget") with the actor, the reason and the
// counts, never any content. It is one transaction. The tombstone's time is the
// server's clock once the forget lock is held (or the latest recorded_at of the
// deleted memories, should a restore have brought one from a clock ahead), so that
// the tombstone covers everything it deleted and no write yet to take the lock can
// be covered; calling Forget again records a later tombstone and another audit record.
func (s *Store) Forget(ctx context.Context, scope, reason, actor string) (ForgetResult, error) {
	if err := memory.ValidateScope(scope); err != nil {
		return ForgetResult{}, fmt.Errorf("pgstore: forget: %w", err)
	}
	var res ForgetResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := s.lockForForget(ctx, tx); err != nil {
			return err
		}
		var at time.Time
		if err := tx.QueryRow(ctx, `SELECT greatest(clock_timestamp(), max(recorded_at)) FROM `+s.t.memories+` WHERE scope = $1`, scope).Scan(&at); err != nil {
			return err
		}
		r, err := s.applyTombstones(ctx, tx, []Tombstone{{Scope: scope, ForgottenAt: at, Reason: reason}}, ApplyOptions{Actor: actor, always: true})
		res = ForgetResult{Deleted: r.Forgotten, VectorsDeleted: r.VectorsDeleted, ForgottenAt: at.UTC()}
		return err
	})
	if err != nil {
		return ForgetResult{}, fmt.Errorf("pgstore: forget %q: %w", scope, err)
	}
	return res, nil
}

// ApplyOptions configure ApplyTombstones.
type ApplyOptions struct {
	// Actor and Source go into the audit records (who, and for a restore the package).
	Actor, Source string
	// RecordIndexDeletions records the vector deletions owed to an external index
	// (Milvus) for the memories deleted, in index_deletions, worked off by
	// ProcessDeletionEntries. The vectors table (the embedded index) is always
	// cleaned in the same transaction.
	RecordIndexDeletions bool
	// DryRun rolls the transaction back: the result says what would happen.
	DryRun bool
	// always writes an audit record for every tombstone, changed or not (Forget).
	always bool
}

// ApplyResult says what ApplyTombstones did.
type ApplyResult struct {
	// Added tombstones were new, or later than the scope's tombstone.
	Added int64
	// Forgotten memories were deleted because a tombstone covers them;
	// VectorsDeleted vectors rows with them.
	Forgotten, VectorsDeleted int64
}

// MaxApplyBatch is the largest number of tombstones ApplyTombstones takes at once.
const MaxApplyBatch = 10000

// ApplyTombstones records tombstones (for instance a package's, on restore) and
// forgets, exactly as Forget would, what their scopes hold up to their times: the
// covered memories and their vectors are deleted and a "forget" audit record is
// written for each scope where something changed (a new or later tombstone, deleted
// memories). Memories created after a tombstone are kept. Several tombstones of one
// scope count as the latest. It is one transaction under the forget lock; running it
// again changes nothing.
func (s *Store) ApplyTombstones(ctx context.Context, ts []Tombstone, opts ApplyOptions) (ApplyResult, error) {
	if len(ts) > MaxApplyBatch {
		return ApplyResult{}, fmt.Errorf("pgstore: apply tombstones: %d tombstones in one batch (at most %d)", len(ts), MaxApplyBatch)
	}
	for _, t := range ts {
		if err := memory.ValidateScope(t.Scope); err != nil {
			return ApplyResult{}, fmt.Errorf("pgstore: apply tombstones: %w", err)
		}
		if t.ForgottenAt.IsZero() {
			return ApplyResult{}, fmt.Errorf("pgstore: apply tombstones: %s: forgotten_at is not set", t.Scope)
		}
	}
	if len(ts) == 0 {
		return ApplyResult{}, nil
	}
	var res ApplyResult
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("pgstore: apply tombstones: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := s.lockForForget(ctx, tx); err != nil {
		return res, fmt.Errorf("pgstore: apply tombstones: %w", err)
	}
	if res, err = s.applyTombstones(ctx, tx, ts, opts); err != nil {
		return ApplyResult{}, fmt.Errorf("pgstore: apply tombstones: %w", err)
	}
	if opts.DryRun {
		return res, nil
	}
	if err := tx.Commit(ctx); err != nil {
		return ApplyResult{}, fmt.Errorf("pgstore: apply tombstones: %w", err)
	}
	return res, nil
}

// applyTombstones is the one statement behind Forget and ApplyTombstones; tx holds the
// forget lock.
func (s *Store) applyTombstones(ctx context.Context, tx pgx.Tx, ts []Tombstone, opts ApplyOptions) (ApplyResult, error) {
	scopes := make([]string, len(ts))
	times := make([]time.Time, len(ts))
	reasons := make([]string, len(ts))
	for i, t := range ts {
		scopes[i], times[i], reasons[i] = t.Scope, t.ForgottenAt.UTC().Truncate(time.Microsecond), t.Reason
	}
	record := ``
	if opts.RecordIndexDeletions {
		record = `, rec AS (
			INSERT INTO ` + s.t.indexDeletions + ` (memory_id, scope)
			SELECT memory_id, scope FROM del ON CONFLICT (memory_id) DO NOTHING
		)`
	}
	changed := `per.added OR per.deleted > 0 OR per.vdeleted > 0`
	if opts.always {
		changed = `true`
	}
	// Every part sees the snapshot taken when the statement began: the vectors kept
	// are exactly those of memories the tombstones do not cover. A tombstone later
	// than the server's clock (from a server whose clock is ahead) is applied at the
	// clock's time: it covers the same memories today, and writes after it are not
	// refused as if they came before.
	sql := `WITH t AS (
			SELECT DISTINCT ON (scope) scope, least(forgotten_at, $6::timestamptz) AS forgotten_at, reason
			FROM unnest($1::text[], $2::timestamptz[], $3::text[]) AS x(scope, forgotten_at, reason)
			ORDER BY scope, forgotten_at DESC
		), ins AS (
			INSERT INTO ` + s.t.tombstones + ` (scope, forgotten_at, reason)
			SELECT t.scope, t.forgotten_at, t.reason FROM t
			WHERE NOT EXISTS (SELECT 1 FROM ` + s.t.tombstones + ` x WHERE x.scope = t.scope AND x.forgotten_at >= t.forgotten_at)
			ON CONFLICT DO NOTHING
			RETURNING scope
		), del AS (
			DELETE FROM ` + s.t.memories + ` m USING t WHERE m.scope = t.scope AND m.recorded_at <= t.forgotten_at
			RETURNING m.memory_id, m.scope
		), vdel AS (
			DELETE FROM ` + s.t.vectors + ` v USING t WHERE v.scope = t.scope
				AND NOT EXISTS (SELECT 1 FROM ` + s.t.memories + ` m WHERE m.memory_id = v.memory_id AND m.recorded_at > t.forgotten_at)
			RETURNING v.scope
		)` + record + `, per AS (
			SELECT t.scope, t.reason, t.forgotten_at, i.scope IS NOT NULL AS added,
				coalesce(d.n, 0) AS deleted, coalesce(v.n, 0) AS vdeleted
			FROM t LEFT JOIN ins i ON i.scope = t.scope
			LEFT JOIN (SELECT scope, count(*) AS n FROM del GROUP BY scope) d ON d.scope = t.scope
			LEFT JOIN (SELECT scope, count(*) AS n FROM vdel GROUP BY scope) v ON v.scope = t.scope
		), audit AS (
			INSERT INTO ` + s.t.auditLog + ` (action, scope, detail)
			SELECT 'forget', per.scope, jsonb_strip_nulls(jsonb_build_object('actor', $4::text, 'reason', per.reason,
				'forgotten_at', per.forgotten_at, 'deleted', per.deleted, 'vectors_deleted', per.vdeleted,
				'source', nullif($5::text, '')))
			FROM per WHERE ` + changed + `
		)
		SELECT (SELECT count(*) FROM ins), (SELECT count(*) FROM del), (SELECT count(*) FROM vdel)`
	// Forget's own tombstone is never moved: it covers everything it deletes.
	clock := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	if !opts.always {
		if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&clock); err != nil {
			return ApplyResult{}, err
		}
	}
	var res ApplyResult
	err := tx.QueryRow(ctx, sql, scopes, times, reasons, opts.Actor, opts.Source, clock).Scan(&res.Added, &res.Forgotten, &res.VectorsDeleted)
	return res, err
}

// EachTombstone calls fn for each scope's tombstone (its latest), in scope order
// (byte order), streaming them from the server.
func (s *Store) EachTombstone(ctx context.Context, fn func(Tombstone) error) error {
	return s.eachTombstone(ctx, s.pool, fn)
}

// querier is a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func (s *Store) eachTombstone(ctx context.Context, q querier, fn func(Tombstone) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Rows of a scope arrive oldest first (the primary key's order): the last one of
	// each scope is its tombstone.
	cols := `scope, forgotten_at, reason`
	if s.readsBefore(7) {
		// Migration 7 moves a tombstone in the future to just before now.
		cols = `scope, least(forgotten_at, now() - interval '1 microsecond'), reason`
	}
	rows, err := q.Query(ctx, `SELECT `+cols+` FROM `+s.t.tombstones+` ORDER BY scope, forgotten_at`)
	if err != nil {
		return fmt.Errorf("pgstore: tombstones: %w", err)
	}
	defer rows.Close()
	var cur Tombstone
	flush := func() error {
		if cur.Scope == "" {
			return nil
		}
		cur.ForgottenAt = cur.ForgottenAt.UTC()
		return fn(cur)
	}
	for rows.Next() {
		var t Tombstone
		if err := rows.Scan(&t.Scope, &t.ForgottenAt, &t.Reason); err != nil {
			return fmt.Errorf("pgstore: tombstones: %w", err)
		}
		if t.Scope != cur.Scope {
			if err := flush(); err != nil {
				cancel()
				return err
			}
		}
		cur = t
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgstore: tombstones: %w", err)
	}
	return flush()
}

// Tombstones returns every scope's tombstone, ordered by scope. It holds them all in
// memory; EachTombstone streams them.
func (s *Store) Tombstones(ctx context.Context) ([]Tombstone, error) {
	var out []Tombstone
	err := s.EachTombstone(ctx, func(t Tombstone) error { out = append(out, t); return nil })
	return out, err
}

// ForgottenAt returns the time of scope's tombstone, and false when it has none.
func (s *Store) ForgottenAt(ctx context.Context, scope string) (time.Time, bool, error) {
	var at *time.Time
	if err := s.pool.QueryRow(ctx, `SELECT max(forgotten_at) FROM `+s.t.tombstones+` WHERE scope = $1`, scope).Scan(&at); err != nil {
		return time.Time{}, false, fmt.Errorf("pgstore: tombstone of %q: %w", scope, err)
	}
	if at == nil {
		return time.Time{}, false, nil
	}
	return at.UTC(), true, nil
}

// IsForgotten reports whether scope has a tombstone.
func (s *Store) IsForgotten(ctx context.Context, scope string) (bool, error) {
	_, ok, err := s.ForgottenAt(ctx, scope)
	return ok, err
}
