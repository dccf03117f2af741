package pgindex

import (
	"cmp"
	"container/heap"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/amemory/memory-operator/internal/vector"
)

// The embedded engine searches exactly: every vector of the scope is scored. Scoring
// in SQL (unnest and sum per row) cost 26 ms for 1,000 vectors of 256 dimensions,
// more than the whole search budget; reading the vectors in PostgreSQL's binary
// array format and scoring them here as they stream in costs a fraction of that, in
// memory bounded by K. The score is vector.Score's arithmetic (float64 products and
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
// query of a scope (SearchMany).
func (ix *Index) scoreEach(rows pgx.Rows, queries [][]float32, ks []int) ([][]vector.Hit, error) {
	defer rows.Close()
	best := make([]hitHeap, len(queries))
	binaryFormat := len(rows.FieldDescriptions()) > 1 && rows.FieldDescriptions()[1].Format == pgtype.BinaryFormatCode
	var vec []float32
	for rows.Next() {
		var (
			id  string
			raw []byte
		)
		if binaryFormat {
			values := rows.RawValues()
			id, raw = string(values[0]), values[1]
		} else if err := rows.Scan(&id, &vec); err != nil {
			return nil, err
		}
		for qi, query := range queries {
			var score float32
			if binaryFormat {
				var err error
				if score, err = scoreBinary(ix.spec.Metric, raw, query); err != nil {
					return nil, fmt.Errorf("vector of %s: %w", id, err)
				}
			} else {
				score = vector.Score(ix.spec.Metric, vec, query)
			}
			if score == 0 {
				score = 0 // -0 from a negated zero distance
			}
			h, k := vector.Hit{ID: id, Score: score}, ks[qi]
			switch {
			case k == 0 || best[qi].Len() < k:
				heap.Push(&best[qi], h)
			case better(h, best[qi][0]):
				best[qi][0] = h
				heap.Fix(&best[qi], 0)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	out := make([][]vector.Hit, len(queries))
	for qi := range best {
		out[qi] = make([]vector.Hit, best[qi].Len())
		for i := len(out[qi]) - 1; i >= 0; i-- {
			out[qi][i] = heap.Pop(&best[qi]).(vector.Hit)
		}
	}
	return out, nil
}

// better reports whether a ranks before b: higher score, then smaller memory_id.
func better(a, b vector.Hit) bool {
	return cmp.Or(cmp.Compare(b.Score, a.Score), strings.Compare(a.ID, b.ID)) < 0
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

// scoreBinary scores a real[] in PostgreSQL's binary array format (array_send:
// dimensions, null flag, element type, then per dimension its length and lower
// bound, then per element its length and big-endian IEEE 754 bits) against query,
// without building a slice of it.
func scoreBinary(m vector.Metric, b []byte, query []float32) (float32, error) {
	if len(b) < 12 {
		return 0, fmt.Errorf("real[] of %d bytes", len(b))
	}
	ndim, hasNull, elem := binary.BigEndian.Uint32(b), binary.BigEndian.Uint32(b[4:]), binary.BigEndian.Uint32(b[8:])
	if ndim != 1 || hasNull != 0 || elem != pgtype.Float4OID || len(b) < 20 {
		return 0, fmt.Errorf("not a one-dimensional real[] without nulls (dimensions %d, nulls %d, element type %d)", ndim, hasNull, elem)
	}
	n := int(binary.BigEndian.Uint32(b[12:]))
	b = b[20:]
	if n != len(query) || len(b) != 8*n {
		return 0, vector.DimensionError("stored vector", len(query), n)
	}
	var s float64
	for i, q := range query {
		x := float64(math.Float32frombits(binary.BigEndian.Uint32(b[8*i+4:])))
		if m == vector.L2 {
			d := x - float64(q)
			s += d * d
		} else {
			s += x * float64(q)
		}
	}
	if m == vector.L2 {
		return float32(-math.Sqrt(s)), nil
	}
	return float32(s), nil
}
