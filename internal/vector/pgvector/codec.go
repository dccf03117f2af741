package pgvector

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/amemory/memory-operator/internal/vector"
)

// How vectors cross the wire. pgx knows nothing of the vector type (its OID differs
// per database), so: a query vector or an INSERTed one is a text parameter
// ("[1,2.5,...]", parsed once by vector_in: a string is always sent as text, and
// the shortest float32 representation round-trips exactly); COPY rows carry
// vector_recv's binary format as raw bytes (pgx writes a []byte as it is for a type
// it does not know); and results are cast to real[] in SQL, which pgx reads in
// binary.

// TextVector renders v as pgvector's text input.
func TextVector(v []float32) string {
	b := make([]byte, 0, 2+len(v)*10)
	b = append(b, '[')
	for i, x := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendFloat(b, float64(x), 'g', -1, 32)
	}
	return string(append(b, ']'))
}

// binaryVector renders v in vector_recv's format: the dimension and an unused field
// as big-endian int16, then each component as big-endian IEEE 754 bits.
func binaryVector(v []float32) []byte {
	b := make([]byte, 4, 4+4*len(v))
	binary.BigEndian.PutUint16(b, uint16(len(v)))
	for _, x := range v {
		b = binary.BigEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// decodeReals reads a real[] in PostgreSQL's binary array format (array_send:
// dimensions, null flag, element type, per dimension its length and lower bound,
// then per element its length and big-endian IEEE 754 bits) into dst, which it
// returns resized to the array's length.
func decodeReals(dst []float32, b []byte) ([]float32, error) {
	if len(b) < 12 {
		return nil, fmt.Errorf("real[] of %d bytes", len(b))
	}
	ndim, hasNull, elem := binary.BigEndian.Uint32(b), binary.BigEndian.Uint32(b[4:]), binary.BigEndian.Uint32(b[8:])
	if ndim != 1 || hasNull != 0 || elem != pgtype.Float4OID || len(b) < 20 {
		return nil, fmt.Errorf("not a one-dimensional real[] without nulls (dimensions %d, nulls %d, element type %d)", ndim, hasNull, elem)
	}
	n := int(binary.BigEndian.Uint32(b[12:]))
	b = b[20:]
	if len(b) != 8*n {
		return nil, fmt.Errorf("real[] of %d elements in %d bytes", n, len(b))
	}
	dst = dst[:0]
	for i := range n {
		dst = append(dst, math.Float32frombits(binary.BigEndian.Uint32(b[8*i+4:])))
	}
	return dst, nil
}

// score is vector.Score, with the -0 of a negated zero distance made 0.
func score(m vector.Metric, stored, query []float32) float32 {
	s := vector.Score(m, stored, query)
	if s == 0 {
		return 0
	}
	return s
}
