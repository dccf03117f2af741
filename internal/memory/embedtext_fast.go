package memory

import (
	"bytes"
	"slices"
	"strconv"
	"sync"

	"github.com/amemory/memory-operator/internal/jsonscan"
)

// embeddingTextFast is EmbeddingText without encoding/json's reflection and maps: a
// restore embeds every memory it writes, and decoding content into maps was most of
// the time a hashing embedder takes. It parses into a flat tree over one buffer of
// decoded strings and writes the lines flattenText would write straight into one
// output buffer. ok is false when it cannot decide (anything unusual: invalid JSON,
// very deep nesting); the slow path then does. FuzzEmbeddingTextFast holds the two
// equal.
func embeddingTextFast(key string, content []byte) (string, bool) {
	if checkStorableText(content) != nil {
		return "", false
	}
	p := textParsers.Get().(*textParser)
	defer textParsers.Put(p)
	p.reset(content)
	root, ok := p.value(0)
	if !ok || !p.s.AtEnd() {
		return "", false
	}
	p.path = append(p.path, key...)
	p.flatten(root)
	if p.lines == 0 {
		return key, true
	}
	return string(p.out), true
}

var textParsers = sync.Pool{New: func() any { return new(textParser) }}

// maxFastDepth leaves deeply nested content to encoding/json, which decides on its
// own limit.
const maxFastDepth = 256

// textNode is a decoded JSON value: an object or an array (its children are
// kids[first:first+n], an object's sorted by key), or a scalar whose text is
// arena[start:end] (a string's decoded bytes; null, true and false as they read; a
// number's literal).
type textNode struct {
	kind       byte // '{', '[', 's' (scalar text) or 'n' (number literal)
	start, end int32
	// key is the member name of an object's child, in the arena.
	keyStart, keyEnd int32
	first, n         int32
}

type textParser struct {
	s     jsonscan.Scanner
	arena []byte
	nodes []textNode
	kids  []int32 // children of objects and arrays, in blocks
	stack []int32 // children being collected
	path  []byte
	out   []byte
	lines int
}

func (p *textParser) reset(content []byte) {
	p.s = jsonscan.Scanner{Data: content}
	p.arena, p.nodes, p.kids, p.stack, p.path, p.out, p.lines = p.arena[:0], p.nodes[:0], p.kids[:0], p.stack[:0], p.path[:0], p.out[:0], 0
}

func (p *textParser) text(start, end int32) []byte { return p.arena[start:end] }

func (p *textParser) add(n textNode) int32 {
	p.nodes = append(p.nodes, n)
	return int32(len(p.nodes) - 1)
}

func (p *textParser) scalar(kind byte, text []byte) int32 {
	start := int32(len(p.arena))
	p.arena = append(p.arena, text...)
	return p.add(textNode{kind: kind, start: start, end: int32(len(p.arena))})
}

func (p *textParser) value(depth int) (int32, bool) {
	if depth > maxFastDepth {
		return 0, false
	}
	switch c := p.s.Next(); {
	case c == '"':
		start := len(p.arena)
		var ok bool
		if p.arena, ok = p.s.String(p.arena); !ok {
			return 0, false
		}
		return p.add(textNode{kind: 's', start: int32(start), end: int32(len(p.arena))}), true
	case c == '{':
		return p.object(depth)
	case c == '[':
		p.s.Pos++
		mark := len(p.stack)
		if !p.s.Consume(']') {
			for {
				kid, ok := p.value(depth + 1)
				if !ok {
					return 0, false
				}
				p.stack = append(p.stack, kid)
				if p.s.Consume(']') {
					break
				}
				if !p.s.Consume(',') {
					return 0, false
				}
			}
		}
		return p.add(p.block('[', mark)), true
	case c == '-' || ('0' <= c && c <= '9'):
		lit, _, ok := p.s.Number()
		return p.scalar('n', lit), ok
	}
	for _, lit := range []string{"null", "true", "false"} {
		if p.s.Literal(lit) {
			return p.scalar('s', []byte(lit)), true
		}
	}
	return 0, false
}

// block moves the children collected since mark into kids.
func (p *textParser) block(kind byte, mark int) textNode {
	n := textNode{kind: kind, first: int32(len(p.kids)), n: int32(len(p.stack) - mark)}
	p.kids = append(p.kids, p.stack[mark:]...)
	p.stack = p.stack[:mark]
	return n
}

// object reads an object with its members sorted by key, as flattenText sorts a
// map's keys; of duplicate keys the last value wins, as when encoding/json fills a map.
func (p *textParser) object(depth int) (int32, bool) {
	p.s.Pos++
	mark := len(p.stack)
	if !p.s.Consume('}') {
		for {
			keyStart := len(p.arena)
			var ok bool
			if p.arena, ok = p.s.String(p.arena); !ok || !p.s.Consume(':') {
				return 0, false
			}
			keyEnd := len(p.arena)
			kid, ok := p.value(depth + 1)
			if !ok {
				return 0, false
			}
			p.nodes[kid].keyStart, p.nodes[kid].keyEnd = int32(keyStart), int32(keyEnd)
			p.stack = append(p.stack, kid)
			if p.s.Consume('}') {
				break
			}
			if !p.s.Consume(',') {
				return 0, false
			}
		}
	}
	members := p.stack[mark:]
	key := func(i int32) []byte { return p.text(p.nodes[i].keyStart, p.nodes[i].keyEnd) }
	slices.SortStableFunc(members, func(a, b int32) int { return bytes.Compare(key(a), key(b)) })
	kept := members[:0]
	for i, m := range members {
		if i+1 < len(members) && bytes.Equal(key(members[i+1]), key(m)) {
			continue // a later duplicate replaces it
		}
		kept = append(kept, m)
	}
	p.stack = p.stack[:mark+len(kept)]
	return p.add(p.block('{', mark)), true
}

// appendScalar appends scalarText of node i to b.
func (p *textParser) appendScalar(b []byte, i int32) ([]byte, bool) {
	n := &p.nodes[i]
	switch n.kind {
	case 's':
		return append(b, p.text(n.start, n.end)...), true
	case 'n':
		lit := string(p.text(n.start, n.end))
		if s, err := canonicalNumber(lit); err == nil {
			return append(b, s...), true
		}
		return append(b, lit...), true
	}
	return b, false
}

// startLine begins an output line: the line separator, then leaf's "path: ".
func (p *textParser) startLine() {
	if p.lines > 0 {
		p.out = append(p.out, '\n')
	}
	p.lines++
	if len(p.path) > 0 {
		p.out = append(p.out, p.path...)
		p.out = append(p.out, ": "...)
	}
}

// flatten is flattenText for node i under p.path.
func (p *textParser) flatten(i int32) {
	n := p.nodes[i]
	kids := p.kids[n.first : n.first+n.n]
	switch n.kind {
	case '{':
		for _, k := range kids {
			p.child(p.text(p.nodes[k].keyStart, p.nodes[k].keyEnd), k)
		}
	case '[':
		if len(kids) == 0 {
			return
		}
		if !slices.ContainsFunc(kids, func(k int32) bool { return p.nodes[k].kind == '{' || p.nodes[k].kind == '[' }) {
			p.startLine()
			for j, k := range kids {
				if j > 0 {
					p.out = append(p.out, ", "...)
				}
				p.out, _ = p.appendScalar(p.out, k)
			}
			return
		}
		var idx []byte
		for j, k := range kids {
			idx = strconv.AppendInt(idx[:0], int64(j), 10)
			p.child(idx, k)
		}
	default:
		p.startLine()
		p.out, _ = p.appendScalar(p.out, i)
	}
}

// child flattens node k under the path extended by name (joined with a dot).
func (p *textParser) child(name []byte, k int32) {
	mark := len(p.path)
	if mark > 0 {
		p.path = append(p.path, '.')
	}
	p.path = append(p.path, name...)
	p.flatten(k)
	p.path = p.path[:mark]
}
