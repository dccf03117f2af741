package milvus

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/milvus-io/milvus-sdk-go/v2/client"
	"github.com/milvus-io/milvus-sdk-go/v2/entity"

	"github.com/amemory/memory-operator/internal/vector"
)

var _ vector.Scorer = (*Index)(nil)

// ScoreIDs reads the stored vectors of the given entries of q.Scope (and q.Types),
// maxExprIDs per query, and scores them here with vector.Score: exact whatever the
// collection's index (HNSW is approximate, and a filtered HNSW search can come back
// short). The vectors cross the wire: 4 bytes per dimension per ID.
func (ix *Index) ScoreIDs(ctx context.Context, q vector.Query, ids []string) ([]vector.Hit, error) {
	if err := vector.ValidateScoreQuery(ix.spec, q, ids); err != nil {
		return nil, fmt.Errorf("milvus score in %s: %w", ix.collection, err)
	}
	scope, err := ScopeFilter(q.Scope, q.Types)
	if err != nil {
		return nil, fmt.Errorf("milvus score in %s: %w", ix.collection, err)
	}
	qv := vector.Prepare(ix.spec.Metric, q.Vector)
	hits := make([]vector.Hit, 0, len(ids))
	for start := 0; start < len(ids); start += maxExprIDs {
		expr := scope + " && " + FieldID + " in " + idList(ids[start:min(start+maxExprIDs, len(ids))])
		var rs client.ResultSet
		err := ix.loaded(ctx, func() (err error) {
			rs, err = ix.c.Query(ctx, ix.collection, nil, expr, []string{FieldID, FieldEmbedding},
				client.WithSearchQueryConsistencyLevel(entity.ClStrong))
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("milvus score in %s: %w", ix.collection, err)
		}
		if rs.Len() == 0 {
			continue
		}
		idCol, okID := rs.GetColumn(FieldID).(*entity.ColumnVarChar)
		vecCol, okVec := rs.GetColumn(FieldEmbedding).(*entity.ColumnFloatVector)
		if !okID || !okVec {
			return nil, fmt.Errorf("milvus score in %s: unexpected result columns", ix.collection)
		}
		vecs := vecCol.Data()
		for i, id := range idCol.Data() {
			if len(vecs[i]) != ix.spec.Dimension {
				continue // as Search: only vectors of the index's dimension
			}
			hits = append(hits, vector.Hit{ID: id, Score: zeroSign(vector.Score(ix.spec.Metric, vecs[i], qv))})
		}
	}
	return vector.RankHits(hits, q.K), nil
}

// idList renders IDs as a Milvus list literal. ValidateScoreQuery checked them
// (vector.ValidateID: printable ASCII without quotes or backslashes), so Go's quoting
// is the literal.
func idList(ids []string) string {
	quoted := make([]string, len(ids))
	for i, id := range ids {
		quoted[i] = strconv.Quote(id)
	}
	return "[" + strings.Join(quoted, ",") + "]"
}

// zeroSign turns -0 (a negated zero distance) into 0, as Search reports it.
func zeroSign(s float32) float32 {
	if s == 0 {
		return 0
	}
	return s
}
