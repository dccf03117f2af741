package pgindex

import (
	"context"
	"fmt"

	"github.com/amemory/memory-operator/internal/vector"
)

var _ vector.Scorer = (*Index)(nil)

// ScoreIDs scores the given entries of q.Scope (and q.Types) as Search does (see
// scan.go), so a memory scores the same on both paths; ranked by vector.RankHits
// (the float32 score, ties by memory_id in byte order). One query, whatever the number
// of IDs.
func (ix *Index) ScoreIDs(ctx context.Context, q vector.Query, ids []string) ([]vector.Hit, error) {
	if err := vector.ValidateScoreQuery(ix.spec, q, ids); err != nil {
		return nil, fmt.Errorf("score vectors in %s: %w", ix.table, err)
	}
	if len(ids) == 0 {
		return []vector.Hit{}, nil
	}
	args := []any{q.Scope, ids, storedBytes(ix.spec.Dimension)}
	typeFilter := ""
	if len(q.Types) > 0 {
		typeFilter = ` AND v.memory_type = ANY($4::text[])`
		args = append(args, q.Types)
	}
	hits, err := ix.scoreRows(ctx, vector.Prepare(ix.spec.Metric, q.Vector), q.K, `SELECT v.memory_id, v.embedding FROM `+ix.table+` v
		WHERE v.memory_id = ANY($2::text[]) AND v.scope = $1`+typeFilter+` AND octet_length(v.embedding) = $3`, args...)
	if err != nil {
		return nil, fmt.Errorf("score vectors in %s: %w", ix.table, err)
	}
	return vector.RankHits(hits, q.K), nil
}
