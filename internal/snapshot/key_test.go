package snapshot

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	raw := bytes.Repeat([]byte{0xA5}, 32)
	raw[0], raw[31] = '\n', ' ' // raw keys are taken as they are, whitespace included
	var want Key
	copy(want[:], raw)
	hexKey := hex.EncodeToString(raw)
	for name, in := range map[string][]byte{
		"raw":               raw,
		"hex":               []byte(hexKey),
		"hex upper newline": []byte(strings.ToUpper(hexKey) + "\n"),
		"base64":            []byte(base64.StdEncoding.EncodeToString(raw)),
		"base64 newline":    []byte(base64.StdEncoding.EncodeToString(raw) + "\n"),
		"base64 raw":        []byte(base64.RawStdEncoding.EncodeToString(raw)),
		"base64 url":        []byte(base64.URLEncoding.EncodeToString(raw)),
		"base64 raw url":    []byte(base64.RawURLEncoding.EncodeToString(raw)),
	} {
		got, err := ParseKey(in)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got != want {
			t.Errorf("%s: got a different key", name)
		}
	}
}

func TestParseKeyRefusesWrongLengths(t *testing.T) {
	short := bytes.Repeat([]byte{0xFF}, 16)
	for name, tc := range map[string]struct {
		in   []byte
		want string
	}{
		"16 raw bytes":  {short, "key is 16 bytes; need 32 raw bytes, 64 hex characters or base64 of 32 bytes"},
		"33 raw bytes":  {bytes.Repeat([]byte{0xFF}, 33), "key is 33 bytes; need 32"},
		"empty":         {nil, "key is 0 bytes; need 32"},
		"hex 16 bytes":  {[]byte(hex.EncodeToString(short)), "key is 32 hex characters (16 bytes); need 64 hex characters (32 bytes)"},
		"base64 16":     {[]byte(base64.StdEncoding.EncodeToString(short)), "key is 24 characters of base64 decoding to 16 bytes; need 32 bytes"},
		"hex 33 bytes":  {[]byte(strings.Repeat("ab", 33)), "key is 66 hex characters (33 bytes)"},
		"not base64 !!": {[]byte("this is not a key!!"), "key is 19 bytes; need 32"},
	} {
		_, err := ParseKey(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got error %v, want it to contain %q", name, err, tc.want)
		}
	}
}

// The test vector in docs/snapshot-format.md goes through the operator's own key
// parser, as a key from a Secret would.
func TestDocumentedKeyVector(t *testing.T) {
	doc, err := os.ReadFile("../../docs/snapshot-format.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)in hex as\\s+`([0-9a-f]{64})`.*?has key ID `([0-9a-f]{16})`").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/snapshot-format.md has no key test vector in the expected words")
	}
	k, err := ParseKey(m[1])
	if err != nil {
		t.Fatalf("the documented key does not parse: %v", err)
	}
	if k.ID() != string(m[2]) {
		t.Fatalf("the documented key has ID %s, the document says %s", k.ID(), m[2])
	}
	if string(k[:]) != "0123456789abcdef0123456789abcdef" {
		t.Fatalf("the documented key is %q", k[:])
	}
}

func TestKeyIDAndString(t *testing.T) {
	var a, b Key
	b[0] = 1
	if id := a.ID(); len(id) != 16 || id != a.ID() || id == b.ID() {
		t.Fatalf("IDs %q and %q: want 16 stable hex characters, different per key", a.ID(), b.ID())
	}
	// A fixed vector, so that another implementation can check its key IDs.
	k := Key([]byte("0123456789abcdef0123456789abcdef"))
	if got := k.ID(); got != "3dd7e7d5c58dead2" {
		t.Errorf("ID = %s", got)
	}
	for _, s := range []string{k.String(), fmt.Sprintf("%v", k), fmt.Sprint(k), fmt.Sprintf("%#v", k), fmt.Sprintf("%x", k)} {
		if strings.Contains(s, "0123") || strings.Contains(s, hex.EncodeToString(k[:4])) {
			t.Errorf("formatted key %q shows key material", s)
		}
	}
}
