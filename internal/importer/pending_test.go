package importer

import (
	"errors"
	"reflect"
	"testing"
)

// TestMergePending holds mergePending to add_messages: replace by id, append, remove,
// remove all, and a removal of a message the thread does not hold refused.
func TestMergePending(t *testing.T) {
	msg := func(typ, id, content string) map[string]any {
		m := map[string]any{"type": typ, "content": content}
		if id != "" {
			m["id"] = id
		}
		return m
	}
	w := func(s string) encodedMessages { return encodedMessages{typ: "json", blob: []byte(s)} }
	base := []map[string]any{msg("human", "h1", "refund please"), msg("ai", "a1", "checking")}
	for _, tc := range []struct {
		name   string
		writes []encodedMessages
		want   []map[string]any
	}{
		{"a finished branch's answer is appended", []encodedMessages{w(`[{"type":"ai","id":"a2","content":"refunded"}]`)},
			[]map[string]any{base[0], base[1], msg("ai", "a2", "refunded")}},
		{"a single message, not a list", []encodedMessages{w(`{"type":"ai","id":"a2","content":"refunded"}`)},
			[]map[string]any{base[0], base[1], msg("ai", "a2", "refunded")}},
		{"an id the thread holds is replaced in place", []encodedMessages{w(`[{"type":"ai","id":"a1","content":"checked"}]`)},
			[]map[string]any{base[0], msg("ai", "a1", "checked")}},
		{"writes apply in order", []encodedMessages{w(`[{"type":"ai","id":"a2","content":"one"}]`), w(`[{"type":"ai","id":"a2","content":"two"}]`)},
			[]map[string]any{base[0], base[1], msg("ai", "a2", "two")}},
		{"a removal", []encodedMessages{w(`[{"type":"remove","id":"a1","content":""}]`)}, []map[string]any{base[0]}},
		{"removed, then written again", []encodedMessages{w(`[{"type":"remove","id":"a1","content":""}]`), w(`[{"type":"ai","id":"a1","content":"back"}]`)},
			[]map[string]any{base[0], msg("ai", "a1", "back")}},
		{"remove all keeps what follows it", []encodedMessages{w(`[{"type":"ai","id":"x","content":"gone"},{"type":"remove","id":"__remove_all__","content":""},{"type":"ai","id":"s","content":"summary"}]`)},
			[]map[string]any{msg("ai", "s", "summary")}},
		{"no id: appended without one", []encodedMessages{w(`[{"type":"ai","content":"anonymous"}]`)},
			[]map[string]any{base[0], base[1], msg("ai", "", "anonymous")}},
		{"a null write", []encodedMessages{{typ: "null"}}, base},
	} {
		got, err := mergePending(base, tc.writes, false)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v %v, want %v", tc.name, got, err, tc.want)
		}
	}
	if len(base) != 2 || base[1]["content"] != "checking" {
		t.Fatalf("the thread's own messages changed: %v", base)
	}
	for name, writes := range map[string][]encodedMessages{
		"removing a message the thread does not hold": {w(`[{"type":"remove","id":"nope","content":""}]`)},
		"a write that is not a message":               {w(`[42]`)},
		"a pickled write":                             {{typ: "pickle", blob: []byte{0x80}}},
	} {
		if _, err := mergePending(base, writes, false); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: %v, want an unsupported thread", name, err)
		}
	}
}
