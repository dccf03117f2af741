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
	// Key, when set, recalls only the memory in that (scope, key) slot.
	Key string
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

	args := append([]any{q.Scope, now}, halfLifeArgs(hl)...)
	where := []string{`m.scope = $1`, `m.archived_at IS NULL`, `(m.expires_at IS NULL OR m.expires_at > $2)`}
	if len(types) > 0 {
		args = append(args, types)
		where = append(where, `m.memory_type = ANY($`+strconv.Itoa(len(args))+`)`)
	}
	if q.Key != "" {
		args = append(args, q.Key)
		where = append(where, `m.key = $`+strconv.Itoa(len(args)))
	}
	outer := ""
	if q.MinScore > 0 {
		args = append(args, q.MinScore)
		outer = `WHERE score >= $` + strconv.Itoa(len(args))
	}
	args = append(args, limit)

	sql := `SELECT ` + memoryCols + `, score FROM (
		SELECT m.*, ` + scoreSQL("m", "$2", [4]string{"$3", "$4", "$5", "$6"}) + ` AS score
		FROM ` + s.t.memories + ` m
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

// halfLifeArgs are the per-type half-lives in seconds, in the order scoreSQL takes
// their parameters; a type without one gets 0 (no decay).
func halfLifeArgs(hl memory.HalfLives) []any {
	return []any{hl[memory.Working].Seconds(), hl[memory.Episodic].Seconds(),
		hl[memory.Semantic].Seconds(), hl[memory.Procedural].Seconds()}
}

// scoreSQL is the effective score of the memories row alias m at the timestamptz
// parameter now, with the half-lives in seconds of working, episodic, semantic and
// procedural memory in the parameters hl (see halfLifeArgs). It is the rule of
// memory.HalfLives.Score, so that recall ranks and archival selects as Go scores:
// age from updated_at, a negative age counting as 0, a half-life <= 0 meaning no
// decay. Scores too small for float8 are 0 (see maxDecayExponent) where Go would give
// a subnormal number; no threshold tells them apart.
//
// It is a plain expression (no LATERAL), so that an UPDATE's WHERE can use it.
func scoreSQL(m, now string, hl [4]string) string {
	halfLife := `(CASE ` + m + `.memory_type WHEN 'working' THEN ` + hl[0] + `::float8 WHEN 'episodic' THEN ` + hl[1] +
		`::float8 WHEN 'semantic' THEN ` + hl[2] + `::float8 WHEN 'procedural' THEN ` + hl[3] + `::float8 ELSE 0::float8 END)`
	// date_part, not extract: extract returns numeric, several times slower per row.
	age := `greatest(date_part('epoch', ` + now + `::timestamptz - ` + m + `.updated_at), 0::float8)`
	x := `(` + age + ` / ` + halfLife + `)`
	return `(CASE
		WHEN ` + m + `.base_score <= 0 THEN 0::float8
		WHEN ` + halfLife + ` <= 0 THEN ` + m + `.base_score
		WHEN ` + x + ` >= ` + strconv.Itoa(maxDecayExponent) + ` THEN 0::float8
		WHEN ln(` + m + `.base_score) - ` + x + ` * ln(2::float8) < -700 THEN 0::float8
		ELSE ` + m + `.base_score * power(0.5::float8, ` + x + `)
	END)`
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
