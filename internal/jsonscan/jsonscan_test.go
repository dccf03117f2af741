package jsonscan

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzAppendString holds both string encoders equal to encoding/json with HTML
// escaping off.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", `"quoted" \back\`, "\b\f\n\r\t\x00\x1f\x7f", "<>&", "é😀", "\u2028\u2029",
		"\xff\xfe", "a\xc3", "中文记忆"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		w := bytes.TrimSuffix(want.Bytes(), []byte("\n"))
		if html, _ := json.Marshal(s); !bytes.Equal(AppendStringHTML(nil, s), html) {
			t.Errorf("AppendStringHTML(%q) = %s, want %s", s, AppendStringHTML(nil, s), html)
		}
		if got := AppendString([]byte("x"), s); !bytes.Equal(got[1:], w) {
			t.Errorf("AppendString(%q) = %s, want %s", s, got[1:], w)
		}
		if got := AppendBytes(nil, []byte(s)); !bytes.Equal(got, w) {
			t.Errorf("AppendBytes(%q) = %s, want %s", s, got, w)
		}
	})
}

// The decoder reads back what the encoder writes.
func TestStringRoundTrip(t *testing.T) {
	for _, s := range []string{"", "a\"b\\c", "\x01\u2028é😀"} {
		sc := Scanner{Data: AppendString(nil, s)}
		got, ok := sc.String(nil)
		if !ok || string(got) != s || !sc.AtEnd() {
			t.Errorf("round trip of %q: %q, %v", s, got, ok)
		}
	}
}
