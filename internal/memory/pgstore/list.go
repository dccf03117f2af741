package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/amemory/memory-operator/internal/memory"
)

// GetSlot returns the memory in the (scope, key) slot, or ErrNotFound.
func (s *Store) GetSlot(ctx context.Context, scope, key string) (memory.Item, error) {
	it, err := scanItem(s.pool.QueryRow(ctx, `SELECT `+memoryCols+` FROM `+s.t.memories+` WHERE scope = $1 AND key = $2`, scope, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return memory.Item{}, fmt.Errorf("%w: %s key %q", ErrNotFound, scope, key)
	}
	if err != nil {
		return memory.Item{}, fmt.Errorf("pgstore: get %s key %q: %w", scope, key, err)
	}
	return it, nil
}

// MaxListLimit is the largest page List returns.
const MaxListLimit = 1000

// ListQuery pages through the live memories of one scope in memory_id order.
type ListQuery struct {
	// Scope is required.
	Scope string
	// Types restricts the memory types; empty means all.
	Types []memory.Type
	// KeyPrefix, when set, lists only keyed memories whose key starts with it.
	KeyPrefix string
	// After is the last memory_id of the previous page ("" for the first).
	After string
	// Limit is the page size, 1..MaxListLimit.
	Limit int
	// Now is the time expiry is judged against; zero means time.Now().
	Now time.Time
	// Offset skips that many memories first (LangGraph's paging); prefer After.
	Offset int
}

// List returns a page of the scope's live memories (not archived, not expired).
func (s *Store) List(ctx context.Context, q ListQuery) ([]memory.Item, error) {
	where, args, err := liveFilter(q.Scope, q.Types, q.KeyPrefix, q.Now)
	if err != nil {
		return nil, fmt.Errorf("pgstore: list: %w", err)
	}
	if q.Limit < 1 || q.Limit > MaxListLimit {
		return nil, fmt.Errorf("pgstore: list: limit must be in [1, %d], got %d", MaxListLimit, q.Limit)
	}
	args = append(args, q.After)
	where = append(where, `memory_id > $`+strconv.Itoa(len(args)))
	args = append(args, q.Limit, max(q.Offset, 0))
	rows, err := s.pool.Query(ctx, `SELECT `+memoryCols+` FROM `+s.t.memories+`
		WHERE `+strings.Join(where, ` AND `)+`
		ORDER BY memory_id LIMIT $`+strconv.Itoa(len(args)-1)+` OFFSET $`+strconv.Itoa(len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("pgstore: list: %w", err)
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (memory.Item, error) { return scanItem(r) })
	if err != nil {
		return nil, fmt.Errorf("pgstore: list: %w", err)
	}
	return items, nil
}

// ScopeKey is a scope with the key of one of its live memories ("" for key-less ones).
type ScopeKey struct{ Scope, Key string }

// ScopeKeys returns, in (scope, key) order, up to limit distinct (scope, key prefix)
// pairs of live memories whose scope starts with scopePrefix: for a memory whose key
// starts with keyMark, its key; otherwise "". LangGraph's namespace listing is built
// from it (keys starting with '[' carry extra namespace labels).
func (s *Store) ScopeKeys(ctx context.Context, scopePrefix, keyMark string, limit int) ([]ScopeKey, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT scope, CASE WHEN starts_with(key, $2) THEN key ELSE '' END AS k
		FROM `+s.t.memories+` WHERE starts_with(scope, $1) AND archived_at IS NULL AND (expires_at IS NULL OR expires_at > now())
		ORDER BY 1, 2 LIMIT $3`, scopePrefix, keyMark, limit)
	if err != nil {
		return nil, fmt.Errorf("pgstore: scope keys: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ScopeKey, error) {
		var sk ScopeKey
		return sk, r.Scan(&sk.Scope, &sk.Key)
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: scope keys: %w", err)
	}
	return out, nil
}

// MaxRecentTurns is the most turns Recent returns.
const MaxRecentTurns = 100

// RecentQuery asks for a scope's latest turns.
type RecentQuery struct {
	// Scope is required (a session's scope, "session:<id>", or a user's).
	Scope string
	// Types restricts the memory types; empty means working and episodic (the
	// turns of a conversation, not the facts distilled from it).
	Types []memory.Type
	// Limit is how many turns, 1..MaxRecentTurns.
	Limit int
	// Now is the time expiry is judged against; zero means time.Now().
	Now time.Time
}

// Recent returns the scope's Limit latest live memories of the query's types by
// created_at (the time the turn was said), oldest first, as a transcript reads; ties
// by memory_id. Seed 000 (4.4) reads "the last 5 turns raw, then recall from the
// store": this is the first half.
func (s *Store) Recent(ctx context.Context, q RecentQuery) ([]memory.Item, error) {
	types := q.Types
	if len(types) == 0 {
		types = []memory.Type{memory.Working, memory.Episodic}
	}
	where, args, err := liveFilter(q.Scope, types, "", q.Now)
	if err != nil {
		return nil, fmt.Errorf("pgstore: recent: %w", err)
	}
	if q.Limit < 1 || q.Limit > MaxRecentTurns {
		return nil, fmt.Errorf("pgstore: recent: limit must be in [1, %d], got %d", MaxRecentTurns, q.Limit)
	}
	args = append(args, q.Limit)
	rows, err := s.pool.Query(ctx, `SELECT * FROM (SELECT `+memoryCols+` FROM `+s.t.memories+`
		WHERE `+strings.Join(where, ` AND `)+`
		ORDER BY created_at DESC, memory_id DESC LIMIT $`+strconv.Itoa(len(args))+`) latest
		ORDER BY created_at, memory_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("pgstore: recent: %w", err)
	}
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (memory.Item, error) { return scanItem(r) })
	if err != nil {
		return nil, fmt.Errorf("pgstore: recent: %w", err)
	}
	return items, nil
}
