package pgindex

import (
	"bytes"
	"math"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// FuzzVectorCodec holds the []float32 fast path to the bytes pgx's own real[]
// encoding writes.
func FuzzVectorCodec(f *testing.F) {
	f.Add([]byte{}, false)
	f.Add([]byte{0, 0, 128, 63, 0, 0, 192, 127}, false) // 1, NaN
	f.Add([]byte{}, true)
	f.Fuzz(func(t *testing.T, raw []byte, null bool) {
		var v []float32
		if !null {
			v = make([]float32, 0, len(raw)/4)
			for i := 0; i+4 <= len(raw); i += 4 {
				v = append(v, math.Float32frombits(uint32(raw[i])|uint32(raw[i+1])<<8|uint32(raw[i+2])<<16|uint32(raw[i+3])<<24))
			}
		}
		plain := pgtype.NewMap()
		want, err := plain.Encode(pgtype.Float4ArrayOID, pgtype.BinaryFormatCode, v, []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		fast := pgtype.NewMap()
		ft, _ := fast.TypeForOID(pgtype.Float4ArrayOID)
		fast.RegisterType(&pgtype.Type{Name: ft.Name, OID: ft.OID, Codec: vectorCodec{Codec: ft.Codec}})
		got, err := fast.Encode(pgtype.Float4ArrayOID, pgtype.BinaryFormatCode, v, []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("encoded %v as\n%x\nwant\n%x", v, got, want)
		}
	})
}
