package pgindex

import (
	"context"
	"encoding/binary"
	"math"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// RegisterVectorCodec makes conn encode a []float32 bound to a real[] parameter or
// COPY column straight into PostgreSQL's binary array format. pgx's generic array
// encoding boxes every element into an interface on its way (an allocation per
// float: at 256 dimensions, a restore's vectors spent more time there than anywhere
// else in the worker). Everything else about real[] (other Go types, the text
// format, scanning) is left to pgx's own codec. Use it as (or in) a pool's
// AfterConnect; without it vectors are written the same, only slower.
func RegisterVectorCodec(_ context.Context, conn *pgx.Conn) error {
	m := conn.TypeMap()
	t, ok := m.TypeForOID(pgtype.Float4ArrayOID)
	if !ok {
		return nil
	}
	m.RegisterType(&pgtype.Type{Name: t.Name, OID: t.OID, Codec: vectorCodec{Codec: t.Codec}})
	return nil
}

// vectorCodec is real[]'s codec with a binary encode plan of its own for []float32.
type vectorCodec struct{ pgtype.Codec }

func (c vectorCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if _, ok := value.([]float32); ok && format == pgtype.BinaryFormatCode {
		return float4ArrayPlan{}
	}
	return c.Codec.PlanEncode(m, oid, format, value)
}

// float4ArrayPlan writes a []float32 as a one-dimensional real[] (array_recv's
// format: dimensions, null flag, element type, length and lower bound, then each
// element's length and big-endian IEEE 754 bits), and a nil slice as NULL: the bytes
// pgx's own array encoding writes.
type float4ArrayPlan struct{}

func (float4ArrayPlan) Encode(value any, buf []byte) ([]byte, error) {
	v := value.([]float32)
	if v == nil {
		return nil, nil
	}
	buf = binary.BigEndian.AppendUint32(buf, 1) // dimensions
	buf = binary.BigEndian.AppendUint32(buf, 0) // no nulls
	buf = binary.BigEndian.AppendUint32(buf, pgtype.Float4OID)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(v)))
	buf = binary.BigEndian.AppendUint32(buf, 1) // lower bound
	for _, f := range v {
		buf = binary.BigEndian.AppendUint32(buf, 4)
		buf = binary.BigEndian.AppendUint32(buf, math.Float32bits(f))
	}
	return buf, nil
}
