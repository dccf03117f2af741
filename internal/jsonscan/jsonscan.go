// Package jsonscan holds the primitives of the hand-written JSON fast paths: reading
// strings, numbers and whole values from a byte slice without reflection or
// allocation, with encoding/json's exact semantics for what they accept.
//
// A fast path built on it must only ever succeed where encoding/json would succeed
// with the same result; on anything unusual it reports failure and its caller falls
// back to encoding/json, which then decides (and words the error). Every user of this
// package keeps a differential fuzz test against encoding/json for that reason.
package jsonscan

import (
	"encoding/binary"
	"unicode/utf16"
	"unicode/utf8"
)

// plainRun is the length of the run at the start of b of bytes a string holds as they
// are: anything but '"', '\\' and control characters, and (when ascii) bytes from 0x80.
// It tests eight bytes at a time (the usual SWAR bit tricks: a word has a byte below n
// when (w - n*0x01..) & ^w & 0x80.. is not zero), then finds the byte one by one.
func plainRun(b []byte, ascii bool) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		special := (w - ones*0x20) &^ w // a control character
		special |= ((w ^ ones*'"') - ones) &^ (w ^ ones*'"')
		special |= ((w ^ ones*'\\') - ones) &^ (w ^ ones*'\\')
		special &= highs
		if ascii {
			special |= w & highs
		}
		if special != 0 {
			break
		}
	}
	for ; i < len(b); i++ {
		c := b[i]
		if c == '"' || c == '\\' || c < 0x20 || (ascii && c >= utf8.RuneSelf) {
			break
		}
	}
	return i
}

// MaxDepth is encoding/json's nesting limit.
const MaxDepth = 10000

// Scanner reads JSON from Data, starting at Pos.
type Scanner struct {
	Data []byte
	Pos  int
	// Numbers, when set, is called by Value for every number it skips, with its
	// literal and whether it is a plain integer; false fails the value.
	Numbers func(lit []byte, plain bool) bool
}

// SkipSpace moves past JSON whitespace.
func (s *Scanner) SkipSpace() {
	for s.Pos < len(s.Data) {
		switch s.Data[s.Pos] {
		case ' ', '\t', '\n', '\r':
			s.Pos++
		default:
			return
		}
	}
}

// Next skips whitespace and returns the next byte without consuming it (0 at the end).
func (s *Scanner) Next() byte {
	s.SkipSpace()
	if s.Pos >= len(s.Data) {
		return 0
	}
	return s.Data[s.Pos]
}

// Consume skips whitespace and consumes b if it comes next.
func (s *Scanner) Consume(b byte) bool {
	if s.Next() == b && s.Pos < len(s.Data) {
		s.Pos++
		return true
	}
	return false
}

// AtEnd reports whether only whitespace is left.
func (s *Scanner) AtEnd() bool {
	s.SkipSpace()
	return s.Pos == len(s.Data)
}

// String reads the string at Pos (after whitespace) and appends its decoded bytes to
// dst, as encoding/json decodes a string: escapes resolved, invalid UTF-8 and
// unpaired surrogates replaced by U+FFFD. It fails on what is not a valid JSON string.
func (s *Scanner) String(dst []byte) ([]byte, bool) {
	if s.Next() != '"' {
		return dst, false
	}
	s.Pos++
	for {
		start := s.Pos
		s.Pos += plainRun(s.Data[s.Pos:], true)
		dst = append(dst, s.Data[start:s.Pos]...)
		if s.Pos >= len(s.Data) {
			return dst, false
		}
		switch b := s.Data[s.Pos]; {
		case b == '"':
			s.Pos++
			return dst, true
		case b < 0x20:
			return dst, false
		case b >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(s.Data[s.Pos:])
			s.Pos += size
			dst = utf8.AppendRune(dst, r) // U+FFFD for an invalid byte
		default:
			var ok bool
			if dst, ok = s.escape(dst); !ok {
				return dst, false
			}
		}
	}
}

// escape decodes the escape sequence at Pos (a backslash) into dst.
func (s *Scanner) escape(dst []byte) ([]byte, bool) {
	if s.Pos+1 >= len(s.Data) {
		return dst, false
	}
	esc := s.Data[s.Pos+1]
	s.Pos += 2
	switch esc {
	case '"', '\\', '/':
		return append(dst, esc), true
	case 'b':
		return append(dst, '\b'), true
	case 'f':
		return append(dst, '\f'), true
	case 'n':
		return append(dst, '\n'), true
	case 'r':
		return append(dst, '\r'), true
	case 't':
		return append(dst, '\t'), true
	case 'u':
		r, ok := s.hex4()
		if !ok {
			return dst, false
		}
		if utf16.IsSurrogate(r) {
			// A valid pair is one character; anything else is U+FFFD, and a following
			// escape is read on its own (as encoding/json does).
			save := s.Pos
			if s.Pos+1 < len(s.Data) && s.Data[s.Pos] == '\\' && s.Data[s.Pos+1] == 'u' {
				s.Pos += 2
				if r2, ok := s.hex4(); ok {
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						return utf8.AppendRune(dst, d), true
					}
				}
			}
			s.Pos = save
			r = utf8.RuneError
		}
		return utf8.AppendRune(dst, r), true
	}
	return dst, false
}

func (s *Scanner) hex4() (rune, bool) {
	if s.Pos+4 > len(s.Data) {
		return 0, false
	}
	var r rune
	for _, b := range s.Data[s.Pos : s.Pos+4] {
		switch {
		case b >= '0' && b <= '9':
			b -= '0'
		case b >= 'a' && b <= 'f':
			b = b - 'a' + 10
		case b >= 'A' && b <= 'F':
			b = b - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(b)
	}
	s.Pos += 4
	return r, true
}

// Number reads the number at Pos (after whitespace) and returns its literal. plain
// reports an integer without fraction or exponent.
func (s *Scanner) Number() (lit []byte, plain, ok bool) {
	s.SkipSpace()
	in, p := s.Data, s.Pos
	start := p
	if p < len(in) && in[p] == '-' {
		p++
	}
	digits := func() int {
		n := 0
		for p < len(in) && in[p] >= '0' && in[p] <= '9' {
			p++
			n++
		}
		return n
	}
	intStart := p
	if n := digits(); n == 0 || (n > 1 && in[intStart] == '0') {
		return nil, false, false
	}
	plain = true
	if p < len(in) && in[p] == '.' {
		p++
		plain = false
		if digits() == 0 {
			return nil, false, false
		}
	}
	if p < len(in) && (in[p] == 'e' || in[p] == 'E') {
		p++
		plain = false
		if p < len(in) && (in[p] == '+' || in[p] == '-') {
			p++
		}
		if digits() == 0 {
			return nil, false, false
		}
	}
	s.Pos = p
	return in[start:p], plain, true
}

// Literal consumes lit (true, false or null) if it comes next.
func (s *Scanner) Literal(lit string) bool {
	s.SkipSpace()
	if len(s.Data)-s.Pos < len(lit) || string(s.Data[s.Pos:s.Pos+len(lit)]) != lit {
		return false
	}
	s.Pos += len(lit)
	return true
}

// Value checks the value at Pos (after whitespace) and returns its bytes, exactly as
// they appear (what encoding/json gives a json.RawMessage).
func (s *Scanner) Value() ([]byte, bool) {
	s.SkipSpace()
	start := s.Pos
	if !s.skip(0) {
		return nil, false
	}
	return s.Data[start:s.Pos], true
}

func (s *Scanner) skip(depth int) bool {
	switch s.Next() {
	case '{':
		return depth < MaxDepth && s.skipObject(depth)
	case '[':
		return depth < MaxDepth && s.skipArray(depth)
	case '"':
		return s.skipString()
	case 't':
		return s.Literal("true")
	case 'f':
		return s.Literal("false")
	case 'n':
		return s.Literal("null")
	default:
		lit, plain, ok := s.Number()
		return ok && (s.Numbers == nil || s.Numbers(lit, plain))
	}
}

// skipObject skips the object at Pos, whose members are at depth+1.
func (s *Scanner) skipObject(depth int) bool {
	s.Pos++
	if s.Consume('}') {
		return true
	}
	for {
		if !s.skipString() || !s.Consume(':') || !s.skip(depth+1) {
			return false
		}
		if !s.Consume(',') {
			return s.Consume('}')
		}
	}
}

// skipArray skips the array at Pos, whose elements are at depth+1.
func (s *Scanner) skipArray(depth int) bool {
	s.Pos++
	if s.Consume(']') {
		return true
	}
	for {
		if !s.skip(depth + 1) {
			return false
		}
		if !s.Consume(',') {
			return s.Consume(']')
		}
	}
}

// skipString checks a string without decoding it. encoding/json keeps a RawMessage's
// bytes as they are, invalid UTF-8 included, so only the grammar is checked.
func (s *Scanner) skipString() bool {
	if s.Next() != '"' {
		return false
	}
	s.Pos++
	for s.Pos < len(s.Data) {
		s.Pos += plainRun(s.Data[s.Pos:], false)
		if s.Pos >= len(s.Data) {
			return false
		}
		switch b := s.Data[s.Pos]; {
		case b == '"':
			s.Pos++
			return true
		case b < 0x20:
			return false
		case b == '\\':
			if s.Pos+1 >= len(s.Data) {
				return false
			}
			switch s.Data[s.Pos+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.Pos += 2
			case 'u':
				s.Pos += 2
				if _, ok := s.hex4(); !ok {
					return false
				}
			default:
				return false
			}
		default:
			s.Pos++
		}
	}
	return false
}

// AppendString appends s as encoding/json writes a string with HTML escaping off:
// quotes, backslashes and control characters escaped (\b \f \n \r \t by name, others
// as \u00xx), U+2028 and U+2029 escaped, invalid UTF-8 as \ufffd, the rest as is.
func AppendString(dst []byte, s string) []byte {
	return appendString(dst, s, utf8.DecodeRuneInString, false)
}

// AppendBytes is AppendString of a string held in a byte slice.
func AppendBytes(dst, s []byte) []byte { return appendString(dst, s, utf8.DecodeRune, false) }

// AppendStringHTML appends s as encoding/json.Marshal writes a string: as
// AppendString, and '<', '>' and '&' escaped as \u003c, \u003e and \u0026.
func AppendStringHTML(dst []byte, s string) []byte {
	return appendString(dst, s, utf8.DecodeRuneInString, true)
}

func appendString[S string | []byte](dst []byte, s S, decode func(S) (rune, int), html bool) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && (!html || b != '<' && b != '>' && b != '&') {
				i++
				continue
			}
			dst = appendEscape(append(dst, s[start:i]...), b)
			i++
			start = i
			continue
		}
		// A valid three-byte sequence (most of CJK text) other than U+2028 and
		// U+2029 is written as it is, without decoding the rune.
		if i+2 < len(s) && plainThreeBytes(b, s[i+1], s[i+2]) {
			i += 3
			continue
		}
		r, size := decode(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

const hexDigits = "0123456789abcdef"

// appendEscape appends the escape of the ASCII byte b.
func appendEscape(dst []byte, b byte) []byte {
	switch b {
	case '"', '\\':
		return append(dst, '\\', b)
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	return append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
}

// plainThreeBytes reports whether b, c1, c2 are bytes a JSON string holds as they
// are: a valid three-byte UTF-8 sequence other than U+2028 and U+2029.
func plainThreeBytes(b, c1, c2 byte) bool {
	if b < 0xE0 || b > 0xEF || c2&0xC0 != 0x80 {
		return false
	}
	lo, hi := byte(0x80), byte(0xBF)
	switch b {
	case 0xE0:
		lo = 0xA0 // no overlong forms
	case 0xED:
		hi = 0x9F // no surrogates
	case 0xE2:
		if c1 == 0x80 && (c2 == 0xA8 || c2 == 0xA9) {
			return false
		}
	}
	return c1 >= lo && c1 <= hi
}
