package pgindex

import (
	"container/heap"
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/amemory/memory-operator/internal/vector"
)

// The embedded engine searches exactly: every vector of the scope is scored. Scoring
// in SQL (unnest and sum per row) cost 26 ms for 1,000 vectors of 256 dimensions,
// more than the whole search budget; reading the stored bytes (storage.go) and
// scoring them here as they stream in costs a fraction of that, in memory bounded
// by K. The score is vector.Score's arithmetic (float64 products and
// sums in component order, rounded to float32), so Search and ScoreIDs agree with
// each other and with the conformance suite's reference.

// scoreRows scores the (memory_id, embedding) rows of sql against query and returns
// the best k (all when k is 0), best first, ties by memory_id in byte order.
func (ix *Index) scoreRows(ctx context.Context, query []float32, k int, sql string, args ...any) ([]vector.Hit, error) {
	rows, err := ix.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	hits, err := ix.scoreEach(rows, [][]float32{query}, []int{k})
	if err != nil {
		return nil, err
	}
	return hits[0], nil
}

// scoreEach scores every (memory_id, embedding) row against each of queries, keeping
// the best ks[i] for queries[i] (all when 0), and closes rows. One scan serves every
// query of a scope.
func (ix *Index) scoreEach(rows pgx.Rows, queries [][]float32, ks []int) ([][]vector.Hit, error) {
	best := make([]hitHeap, len(queries))
	err := eachStored(rows, func(_, id string, raw []byte) error {
		for qi, query := range queries {
			if err := best[qi].offer(ix.spec.Metric, id, raw, query, ks[qi]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([][]vector.Hit, len(queries))
	for qi := range best {
		out[qi] = best[qi].ranked()
	}
	return out, nil
}

// eachStored calls fn with each row of rows, ([scope,] memory_id, embedding): the
// scope is "" when rows have two columns. raw is valid only during the call. It
// closes rows.
func eachStored(rows pgx.Rows, fn func(scope, id string, raw []byte) error) error {
	defer rows.Close()
	fields := rows.FieldDescriptions()
	withScope := len(fields) == 3
	// In the binary format a bytea's value is its bytes: read in place, no copy.
	binaryFormat := len(fields) > 1 && fields[len(fields)-1].Format == pgtype.BinaryFormatCode
	for rows.Next() {
		var (
			scope, id string
			raw       []byte
			err       error
		)
		switch {
		case binaryFormat:
			values := rows.RawValues()
			if withScope {
				scope, values = string(values[0]), values[1:]
			}
			id, raw = string(values[0]), values[1]
		case withScope:
			err = rows.Scan(&scope, &id, &raw)
		default:
			err = rows.Scan(&id, &raw)
		}
		if err != nil {
			return err
		}
		if err := fn(scope, id, raw); err != nil {
			return fmt.Errorf("vector of %s: %w", id, err)
		}
	}
	return rows.Err()
}

// offer scores the stored vector raw of memory id against query and keeps it when it
// is among the best k (all when 0).
func (h *hitHeap) offer(m vector.Metric, id string, raw []byte, query []float32, k int) error {
	score, err := scoreStored(m, raw, query)
	if err != nil {
		return err
	}
	if score == 0 {
		score = 0 // -0 from a negated zero distance
	}
	hit := vector.Hit{ID: id, Score: score}
	switch {
	case k == 0 || h.Len() < k:
		heap.Push(h, hit)
	case better(hit, (*h)[0]):
		(*h)[0] = hit
		heap.Fix(h, 0)
	}
	return nil
}

// ranked empties h into its hits, best first.
func (h *hitHeap) ranked() []vector.Hit {
	out := make([]vector.Hit, h.Len())
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = heap.Pop(h).(vector.Hit)
	}
	return out
}

// better reports whether a ranks before b: higher score, then smaller memory_id.
func better(a, b vector.Hit) bool {
	return vector.CompareHits(a, b) < 0
}

// hitHeap is a min-heap of hits by rank: its root is the worst hit kept.
type hitHeap []vector.Hit

func (h hitHeap) Len() int           { return len(h) }
func (h hitHeap) Less(i, j int) bool { return better(h[j], h[i]) }
func (h hitHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *hitHeap) Push(x any)        { *h = append(*h, x.(vector.Hit)) }
func (h *hitHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
