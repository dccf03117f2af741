package memory

import (
	"bytes"
	"slices"
	"sync"

	"github.com/amemory/memory-operator/internal/jsonscan"
)

// This file is a single-pass canonicaliser: it reads JSON bytes and appends their
// canonical encoding (the one CanonicalJSON defines) without building a tree of Go
// values, which makes bulk paths (restores hash every item) several times faster.
//
// It is an optimisation of the encoding/json-based path in canonical.go, not a second
// definition: it succeeds only on input it fully understands, and callers fall back to
// the slow path whenever it fails, so errors are always those of the slow path.
// FuzzCanonicalFast checks that whenever it succeeds its output equals the slow path's.

// errNotFast is the one error of the fast path: "use the slow path".
type errNotFast struct{}

func (errNotFast) Error() string { return "not canonicalised by the fast path" }

type fastCanon struct {
	sc jsonscan.Scanner
	// members is a stack of object members being sorted, shared by nesting levels.
	members []member
	// scratch holds decoded strings, and an object's members while they are reordered.
	scratch []byte
}

// member is one object member, already encoded as "key":value at out[start:end]. Its
// decoded key, for sorting, sits in out just before start (object drops it when it
// writes the members in order).
type member struct {
	key        []byte
	start, end int
}

// fastCanons recycles canonicalisers, whose scratch space then stops growing.
var fastCanons = sync.Pool{New: func() any { return &fastCanon{scratch: make([]byte, 0, 1024)} }}

// appendCanonicalFast appends the canonical encoding of the single JSON value in raw
// to dst and returns it with the value's first byte ('{' for an object). It also
// refuses what jsonb cannot store (NUL in strings, invalid UTF-8, lone surrogates).
// Any error means "use the slow path".
func appendCanonicalFast(dst, raw []byte) ([]byte, byte, error) {
	if checkStorableText(raw) != nil {
		return dst, 0, errNotFast{}
	}
	c := fastCanons.Get().(*fastCanon)
	defer func() {
		c.sc, c.members = jsonscan.Scanner{}, c.members[:0]
		fastCanons.Put(c)
	}()
	c.sc = jsonscan.Scanner{Data: raw}
	first := c.sc.Next()
	out, err := c.value(dst, 0)
	if err != nil || !c.sc.AtEnd() {
		return dst, 0, errNotFast{}
	}
	return out, first, nil
}

func (c *fastCanon) value(out []byte, depth int) ([]byte, error) {
	switch c.sc.Next() {
	case '{':
		return c.object(out, depth+1)
	case '[':
		return c.array(out, depth+1)
	case '"':
		var ok bool
		if c.scratch, ok = c.sc.String(c.scratch[:0]); !ok || bytes.IndexByte(c.scratch, 0) >= 0 {
			return out, errNotFast{} // NUL: jsonb cannot store it
		}
		return jsonscan.AppendBytes(out, c.scratch), nil
	case 't', 'f', 'n':
		for _, lit := range [...]string{"true", "false", "null"} {
			if c.sc.Literal(lit) {
				return append(out, lit...), nil
			}
		}
		return out, errNotFast{}
	default:
		lit, plain, ok := c.sc.Number()
		if !ok {
			return out, errNotFast{}
		}
		// A plain integer without a leading zero and of at most 21 digits is already
		// canonical (canonicalNumber prints such integers plainly); "-0" is "0".
		digits := bytes.TrimPrefix(lit, []byte("-"))
		if plain && len(digits) <= 21 && digits[0] != '0' {
			return append(out, lit...), nil
		}
		s, err := canonicalNumber(string(lit))
		if err != nil {
			return out, errNotFast{}
		}
		return append(out, s...), nil
	}
}

func (c *fastCanon) array(out []byte, depth int) ([]byte, error) {
	if depth > jsonscan.MaxDepth {
		return out, errNotFast{}
	}
	c.sc.Pos++ // '['
	out = append(out, '[')
	if c.sc.Consume(']') {
		return append(out, ']'), nil
	}
	for {
		var err error
		if out, err = c.value(out, depth); err != nil {
			return out, err
		}
		if c.sc.Consume(',') {
			out = append(out, ',')
			continue
		}
		if !c.sc.Consume(']') {
			return out, errNotFast{}
		}
		return append(out, ']'), nil
	}
}

func (c *fastCanon) object(out []byte, depth int) ([]byte, error) {
	if depth > jsonscan.MaxDepth {
		return out, errNotFast{}
	}
	c.sc.Pos++ // '{'
	base := len(out)
	out = append(out, '{')
	if c.sc.Consume('}') {
		return append(out, '}'), nil
	}
	mark := len(c.members)
	for {
		// The member is encoded at the end of out: its decoded key first (kept for
		// sorting), then the canonical "key":value.
		keyStart := len(out)
		var ok bool
		if out, ok = c.sc.String(out); !ok || bytes.IndexByte(out[keyStart:], 0) >= 0 {
			return out, errNotFast{}
		}
		key := out[keyStart:len(out):len(out)]
		memStart := len(out)
		out = jsonscan.AppendBytes(out, key)
		if !c.sc.Consume(':') {
			return out, errNotFast{}
		}
		out = append(out, ':')
		var err error
		if out, err = c.value(out, depth); err != nil {
			return out, err
		}
		c.members = append(c.members, member{key: key, start: memStart, end: len(out)})
		if c.sc.Consume(',') {
			continue
		}
		if !c.sc.Consume('}') {
			return out, errNotFast{}
		}
		break
	}
	// Sort the members by key (byte order, as Go's sort.Strings does); of duplicate
	// keys the last wins, as with encoding/json and jsonb. The keys point into out,
	// which is rewritten below: drop duplicates first.
	ms := c.members[mark:]
	slices.SortStableFunc(ms, func(a, b member) int { return bytes.Compare(a.key, b.key) })
	keep := ms[:0]
	for i, m := range ms {
		if i+1 < len(ms) && bytes.Equal(ms[i+1].key, m.key) {
			continue
		}
		keep = append(keep, m)
	}
	c.scratch = append(c.scratch[:0], out[base+1:]...)
	off := base + 1 // positions in scratch are shifted by this much
	out = out[:base+1]
	for i, m := range keep {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, c.scratch[m.start-off:m.end-off]...)
	}
	c.members = c.members[:mark]
	return append(out, '}'), nil
}
