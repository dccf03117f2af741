package pgindex

import (
	"context"
	"fmt"

	"github.com/amemory/memory-operator/internal/vector"
)

var _ vector.Scorer = (*Index)(nil)

// ScoreIDs scores the given entries of q.Scope (and q.Types) with the expression
// Search uses, so a memory scores the same on both paths; ranked by vector.RankHits
// (the float32 score, ties by memory_id in byte order). One query, whatever the number
// of IDs.
//
// SQL orders by the float8 score, which two scores equal as float32 may not share: it
// returns a few rows past K (scoreSlack) and RankHits has the last word.
func (ix *Index) ScoreIDs(ctx context.Context, q vector.Query, ids []string) ([]vector.Hit, error) {
	if err := vector.ValidateScoreQuery(ix.spec, q, ids); err != nil {
		return nil, fmt.Errorf("score vectors in %s: %w", ix.table, err)
	}
	if len(ids) == 0 {
		return []vector.Hit{}, nil
	}
	var limit any // NULL: LIMIT ALL
	if q.K > 0 {
		limit = q.K + scoreSlack
	}
	args := []any{q.Scope, vector.Prepare(ix.spec.Metric, q.Vector), ids, ix.spec.Dimension, limit}
	typeFilter := ""
	if len(q.Types) > 0 {
		typeFilter = ` AND v.memory_type = ANY($6::text[])`
		args = append(args, q.Types)
	}
	sql := `SELECT memory_id, score FROM (
		SELECT v.memory_id, (SELECT ` + scoreExpr(ix.spec.Metric) + ` FROM unnest(v.embedding, $2::real[]) AS u(a, b)) AS score
		FROM ` + ix.table + ` v
		WHERE v.memory_id = ANY($3::text[]) AND v.scope = $1` + typeFilter + ` AND cardinality(v.embedding) = $4
	) s ORDER BY score DESC, memory_id COLLATE "C" LIMIT $5`
	hits, err := ix.queryHits(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("score vectors in %s: %w", ix.table, err)
	}
	return vector.RankHits(hits, q.K), nil
}

// scoreSlack is how many rows past K ScoreIDs reads: more than can share one float32
// score at the cut in any real ranking.
const scoreSlack = 16
