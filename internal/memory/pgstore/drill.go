package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Census is what a restore drill compares with a package's manifest: the store's
// memories and tombstones counted in one database snapshot, and the memories a
// tombstone covers (a forgotten memory that came back: always 0 in a sound store).
type Census struct {
	Memories   int64
	Archived   int64
	Tombstones int64
	Covered    int64
	Scopes     int64
}

// Census counts the store in one repeatable-read transaction, so that the numbers
// agree with each other.
func (s *Store) Census(ctx context.Context) (Census, error) {
	var c Census
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return c, fmt.Errorf("pgstore: census: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	err = tx.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE archived_at IS NOT NULL), count(DISTINCT scope)
		FROM `+s.t.memories).Scan(&c.Memories, &c.Archived, &c.Scopes)
	if err == nil {
		err = tx.QueryRow(ctx, `SELECT count(*) FROM `+s.t.tombstones).Scan(&c.Tombstones)
	}
	if err == nil {
		err = tx.QueryRow(ctx, `SELECT count(*) FROM `+s.t.memories+` m WHERE `+s.covered("m")).Scan(&c.Covered)
	}
	if err != nil {
		return c, fmt.Errorf("pgstore: census: %w", err)
	}
	return c, tx.Commit(ctx)
}

// SampleScopes returns up to n scopes holding live (unarchived) memories, chosen by a
// hash of their names: the same store gives the same sample, and the sample is
// spread over the store rather than its first scopes.
func (s *Store) SampleScopes(ctx context.Context, n int) ([]string, error) {
	return s.strings(ctx, "sample scopes", `SELECT scope FROM `+s.t.memories+`
		WHERE archived_at IS NULL GROUP BY scope ORDER BY md5(scope), scope LIMIT $1`, n)
}

// SampleMemories returns up to n IDs of scope's live memories, chosen by a hash of
// the IDs (as SampleScopes chooses scopes).
func (s *Store) SampleMemories(ctx context.Context, scope string, n int) ([]string, error) {
	return s.strings(ctx, "sample memories", `SELECT memory_id FROM `+s.t.memories+`
		WHERE scope = $2 AND archived_at IS NULL ORDER BY md5(memory_id), memory_id LIMIT $1`, n, scope)
}

// LiveIDs returns up to limit IDs of scope's live memories after the ID after, in
// order: a scope is read a page at a time however large it is.
func (s *Store) LiveIDs(ctx context.Context, scope, after string, limit int) ([]string, error) {
	return s.strings(ctx, "live IDs", `SELECT memory_id FROM `+s.t.memories+`
		WHERE scope = $2 AND memory_id > $3 AND archived_at IS NULL ORDER BY memory_id LIMIT $1`, limit, scope, after)
}

func (s *Store) strings(ctx context.Context, what, sql string, args ...any) ([]string, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %s: %w", what, err)
	}
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return nil, fmt.Errorf("pgstore: %s: %w", what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: %s: %w", what, err)
	}
	return out, nil
}
