package snapshot

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
)

// itemLines are item lines that a hand-written decoder could get wrong.
func itemLines(t testing.TB) []string {
	at := time.Date(2026, 11, 30, 5, 6, 7, 123456789, time.UTC)
	full := memory.Item{MemoryID: "m1", MemoryType: memory.Semantic, Scope: "user:1024", Key: "pref.é",
		Content: json.RawMessage(`{"text":"a \"quoted\" \u00e9 \ud83d\ude00","n":[1,2.5e3,-0,{"x":null}]}`),
		Source:  "agent@1", BaseScore: 0.75, CreatedAt: at, UpdatedAt: at.Add(time.Hour), RecordedAt: at.Add(2 * time.Hour), ExpiresAt: &at, ArchivedAt: &at,
		History:   []memory.Revision{{Content: json.RawMessage(`{"a":1}`), Source: "s", BaseScore: 1e-7, UpdatedAt: at, SupersededAt: at}},
		Embedding: []float32{0.5, -1.25, 3e-8, 1e20}}
	b, err := appendItem(nil, &full)
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{string(b)},
		`{}`, `{"memory_id":"a"}`, ` { "memory_id" : "a" , "scope" : "s" } `, `{"memory_id":"a","memory_id":"b"}`,
		`{"Memory_ID":"a"}`, `{"unknown":1,"memory_id":"a"}`, `{"memory_id":null}`, `{"memory_id":1}`,
		`{"memory_id":"\u0041\ud800x\n\u0000"}`, "{\"memory_id\":\"\xff\xfe\"}", `{"content":null}`, `{"content":"str"}`,
		`{"content":{"a":[1,2,{"b":"c"}]} }`, `{"content":{"a":}}`, `{"content":{"a":1}`, `{"base_score":1e400}`,
		`{"base_score":"1"}`, `{"base_score":-0.0}`, `{"created_at":"2026-11-30T05:06:07Z"}`,
		`{"created_at":"2026-11-30 05:06:07Z"}`, `{"created_at":null}`, `{"created_at":"2026-11-30T05:06:07.5+01:00"}`,
		`{"recorded_at":"2026-11-30T05:06:07Z"}`, `{"recorded_at":null}`, `{"recorded_at":"x"}`, `{"recorded_at":"0001-01-01T00:00:00Z"}`,
		`{"expires_at":null}`, `{"expires_at":"bad"}`, `{"history":null}`, `{"history":[]}`, `{"history":[{}]}`,
		`{"history":[{"content":{"a":1},"source":"x","unknown":1}]}`, `{"history":[{"source":"x","source":"y"}]}`,
		`{"history":[{"content":{"a":1}},{"base_score":2}]}`, `{"history":{}}`, `{"embedding":null}`, `{"embedding":[]}`,
		`{"embedding":[1,2,3]}`, `{"embedding":[1e39]}`, `{"embedding":[1,]}`, `{"embedding":["1"]}`,
		// Format 4's base64 of little-endian float32s: 1 and -2.5; NaN; Inf; 3 bytes;
		// not base64; unpadded; an escaped "/"; nothing.
		`{"embedding":"AACAPwAAIMA="}`, `{"embedding":"AADAfw=="}`, `{"embedding":"AACAfw=="}`, `{"embedding":"AACA"}`,
		`{"embedding":"AA*APw=="}`, `{"embedding":"AACAPw"}`, `{"embedding":"\/\/\/\/"}`, `{"embedding":""}`, `{"embedding":"AACAPw==" }`,
		`{"memory_id":"a"} x`, `{"memory_id":"a"}{}`, `[]`, `null`, ``, `{"memory_id":"a",}`, `{,}`,
		`{"key":"`+strings.Repeat("k", 300)+`"}`,
	)
}

func TestUnmarshalItemMatchesEncodingJSON(t *testing.T) {
	fast := 0
	for i, l := range itemLines(t) {
		ok := checkUnmarshalItem(t, []byte(l))
		if i == 0 && !ok {
			t.Errorf("the fast path did not decode a line the writer produced: %s", l)
		}
		if ok {
			fast++
		}
	}
	if fast < 15 {
		t.Errorf("the fast path decoded only %d lines", fast)
	}
}

func FuzzUnmarshalItem(f *testing.F) {
	for _, l := range itemLines(f) {
		f.Add([]byte(l))
	}
	f.Fuzz(func(t *testing.T, line []byte) { checkUnmarshalItem(t, line) })
}

// checkUnmarshalItem compares unmarshalItem with encoding/json on line and reports
// whether the fast path decoded it.
func checkUnmarshalItem(t *testing.T, line []byte) bool {
	t.Helper()
	var want, got, fast memory.Item
	wantErr := decodeItemJSON(line, &want)
	gotErr := unmarshalItem(line, &got)
	if (wantErr == nil) != (gotErr == nil) {
		t.Errorf("%q: encoding/json error %v, unmarshalItem error %v", line, wantErr, gotErr)
	}
	if wantErr == nil && !reflect.DeepEqual(want, got) {
		t.Errorf("%q:\nencoding/json %#v\nunmarshalItem %#v", line, want, got)
	}
	ok := decodeItemFast(line, &fast)
	if ok && wantErr != nil {
		t.Errorf("%q: the fast path accepted what encoding/json refuses: %v", line, wantErr)
	}
	return ok
}
