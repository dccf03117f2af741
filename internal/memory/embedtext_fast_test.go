package memory

import (
	"strings"
	"testing"
)

var embeddingTextCases = append([]string{
	`{"user":"where is order 1042?","reply":"It ships Tuesday.","tool_calls":[{"name":"lookup_order","args":{"id":1042}}]}`,
	`{"tags":["a","b",1,null,true]}`, `{"mixed":[1,{"x":2}]}`, `{"nested":{"deep":{"deeper":[[1,2],[3]]}}}`,
	`{"n":1.50,"m":-0,"e":1E+2,"big":123456789012345678901234567890}`, `[]`, `{}`, `{"a":{}}`, `{"a":[]}`,
	`"just text"`, `null`, `{"k":"v","k":{"x":1}}`, `{"k":{"x":1},"k":"v"}`,
	strings.Repeat(`{"a":`, 300) + `1` + strings.Repeat(`}`, 300),
}, canonicalCases...)

// checkEmbeddingTextFast compares EmbeddingText's fast path with encoding/json's
// under several keys, and reports whether the fast path decided.
func checkEmbeddingTextFast(t *testing.T, raw []byte) bool {
	t.Helper()
	decided := false
	for _, key := range []string{"", "address"} {
		fast, ok := embeddingTextFast(key, raw)
		if !ok {
			continue
		}
		decided = true
		if slow := embeddingTextSlow(key, raw); fast != slow {
			t.Fatalf("key %q, content %q:\nfast %q\nslow %q", key, raw, fast, slow)
		}
	}
	return decided
}

func TestEmbeddingTextFastMatchesSlow(t *testing.T) {
	decided := 0
	for _, c := range embeddingTextCases {
		if checkEmbeddingTextFast(t, []byte(c)) {
			decided++
		}
	}
	// Ordinary documents must take the fast path.
	if decided < 45 {
		t.Errorf("the fast path decided only %d of %d cases", decided, len(embeddingTextCases))
	}
	if _, ok := embeddingTextFast("", []byte(embeddingTextCases[0])); !ok {
		t.Error("an imported turn did not take the fast path")
	}
}

func FuzzEmbeddingTextFast(f *testing.F) {
	for _, c := range embeddingTextCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkEmbeddingTextFast(t, raw) })
}

func BenchmarkEmbeddingText(b *testing.B) {
	it := Item{Content: []byte(`{"user":"Where is my order 1042? It was due Monday.","assistant":"Order 1042 left the warehouse and ships Tuesday.","tool_calls":[{"name":"lookup_order","args":{"order_id":"1042","verbose":true},"id":"call_1"}],"at":"2026-11-20T10:00:00Z"}`)}
	for b.Loop() {
		_ = it.EmbeddingText()
	}
}

func BenchmarkEmbeddingTextSlow(b *testing.B) {
	it := Item{Content: []byte(`{"user":"Where is my order 1042? It was due Monday.","assistant":"Order 1042 left the warehouse and ships Tuesday.","tool_calls":[{"name":"lookup_order","args":{"order_id":"1042","verbose":true},"id":"call_1"}],"at":"2026-11-20T10:00:00Z"}`)}
	for b.Loop() {
		_ = embeddingTextSlow(it.Key, it.Content)
	}
}
