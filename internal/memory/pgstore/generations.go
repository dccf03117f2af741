package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/memory"
)

// Index generations (tables index_generations and generation_pending, migration 13)
// let a store change its embedding model while it serves. Generation 1 is the index
// the store was made with; a model switch adds generation 2 (then 3, ...) in another
// table or collection, in state Building:
//
//   - from the moment the generation is committed, every statement that changes
//     memories records their IDs for it in generation_pending (a trigger), whoever
//     writes;
//   - its re-embed worker waits until every write that may have missed that record
//     has ended (WaitForEarlierWriters), then walks every memory in memory_id order
//     (the backfill, resumable from backfill_after) and then the recorded changes,
//     bringing the generation's vector of each memory in line with its row. A change
//     recorded while the worker reads is done again by the next round, so the last
//     vector written always follows the last change;
//   - at the cutover the new generation becomes Serving and the old one Retained:
//     changes are now recorded for the old one, which a rollback catches up the same
//     way, until it is dropped.

// Generation states.
const (
	GenerationServing  = "serving"
	GenerationBuilding = "building"
	GenerationRetained = "retained"
)

// ErrNoGeneration is returned for a generation the store does not have.
var ErrNoGeneration = errors.New("pgstore: no such index generation")

// Generation is one index generation of a store.
type Generation struct {
	Number int
	State  string
	// Model and Dimension are the embedding model of its vectors; Embedder is a
	// digest of the whole embedder spec that made them (the operator's), and
	// Location the table or collection holding them.
	Model     string
	Dimension int
	Embedder  string
	Location  string
	ChangedAt time.Time
	// BackfillAfter is the last memory_id the backfill finished ("" before the
	// first); BackfillDone says it walked every memory. Embedded counts the
	// memories it embedded.
	BackfillAfter string
	BackfillDone  bool
	Embedded      int64
	// BackfillUntil is the highest memory_id the backfill walks to, fixed when it
	// first starts (nil before): a memory written since has its change recorded, so
	// the walk need not chase writers that add memories behind it.
	BackfillUntil *string
	// Rate is the backfill's last measured pace (memories a second) and ProgressAt
	// when it was saved (zero before the first save).
	Rate       float64
	ProgressAt time.Time
	// VerifiedAt is when its worker found it complete and passing its check (zero:
	// not yet), with the sample's self-recall on it and on the serving generation
	// (-1: not measured).
	VerifiedAt            time.Time
	Recall, ServingRecall float64
}

const generationCols = `generation, state, model, dimension, embedder, location, changed_at, backfill_after, backfill_done, embedded,
	embed_rate, progress_at, verified_at, coalesce(recall, -1), coalesce(serving_recall, -1), backfill_until`

func scanGeneration(r pgx.Row) (Generation, error) {
	var g Generation
	var at, verified *time.Time
	err := r.Scan(&g.Number, &g.State, &g.Model, &g.Dimension, &g.Embedder, &g.Location, &g.ChangedAt, &g.BackfillAfter, &g.BackfillDone, &g.Embedded,
		&g.Rate, &at, &verified, &g.Recall, &g.ServingRecall, &g.BackfillUntil)
	if at != nil {
		g.ProgressAt = *at
	}
	if verified != nil {
		g.VerifiedAt = *verified
	}
	return g, err
}

func (s *Store) generations() string {
	return pgx.Identifier{s.schema, "index_generations"}.Sanitize()
}

func (s *Store) generationPending() string {
	return pgx.Identifier{s.schema, "generation_pending"}.Sanitize()
}

// Generations lists the store's index generations by number (none before the
// store's first switch: generation 1 is implied).
func (s *Store) Generations(ctx context.Context) ([]Generation, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+generationCols+` FROM `+s.generations()+` ORDER BY generation`)
	if err != nil {
		return nil, fmt.Errorf("pgstore: generations: %w", err)
	}
	gs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Generation, error) { return scanGeneration(r) })
	if err != nil {
		return nil, fmt.Errorf("pgstore: generations: %w", err)
	}
	return gs, nil
}

// GenerationByNumber returns generation n, or an error wrapping ErrNoGeneration.
func (s *Store) GenerationByNumber(ctx context.Context, n int) (Generation, error) {
	g, err := scanGeneration(s.pool.QueryRow(ctx, `SELECT `+generationCols+` FROM `+s.generations()+` WHERE generation = $1`, n))
	if errors.Is(err, pgx.ErrNoRows) {
		return g, fmt.Errorf("%w: %d in schema %s", ErrNoGeneration, n, s.schema)
	}
	if err != nil {
		return g, fmt.Errorf("pgstore: generation %d: %w", n, err)
	}
	return g, nil
}

// StartGeneration records a new generation in state Building, and the serving one
// (as serving) when the store has none recorded yet. It runs as the store's admin:
// no store role may add or move generations. Starting one that exists changes
// nothing and returns it as it is.
func StartGeneration(ctx context.Context, admin *pgxpool.Pool, schema string, serving, next Generation) (Generation, error) {
	s := New(admin, schema)
	var out Generation
	err := pgx.BeginFunc(ctx, admin, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE `+s.generations()+` IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return err
		}
		// The serving generation is complete by definition: a rollback to it later
		// catches up on changes only.
		if _, err := tx.Exec(ctx, `INSERT INTO `+s.generations()+` (generation, state, model, dimension, embedder, location, backfill_done)
			SELECT $1, 'serving', $2, $3, $4, $5, true WHERE NOT EXISTS (SELECT 1 FROM `+s.generations()+` WHERE state = 'serving')`,
			serving.Number, serving.Model, serving.Dimension, serving.Embedder, serving.Location); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+s.generations()+` (generation, state, model, dimension, embedder, location)
			VALUES ($1, 'building', $2, $3, $4, $5) ON CONFLICT (generation) DO NOTHING`,
			next.Number, next.Model, next.Dimension, next.Embedder, next.Location); err != nil {
			return err
		}
		var err error
		out, err = scanGeneration(tx.QueryRow(ctx, `SELECT `+generationCols+` FROM `+s.generations()+` WHERE generation = $1`, next.Number))
		return err
	})
	if err != nil {
		return out, fmt.Errorf("pgstore: starting index generation %d in schema %s: %w", next.Number, schema, err)
	}
	return out, nil
}

// BeginCutover starts recording changes for the serving generation too (it becomes
// retained), while n, about to serve, still gets them: in between, writers on either
// generation (gateway pods before and after their rollout) leave records for the
// other. CutOver ends it. Its verification is cleared, since a later rollback to it
// must verify afresh.
func BeginCutover(ctx context.Context, admin *pgxpool.Pool, schema string, n int) error {
	s := New(admin, schema)
	err := pgx.BeginFunc(ctx, admin, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE `+s.generations()+` SET changed_at = now() WHERE generation = $1 AND state <> 'serving'`, n)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("%w: %d (or it serves already)", ErrNoGeneration, n)
		}
		_, err = tx.Exec(ctx, `UPDATE `+s.generations()+` SET state = 'retained', changed_at = now(), verified_at = NULL, recall = NULL, serving_recall = NULL
			WHERE state = 'serving'`)
		return err
	})
	if err != nil {
		return fmt.Errorf("pgstore: beginning the cutover to index generation %d in schema %s: %w", n, schema, err)
	}
	return nil
}

// CutOver makes generation n the serving one and the serving one retained, in one
// transaction (as the store's admin). From its commit, changes are recorded for the
// retained generation and no longer for n; those recorded for n before are left for
// its worker, which finishes them and stops.
func CutOver(ctx context.Context, admin *pgxpool.Pool, schema string, n int) error {
	s := New(admin, schema)
	err := pgx.BeginFunc(ctx, admin, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE `+s.generations()+` SET state = 'retained', changed_at = now(), verified_at = NULL, recall = NULL, serving_recall = NULL
			WHERE state = 'serving' AND generation <> $1`, n); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE `+s.generations()+` SET state = 'serving', changed_at = now() WHERE generation = $1`, n)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("%w: %d", ErrNoGeneration, n)
		}
		// Changes recorded for n before now stay: its worker finishes them.
		return nil
	})
	if err != nil {
		return fmt.Errorf("pgstore: cutting over to index generation %d in schema %s: %w", n, schema, err)
	}
	return nil
}

// DropGeneration forgets a generation that is not serving, with its recorded
// changes (as the store's admin; its index is the caller's to drop).
func DropGeneration(ctx context.Context, admin *pgxpool.Pool, schema string, n int) error {
	s := New(admin, schema)
	if _, err := admin.Exec(ctx, `DELETE FROM `+s.generations()+` WHERE generation = $1 AND state <> 'serving'`, n); err != nil {
		return fmt.Errorf("pgstore: dropping index generation %d in schema %s: %w", n, schema, err)
	}
	return nil
}

// WaitForEarlierWriters returns once every transaction that had written the store's
// memories when it was called has ended. A worker calls it after its generation
// started recording changes and before it reads memories: a write whose statement
// ran before that record was visible left no record, and must be committed (or
// rolled back) before the backfill reads, so that the backfill sees it.
//
// Such a transaction holds a ROW EXCLUSIVE lock on the memories table from its first
// write to its end (pg_locks, readable by every role), so the wait is for those
// transactions alone: the oldest transaction of the whole server, another store's
// long restore or index build, does not hold a switch back. (A prepared transaction
// holds no virtual transaction lock and is not waited for; the store's writers do not
// prepare.)
func (s *Store) WaitForEarlierWriters(ctx context.Context, poll time.Duration) error {
	var writers []string
	err := s.pool.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT virtualtransaction), '{}') FROM pg_locks
		WHERE locktype = 'relation' AND relation = $1::regclass AND mode = 'RowExclusiveLock'
		AND pid IS DISTINCT FROM pg_backend_pid()`, s.t.memories).Scan(&writers)
	if err != nil {
		return fmt.Errorf("pgstore: waiting for earlier writers: %w", err)
	}
	for len(writers) > 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgstore: waiting for %d transactions that wrote memories of schema %s to end: %w", len(writers), s.schema, ctx.Err())
		case <-time.After(poll):
		}
		// Every transaction holds the lock on its own virtual transaction ID until it ends.
		if err := s.pool.QueryRow(ctx, `SELECT coalesce(array_agg(virtualxid), '{}') FROM pg_locks
			WHERE locktype = 'virtualxid' AND virtualxid = ANY($1::text[])`, writers).Scan(&writers); err != nil {
			return fmt.Errorf("pgstore: waiting for earlier writers: %w", err)
		}
	}
	return nil
}

// AfterEveryID sorts after every memory ID (printable ASCII, compared byte by byte):
// BackfillPage up to it reads every memory.
const AfterEveryID = "\U0010FFFF"

// BoundBackfill fixes, once, the highest memory_id generation n's backfill walks to:
// the highest there is now. It returns the bound ("" for an empty store: nothing
// to walk). Call it after WaitForEarlierWriters.
func (s *Store) BoundBackfill(ctx context.Context, n int) (string, error) {
	var until string
	err := s.pool.QueryRow(ctx, `UPDATE `+s.generations()+` SET backfill_until = coalesce(backfill_until,
			(SELECT coalesce(max(memory_id), '') FROM `+s.t.memories+`))
		WHERE generation = $1 RETURNING backfill_until`, n).Scan(&until)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("%w: %d in schema %s", ErrNoGeneration, n, s.schema)
	}
	if err != nil {
		return "", fmt.Errorf("pgstore: bounding the backfill of generation %d: %w", n, err)
	}
	return until, nil
}

// BackfillPage returns up to limit memories after the memory_id after and up to
// until, in memory_id order, archived ones included (the caller keeps those out of
// the index).
func (s *Store) BackfillPage(ctx context.Context, after, until string, limit int) ([]memory.Item, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+memoryCols+` FROM `+s.t.memories+` WHERE memory_id > $1 AND memory_id <= $2 ORDER BY memory_id LIMIT $3`,
		after, until, limit)
	if err != nil {
		return nil, fmt.Errorf("pgstore: backfill page: %w", err)
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (memory.Item, error) { return scanItem(r) })
	if err != nil {
		return nil, fmt.Errorf("pgstore: backfill page: %w", err)
	}
	return items, nil
}

// IndexedIDs returns up to limit IDs of memories an index must hold (live, not
// archived) after the ID after, in order: the whole store read a page at a time.
func (s *Store) IndexedIDs(ctx context.Context, after string, limit int) ([]string, error) {
	return s.strings(ctx, "indexed IDs", `SELECT memory_id FROM `+s.t.memories+`
		WHERE memory_id > $2 AND archived_at IS NULL ORDER BY memory_id LIMIT $1`, limit, after)
}

// SaveBackfill records the backfill's progress of generation n: the last memory_id
// done, whether it is complete, how many memories it embedded in all and at what
// pace lately (memories a second).
func (s *Store) SaveBackfill(ctx context.Context, n int, after string, done bool, embedded int64, rate float64) error {
	tag, err := s.pool.Exec(ctx, `UPDATE `+s.generations()+` SET backfill_after = $2, backfill_done = $3, embedded = $4,
		embed_rate = $5, progress_at = now() WHERE generation = $1`, n, after, done, embedded, rate)
	if err != nil {
		return fmt.Errorf("pgstore: saving the backfill of generation %d: %w", n, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %d in schema %s", ErrNoGeneration, n, s.schema)
	}
	return nil
}

// MarkVerified records that generation n is complete and passed its check, with
// the sample's self-recall on it and on the serving generation (-1: not measured).
func (s *Store) MarkVerified(ctx context.Context, n int, recall, servingRecall float64) error {
	nullable := func(v float64) *float64 {
		if v < 0 {
			return nil
		}
		return &v
	}
	_, err := s.pool.Exec(ctx, `UPDATE `+s.generations()+` SET verified_at = now(), recall = $2, serving_recall = $3 WHERE generation = $1`,
		n, nullable(recall), nullable(servingRecall))
	if err != nil {
		return fmt.Errorf("pgstore: marking generation %d verified: %w", n, err)
	}
	return nil
}

// GenerationChanges returns up to limit recorded changes of generation n, oldest
// record first.
func (s *Store) GenerationChanges(ctx context.Context, n, limit int) ([]PendingRef, error) {
	rows, err := s.pool.Query(ctx, `SELECT memory_id, seq FROM `+s.generationPending()+` WHERE generation = $1 ORDER BY seq LIMIT $2`, n, limit)
	if err != nil {
		return nil, fmt.Errorf("pgstore: changes of generation %d: %w", n, err)
	}
	refs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PendingRef, error) {
		var p PendingRef
		return p, r.Scan(&p.MemoryID, &p.Seq)
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: changes of generation %d: %w", n, err)
	}
	return refs, nil
}

// GenerationChangesDone removes the records of refs whose sequence number still
// matches: a memory changed again meanwhile keeps its newer record.
func (s *Store) GenerationChangesDone(ctx context.Context, n int, refs []PendingRef) error {
	if len(refs) == 0 {
		return nil
	}
	ids, seqs := make([]string, len(refs)), make([]int64, len(refs))
	for i, r := range refs {
		ids[i], seqs[i] = r.MemoryID, r.Seq
	}
	_, err := s.pool.Exec(ctx, `DELETE FROM `+s.generationPending()+` p USING unnest($2::text[], $3::bigint[]) AS d(memory_id, seq)
		WHERE p.generation = $1 AND p.memory_id = d.memory_id AND p.seq = d.seq`, n, ids, seqs)
	if err != nil {
		return fmt.Errorf("pgstore: clearing changes of generation %d: %w", n, err)
	}
	return nil
}

// GenerationChanged returns which of ids have a change recorded for generation n
// not yet done.
func (s *Store) GenerationChanged(ctx context.Context, n int, ids []string) (map[string]bool, error) {
	rows, err := s.pool.Query(ctx, `SELECT memory_id FROM `+s.generationPending()+` WHERE generation = $1 AND memory_id = ANY($2::text[])`, n, ids)
	if err != nil {
		return nil, fmt.Errorf("pgstore: changes of generation %d: %w", n, err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("pgstore: changes of generation %d: %w", n, err)
	}
	out := make(map[string]bool, len(found))
	for _, id := range found {
		out[id] = true
	}
	return out, nil
}

// GenerationBacklog counts the recorded changes of generation n not yet done.
func (s *Store) GenerationBacklog(ctx context.Context, n int) (int64, error) {
	var c int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+s.generationPending()+` WHERE generation = $1`, n).Scan(&c); err != nil {
		return 0, fmt.Errorf("pgstore: backlog of generation %d: %w", n, err)
	}
	return c, nil
}

// IndexedCount counts the memories an index must hold: live, not archived.
func (s *Store) IndexedCount(ctx context.Context) (int64, error) {
	var c int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+s.t.memories+` WHERE archived_at IS NULL`).Scan(&c); err != nil {
		return 0, fmt.Errorf("pgstore: counting memories: %w", err)
	}
	return c, nil
}
