package jsonscan

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"testing"
)

// treeFrom builds a plain value tree (what a decoder yields) from fuzz input, so that
// every type AppendMarshal takes, nesting, tricky strings and floats at the format's
// edges come up.
type treeFrom struct{ b []byte }

func (t *treeFrom) byte() byte {
	if len(t.b) == 0 {
		return 0
	}
	c := t.b[0]
	t.b = t.b[1:]
	return c
}

func (t *treeFrom) u64() uint64 {
	var w [8]byte
	n := copy(w[:], t.b)
	t.b = t.b[n:]
	return binary.LittleEndian.Uint64(w[:])
}

func (t *treeFrom) str() string {
	n := int(t.byte() % 12)
	n = min(n, len(t.b))
	s := string(t.b[:n])
	t.b = t.b[n:]
	return s
}

var edgeFloats = []float64{0, math.Copysign(0, -1), 1e-6, 9.999999e-7, 1e21, 9.99999999999999e20, -1e21, 1e-7, 5e-324,
	math.MaxFloat64, 0.1, 1.5, -2.25, 123456789012345678, 1e20, 1e-300}

func (t *treeFrom) value(depth int) any {
	switch k := t.byte() % 13; {
	case k == 0:
		return nil
	case k == 1:
		return t.byte()%2 == 0
	case k == 2:
		return t.str()
	case k == 3:
		return int64(t.u64())
	case k == 4:
		return t.u64()
	case k == 5:
		return math.Float64frombits(t.u64())
	case k == 6:
		return edgeFloats[int(t.byte())%len(edgeFloats)]
	case k == 7:
		return json.Number(t.str())
	case k == 8:
		return int(int32(t.u64()))
	case k == 9 && depth < 6:
		if t.byte()%5 == 0 {
			return []any(nil)
		}
		a := []any{}
		for range t.byte() % 5 {
			a = append(a, t.value(depth+1))
		}
		return a
	case k >= 10 && depth < 6:
		if t.byte()%7 == 0 {
			return map[string]any(nil)
		}
		m := map[string]any{}
		for range t.byte() % 6 {
			m[t.str()] = t.value(depth + 1)
		}
		return m
	}
	return "leaf"
}

// FuzzAppendMarshal holds AppendMarshal to encoding/json.Marshal: the same bytes
// whenever it succeeds, and it succeeds whenever Marshal does (for the plain values
// it takes; NaN, infinities and invalid Numbers are where Marshal fails too).
func FuzzAppendMarshal(f *testing.F) {
	for _, s := range []string{"", "\x0a\x05\x02ab\x02\x03<&>", "\x0b\x03\x02\x04\u2028\x06\x05", "\x09\x04\x07\x031.0\x07\x02 1\x06\x07",
		"\x0a\x02\x02\x02\xff\xfe\x05\x00\x00\x00\x00\x00\x00\xf0\x7f"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tf := &treeFrom{b: b}
		v := tf.value(0)
		want, werr := json.Marshal(v)
		got, ok := AppendMarshal([]byte("x"), v)
		switch {
		case werr != nil && ok:
			t.Fatalf("AppendMarshal(%#v) = %s, but encoding/json fails: %v", v, got[1:], werr)
		case werr == nil && !ok:
			t.Fatalf("AppendMarshal(%#v) failed, encoding/json writes %s", v, want)
		case ok && !bytes.Equal(got[1:], want):
			t.Fatalf("AppendMarshal(%#v) = %s, want %s", v, got[1:], want)
		}
	})
}

func TestAppendMarshalFallsBack(t *testing.T) {
	for _, v := range []any{struct{}{}, []string{"a"}, map[string]string{}, math.NaN(), json.Number("01"), json.Number(" 1"), float32(1)} {
		if got, ok := AppendMarshal(nil, v); ok {
			t.Errorf("AppendMarshal(%#v) = %s, want a fallback to encoding/json", v, got)
		}
	}
}
