package pgstore

// Scheduled archival (the archive worker's PostgreSQL side).
//
// PostgreSQL is the truth and the vector index (Milvus, or the vectors table) is
// derived from it, but the two cannot share a transaction. So every change that takes
// vectors out of the index leaves, in the SAME transaction, a durable record of the
// deletions it owes, and ProcessIndexDeletions works them off in batches, advancing
// the record only after the index delete succeeded. A crash at any point leaves either
// the change undone or the deletions recorded, and the next run finishes them. Readers
// never see the gap: recall and search read PostgreSQL, which already says archived
// (or gone).
//
// There are two records, because archival marks many rows and purging deletes few:
//
//	archive_runs(archived_at PK, marked, recorded_at, vectors_after, vectors_deleted_at,
//	             cold_package, cold_items, cold_written_at)
//	index_deletions(memory_id PK, scope, recorded_at)
//
// MarkArchived adds one archive_runs row per run, keyed by the run's clock: every
// memory it archived has archived_at = that time, so the run's pending deletions are
// "memories archived at archived_at with memory_id > vectors_after", found through the
// (archived_at, memory_id) index, with no per-row bookkeeping in the marking
// statement. PurgeExpired deletes rows, so it records each one in index_deletions.
//
// A memory can come back while its deletion is pending: Put supersedes it with
// archived_at NULL, Unarchive rehydrates it, a restore re-inserts a purged one. Its
// vector must then stay. A run's batch selects only memories still archived at the
// run's time and locks them (FOR SHARE) for the index delete; index_deletions entries
// whose memory is live again are dropped without a delete. A concurrent revival (Put
// locks FOR UPDATE, Unarchive updates) waits for the batch to commit and writes its
// vector after the delete, never before it.
//
// Archived memories may later be deleted from PostgreSQL, but only once their vectors
// are gone and their cold copy is recorded: RecordColdCopy is called after the
// package's manifest is written, and DeleteArchived deletes only memories of runs with
// both. A re-run at the same clock that archives more memories clears both, so they
// are done again.
//
// Every statement here is set-based; archival never touches a memory a tombstone covers.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/amemory/memory-operator/internal/memory"
)

// DefaultDeletionBatch is how many pending vector deletions ProcessIndexDeletions
// hands to the index at a time when no batch size is given.
const DefaultDeletionBatch = 1000

// MarkResult reports what MarkArchived did (or, in a dry run, would do).
type MarkResult struct {
	// ArchivedAt is the archived_at given to the memories: the run's clock, to the
	// microsecond.
	ArchivedAt time.Time
	// Scanned is the number of live memories scored: not archived, not expired at the
	// run's clock, not covered by a tombstone.
	Scanned int64
	// Archived is the number of memories marked, in total and by type.
	Archived int64
	ByType   map[memory.Type]int64
}

// notTombstoned is true for a memories row m that no tombstone covers. Forget deletes
// what a tombstone covers, so this holds for every stored memory; the check keeps
// archival from ever copying or counting a forgotten memory should one appear. A
// memory created after its scope was forgotten is archived and purged like any other.
func (s *Store) notTombstoned(m string) string { return `NOT ` + s.covered(m) }

// MarkArchived archives, in one statement, every live memory whose effective score at
// now is below threshold: archived_at := now (to the microsecond), the run recorded in
// archive_runs (which makes their vector deletions pending, see the comment at the top
// of this file) and an audit_log record ("archive") written. Live means not archived,
// not expired at now (expired memories are purged, not archived) and not covered by
// a tombstone.
//
// The score is memory.HalfLives.Score's, computed in SQL (see scoreSQL): a type
// missing from halfLives (or with a half-life <= 0) does not decay, so it is archived
// only when its base score is below threshold. "Below" is strict.
//
// With dryRun nothing is written and the counts are what would be marked. Running it
// again at the same clock marks nothing new (the first run's memories are archived).
func (s *Store) MarkArchived(ctx context.Context, now time.Time, threshold float64, halfLives memory.HalfLives, dryRun bool) (MarkResult, error) {
	now = now.UTC().Truncate(time.Microsecond)
	res := MarkResult{ArchivedAt: now, ByType: map[memory.Type]int64{}}
	args := append([]any{now, threshold}, halfLifeArgs(halfLives)...)
	live := `m.archived_at IS NULL AND (m.expires_at IS NULL OR m.expires_at > $1::timestamptz) AND ` + s.notTombstoned("m")
	below := scoreSQL("m", "$1", [4]string{"$3", "$4", "$5", "$6"}) + ` < $2::float8`

	var sql string
	if dryRun {
		sql = `SELECT m.memory_type, count(*), count(*) FILTER (WHERE ` + below + `)
			FROM ` + s.t.memories + ` m WHERE ` + live + ` GROUP BY m.memory_type`
	} else {
		// Every part of one statement sees the same snapshot: the count of live
		// memories is taken before the UPDATE, so it is what was scanned.
		sql = `WITH marked AS (
				UPDATE ` + s.t.memories + ` m SET archived_at = $1::timestamptz
				WHERE ` + live + ` AND ` + below + `
				RETURNING m.memory_type
			), run AS (
				INSERT INTO ` + s.t.archiveRuns + ` AS r (archived_at, marked)
				SELECT $1::timestamptz, count(*) FROM marked HAVING count(*) > 0
				ON CONFLICT (archived_at) DO UPDATE SET marked = r.marked + EXCLUDED.marked,
					vectors_after = '', vectors_deleted_at = NULL,
					cold_package = NULL, cold_items = NULL, cold_written_at = NULL
			), audit AS (
				INSERT INTO ` + s.t.auditLog + ` (action, detail)
				SELECT 'archive', jsonb_build_object('archived_at', $1::timestamptz, 'threshold', $2::float8, 'archived', count(*))
				FROM marked HAVING count(*) > 0
			)
			SELECT NULL::text, count(*), 0::bigint FROM ` + s.t.memories + ` m WHERE ` + live + `
			UNION ALL
			SELECT memory_type, 0::bigint, count(*) FROM marked GROUP BY memory_type`
	}
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return MarkResult{}, fmt.Errorf("pgstore: mark archived: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			typ              *string
			scanned, archive int64
		)
		if err := rows.Scan(&typ, &scanned, &archive); err != nil {
			return MarkResult{}, fmt.Errorf("pgstore: mark archived: %w", err)
		}
		res.Scanned += scanned
		if typ != nil && archive > 0 {
			res.ByType[memory.Type(*typ)] += archive
			res.Archived += archive
		}
	}
	if err := rows.Err(); err != nil {
		return MarkResult{}, fmt.Errorf("pgstore: mark archived: %w", err)
	}
	return res, nil
}

// DeletionOptions adjust ProcessIndexDeletions.
type DeletionOptions struct {
	// BatchSize is how many IDs one call of the index delete gets (0: DefaultDeletionBatch).
	BatchSize int
	// HoldForCold leaves alone the runs without a cold copy yet, so that the copy can
	// still take their vectors from the index.
	HoldForCold bool
	// RecordedBefore: deletions recorded before it (by the database's clock, see
	// ServerTime) count as Recovered.
	RecordedBefore time.Time
}

// DeletionResult counts what ProcessIndexDeletions did.
type DeletionResult struct {
	// Deleted vector IDs were passed to the index delete, which succeeded.
	Deleted int64
	// Recovered of them were recorded before DeletionOptions.RecordedBefore.
	Recovered int64
}

// ProcessIndexDeletions works off the pending vector deletions: the archival runs'
// (in run order, then memory_id order), then the purged memories'. Each batch is one
// transaction that locks the batch's memories (FOR SHARE), calls deleteVectors with
// the IDs of those archived or gone, and advances the record only when that call
// succeeded. On an error earlier batches stay done and the error is returned; running
// it again finishes the job. deleteVectors must be idempotent (vector.Index.Delete is).
func (s *Store) ProcessIndexDeletions(ctx context.Context, opts DeletionOptions,
	deleteVectors func(ctx context.Context, ids []string) error) (DeletionResult, error) {
	var res DeletionResult
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultDeletionBatch
	}
	hold := ``
	if opts.HoldForCold {
		hold = ` AND cold_written_at IS NOT NULL`
	}
	rows, err := s.pool.Query(ctx, `SELECT archived_at, vectors_after, recorded_at < $1::timestamptz FROM `+s.t.archiveRuns+`
		WHERE vectors_deleted_at IS NULL`+hold+` ORDER BY archived_at`, opts.RecordedBefore)
	if err != nil {
		return res, fmt.Errorf("pgstore: pending vector deletions: %w", err)
	}
	type run struct {
		at    time.Time
		after string
		old   bool
	}
	runs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (run, error) {
		var x run
		return x, r.Scan(&x.at, &x.after, &x.old)
	})
	if err != nil {
		return res, fmt.Errorf("pgstore: pending vector deletions: %w", err)
	}
	for _, r := range runs {
		for done := false; !done; {
			err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
				var n int
				var err error
				n, r.after, done, err = s.runDeletionBatch(ctx, tx, r.at, r.after, opts.BatchSize, deleteVectors)
				res.Deleted += int64(n)
				if r.old {
					res.Recovered += int64(n)
				}
				return err
			})
			if err != nil {
				return res, fmt.Errorf("pgstore: vector deletions of the archival run at %s: %w", r.at.UTC().Format(time.RFC3339Nano), err)
			}
		}
	}
	entries, err := s.ProcessDeletionEntries(ctx, opts, deleteVectors)
	res.Deleted += entries.Deleted
	res.Recovered += entries.Recovered
	return res, err
}

// ProcessDeletionEntries works off the pending vector deletions recorded one by one
// in index_deletions (purged memories, and memories a restored tombstone forgot),
// as ProcessIndexDeletions does, leaving the archival runs' deletions alone (those
// wait for their run's cold copy).
func (s *Store) ProcessDeletionEntries(ctx context.Context, opts DeletionOptions,
	deleteVectors func(ctx context.Context, ids []string) error) (DeletionResult, error) {
	var res DeletionResult
	if opts.BatchSize <= 0 {
		opts.BatchSize = DefaultDeletionBatch
	}
	after := ""
	for {
		var b entryBatch
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			var err error
			b, err = s.entryDeletionBatch(ctx, tx, opts, after, deleteVectors)
			return err
		})
		if err != nil {
			return res, fmt.Errorf("pgstore: pending vector deletions: %w", err)
		}
		res.Deleted += b.deleted
		res.Recovered += b.recovered
		if b.n < opts.BatchSize {
			return res, nil
		}
		after = b.last
	}
}

// runDeletionBatch deletes the vectors of the next batch of a run's memories, those
// still archived at the run's time with memory_id > after, and records the progress;
// done says the run has no more.
func (s *Store) runDeletionBatch(ctx context.Context, tx pgx.Tx, at time.Time, after string, batch int,
	deleteVectors func(ctx context.Context, ids []string) error) (n int, last string, done bool, err error) {
	// FOR SHARE: a row revived meanwhile fails the WHERE when re-checked after the lock
	// and drops out; one revived later waits for this transaction.
	rows, err := tx.Query(ctx, `SELECT memory_id FROM `+s.t.memories+`
		WHERE archived_at = $1 AND memory_id > $2 ORDER BY memory_id LIMIT $3 FOR SHARE`, at, after, batch)
	if err != nil {
		return 0, after, false, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, after, false, err
	}
	if len(ids) > 0 {
		if err := deleteVectors(ctx, ids); err != nil {
			return 0, after, false, err
		}
		last = ids[len(ids)-1]
	} else {
		last = after
	}
	done = len(ids) < batch
	_, err = tx.Exec(ctx, `UPDATE `+s.t.archiveRuns+` SET vectors_after = $2,
		vectors_deleted_at = CASE WHEN $3::bool THEN now() END WHERE archived_at = $1`, at, last, done)
	return len(ids), last, done, err
}

// entryBatch is one batch of index_deletions entries: n entries, the last of them last.
type entryBatch struct {
	n                  int
	last               string
	deleted, recovered int64
}

func (s *Store) entryDeletionBatch(ctx context.Context, tx pgx.Tx, opts DeletionOptions, after string,
	deleteVectors func(ctx context.Context, ids []string) error) (entryBatch, error) {
	var b entryBatch
	rows, err := tx.Query(ctx, `SELECT memory_id, recorded_at < $3::timestamptz FROM `+s.t.indexDeletions+`
		WHERE memory_id > $1 ORDER BY memory_id LIMIT $2`, after, opts.BatchSize, opts.RecordedBefore)
	if err != nil {
		return b, err
	}
	type entry struct {
		id  string
		old bool
	}
	entries, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (entry, error) {
		var e entry
		return e, r.Scan(&e.id, &e.old)
	})
	if err != nil || len(entries) == 0 {
		return b, err
	}
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.id
	}
	b.n, b.last = len(ids), ids[len(ids)-1]

	// A memory of that ID may exist again (a restore re-inserted it): lock and keep it
	// if it is live, as for runs.
	if rows, err = tx.Query(ctx, `SELECT memory_id FROM `+s.t.memories+` WHERE memory_id = ANY($1) FOR SHARE`, ids); err != nil {
		return b, err
	}
	if _, err := pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return b, err
	}
	if rows, err = tx.Query(ctx, `SELECT memory_id FROM `+s.t.memories+` WHERE memory_id = ANY($1) AND archived_at IS NULL`, ids); err != nil {
		return b, err
	}
	live, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return b, err
	}
	del := make([]string, 0, len(ids))
	for _, e := range entries {
		if !slices.Contains(live, e.id) {
			del = append(del, e.id)
			if e.old {
				b.recovered++
			}
		}
	}
	if len(del) > 0 {
		if err := deleteVectors(ctx, del); err != nil {
			return b, err
		}
	}
	if _, err := tx.Exec(ctx, `DELETE FROM `+s.t.indexDeletions+` WHERE memory_id = ANY($1)`, ids); err != nil {
		return b, err
	}
	b.deleted = int64(len(del))
	return b, nil
}

// PendingIndexDeletions counts the vector deletions ProcessIndexDeletions would pass to
// the index now.
func (s *Store) PendingIndexDeletions(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM `+s.t.indexDeletions+` d
			WHERE NOT EXISTS (SELECT 1 FROM `+s.t.memories+` m WHERE m.memory_id = d.memory_id AND m.archived_at IS NULL))
		+ (SELECT count(*) FROM `+s.t.archiveRuns+` r JOIN `+s.t.memories+` m
			ON m.archived_at = r.archived_at AND m.memory_id > r.vectors_after
			WHERE r.vectors_deleted_at IS NULL)`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("pgstore: pending vector deletions: %w", err)
	}
	return n, nil
}

// ServerTime is the database server's clock, which records pending deletions (see
// DeletionOptions.RecordedBefore).
func (s *Store) ServerTime(ctx context.Context) (time.Time, error) {
	var t time.Time
	if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("pgstore: server time: %w", err)
	}
	return t.UTC(), nil
}

// PurgeExpired deletes, in one statement, the memories with expires_at <= now that no
// tombstone covers, recording their vector deletions and an audit_log record
// ("purge-expired", with actor and the count, never content). It returns how many it
// deleted (with dryRun, would delete, writing nothing).
func (s *Store) PurgeExpired(ctx context.Context, now time.Time, actor string, dryRun bool) (int64, error) {
	cond := `m.expires_at <= $1::timestamptz AND ` + s.notTombstoned("m")
	sql := `SELECT count(*) FROM ` + s.t.memories + ` m WHERE ` + cond
	args := []any{now}
	if !dryRun {
		sql = `WITH del AS (
				DELETE FROM ` + s.t.memories + ` m WHERE ` + cond + ` RETURNING m.memory_id, m.scope
			), recorded AS (
				INSERT INTO ` + s.t.indexDeletions + ` (memory_id, scope)
				SELECT memory_id, scope FROM del ON CONFLICT (memory_id) DO NOTHING
			), audit AS (
				INSERT INTO ` + s.t.auditLog + ` (action, detail)
				SELECT 'purge-expired', jsonb_build_object('actor', $2::text, 'now', $1::timestamptz, 'deleted', count(*))
				FROM del HAVING count(*) > 0
			)
			SELECT count(*) FROM del`
		args = append(args, actor)
	}
	var n int64
	if err := s.pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("pgstore: purge expired: %w", err)
	}
	return n, nil
}

// ArchiveRun is one archival run that archived memories (a row of archive_runs).
type ArchiveRun struct {
	// ArchivedAt is the run's clock and the archived_at of what it archived.
	ArchivedAt time.Time
	// Marked is how many memories the run archived; StillArchived how many of them are
	// archived (at this time) and stored now.
	Marked, StillArchived int64
	// VectorsDeletedAt is when the run's vector deletions were done (nil: pending).
	VectorsDeletedAt *time.Time
	// ColdPackage is the prefix of the package holding the run's cold copy, with
	// ColdItems items (of this and any other run it covers), written at ColdWrittenAt;
	// empty and nil while the copy is missing.
	ColdPackage   string
	ColdItems     int64
	ColdWrittenAt *time.Time
}

// ArchiveRuns lists the archival runs, oldest first.
func (s *Store) ArchiveRuns(ctx context.Context) ([]ArchiveRun, error) {
	rows, err := s.pool.Query(ctx, `SELECT r.archived_at, r.marked,
			(SELECT count(*) FROM `+s.t.memories+` m WHERE m.archived_at = r.archived_at),
			r.vectors_deleted_at, coalesce(r.cold_package, ''), coalesce(r.cold_items, 0), r.cold_written_at
		FROM `+s.t.archiveRuns+` r ORDER BY r.archived_at`)
	if err != nil {
		return nil, fmt.Errorf("pgstore: archive runs: %w", err)
	}
	runs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ArchiveRun, error) {
		var a ArchiveRun
		err := r.Scan(&a.ArchivedAt, &a.Marked, &a.StillArchived, &a.VectorsDeletedAt, &a.ColdPackage, &a.ColdItems, &a.ColdWrittenAt)
		a.ArchivedAt = a.ArchivedAt.UTC()
		a.VectorsDeletedAt, a.ColdWrittenAt = utcPtr(a.VectorsDeletedAt), utcPtr(a.ColdWrittenAt)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: archive runs: %w", err)
	}
	return runs, nil
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// PrepareColdCopy returns the clocks of the runs whose memories a cold package at
// prefix must hold: those without a recorded cold copy. A copy recorded at prefix
// itself is un-recorded first (its runs are returned too), because the caller is about
// to replace that package: no record ever points at a package being rewritten.
func (s *Store) PrepareColdCopy(ctx context.Context, prefix string) ([]time.Time, error) {
	if prefix == "" {
		return nil, errors.New("pgstore: prepare cold copy: empty prefix")
	}
	var runs []time.Time
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE `+s.t.archiveRuns+` SET cold_package = NULL, cold_items = NULL, cold_written_at = NULL
			WHERE cold_package = $1`, prefix); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT archived_at FROM `+s.t.archiveRuns+` WHERE cold_written_at IS NULL ORDER BY archived_at`)
		if err != nil {
			return err
		}
		runs, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (time.Time, error) {
			var t time.Time
			err := r.Scan(&t)
			return t.UTC(), err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: prepare cold copy: %w", err)
	}
	return runs, nil
}

// RecordColdCopy records that the complete package at prefix (its manifest written)
// holds the memories of runs, items in all. Call it only after the manifest is
// written: DeleteArchived trusts it.
func (s *Store) RecordColdCopy(ctx context.Context, prefix string, runs []time.Time, items int64) error {
	if prefix == "" {
		return errors.New("pgstore: record cold copy: empty prefix")
	}
	_, err := s.pool.Exec(ctx, `UPDATE `+s.t.archiveRuns+` SET cold_package = $1, cold_items = $2, cold_written_at = now()
		WHERE archived_at = ANY($3::timestamptz[]) AND cold_written_at IS NULL`, prefix, items, runs)
	if err != nil {
		return fmt.Errorf("pgstore: record cold copy: %w", err)
	}
	return nil
}

// DeleteArchived deletes from PostgreSQL, in one statement, the memories archived
// before `before` by a run whose vectors are deleted and whose cold copy is recorded
// (and still archived at that run's time, so never one revived since) that no
// tombstone covers, and writes an audit_log record ("delete-archived", with actor,
// before and the count). It returns how many it deleted (with dryRun, would delete,
// writing nothing).
func (s *Store) DeleteArchived(ctx context.Context, before time.Time, actor string, dryRun bool) (int64, error) {
	cond := `m.archived_at = r.archived_at AND r.cold_written_at IS NOT NULL AND r.vectors_deleted_at IS NOT NULL
		AND m.archived_at < $1::timestamptz AND ` + s.notTombstoned("m")
	sql := `SELECT count(*) FROM ` + s.t.memories + ` m JOIN ` + s.t.archiveRuns + ` r ON ` + cond
	args := []any{before}
	if !dryRun {
		sql = `WITH del AS (
				DELETE FROM ` + s.t.memories + ` m USING ` + s.t.archiveRuns + ` r WHERE ` + cond + `
				RETURNING m.memory_id
			), audit AS (
				INSERT INTO ` + s.t.auditLog + ` (action, detail)
				SELECT 'delete-archived', jsonb_build_object('actor', $2::text, 'before', $1::timestamptz, 'deleted', count(*))
				FROM del HAVING count(*) > 0
			)
			SELECT count(*) FROM del`
		args = append(args, actor)
	}
	var n int64
	if err := s.pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("pgstore: delete archived: %w", err)
	}
	return n, nil
}

// Unarchive rehydrates archived memories of scope in place (archived_at := NULL) and
// returns them, in memory_id order, so that the caller can put their vectors back (see
// service.Memory.Rehydrate). IDs that are not archived memories of scope are ignored.
// Their pending vector deletions lapse (they are no longer archived).
//
// Rehydrating counts as re-stating the memory: updated_at moves to now (never back), so
// its age, and the decay of its score, restart. Otherwise the next archival run, with
// the same threshold, would archive it again at once.
func (s *Store) Unarchive(ctx context.Context, scope string, now time.Time, ids ...string) ([]memory.Item, error) {
	if err := memory.ValidateScope(scope); err != nil {
		return nil, fmt.Errorf("pgstore: unarchive: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `WITH u AS (
			UPDATE `+s.t.memories+` SET archived_at = NULL, updated_at = greatest(updated_at, $3)
			WHERE scope = $1 AND memory_id = ANY($2) AND archived_at IS NOT NULL
			RETURNING `+memoryCols+`
		)
		SELECT `+memoryCols+` FROM u ORDER BY memory_id`, scope, ids, now.Truncate(time.Microsecond))
	if err != nil {
		return nil, fmt.Errorf("pgstore: unarchive: %w", err)
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (memory.Item, error) { return scanItem(r) })
	if err != nil {
		return nil, fmt.Errorf("pgstore: unarchive: %w", err)
	}
	return items, nil
}
