package snapshot

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/amemory/memory-operator/internal/jsonscan"
	"github.com/amemory/memory-operator/internal/memory"
)

// appendItem appends the item's JSON line body: byte for byte what encoding/json
// produces for itemLine (memory.Item, its embedding in base64) with HTML escaping off
// (the field names and omitempty rules of memory.Item's tags are the format), without
// reflection or allocation. Content and history contents are validated and compacted
// like json.Compact. Any error leaves the item unwritten. itemjson_test.go holds this equal to encoding/json, and
// fails when memory.Item gains a field this function does not know.
func appendItem(dst []byte, it *memory.Item) ([]byte, error) {
	var err error
	dst = append(dst, `{"memory_id":`...)
	dst = jsonscan.AppendString(dst, it.MemoryID)
	dst = append(dst, `,"memory_type":`...)
	dst = jsonscan.AppendString(dst, string(it.MemoryType))
	dst = append(dst, `,"scope":`...)
	dst = jsonscan.AppendString(dst, it.Scope)
	if it.Key != "" {
		dst = append(dst, `,"key":`...)
		dst = jsonscan.AppendString(dst, it.Key)
	}
	dst = append(dst, `,"content":`...)
	if dst, err = appendRaw(dst, it.Content, "content"); err != nil {
		return dst, err
	}
	dst = append(dst, `,"source":`...)
	dst = jsonscan.AppendString(dst, it.Source)
	dst = append(dst, `,"base_score":`...)
	if dst, err = appendFloat(dst, it.BaseScore, "base_score"); err != nil {
		return dst, err
	}
	dst = append(dst, `,"created_at":`...)
	if dst, err = appendTime(dst, it.CreatedAt, "created_at"); err != nil {
		return dst, err
	}
	dst = append(dst, `,"updated_at":`...)
	if dst, err = appendTime(dst, it.UpdatedAt, "updated_at"); err != nil {
		return dst, err
	}
	if !it.RecordedAt.IsZero() {
		dst = append(dst, `,"recorded_at":`...)
		if dst, err = appendTime(dst, it.RecordedAt, "recorded_at"); err != nil {
			return dst, err
		}
	}
	if it.ExpiresAt != nil {
		dst = append(dst, `,"expires_at":`...)
		if dst, err = appendTime(dst, *it.ExpiresAt, "expires_at"); err != nil {
			return dst, err
		}
	}
	if it.ArchivedAt != nil {
		dst = append(dst, `,"archived_at":`...)
		if dst, err = appendTime(dst, *it.ArchivedAt, "archived_at"); err != nil {
			return dst, err
		}
	}
	if len(it.History) > 0 {
		dst = append(dst, `,"history":[`...)
		for i := range it.History {
			if i > 0 {
				dst = append(dst, ',')
			}
			if dst, err = appendRevision(dst, &it.History[i]); err != nil {
				return dst, err
			}
		}
		dst = append(dst, ']')
	}
	if len(it.Embedding) > 0 {
		dst = append(dst, `,"embedding":`...)
		if dst, err = appendEmbedding(dst, it.Embedding); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

// appendEmbedding appends v as format 4 writes an embedding: a JSON string holding the
// standard base64 (RFC 4648, padded) of its float32 values in little-endian byte order,
// the encoding of OpenAI's embeddings API with encoding_format "base64". Decimal
// numbers cost a restore most of its time (parsing 384 of them took 25 times as long
// as decoding their base64) and a snapshot a good part of its own.
func appendEmbedding(dst []byte, v []float32) ([]byte, error) {
	var stack [4096]byte
	raw := stack[:0]
	for i, x := range v {
		if f := float64(x); math.IsInf(f, 0) || math.IsNaN(f) {
			return dst, fmt.Errorf("embedding: element %d is %v (must be finite)", i, x)
		}
		raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(x))
	}
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, raw)
	return append(dst, '"'), nil
}

func appendRevision(dst []byte, r *memory.Revision) ([]byte, error) {
	var err error
	dst = append(dst, `{"content":`...)
	if dst, err = appendRaw(dst, r.Content, "history.content"); err != nil {
		return dst, err
	}
	dst = append(dst, `,"source":`...)
	dst = jsonscan.AppendString(dst, r.Source)
	dst = append(dst, `,"base_score":`...)
	if dst, err = appendFloat(dst, r.BaseScore, "history.base_score"); err != nil {
		return dst, err
	}
	dst = append(dst, `,"updated_at":`...)
	if dst, err = appendTime(dst, r.UpdatedAt, "history.updated_at"); err != nil {
		return dst, err
	}
	dst = append(dst, `,"superseded_at":`...)
	if dst, err = appendTime(dst, r.SupersededAt, "history.superseded_at"); err != nil {
		return dst, err
	}
	return append(dst, '}'), nil
}

// appendRaw appends a json.RawMessage as encoding/json does: nil is null, anything
// else must be one valid JSON value and is compacted.
func appendRaw(dst []byte, raw json.RawMessage, field string) ([]byte, error) {
	if raw == nil {
		return append(dst, "null"...), nil
	}
	out, err := appendCompact(dst, raw)
	if err != nil {
		return dst, fmt.Errorf("%s: %w", field, err)
	}
	return out, nil
}

// appendTime appends time.Time's JSON form (RFC 3339 with nanoseconds, quoted).
func appendTime(dst []byte, t time.Time, field string) ([]byte, error) {
	dst = append(dst, '"')
	out, err := t.AppendText(dst)
	if err != nil {
		return dst, fmt.Errorf("%s: %w", field, err)
	}
	return append(out, '"'), nil
}

// appendFloat appends a float as encoding/json does: shortest representation, in
// exponent form below 1e-6 and from 1e21, with a two-digit exponent trimmed to one.
func appendFloat(dst []byte, f float64, field string) ([]byte, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return dst, fmt.Errorf("%s: unsupported value %v", field, f)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 {
		if abs < 1e-6 || abs >= 1e21 {
			format = 'e'
		}
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, nil
}

// maxNesting matches encoding/json's limit on nested arrays and objects.
const maxNesting = 10000

// appendCompact appends src without insignificant whitespace, copying every token as
// is (json.Compact's output), and fails unless src is exactly one valid JSON value.
func appendCompact(dst, src []byte) ([]byte, error) {
	c := compactor{src: src, dst: dst}
	c.space()
	if err := c.value(0); err != nil {
		return dst, err
	}
	c.space()
	if c.i != len(c.src) {
		return dst, c.errorf("data after the top-level value")
	}
	return c.dst, nil
}

type compactor struct {
	src, dst []byte
	i        int
}

var errUnexpectedEnd = errors.New("unexpected end of JSON input")

func (c *compactor) errorf(format string, args ...any) error {
	return fmt.Errorf("invalid JSON at offset %d: %s", c.i, fmt.Sprintf(format, args...))
}

func (c *compactor) space() {
	for c.i < len(c.src) {
		switch c.src[c.i] {
		case ' ', '\t', '\n', '\r':
			c.i++
		default:
			return
		}
	}
}

func (c *compactor) value(depth int) error {
	if c.i >= len(c.src) {
		return errUnexpectedEnd
	}
	switch b := c.src[c.i]; {
	case b == '{' || b == '[':
		if depth >= maxNesting {
			return c.errorf("exceeded max depth")
		}
		return c.container(b, depth)
	case b == '"':
		return c.str()
	case b == '-' || '0' <= b && b <= '9':
		return c.number()
	case b == 't':
		return c.literal("true")
	case b == 'f':
		return c.literal("false")
	case b == 'n':
		return c.literal("null")
	default:
		return c.errorf("unexpected character %q", b)
	}
}

// container copies an object (open '{') or an array (open '[').
func (c *compactor) container(open byte, depth int) error {
	closer := byte(']')
	if open == '{' {
		closer = '}'
	}
	c.dst = append(c.dst, open)
	c.i++
	c.space()
	if c.i < len(c.src) && c.src[c.i] == closer {
		c.dst = append(c.dst, closer)
		c.i++
		return nil
	}
	for {
		if open == '{' {
			if c.i >= len(c.src) {
				return errUnexpectedEnd
			}
			if c.src[c.i] != '"' {
				return c.errorf("object key is not a string")
			}
			if err := c.str(); err != nil {
				return err
			}
			c.space()
			if c.i >= len(c.src) {
				return errUnexpectedEnd
			}
			if c.src[c.i] != ':' {
				return c.errorf("missing ':' after object key")
			}
			c.dst = append(c.dst, ':')
			c.i++
			c.space()
		}
		if err := c.value(depth + 1); err != nil {
			return err
		}
		c.space()
		if c.i >= len(c.src) {
			return errUnexpectedEnd
		}
		switch c.src[c.i] {
		case ',':
			c.dst = append(c.dst, ',')
			c.i++
			c.space()
		case closer:
			c.dst = append(c.dst, closer)
			c.i++
			return nil
		default:
			return c.errorf("unexpected character %q after a value in an object or array", c.src[c.i])
		}
	}
}

// str copies a string, checking its escapes and refusing raw control characters.
func (c *compactor) str() error {
	start := c.i
	c.i++ // opening quote
	for c.i < len(c.src) {
		b := c.src[c.i]
		switch {
		case b == '"':
			c.i++
			c.dst = append(c.dst, c.src[start:c.i]...)
			return nil
		case b < 0x20:
			return c.errorf("control character %q in string", b)
		case b == '\\':
			c.i++
			if c.i >= len(c.src) {
				return errUnexpectedEnd
			}
			switch c.src[c.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				c.i++
			case 'u':
				c.i++
				for k := 0; k < 4; k++ {
					if c.i >= len(c.src) {
						return errUnexpectedEnd
					}
					if !isHexDigit(c.src[c.i]) {
						return c.errorf("invalid \\u escape")
					}
					c.i++
				}
			default:
				return c.errorf("invalid escape \\%c", c.src[c.i])
			}
		default:
			c.i++
		}
	}
	return errUnexpectedEnd
}

func isHexDigit(b byte) bool {
	return '0' <= b && b <= '9' || 'a' <= b && b <= 'f' || 'A' <= b && b <= 'F'
}

// number copies a number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (c *compactor) number() error {
	start := c.i
	if c.src[c.i] == '-' {
		c.i++
	}
	switch {
	case c.i < len(c.src) && c.src[c.i] == '0':
		c.i++
	case c.i < len(c.src) && '1' <= c.src[c.i] && c.src[c.i] <= '9':
		c.digits()
	default:
		return c.numberErr()
	}
	if c.i < len(c.src) && c.src[c.i] == '.' {
		c.i++
		if c.digits() == 0 {
			return c.numberErr()
		}
	}
	if c.i < len(c.src) && (c.src[c.i] == 'e' || c.src[c.i] == 'E') {
		c.i++
		if c.i < len(c.src) && (c.src[c.i] == '+' || c.src[c.i] == '-') {
			c.i++
		}
		if c.digits() == 0 {
			return c.numberErr()
		}
	}
	c.dst = append(c.dst, c.src[start:c.i]...)
	return nil
}

func (c *compactor) numberErr() error {
	if c.i >= len(c.src) {
		return errUnexpectedEnd
	}
	return c.errorf("invalid number")
}

func (c *compactor) digits() int {
	n := 0
	for c.i < len(c.src) && '0' <= c.src[c.i] && c.src[c.i] <= '9' {
		c.i++
		n++
	}
	return n
}

func (c *compactor) literal(lit string) error {
	if len(c.src)-c.i < len(lit) {
		if string(c.src[c.i:]) == lit[:len(c.src)-c.i] {
			return errUnexpectedEnd
		}
		return c.errorf("invalid literal")
	}
	if string(c.src[c.i:c.i+len(lit)]) != lit {
		return c.errorf("invalid literal")
	}
	c.dst = append(c.dst, lit...)
	c.i += len(lit)
	return nil
}
