package memory

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
)

// canonicalCases are documents where a hand-written canonicaliser is easy to get
// wrong: escapes, surrogates, invalid UTF-8, duplicate keys, number spellings, nesting.
var canonicalCases = []string{
	`{}`, `[]`, `""`, `0`, `-0`, `1`, `-1`, `1.0`, `1.50`, `15e-1`, `1e2`, `100.0`, `0.000001`, `1e-7`,
	`123456789012345678901`, `1234567890123456789012`, `-00`, `01`, `1.`, `.5`, `1e`, `1e+`, `1E+2`, `-`,
	`1e999999999`, `true`, `false`, `null`, `nul`, `truex`, ` {"a" : 1 } `, "\t{\"a\":1}\n",
	`{"b":1,"a":2}`, `{"a":1,"a":2}`, `{"a":{"a":1,"a":{"c":1,"b":2}},"a":3}`, `{"a":1,"b":2,"a":3}`,
	`{"é":1,"e":2,"z":3,"Z":4,"":5}`, `{"a":[1,{"y":2,"x":[3,4]}],"b":null}`,
	`"a\"b\\c\/d\b\f\n\r\t"`, `"\u0001\u001f\u007f\u0080"`, `"\u2028\u2029"`, "\"\u2028\"",
	`"\ud83d\ude00"`, `"\ud83d"`, `"\ude00"`, `"\ud83dx"`, `"\ud83d\u0041"`, `"\ud83d\ud83d\ude00"`,
	`"\u0000"`, `{"\u0000":1}`, "\"a\x00\"", "\"\x01\"", "\"\xff\"", "\"a\xc3\"", "{\"\xff\":1,\"\xfe\":2}",
	`"<>&"`, `"\u003c"`, `"\uD83D\uDE00"`, `"\uzzzz"`, `"\u12"`, `"\x"`, `"abc`, `{"a":1`, `{"a" 1}`, `{,}`,
	`[1,]`, `[,1]`, `{"a":1,}`, `[1 2]`, `{} {}`, `{}x`, ``, ` `, `{"a":"` + strings.Repeat("x", 5000) + `"}`,
	strings.Repeat("[", 200) + strings.Repeat("]", 200),
}

// TestCanonicalFastMatchesSlow checks the fast canonicaliser against encoding/json:
// whenever the fast path succeeds, its output is the slow path's, and it never
// accepts what the slow path refuses.
func TestCanonicalFastMatchesSlow(t *testing.T) {
	fastOK := 0
	for _, c := range canonicalCases {
		if checkCanonicalFast(t, []byte(c)) {
			fastOK++
		}
	}
	// The fast path must actually be taken for ordinary documents (the cases with lone
	// surrogates, invalid UTF-8 or NUL are refused by both paths).
	if fastOK < 36 {
		t.Errorf("the fast path succeeded on only %d of %d cases", fastOK, len(canonicalCases))
	}
}

func FuzzCanonicalFast(f *testing.F) {
	for _, c := range canonicalCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkCanonicalFast(t, raw) })
}

// checkCanonicalFast compares both paths on raw and reports whether the fast one succeeded.
func checkCanonicalFast(t *testing.T, raw []byte) bool {
	t.Helper()
	fast, first, fastErr := appendCanonicalFast(nil, raw)
	slow, slowErr := canonicalSlow(raw)
	if slowErr == nil {
		// The slow path also refuses what jsonb cannot store only in content checks;
		// mirror that so both sides judge the same thing.
		if v, err := decodeJSON(raw); err == nil && checkStorable(v) != nil {
			slowErr = checkStorable(v)
		}
	}
	switch {
	case fastErr == nil && slowErr != nil:
		t.Errorf("%q: the fast path accepted what the slow path refuses (%v): %s", raw, slowErr, fast)
	case fastErr == nil && !bytes.Equal(fast, slow):
		t.Errorf("%q: fast %s, slow %s", raw, fast, slow)
	case fastErr == nil && first != bytes.TrimLeft(raw, " \t\r\n")[0]:
		t.Errorf("%q: first byte %q", raw, first)
	}
	if fastErr == nil && !json.Valid(fast) {
		t.Errorf("%q: fast output %q is not JSON", raw, fast)
	}
	return fastErr == nil
}

// TestContentHashUnchangedByFastPath pins hashes computed before the fast path
// existed: stored content_hash values must never change.
func TestContentHashUnchangedByFastPath(t *testing.T) {
	for raw, want := range map[string]string{
		`{"text":"prefers window seats","tags":["travel","seat"],"n":1.50}`:         "341c512e476b6b7619877d5b83decc4a18c79e7bd78580f4fdfd3ca2cf7c722a",
		`{"b":{"y":[1,2e3,{"z":"\u00e9\ud83d\ude00"}],"x":null},"a":"line\nbreak"}`: "18eeb14285ba7e0fe1652f2cecd5b97d7e2cd52bba0270d20d76d7d4bc4a0dfc",
	} {
		it := validItem()
		it.MemoryType, it.Key, it.Content = Semantic, "k", json.RawMessage(raw)
		for name, hash := range map[string]func() ([]byte, error){"ContentHash": it.ContentHash, "ValidatedHash": it.ValidatedHash} {
			got, err := hash()
			if err != nil {
				t.Fatal(err)
			}
			if hex.EncodeToString(got) != want {
				t.Errorf("%s of %s changed: %x", name, raw, got)
			}
		}
	}
}

// FuzzValidContentFast holds the validation fast path to the slow one: whenever it
// accepts content, decoding it as content succeeds.
func FuzzValidContentFast(f *testing.F) {
	for _, c := range canonicalCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkValidContentFast(t, raw) })
}

func checkValidContentFast(t *testing.T, raw []byte) bool {
	t.Helper()
	fast := validContentFast(raw)
	_, slowErr := decodeContent(raw)
	if fast && slowErr != nil {
		t.Errorf("%q: the fast path accepted what the slow path refuses: %v", raw, slowErr)
	}
	return fast
}

func TestValidContentFastMatchesSlow(t *testing.T) {
	accepted := 0
	for _, c := range canonicalCases {
		if checkValidContentFast(t, []byte(c)) {
			accepted++
		}
	}
	for _, c := range []string{`{"n":1e-16383}`, `{"n":1e-16384}`, `{"n":1.5e131071}`, `{"a":{"b":[1,2,{"c":"\u00e9"}]}}`} {
		checkValidContentFast(t, []byte(c))
	}
	if accepted < 8 { // the objects among the cases
		t.Errorf("the fast path accepted only %d cases", accepted)
	}
}
