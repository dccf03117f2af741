package memory

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// CanonicalJSON returns a canonical encoding of the JSON value in raw: object keys
// sorted, no insignificant whitespace, no HTML escaping, and numbers written in one
// exact decimal form ("1.50", "15e-1" and "1.5" all become "1.5"; "1e2" and "100.0"
// become "100"). Two documents that mean the same thing encode the same bytes, and
// so does the document after a round trip through PostgreSQL jsonb, which keeps
// numbers as exact decimals. Duplicate object keys keep the last value, as jsonb does.
func CanonicalJSON(raw []byte) ([]byte, error) {
	if out, _, err := appendCanonicalFast(nil, raw); err == nil {
		return out, nil
	}
	return canonicalSlow(raw)
}

// canonicalSlow is CanonicalJSON through encoding/json: the reference the fast path
// is tested against, and the source of every error message.
func canonicalSlow(raw []byte) ([]byte, error) {
	v, err := decodeJSON(raw)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := writeCanonical(&buf, v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// decodeJSON decodes exactly one JSON value, keeping numbers as json.Number.
func decodeJSON(raw []byte) (any, error) {
	if err := checkStorableText(raw); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty JSON document")
		}
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("invalid JSON: data after the top-level value")
	}
	return v, nil
}

func writeCanonical(buf *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case nil:
		buf.WriteString("null")
	case bool:
		buf.WriteString(strconv.FormatBool(x))
	case json.Number:
		s, err := canonicalNumber(string(x))
		if err != nil {
			return err
		}
		buf.WriteString(s)
	case string:
		writeString(buf, x)
	case []any:
		buf.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeCanonical(buf, e); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case map[string]any:
		keys := sortedKeys(x)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeString(buf, k)
			buf.WriteByte(':')
			if err := writeCanonical(buf, x[k]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	default:
		return fmt.Errorf("unexpected JSON value of type %T", v)
	}
	return nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func writeString(buf *bytes.Buffer, s string) {
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)           // encoding a string cannot fail
	buf.Truncate(buf.Len() - 1) // Encode appends a newline
}

// maxExponent bounds decimal exponents; PostgreSQL's numeric cannot hold more anyway,
// and the bound keeps canonicalisation cheap for hostile input.
const maxExponent = 1 << 20

// canonicalNumber rewrites a JSON number literal into one exact decimal form:
// digits without leading or trailing zeros and a decimal exponent, printed plainly when
// short and in scientific notation ("1.5e+30") otherwise. It never goes through float64,
// so large integers and long fractions keep their value.
// Limits of PostgreSQL's numeric: NUMERIC_DSCALE_MAX, and (NUMERIC_WEIGHT_MAX + 1)
// base-10000 digits before the point.
const (
	maxNumericScale = 16383
	maxNumericWhole = 131072
)

func canonicalNumber(lit string) (string, error) {
	s := lit
	neg := false
	if strings.HasPrefix(s, "-") {
		neg, s = true, s[1:]
	}
	mant, expPart := s, ""
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant, expPart = s[:i], s[i+1:]
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	exp := 0
	if expPart != "" {
		e, err := strconv.Atoi(expPart)
		if err != nil || e > maxExponent || e < -maxExponent {
			return "", fmt.Errorf("number %s is out of range", lit)
		}
		exp = e
	}
	// PostgreSQL's numeric (what jsonb keeps numbers in) holds at most 16383 digits
	// after the decimal point, counted as written (trailing zeros included), and
	// 131072 before it.
	if scale := len(frac) - exp; scale > maxNumericScale {
		return "", fmt.Errorf("number %.40s has %d digits after the decimal point; PostgreSQL keeps at most %d", lit, scale, maxNumericScale)
	}
	// value = digits * 10^(exp - len(frac))
	digits := strings.TrimLeft(intPart+frac, "0")
	exp -= len(frac)
	if digits == "" {
		return "0", nil
	}
	trimmed := strings.TrimRight(digits, "0")
	exp += len(digits) - len(trimmed)
	digits = trimmed
	if whole := len(digits) + exp; whole > maxNumericWhole {
		return "", fmt.Errorf("number %.40s has %d digits before the decimal point; PostgreSQL keeps at most %d", lit, whole, maxNumericWhole)
	}

	var out string
	n := len(digits)
	switch point := n + exp; { // position of the decimal point from the left of digits
	case exp >= 0 && point <= 21:
		out = digits + strings.Repeat("0", exp)
	case exp < 0 && point > 0:
		out = digits[:point] + "." + digits[point:]
	case exp < 0 && point > -6:
		out = "0." + strings.Repeat("0", -point) + digits
	default:
		e := point - 1
		out = digits[:1]
		if n > 1 {
			out += "." + digits[1:]
		}
		if e >= 0 {
			out += "e+" + strconv.Itoa(e)
		} else {
			out += "e-" + strconv.Itoa(-e)
		}
	}
	if neg {
		out = "-" + out
	}
	return out, nil
}

// checkStorableText refuses JSON text that encoding/json would accept (replacing the
// offending characters with U+FFFD) but PostgreSQL's jsonb refuses, since content is
// stored as the bytes it arrived in: invalid UTF-8, and a \u escape of a UTF-16
// surrogate that is not half of a pair. It looks only at escapes and byte encoding;
// the JSON syntax is checked by the parser.
func checkStorableText(raw []byte) error {
	if !utf8.Valid(raw) {
		i := 0
		for i < len(raw) {
			r, size := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && size == 1 {
				break
			}
			i += size
		}
		return fmt.Errorf("is not valid UTF-8 (byte 0x%02x at offset %d)", raw[i], i)
	}
	for i := 0; i < len(raw); {
		j := bytes.IndexByte(raw[i:], '\\')
		if j < 0 {
			return nil
		}
		i += j
		if i+1 >= len(raw) || raw[i+1] != 'u' {
			i += 2 // an escaped character, possibly a backslash
			continue
		}
		r, ok := hex4(raw[i+2:])
		switch {
		case !ok:
			i += 2 // not an escape the parser accepts; it says so
		case utf16.IsSurrogate(r) && r < 0xdc00:
			if r2, ok2 := hex4(raw[min(i+8, len(raw)):]); i+7 < len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' && ok2 && r2 >= 0xdc00 && r2 <= 0xdfff {
				i += 12
				continue
			}
			return fmt.Errorf("has a lone UTF-16 surrogate \\u%04x at offset %d (a high surrogate must be followed by a low one), which PostgreSQL jsonb cannot store", r, i)
		case utf16.IsSurrogate(r):
			return fmt.Errorf("has a lone UTF-16 surrogate \\u%04x at offset %d (a low surrogate must follow a high one), which PostgreSQL jsonb cannot store", r, i)
		default:
			i += 6
		}
	}
	return nil
}

// hex4 decodes the four hex digits at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
