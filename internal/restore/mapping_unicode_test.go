package restore

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/amemory/memory-operator/internal/memory"
)

// TestMapperUnicodeScopes: exact and prefix rules and both map formats take scopes in
// any language, spelled composed or decomposed; what they map to is always the NFC
// scope, the one a package or a store holds.
func TestMapperUnicodeScopes(t *testing.T) {
	m := newMapper(t, UnmappedKeep)
	if err := m.AddExact("user:zoe\u0308", "user:zoë-ユーザー"); err != nil { // from spelled decomposed
		t.Fatal(err)
	}
	if err := m.AddExact("user:zoë", "user:zoë-ユーザー"); err != nil { // the same rule, composed: a no-op
		t.Fatalf("the same rule spelled composed: %v", err)
	}
	if err := m.AddExact("session:thread/42", "session:tenant:acme/thread/42"); err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]string{{"user:", "user:旧-"}, {"user:q", "user:e"}, {"agent:a\u0301", "agent:b"}} {
		if err := m.AddPrefix(r[0], r[1]); err != nil {
			t.Fatalf("AddPrefix(%q, %q): %v", r[0], r[1], err)
		}
	}
	assertMaps(t, m, "user:zoë", "user:zoë-ユーザー")
	assertMaps(t, m, "session:thread/42", "session:tenant:acme/thread/42")
	assertMaps(t, m, "user:用户123", "user:旧-用户123")
	assertMaps(t, m, "user:q\u0301x", "user:\u00e9x") // the rule cut q from its mark: the result is composed
	assertMaps(t, m, "agent:áz", "agent:bz")          // the rule was given decomposed
	if m.Len() != 2 {
		t.Fatalf("Len = %d, want 2", m.Len())
	}
	// What is not a scope in any spelling stays refused, naming the character.
	for _, r := range [][2]string{{"user:a\u200db", "user:x"}, {"user:x", "user:a\u00a0b"}, {"user:\u0301", "user:x"}, {"user:x", "user:😀"}} {
		if err := m.AddExact(r[0], r[1]); err == nil {
			t.Errorf("AddExact(%q, %q): no error", r[0], r[1])
		}
	}
}

// TestMapperLoadUnicode: a map exported by a spreadsheet (a byte order mark, CRLF,
// quoted fields, a header) or by Python's json.dumps (\u escapes, surrogate pairs)
// loads Unicode scopes; a character that is no part of a scope fails its line.
func TestMapperLoadUnicode(t *testing.T) {
	csvMap := "\xEF\xBB\xBFfrom,to\r\n\"user:zoe\u0308\",\"user:zoë-ユーザー\"\r\nuser:用户123,user:u/123\r\n# a comment\r\n\"session:a/b:c\",session:ß\r\n"
	jsonMap := "\xEF\xBB\xBF" + `{"from": "user:zo\u00eb", "to": "user:\u30e6\u30fc\u30b6\u30fc"}` + "\n" +
		`{"from": "user:\ud842\udfb7\u91ce\u5bb6", "to": "user:yoshinoya"}` + "\n"
	for _, tc := range []struct {
		format MapFormat
		data   string
		want   map[string]string
	}{
		{MapCSV, csvMap, map[string]string{"user:zoë": "user:zoë-ユーザー", "user:用户123": "user:u/123", "session:a/b:c": "session:ß"}},
		{MapJSONLines, jsonMap, map[string]string{"user:zoë": "user:ユーザー", "user:𠮷野家": "user:yoshinoya"}},
	} {
		m := newMapper(t, UnmappedFail)
		n, err := m.Load(strings.NewReader(tc.data), tc.format)
		if err != nil || n != len(tc.want) {
			t.Fatalf("%s: Load = %d, %v", tc.format, n, err)
		}
		for from, to := range tc.want {
			assertMaps(t, m, from, to)
		}
	}
	for _, tc := range []struct {
		format MapFormat
		data   string
		line   int
		why    string
	}{
		{MapCSV, "user:a,user:b\nuser:\xEF\xBB\xBFc,user:d\n", 2, "U+FEFF"}, // a byte order mark inside the map
		{MapCSV, "user:a,user:b\nuser:c\u200d,user:d\n", 2, "U+200D"},
		{MapCSV, "user:a,user:b\nuser:c,user:\xff\n", 2, "not valid UTF-8"},
		{MapJSONLines, `{"from": "user:a", "to": "user:b\u2028"}`, 1, "U+2028"},
		{MapJSONLines, `{"from": "user:a", "to": "user:\ud842"}`, 1, "U+FFFD"}, // a lone surrogate decodes as U+FFFD
	} {
		_, err := newMapper(t, UnmappedKeep).Load(strings.NewReader(tc.data), tc.format)
		var me *MapError
		if !errors.As(err, &me) || me.Line != tc.line || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%s %q: %v; want line %d naming %s", tc.format, tc.data, err, tc.line, tc.why)
		}
	}
}

// randomScope makes a valid scope from a mix of scripts, composed or not.
func randomScope(rng *rand.Rand) string {
	parts := []string{"a", "Z", "0", "-", "_", ".", "@", ":", "/", "ë", "e\u0308", "ユーザー", "用户", "𠮷", "ஷ", "हिन्दी", "Ελένη", "محمد", "ß", "가", "\u1100\u1161"}
	var b strings.Builder
	b.WriteString([]string{"user:", "session:", "agent:"}[rng.IntN(3)])
	b.WriteString("x") // a base for any mark that follows
	for range rng.IntN(12) {
		b.WriteString(parts[rng.IntN(len(parts))])
	}
	return b.String()
}

// TestMapperCSVRoundTrip: a map of Unicode scopes written by encoding/csv and by
// encoding/json (as any tool would write one) loads back rule for rule.
func TestMapperCSVRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 20))
	want := map[string]string{}
	var csvBuf, jsonBuf bytes.Buffer
	csvBuf.WriteString("\xEF\xBB\xBF")
	cw := csv.NewWriter(&csvBuf)
	cw.UseCRLF = true
	_ = cw.Write([]string{"from", "to"})
	for len(want) < 2000 {
		from, to := randomScope(rng), randomScope(rng)
		if _, dup := want[memory.NormalizeScope(from)]; dup {
			continue
		}
		want[memory.NormalizeScope(from)] = memory.NormalizeScope(to)
		_ = cw.Write([]string{from, to})
		line, _ := json.Marshal(map[string]string{"from": from, "to": to})
		jsonBuf.Write(append(line, '\n'))
	}
	cw.Flush()
	for format, data := range map[MapFormat][]byte{MapCSV: csvBuf.Bytes(), MapJSONLines: jsonBuf.Bytes()} {
		m := newMapper(t, UnmappedFail)
		if n, err := m.Load(bytes.NewReader(data), format); err != nil || n != len(want) {
			t.Fatalf("%s: Load = %d, %v", format, n, err)
		}
		for from, to := range want {
			if err := memory.ValidateScope(to); err != nil {
				t.Fatal(err)
			}
			assertMaps(t, m, from, to)
		}
	}
}

// FuzzMappingCSVRoundTrip: any pair of scopes, written as a CSV record after a byte
// order mark, loads as the one rule from NFC(from) to NFC(to), or fails naming line 1
// when one of them is no scope.
func FuzzMappingCSVRoundTrip(f *testing.F) {
	f.Add("user:zoe\u0308", "user:zoë-ユーザー", true)
	f.Add("session:a/b", "session:\"q\"", false)
	f.Add("user:a,b", "user:\r\n", true)
	f.Fuzz(func(t *testing.T, from, to string, bom bool) {
		var buf bytes.Buffer
		if bom {
			buf.WriteString("\xEF\xBB\xBF")
		}
		cw := csv.NewWriter(&buf)
		if err := cw.Write([]string{from, to}); err != nil {
			return
		}
		cw.Flush()
		m := newMapper(t, UnmappedKeep)
		n, err := m.Load(&buf, MapCSV)
		nf, nt := memory.NormalizeScope(strings.TrimSpace(from)), memory.NormalizeScope(strings.TrimSpace(to))
		valid := memory.ValidateScope(nf) == nil && memory.ValidateScope(nt) == nil
		header := strings.EqualFold(strings.TrimSpace(from), "from") && strings.EqualFold(strings.TrimSpace(to), "to")
		switch {
		case header:
		case valid && (err != nil || n != 1):
			t.Fatalf("%q,%q: Load = %d, %v", from, to, n, err)
		case valid:
			if got, keep, err := m.Map(nf); err != nil || !keep || got != nt {
				t.Fatalf("%q,%q: Map(%q) = %q, %v, %v", from, to, nf, got, keep, err)
			}
		case err == nil && n > 0:
			t.Fatalf("%q,%q: loaded %d rules from an invalid pair", from, to, n)
		}
		for f, to := range m.exact {
			if memory.ValidateScope(f) != nil || memory.ValidateScope(to) != nil {
				t.Fatalf("rule %q -> %q is not between valid scopes", f, to)
			}
		}
	})
}
