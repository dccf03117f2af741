package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/amemory/memory-operator/internal/memory"
)

// Tombstone records a forgotten scope.
type Tombstone = memory.Tombstone

// ForgetResult counts what Forget deleted.
type ForgetResult struct {
	// Deleted is the number of memories deleted.
	Deleted int64
	// VectorsDeleted is the number of vectors rows deleted.
	VectorsDeleted int64
	// ForgottenAt is the tombstone's time.
	ForgottenAt time.Time
}

// Forget deletes every memory of scope and its vectors, records (or refreshes) the
// scope's tombstone and writes an audit_log record (action "forget") with the actor,
// the reason and the counts, never any content. It is one transaction.
func (s *Store) Forget(ctx context.Context, scope, reason, actor string) (ForgetResult, error) {
	if err := memory.ValidateScope(scope); err != nil {
		return ForgetResult{}, fmt.Errorf("pgstore: forget: %w", err)
	}
	var res ForgetResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM `+s.t.vectors+` WHERE scope = $1
			OR memory_id IN (SELECT memory_id FROM `+s.t.memories+` WHERE scope = $1)`, scope)
		if err != nil {
			return err
		}
		res.VectorsDeleted = tag.RowsAffected()
		tag, err = tx.Exec(ctx, `DELETE FROM `+s.t.memories+` WHERE scope = $1`, scope)
		if err != nil {
			return err
		}
		res.Deleted = tag.RowsAffected()
		if err := tx.QueryRow(ctx, `INSERT INTO `+s.t.tombstones+` AS t (scope, forgotten_at, reason)
			VALUES ($1, now(), $2)
			ON CONFLICT (scope) DO UPDATE SET forgotten_at = EXCLUDED.forgotten_at, reason = EXCLUDED.reason
			RETURNING forgotten_at`, scope, reason).Scan(&res.ForgottenAt); err != nil {
			return err
		}
		res.ForgottenAt = res.ForgottenAt.UTC()
		_, err = tx.Exec(ctx, `INSERT INTO `+s.t.auditLog+` (action, scope, detail)
			VALUES ('forget', $1, jsonb_build_object('actor', $2::text, 'reason', $3::text,
				'deleted', $4::bigint, 'vectors_deleted', $5::bigint))`,
			scope, actor, reason, res.Deleted, res.VectorsDeleted)
		return err
	})
	if err != nil {
		return ForgetResult{}, fmt.Errorf("pgstore: forget %q: %w", scope, err)
	}
	return res, nil
}

// AddTombstone records a tombstone without deleting anything, e.g. one carried by a
// snapshot into the store it is restored to. An existing tombstone keeps the later
// of the two times (and that time's reason).
func (s *Store) AddTombstone(ctx context.Context, t Tombstone) error {
	if err := memory.ValidateScope(t.Scope); err != nil {
		return fmt.Errorf("pgstore: add tombstone: %w", err)
	}
	if t.ForgottenAt.IsZero() {
		return errors.New("pgstore: add tombstone: forgotten_at is not set")
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO `+s.t.tombstones+` AS t (scope, forgotten_at, reason)
		VALUES ($1, $2, $3)
		ON CONFLICT (scope) DO UPDATE SET
			forgotten_at = greatest(t.forgotten_at, EXCLUDED.forgotten_at),
			reason = CASE WHEN EXCLUDED.forgotten_at > t.forgotten_at THEN EXCLUDED.reason ELSE t.reason END`,
		t.Scope, t.ForgottenAt, t.Reason)
	if err != nil {
		return fmt.Errorf("pgstore: add tombstone %q: %w", t.Scope, err)
	}
	return nil
}

// Tombstones returns every tombstone, ordered by scope.
func (s *Store) Tombstones(ctx context.Context) ([]Tombstone, error) {
	rows, err := s.pool.Query(ctx, `SELECT scope, forgotten_at, reason FROM `+s.t.tombstones+` ORDER BY scope`)
	if err != nil {
		return nil, fmt.Errorf("pgstore: tombstones: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Tombstone, error) {
		var t Tombstone
		err := r.Scan(&t.Scope, &t.ForgottenAt, &t.Reason)
		t.ForgottenAt = t.ForgottenAt.UTC()
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: tombstones: %w", err)
	}
	return out, nil
}

// IsForgotten reports whether scope has a tombstone.
func (s *Store) IsForgotten(ctx context.Context, scope string) (bool, error) {
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+s.t.tombstones+` WHERE scope = $1)`, scope).Scan(&ok); err != nil {
		return false, fmt.Errorf("pgstore: is forgotten: %w", err)
	}
	return ok, nil
}
