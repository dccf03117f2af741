package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/amemory/memory-operator/internal/memory"
)

// A search narrowed by something the vector index does not hold (a key prefix, a
// filter on the content) selects its candidates here, streamed in one query, and has
// only those scored (vector.Scorer); it then loads the page it returns with GetMany.

// CandidateQuery selects the live memories (not archived, not expired) of one scope.
type CandidateQuery struct {
	// Scope is required.
	Scope string
	// Types restricts the memory types; empty means all.
	Types []memory.Type
	// KeyPrefix, when set, selects only keyed memories whose key starts with it.
	KeyPrefix string
	// Now is the time expiry is judged against; zero means time.Now().
	Now time.Time
	// Content reads each memory's content too (a filter needs it); without it only
	// IDs and keys cross the wire.
	Content bool
}

// Candidate is one memory a CandidateQuery selects.
type Candidate struct {
	MemoryID string
	Key      string          // "" for a key-less memory
	Content  json.RawMessage // only with CandidateQuery.Content
}

// ErrStop ends EachCandidate early, without an error, when fn returns it.
var ErrStop = errors.New("pgstore: stop")

// EachCandidate calls fn with every memory q selects, in memory_id order, reading
// them from one query as they stream in (a scope of any size costs one round trip
// and constant memory here). fn may return ErrStop to end the scan.
func (s *Store) EachCandidate(ctx context.Context, q CandidateQuery, fn func(Candidate) error) error {
	where, args, err := liveFilter(q.Scope, q.Types, q.KeyPrefix, q.Now)
	if err != nil {
		return fmt.Errorf("pgstore: candidates: %w", err)
	}
	content := `NULL::jsonb`
	if q.Content {
		content = `content`
	}
	rows, err := s.pool.Query(ctx, `SELECT memory_id, coalesce(key, ''), `+content+` FROM `+s.t.memories+`
		WHERE `+strings.Join(where, ` AND `)+` ORDER BY memory_id`, args...)
	if err != nil {
		return fmt.Errorf("pgstore: candidates: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var c Candidate
		var raw []byte
		if err := rows.Scan(&c.MemoryID, &c.Key, &raw); err != nil {
			return fmt.Errorf("pgstore: candidates: %w", err)
		}
		if raw != nil {
			c.Content = raw
		}
		if err := fn(c); err != nil {
			if errors.Is(err, ErrStop) {
				return nil
			}
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgstore: candidates: %w", err)
	}
	return nil
}

// liveFilter is the WHERE clause (its terms, and their arguments) of the live
// memories of scope, of the types and under the key prefix when given, at now (zero:
// time.Now()). More terms can follow, numbered from len(args)+1.
func liveFilter(scope string, types []memory.Type, keyPrefix string, now time.Time) ([]string, []any, error) {
	if err := memory.ValidateScope(scope); err != nil {
		return nil, nil, err
	}
	names, err := typeNames(types)
	if err != nil {
		return nil, nil, err
	}
	if now.IsZero() {
		now = time.Now()
	}
	args := []any{scope, now}
	where := []string{`scope = $1`, `archived_at IS NULL`, `(expires_at IS NULL OR expires_at > $2)`}
	if len(names) > 0 {
		args = append(args, names)
		where = append(where, `memory_type = ANY($`+strconv.Itoa(len(args))+`)`)
	}
	if keyPrefix != "" {
		args = append(args, keyPrefix)
		where = append(where, `starts_with(key, $`+strconv.Itoa(len(args))+`)`)
	}
	return where, args, nil
}

// GetMany returns the stored memories with the given IDs, in one query, in memory_id
// order; IDs that name no memory are left out. It does not judge liveness: the caller
// does, as after Get.
func (s *Store) GetMany(ctx context.Context, ids []string) ([]memory.Item, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT `+memoryCols+` FROM `+s.t.memories+` WHERE memory_id = ANY($1::text[]) ORDER BY memory_id`, ids)
	if err != nil {
		return nil, fmt.Errorf("pgstore: get many: %w", err)
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (memory.Item, error) { return scanItem(r) })
	if err != nil {
		return nil, fmt.Errorf("pgstore: get many: %w", err)
	}
	return items, nil
}
