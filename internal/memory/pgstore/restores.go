package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ReceivedRestore is a restore that completed into the store: which MemoryRestore
// (its UID and namespace/name), which package, when, and what it wrote.
type ReceivedRestore struct {
	UID, Name                         string
	PackageID, ManifestSHA256, Source string
	CompletedAt                       time.Time
	Restored, Unchanged               int64
}

// RecordRestore records a restore that completed. Recording the same restore again
// (its Job's retry after the record was written) updates it.
func (s *Store) RecordRestore(ctx context.Context, r ReceivedRestore) error {
	if r.UID == "" || r.ManifestSHA256 == "" {
		return errors.New("pgstore: a received restore needs its UID and the package's manifest SHA-256")
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO `+s.t.restores+`
		(restore_uid, restore_name, package_id, manifest_sha256, source, completed_at, restored, unchanged)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (restore_uid) DO UPDATE SET completed_at = excluded.completed_at,
			restored = excluded.restored, unchanged = excluded.unchanged`,
		r.UID, r.Name, r.PackageID, r.ManifestSHA256, r.Source, r.CompletedAt, r.Restored, r.Unchanged)
	if err != nil {
		return fmt.Errorf("pgstore: recording restore %s: %w", r.Name, err)
	}
	return nil
}

// ReceivedPackage is the latest restore of the package with this manifest SHA-256,
// or nil when the store never received it.
func (s *Store) ReceivedPackage(ctx context.Context, manifestSHA256 string) (*ReceivedRestore, error) {
	return s.oneRestore(ctx, `WHERE manifest_sha256 = $1 ORDER BY completed_at DESC LIMIT 1`, manifestSHA256)
}

// LastRestore is the latest restore the store received, or nil when there is none.
func (s *Store) LastRestore(ctx context.Context) (*ReceivedRestore, error) {
	return s.oneRestore(ctx, `ORDER BY completed_at DESC LIMIT 1`)
}

func (s *Store) oneRestore(ctx context.Context, where string, args ...any) (*ReceivedRestore, error) {
	var r ReceivedRestore
	err := s.pool.QueryRow(ctx, `SELECT restore_uid, restore_name, package_id, manifest_sha256, source,
		completed_at, restored, unchanged FROM `+s.t.restores+` `+where, args...).Scan(
		&r.UID, &r.Name, &r.PackageID, &r.ManifestSHA256, &r.Source, &r.CompletedAt, &r.Restored, &r.Unchanged)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: reading received restores: %w", err)
	}
	r.CompletedAt = r.CompletedAt.UTC()
	return &r, nil
}
