package milvus

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/amemory/memory-operator/internal/vector"
)

// liteString reads a string literal at the start of expr as Milvus Lite's tokenizer
// does (milvus_lite/search/filter/tokens.py: double or single quotes; the escapes
// \" \' \\ \n \r \t and no others; a raw newline or carriage return ends nothing but
// is an error): the value, and how many bytes the literal took.
func liteString(expr string) (string, int, bool) {
	if expr == "" || (expr[0] != '"' && expr[0] != '\'') {
		return "", 0, false
	}
	quote := expr[0]
	var b strings.Builder
	for i := 1; i < len(expr); i++ {
		c := expr[i]
		if c == quote {
			return b.String(), i + 1, true
		}
		switch c {
		case '\\':
			if i+1 >= len(expr) {
				return "", 0, false
			}
			i++
			switch expr[i] {
			case '"', '\'', '\\':
				b.WriteByte(expr[i])
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			default:
				return "", 0, false
			}
		case '\n', '\r':
			return "", 0, false
		default:
			b.WriteByte(c)
		}
	}
	return "", 0, false
}

// FuzzLiteral: whatever the string, literal either refuses it (invalid UTF-8, a
// control character other than \n \r \t) or writes a literal that both grammars read
// back as exactly that string, ending at its last byte — so nothing after it, and
// nothing in it, can be read as more expression. Milvus Lite's reading is
// liteString; a Milvus server reads the lexed token with strconv.Unquote.
func FuzzLiteral(f *testing.F) {
	for _, s := range []string{"user:1", `user:1" || scope != "`, `a\`, `a\"`, "a\nb\r\tc", "zoë-ユーザー", "𠮷", "", "'", `\u4e2d`, "\x00", "\xff", "a\u2028b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lit, err := literal(s)
		if err != nil {
			if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return (r < ' ' && r != '\n' && r != '\r' && r != '\t') || r == 0x7f }) {
				t.Fatalf("literal(%q) refused: %v", s, err)
			}
			return
		}
		if got, n, ok := liteString(lit + ` || x == "y"`); !ok || got != s || n != len(lit) {
			t.Fatalf("literal(%q) = %s: Milvus Lite reads %q (%d of %d bytes, ok %v)", s, lit, got, n, len(lit), ok)
		}
		if got, err := strconv.Unquote(lit); err != nil || got != s {
			t.Fatalf("literal(%q) = %s: a Milvus server reads %q, %v", s, lit, got, err)
		}
	})
}

// FuzzScopeValue: the value a scope is stored and filtered under is ASCII, fits the
// collection's field, is the scope itself for an ASCII scope (what collections written
// before hold) and is never another valid scope's value.
func FuzzScopeValue(f *testing.F) {
	f.Add("user:1", "user:2")
	f.Add("user:𠮷", "user:ஷ")
	f.Add("user:zoë", "user:zoe\u0308")
	f.Add("session:a/b", "~abc")
	f.Fuzz(func(t *testing.T, a, b string) {
		if vector.ValidateScope(a) != nil {
			return
		}
		va := scopeValue(a)
		ascii := !strings.ContainsFunc(a, func(r rune) bool { return r >= utf8.RuneSelf })
		switch {
		case ascii && va != a:
			t.Fatalf("ASCII scope %q stored as %q", a, va)
		case !ascii && (len(va) != 44 || va[0] != '~'):
			t.Fatalf("scope %q stored as %q", a, va)
		case len(va) > vector.MaxScopeLen || strings.ContainsFunc(va, func(r rune) bool { return r >= utf8.RuneSelf }):
			t.Fatalf("scope %q stored as %q", a, va)
		case vector.ValidateScope(va) == nil && va != a:
			t.Fatalf("scope %q stored as %q, itself a valid scope", a, va)
		}
		if vector.ValidateScope(b) == nil && a != b && scopeValue(b) == va {
			t.Fatalf("scopes %q and %q are both stored as %q", a, b, va)
		}
	})
}
