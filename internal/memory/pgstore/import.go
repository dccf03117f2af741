package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
)

// ImportResult counts what Import did.
type ImportResult struct {
	// Inserted memories were new.
	Inserted int64
	// Skipped memories were already present: the same memory_id, the same content in
	// the scope, or an occupied (scope, key) slot. Import never supersedes.
	Skipped int64
	// Embeddings is the number of vectors rows written.
	Embeddings int64
}

// Staging tables live in the session's temporary schema and vanish at commit.
var (
	memStage = pgx.Identifier{"pg_temp", "memory_import_stage"}
	vecStage = pgx.Identifier{"pg_temp", "memory_import_vectors"}
)

var memCopyCols = []string{"memory_id", "memory_type", "scope", "key", "content", "content_hash", "source",
	"base_score", "created_at", "updated_at", "expires_at", "archived_at", "history", "recorded_at"}

// recordedAt is the recorded_at a bulk write (restore, import) stores for it: the
// time its source recorded it, at most now; an item that never carried one was
// recorded no later than it was created.
func recordedAt(it *memory.Item, now time.Time) time.Time {
	t := it.RecordedAt
	if t.IsZero() {
		t = it.CreatedAt
	}
	if now = now.UTC().Truncate(time.Microsecond); t.After(now) {
		return now
	}
	return t
}

// Import bulk-loads items from next until it reports ok == false. Items are validated
// (no defaults are filled in; created_at and updated_at at most
// memory.MaxFutureSkew ahead of the clock; recorded_at as the item says, at most
// now, or its created_at) and loaded in batches (DefaultImportBatch items, one
// transaction each): COPY into a temporary staging table, then INSERT ... ON CONFLICT
// DO NOTHING into memories, so importing the same items again changes nothing. A
// memory that its scope's tombstone covers is skipped (see forget.go).
// Embeddings on items go to the vectors table the same way, for the memories that
// exist with the same ID and scope after the batch. Memory use is bounded by the batch
// size. On error the batches already committed stay; a rerun completes the import.
func (s *Store) Import(ctx context.Context, next func() (memory.Item, bool, error)) (ImportResult, error) {
	var (
		res   ImportResult
		mrows [][]any
		vrows [][]any
	)
	flush := func() error {
		if len(mrows) == 0 {
			return nil
		}
		ins, vec, err := s.importBatchTx(ctx, mrows, vrows)
		if err != nil {
			return err
		}
		res.Inserted += ins
		res.Skipped += int64(len(mrows)) - ins
		res.Embeddings += vec
		mrows, vrows = mrows[:0], vrows[:0]
		return nil
	}
	for {
		it, ok, err := next()
		if err != nil {
			return res, fmt.Errorf("pgstore: import: reading items: %w", err)
		}
		if !ok {
			break
		}
		normalizeTimes(&it)
		if err := it.Validate(); err != nil {
			return res, fmt.Errorf("pgstore: import: memory %q: %w", it.MemoryID, err)
		}
		now := time.Now()
		if err := it.CheckNotFuture(now); err != nil {
			return res, fmt.Errorf("pgstore: import: memory %q: %w", it.MemoryID, err)
		}
		hash, err := it.ContentHash()
		if err != nil {
			return res, fmt.Errorf("pgstore: import: memory %q: %w", it.MemoryID, err)
		}
		history, err := historyJSON(it.History)
		if err != nil {
			return res, fmt.Errorf("pgstore: import: memory %q: %w", it.MemoryID, err)
		}
		mrows = append(mrows, []any{it.MemoryID, string(it.MemoryType), it.Scope, nullable(it.Key),
			[]byte(it.Content), hash, it.Source, it.BaseScore, it.CreatedAt, it.UpdatedAt,
			it.ExpiresAt, it.ArchivedAt, history, recordedAt(&it, now)})
		if len(it.Embedding) > 0 {
			vrows = append(vrows, []any{it.MemoryID, it.Scope, pgindex.EncodeVector(it.Embedding)})
		}
		if len(mrows) >= s.importBatch {
			if err := flush(); err != nil {
				return res, err
			}
		}
	}
	if err := flush(); err != nil {
		return res, err
	}
	return res, nil
}

func (s *Store) importBatchTx(ctx context.Context, mrows, vrows [][]any) (inserted, vectors int64, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := s.lockForWrite(ctx, tx); err != nil {
			return err
		}
		cols := memoryCols + `, content_hash`
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE `+memStage.Sanitize()+
			` (LIKE `+s.t.memories+` INCLUDING DEFAULTS) ON COMMIT DROP`); err != nil {
			return err
		}
		if _, err := tx.CopyFrom(ctx, memStage, memCopyCols, pgx.CopyFromRows(mrows)); err != nil {
			return fmt.Errorf("copying memories: %w", err)
		}
		// The scopes that gained memories are owed their lexical postings
		// (lexical.go: a search makes them).
		err := tx.QueryRow(ctx, `WITH ins AS (
				INSERT INTO `+s.t.memories+` (`+cols+`)
				SELECT `+cols+` FROM `+memStage.Sanitize()+` s WHERE NOT `+s.covered("s")+` ON CONFLICT DO NOTHING
				RETURNING scope
			), owed AS (
				INSERT INTO `+s.t.termPending+` (scope) SELECT DISTINCT scope FROM ins
			)
			SELECT count(*) FROM ins`).Scan(&inserted)
		if err != nil {
			return fmt.Errorf("inserting memories: %w", err)
		}

		if len(vrows) == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE `+vecStage.Sanitize()+
			` (memory_id text NOT NULL, scope text NOT NULL, embedding bytea NOT NULL) ON COMMIT DROP`); err != nil {
			return err
		}
		if _, err := tx.CopyFrom(ctx, vecStage, []string{"memory_id", "scope", "embedding"}, pgx.CopyFromRows(vrows)); err != nil {
			return fmt.Errorf("copying embeddings: %w", err)
		}
		tag, err := tx.Exec(ctx, `INSERT INTO `+s.t.vectors+` (memory_id, scope, memory_type, embedding)
			SELECT v.memory_id, m.scope, m.memory_type, v.embedding
			FROM `+vecStage.Sanitize()+` v JOIN `+s.t.memories+` m ON m.memory_id = v.memory_id AND m.scope = v.scope
			ON CONFLICT DO NOTHING`)
		if err != nil {
			return fmt.Errorf("inserting embeddings: %w", err)
		}
		vectors = tag.RowsAffected()
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("pgstore: import: %w", err)
	}
	return inserted, vectors, nil
}
