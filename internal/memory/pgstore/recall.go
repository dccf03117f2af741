package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
)

// DefaultRecallLimit is the number of memories Recall returns when no limit is given.
const DefaultRecallLimit = 100

// RecallQuery selects the memories of one scope for an agent.
type RecallQuery struct {
	// Scope is required: recall never crosses scopes.
	Scope string
	// Types restricts the memory types; empty means all.
	Types []memory.Type
	// Limit is the maximum number of results; <= 0 means DefaultRecallLimit.
	Limit int
	// Now is the time scores are computed at and expiry is judged against; zero
	// means time.Now().
	Now time.Time
	// HalfLives are the per-type half-lives; nil means memory.DefaultHalfLives(). A
	// type missing from a non-nil map does not decay.
	HalfLives memory.HalfLives
	// MinScore drops memories whose effective score is below it; 0 keeps all.
	MinScore float64
}

// Scored is a recalled memory with its effective score.
type Scored struct {
	memory.Item
	Score float64 `json:"score"`
}

// maxDecayExponent caps age/half-life in SQL: beyond it the score counts as 0.
// PostgreSQL raises an error on floating-point underflow where Go quietly returns 0,
// and 0.5^1000 is still a normal float8, so the cap keeps power() in range.
const maxDecayExponent = 1000

// Recall returns the scope's live memories (not archived, not expired at Now), best
// first: by effective score, base_score * 0.5^(age/half_life) with age measured from
// updated_at (as memory.HalfLives.Score does), computed in SQL; ties by updated_at
// (newest first), then memory_id.
func (s *Store) Recall(ctx context.Context, q RecallQuery) ([]Scored, error) {
	if q.Scope == "" {
		return nil, errors.New("pgstore: recall: scope is required")
	}
	if err := memory.ValidateScope(q.Scope); err != nil {
		return nil, fmt.Errorf("pgstore: recall: %w", err)
	}
	types, err := typeNames(q.Types)
	if err != nil {
		return nil, fmt.Errorf("pgstore: recall: %w", err)
	}
	now := q.Now
	if now.IsZero() {
		now = time.Now()
	}
	hl := q.HalfLives
	if hl == nil {
		hl = memory.DefaultHalfLives()
	}
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultRecallLimit
	}

	args := []any{q.Scope, now,
		hl[memory.Working].Seconds(), hl[memory.Episodic].Seconds(),
		hl[memory.Semantic].Seconds(), hl[memory.Procedural].Seconds()}
	where := []string{`m.scope = $1`, `m.archived_at IS NULL`, `(m.expires_at IS NULL OR m.expires_at > $2)`}
	if len(types) > 0 {
		args = append(args, types)
		where = append(where, `m.memory_type = ANY($`+strconv.Itoa(len(args))+`)`)
	}
	outer := ""
	if q.MinScore > 0 {
		args = append(args, q.MinScore)
		outer = `WHERE score >= $` + strconv.Itoa(len(args))
	}
	args = append(args, limit)

	sql := `SELECT ` + memoryCols + `, score FROM (
		SELECT m.*, CASE
				WHEN m.base_score <= 0 THEN 0::float8
				WHEN d.half_life <= 0 THEN m.base_score
				WHEN d.age / d.half_life >= ` + strconv.Itoa(maxDecayExponent) + ` THEN 0::float8
				WHEN ln(m.base_score) - (d.age / d.half_life) * ln(2::float8) < -700 THEN 0::float8
				ELSE m.base_score * power(0.5::float8, d.age / d.half_life)
			END AS score
		FROM ` + s.t.memories + ` m
		CROSS JOIN LATERAL (SELECT
			greatest(extract(epoch FROM ($2::timestamptz - m.updated_at))::float8, 0::float8) AS age,
			CASE m.memory_type
				WHEN 'working' THEN $3::float8
				WHEN 'episodic' THEN $4::float8
				WHEN 'semantic' THEN $5::float8
				WHEN 'procedural' THEN $6::float8
				ELSE 0::float8
			END AS half_life) d
		WHERE ` + strings.Join(where, ` AND `) + `
	) r ` + outer + `
	ORDER BY score DESC, updated_at DESC, memory_id
	LIMIT $` + strconv.Itoa(len(args))

	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("pgstore: recall: %w", err)
	}
	defer rows.Close()
	var out []Scored
	for rows.Next() {
		var sc Scored
		it, err := scanItem(rows, &sc.Score)
		if err != nil {
			return nil, fmt.Errorf("pgstore: recall: %w", err)
		}
		sc.Item = it
		out = append(out, sc)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: recall: %w", err)
	}
	return out, nil
}

// typeNames validates types and returns their names (nil for none).
func typeNames(types []memory.Type) ([]string, error) {
	if len(types) == 0 {
		return nil, nil
	}
	out := make([]string, len(types))
	for i, t := range types {
		if err := t.Validate(); err != nil {
			return nil, err
		}
		out[i] = string(t)
	}
	return out, nil
}
