package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// LiveScopes returns those of scopes that hold at least one memory (archived ones
// count), in no particular order. A restore asks it of the scopes its mapping renames
// package scopes to: memories there belong to someone already.
func (s *Store) LiveScopes(ctx context.Context, scopes []string) ([]string, error) {
	if len(scopes) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT u.scope FROM unnest($1::text[]) AS u(scope)
		WHERE EXISTS (SELECT 1 FROM `+s.t.memories+` m WHERE m.scope = u.scope COLLATE "C")`, scopes)
	if err != nil {
		return nil, fmt.Errorf("pgstore: live scopes: %w", err)
	}
	defer rows.Close()
	var live []string
	for rows.Next() {
		var sc string
		if err := rows.Scan(&sc); err != nil {
			return nil, fmt.Errorf("pgstore: live scopes: %w", err)
		}
		live = append(live, sc)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: live scopes: %w", err)
	}
	return live, nil
}

// OwnMemory names a memory a caller wrote itself: its ID and its content hash
// (memory.Item.ContentHash).
type OwnMemory struct {
	ID   string
	Hash []byte
}

// ForeignMemories counts the memories of scope that are none of own (the same ID
// holding the same value), and returns the smallest such ID (for an error message);
// 0 and "" when there are none.
func (s *Store) ForeignMemories(ctx context.Context, scope string, own []OwnMemory) (int64, string, error) {
	ids := make([]string, len(own))
	hashes := make([][]byte, len(own))
	for i, o := range own {
		ids[i], hashes[i] = o.ID, o.Hash
	}
	var (
		n     int64
		first *string
	)
	err := s.pool.QueryRow(ctx, `SELECT count(*), min(m.memory_id) FROM `+s.t.memories+` m
		WHERE m.scope = $1 AND NOT EXISTS (SELECT 1 FROM unnest($2::text[], $3::bytea[]) AS o(id, hash)
			WHERE o.id = m.memory_id AND o.hash = m.content_hash)`,
		scope, ids, hashes).Scan(&n, &first)
	if err != nil {
		return 0, "", fmt.Errorf("pgstore: memories of %q: %w", scope, err)
	}
	if first == nil {
		return n, "", nil
	}
	return n, *first, nil
}

// ScopeRename is a package scope a restore writes under another name.
type ScopeRename struct {
	Source, Target string
}

// recordRenames records, in the merge's transaction, that the renamed scopes' target
// scopes hold memories of source's scopes (see migration 6).
func (s *Store) recordRenames(ctx context.Context, tx pgx.Tx, source string, renames []ScopeRename) error {
	if len(renames) == 0 {
		return nil
	}
	from := make([]string, len(renames))
	to := make([]string, len(renames))
	for i, r := range renames {
		from[i], to[i] = r.Source, r.Target
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+s.t.scopeRenames+` (target_scope, source, source_scope)
		SELECT t, $1, f FROM unnest($2::text[], $3::text[]) AS u(f, t) ON CONFLICT DO NOTHING`, source, from, to)
	if err != nil {
		return fmt.Errorf("recording renamed scopes: %w", err)
	}
	return nil
}

// KnownRenames returns those of renames that an earlier restore from source recorded
// (the same source scope written under the same target scope).
func (s *Store) KnownRenames(ctx context.Context, source string, renames []ScopeRename) ([]ScopeRename, error) {
	if len(renames) == 0 {
		return nil, nil
	}
	from := make([]string, len(renames))
	to := make([]string, len(renames))
	for i, r := range renames {
		from[i], to[i] = r.Source, r.Target
	}
	rows, err := s.pool.Query(ctx, `SELECT r.source_scope, r.target_scope FROM `+s.t.scopeRenames+` r
		JOIN unnest($2::text[], $3::text[]) AS u(f, t) ON r.source_scope = u.f COLLATE "C" AND r.target_scope = u.t COLLATE "C"
		WHERE r.source = $1`, source, from, to)
	if err != nil {
		return nil, fmt.Errorf("pgstore: renamed scopes: %w", err)
	}
	known, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ScopeRename, error) {
		var r ScopeRename
		err := row.Scan(&r.Source, &r.Target)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: renamed scopes: %w", err)
	}
	return known, nil
}
