package importer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
)

// contentByMaps is how turn and working-memory contents were made before
// appendTurn and appendWorking: the maps of messageContent, marshalled.
func contentByMaps(t *testing.T, threadID string, n int, msgs []map[string]any) (turn []byte, working [][]byte) {
	t.Helper()
	var list []any
	for i, m := range msgs {
		list = append(list, messageContent(m))
		w, err := json.Marshal(map[string]any{"thread_id": threadID, "index": i, "message": messageContent(m)})
		if err != nil {
			t.Fatal(err)
		}
		working = append(working, w)
	}
	turn, err := json.Marshal(map[string]any{"thread_id": threadID, "turn": n, "messages": list})
	if err != nil {
		t.Fatal(err)
	}
	return turn, working
}

func assertContentJSON(t *testing.T, threadID string, n int, msgs []map[string]any) {
	t.Helper()
	wantTurn, wantWorking := contentByMaps(t, threadID, n, msgs)
	got, ok := appendTurn(nil, threadID, n, msgs)
	if !ok || !bytes.Equal(got, wantTurn) {
		t.Fatalf("appendTurn (ok %v):\n%s\nwant\n%s", ok, got, wantTurn)
	}
	for i, m := range msgs {
		got, ok := appendWorking(nil, threadID, i, m)
		if !ok || !bytes.Equal(got, wantWorking[i]) {
			t.Fatalf("appendWorking %d (ok %v):\n%s\nwant\n%s", i, ok, got, wantWorking[i])
		}
	}
}

// TestContentJSONMatchesMaps: contents written straight to JSON are the bytes of the
// maps messageContent builds, for LangGraph's real messages and for every optional
// field set, empty, null or absent.
func TestContentJSONMatchesMaps(t *testing.T) {
	assertContentJSON(t, "u-42:sess-1", 3, realMessages(t))
	msgs := []map[string]any{
		{"type": "human", "content": "a <b> & c", "id": "", "name": nil, "artifact": "x", "status": "", "tool_call_id": nil},
		{"type": "ai", "content": []any{map[string]any{"type": "text", "text": "hi"}}, "id": "m2",
			"tool_calls":         []any{"not a call", map[string]any{"name": "lookup", "args": map[string]any{"n": 1.5e-7}, "id": nil}},
			"invalid_tool_calls": []any{map[string]any{"name": "bad", "args": "{"}}},
		{"type": "ai", "content": "", "tool_calls": []any{"only junk"}},
		{"type": "ai", "content": nil, "additional_kwargs": map[string]any{"tool_calls": []any{
			map[string]any{"id": "c1", "function": map[string]any{"name": "f", "arguments": `{"q":"订单","k":[1,2]}`}},
			map[string]any{"id": "c2", "function": map[string]any{"name": "g", "arguments": `not json`}},
			map[string]any{"id": nil}, 7}}},
		{"type": "tool", "content": "ok", "tool_call_id": "c1", "status": "success", "artifact": map[string]any{"rows": []any{}}, "name": "f"},
		{"type": "ai", "content": "cited", "additional_kwargs": map[string]any{"citation": map[string]any{"source": "kb", "doc_id": "faq-1"},
			"refusal": nil, "tool_calls": []any{}, "tags": []any{"a"}}},
		{"type": "ai", "content": "nothing kept", "additional_kwargs": map[string]any{"refusal": nil}},
		{"type": "chat", "content": "\u2028"},
		{"type": "odd-type", "content": json.Number("12")},
		{"content": "no type"},
	}
	assertContentJSON(t, "thread <&> \"q\"", 0, msgs)
	// A value no decoder yields falls back to the maps.
	if _, ok := appendTurn(nil, "t", 0, []map[string]any{{"type": "ai", "content": struct{}{}}}); ok {
		t.Fatal("appendTurn took a struct")
	}
}

// FuzzContentJSON: for messages made of any mix of their fields and plain values.
func FuzzContentJSON(f *testing.F) {
	f.Add([]byte("\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b"))
	f.Add([]byte("ai\x00tool_calls\x00\x05\x00additional_kwargs"))
	keys := []string{"type", "content", "id", "name", "tool_call_id", "status", "artifact", "tool_calls", "invalid_tool_calls", "additional_kwargs"}
	f.Fuzz(func(t *testing.T, b []byte) {
		next := func() byte {
			if len(b) == 0 {
				return 0
			}
			c := b[0]
			b = b[1:]
			return c
		}
		var value func(depth int) any
		value = func(depth int) any {
			switch k := next() % 9; {
			case k == 0:
				return nil
			case k == 1:
				return ""
			case k == 2:
				return fmt.Sprintf("s<%d>&", next())
			case k == 3:
				return float64(next()) / 7
			case k == 4:
				return int64(next()) - 100
			case k == 5 && depth < 3:
				var l []any
				for range next() % 4 {
					l = append(l, value(depth+1))
				}
				return l
			case k >= 6 && depth < 3:
				m := map[string]any{}
				for range next() % 4 {
					m[[]string{"name", "args", "id", "function", "arguments", "tool_calls", "x"}[next()%7]] = value(depth + 1)
				}
				if k == 8 {
					m["arguments"] = `{"a":[1,"b"]}`
				}
				return m
			}
			return "leaf"
		}
		var msgs []map[string]any
		for range 1 + next()%3 {
			m := map[string]any{}
			for range next() % 8 {
				key := keys[int(next())%len(keys)]
				if key == "type" {
					m[key] = []string{"human", "ai", "tool", "system", "weird"}[next()%5]
					continue
				}
				m[key] = value(0)
			}
			msgs = append(msgs, m)
		}
		assertContentJSON(t, "t-1", int(next()), msgs)
	})
}
