package pgindex

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/amemory/memory-operator/internal/vector"
)

// The embedded engine stores a vector as bytea: its components' big-endian IEEE 754
// float32 bits, 4 bytes each, nothing else (the bytes float4send writes for each
// component, which migration 9 uses to convert the real[] column of older stores).
// Reading a real[] back made the server run array_send, a function call per
// component: 9 µs a row of 384 dimensions, 25 times what sending the same vector as
// bytea costs, and most of a scope search's time. A dimension is 4 bytes of it, so
// "vectors of dimension d" is octet_length(embedding) = 4d in SQL.

// EncodeVector is v in the storage format.
func EncodeVector(v []float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, f := range v {
		b = binary.BigEndian.AppendUint32(b, math.Float32bits(f))
	}
	return b
}

// DecodeVector reads a vector in the storage format.
func DecodeVector(b []byte) ([]float32, error) {
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("stored vector of %d bytes, not a whole number of float32 components", len(b))
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.BigEndian.Uint32(b[4*i:]))
	}
	return v, nil
}

// storedBytes is the length of a stored vector of dim components.
func storedBytes(dim int) int { return 4 * dim }

// scoreStored scores a vector in the storage format against query with
// vector.Score's arithmetic (float64 products and sums in component order, rounded
// to float32), without building a slice of it. It is the inner loop of an exact
// search: one loop per metric, and b resliced to the query's length so the compiler
// drops the bounds checks.
func scoreStored(m vector.Metric, b []byte, query []float32) (float32, error) {
	if len(b) != storedBytes(len(query)) {
		if len(b)%4 != 0 {
			return 0, fmt.Errorf("stored vector of %d bytes, not a whole number of float32 components", len(b))
		}
		return 0, vector.DimensionError("stored vector", len(query), len(b)/4)
	}
	var s float64
	if m == vector.L2 {
		for i, q := range query {
			c := b[4*i : 4*i+4 : 4*i+4]
			d := float64(math.Float32frombits(binary.BigEndian.Uint32(c))) - float64(q)
			s += d * d
		}
		return float32(-math.Sqrt(s)), nil
	}
	for i, q := range query {
		c := b[4*i : 4*i+4 : 4*i+4]
		s += float64(math.Float32frombits(binary.BigEndian.Uint32(c))) * float64(q)
	}
	return float32(s), nil
}
