package jsonscan

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
)

// AppendMarshal appends the JSON of v exactly as encoding/json.Marshal writes it,
// for the plain values a decoder yields: nil, bool, string, int64, uint64, int,
// float64, json.Number, []any and map[string]any (keys sorted, HTML characters
// escaped, nil slices and maps as null). It reports false for anything else, a
// non-finite number or an invalid json.Number, with dst's contents unspecified: the
// caller then uses encoding/json, which decides (and words the error). It skips
// encoding/json's reflection and per-map key sorting through reflect.Value, which is
// most of its cost on such trees.
func AppendMarshal(dst []byte, v any) ([]byte, bool) {
	return appendValue(dst, v, 0)
}

// maxMarshalDepth bounds the nesting AppendMarshal follows (encoding/json itself
// refuses cycles, which plain trees cannot have, only beyond 1000 levels).
const maxMarshalDepth = 1000

func appendValue(dst []byte, v any, depth int) ([]byte, bool) {
	if depth > maxMarshalDepth {
		return dst, false
	}
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), true
	case bool:
		return strconv.AppendBool(dst, x), true
	case string:
		return AppendStringHTML(dst, x), true
	case int64:
		return strconv.AppendInt(dst, x, 10), true
	case int:
		return strconv.AppendInt(dst, int64(x), 10), true
	case uint64:
		return strconv.AppendUint(dst, x, 10), true
	case float64:
		return appendFloat(dst, x)
	case json.Number:
		s := string(x)
		if s == "" {
			s = "0" // as encoding/json writes an empty Number
		}
		if !validNumber(s) {
			return dst, false
		}
		return append(dst, s...), true
	case []any:
		return appendArray(dst, x, depth)
	case map[string]any:
		return appendObject(dst, x, depth)
	}
	return dst, false
}

func appendArray(dst []byte, x []any, depth int) ([]byte, bool) {
	if x == nil {
		return append(dst, "null"...), true
	}
	dst = append(dst, '[')
	for i, e := range x {
		if i > 0 {
			dst = append(dst, ',')
		}
		var ok bool
		if dst, ok = appendValue(dst, e, depth+1); !ok {
			return dst, false
		}
	}
	return append(dst, ']'), true
}

func appendObject(dst []byte, x map[string]any, depth int) ([]byte, bool) {
	if x == nil {
		return append(dst, "null"...), true
	}
	keys := make([]string, 0, len(x))
	for k := range x {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, strings.Compare)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendStringHTML(dst, k)
		dst = append(dst, ':')
		var ok bool
		if dst, ok = appendValue(dst, x[k], depth+1); !ok {
			return dst, false
		}
	}
	return append(dst, '}'), true
}

// appendFloat writes f as encoding/json does: the shortest representation that
// round-trips, in exponent form only below 1e-6 or from 1e21, with a two-digit
// exponent shortened ("1e-07" is written "1e-7").
func appendFloat(dst []byte, f float64) ([]byte, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return dst, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, true
}

// validNumber reports whether s is a JSON number literal (no space around it).
func validNumber(s string) bool {
	sc := Scanner{Data: []byte(s)}
	lit, _, ok := sc.Number()
	return ok && len(lit) == len(s)
}
