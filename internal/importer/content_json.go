package importer

import (
	"strconv"

	"github.com/amemory/memory-operator/internal/jsonscan"
)

// The contents of imported turns, written straight to JSON: the same bytes as
// marshalJSON of the maps messageContent builds (its keys in sorted order, as
// encoding/json writes a map), without building those maps and sorting their keys
// for every message (a quarter of an import's conversion). A value the writer cannot
// take (none a decoder yields) makes it report false; the caller then takes the map
// path. TestContentJSONMatchesMaps holds the two equal.

// appendTurn appends {"messages":[...],"thread_id":id,"turn":n}.
func appendTurn(dst []byte, threadID string, n int, msgs []map[string]any) ([]byte, bool) {
	dst = append(dst, `{"messages":[`...)
	for i, m := range msgs {
		if i > 0 {
			dst = append(dst, ',')
		}
		var ok bool
		if dst, ok = appendMessage(dst, m); !ok {
			return dst, false
		}
	}
	dst = append(dst, `],"thread_id":`...)
	dst = jsonscan.AppendStringHTML(dst, threadID)
	dst = append(dst, `,"turn":`...)
	dst = strconv.AppendInt(dst, int64(n), 10)
	return append(dst, '}'), true
}

// appendWorking appends {"index":i,"message":{...},"thread_id":id}.
func appendWorking(dst []byte, threadID string, i int, m map[string]any) ([]byte, bool) {
	dst = append(dst, `{"index":`...)
	dst = strconv.AppendInt(dst, int64(i), 10)
	dst = append(dst, `,"message":`...)
	dst, ok := appendMessage(dst, m)
	if !ok {
		return dst, false
	}
	dst = append(dst, `,"thread_id":`...)
	dst = jsonscan.AppendStringHTML(dst, threadID)
	return append(dst, '}'), true
}

// appendMessage appends messageContent(m) as JSON: its keys are additional_kwargs,
// artifact, content, id, invalid_tool_calls, name, role, status, tool_call_id and
// tool_calls, in that (sorted) order, each when messageContent sets it.
func appendMessage(dst []byte, m map[string]any) ([]byte, bool) {
	ok, first := true, true
	field := func(key string, v any) {
		if !ok {
			return
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, key...) // keys are plain: no escaping
		dst, ok = jsonscan.AppendMarshal(dst, v)
	}
	kept := func(key string) (any, bool) { // as messageContent keeps an optional field
		v, has := m[key]
		return v, has && v != nil && v != ""
	}
	dst = append(dst, '{')
	if kw, has := keptKwargs(m); has {
		field(`"additional_kwargs":`, kw)
	}
	if v, has := kept("artifact"); has {
		field(`"artifact":`, v)
	}
	field(`"content":`, m["content"])
	if v, has := kept("id"); has {
		field(`"id":`, v)
	}
	if tc, is := m["invalid_tool_calls"].([]any); is && len(tc) > 0 {
		field(`"invalid_tool_calls":`, tc)
	}
	if v, has := kept("name"); has {
		field(`"name":`, v)
	}
	typ, _ := m["type"].(string)
	role := roles[typ]
	if role == "" {
		role = typ
	}
	field(`"role":`, role)
	if v, has := kept("status"); has {
		field(`"status":`, v)
	}
	if v, has := kept("tool_call_id"); has {
		field(`"tool_call_id":`, v)
	}
	if calls, has := toolCalls(m); has {
		field(`"tool_calls":`, calls)
	}
	return append(dst, '}'), ok
}
