package importer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// AutoGenState reads what autogen-agentchat and autogen-core (0.4 to 0.7) save, one
// JSON document per file:
//
//   - a team's save_state() (type TeamState): the conversation is the group chat
//     manager's message thread (TextMessage, MultiModalMessage, ToolCallRequestEvent,
//     ToolCallExecutionEvent, ToolCallSummaryMessage, HandoffMessage, StopMessage, each
//     with its source and created_at), one thread. Each agent's own model context
//     repeats that thread as the model saw it (with memory injected as system
//     messages): counted, not imported twice.
//   - an agent's save_state() (type AssistantAgentState): its model context (UserMessage,
//     AssistantMessage with text or FunctionCalls, FunctionExecutionResultMessage,
//     SystemMessage), one thread.
//   - a ListMemory's dump_component() (provider autogen_core.memory.ListMemory): each
//     memory content (text, markdown or JSON, with its metadata) a store item of
//     namespace ("agents", <the memory's name>), keyed by its position.
//
// The thread is named by name (the file's name without its extension, unless given).
// Events that are not conversation (MemoryQueryEvent, ThoughtEvent, streaming chunks,
// code generation and execution events, ...) are counted by type in Stats.LeftOut.
type AutoGenState struct {
	thread *Thread
	items  []StoreItem
	events map[string]int64 // what is not conversation, counted by kind
	kind   string
}

// maxAutoGenState bounds a state file read into memory.
const maxAutoGenState = 512 << 20

// OpenAutoGenState reads path; name names its thread ("" for the file's base name).
func OpenAutoGenState(path, name string) (*AutoGenState, error) {
	b, err := readSourceFile("autogen", path, maxAutoGenState)
	if err != nil {
		return nil, err
	}
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(path), ".json")
	}
	return ParseAutoGenState(b, name)
}

// ParseAutoGenState parses a state document; name names its thread.
func ParseAutoGenState(b []byte, name string) (*AutoGenState, error) {
	var doc struct {
		Type     string                     `json:"type"`
		Provider string                     `json:"provider"`
		Agents   map[string]json.RawMessage `json:"agent_states"`
		Context  *struct {
			Messages []json.RawMessage `json:"messages"`
		} `json:"llm_context"`
		Config *struct {
			Name     string `json:"name"`
			Contents []struct {
				Content  json.RawMessage `json:"content"`
				MimeType string          `json:"mime_type"`
				Metadata map[string]any  `json:"metadata"`
			} `json:"memory_contents"`
		} `json:"config"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("autogen: not JSON: %w", err)
	}
	a := &AutoGenState{events: map[string]int64{}}
	switch {
	case doc.Type == "TeamState":
		a.kind = "autogen-team-state"
		var thread []json.RawMessage
		for _, agent := range slices.Sorted(maps.Keys(doc.Agents)) {
			var s struct {
				Type    string            `json:"type"`
				Thread  []json.RawMessage `json:"message_thread"`
				Agent   json.RawMessage   `json:"agent_state"`
				Buffer  []json.RawMessage `json:"message_buffer"`
				Context *struct {
					Messages []json.RawMessage `json:"messages"`
				} `json:"llm_context"`
			}
			if err := json.Unmarshal(doc.Agents[agent], &s); err != nil {
				return nil, fmt.Errorf("autogen: team state of %s: %w", agent, err)
			}
			switch {
			case s.Thread != nil || strings.HasSuffix(s.Type, "ManagerState"):
				thread = s.Thread
			default:
				a.events["autogen agent model contexts (the team's thread holds their conversation)"]++
			}
		}
		t := Thread{ID: name}
		if err := a.readThread(&t, thread); err != nil {
			return nil, err
		}
		a.thread = &t
	case doc.Type == "AssistantAgentState" || doc.Context != nil:
		a.kind = "autogen-agent-state"
		t := Thread{ID: name}
		if doc.Context != nil {
			for i, raw := range doc.Context.Messages {
				msgs, err := autogenLLMMessage(raw)
				if err != nil {
					t.Unsupported = unsupported("model context message %d: %v", i, err)
					break
				}
				for _, m := range msgs {
					t.add(m, time.Time{})
				}
			}
		}
		a.thread = &t
	case strings.HasSuffix(doc.Provider, ".ListMemory") && doc.Config != nil:
		a.kind = "autogen-list-memory"
		mem := doc.Config.Name
		if mem == "" {
			mem = name
		}
		for i, c := range doc.Config.Contents {
			v := map[string]any{"mime_type": c.MimeType}
			var content any
			if err := json.Unmarshal(c.Content, &content); err != nil {
				return nil, fmt.Errorf("autogen: ListMemory content %d: %w", i, err)
			}
			v["content"] = content
			if len(c.Metadata) > 0 {
				v["metadata"] = c.Metadata
			}
			raw, _ := json.Marshal(v) // decoded JSON: cannot fail
			a.items = append(a.items, StoreItem{Namespace: []string{"agents", mem}, Key: fmt.Sprintf("list-memory-%04d", i), Value: raw})
		}
	default:
		return nil, fmt.Errorf("autogen: neither a team's or an agent's save_state() (type TeamState or AssistantAgentState) nor a ListMemory's dump_component(); type %q, provider %q",
			doc.Type, doc.Provider)
	}
	return a, nil
}

// readThread reads a team's message thread into t.
func (a *AutoGenState) readThread(t *Thread, thread []json.RawMessage) error {
	for i, raw := range thread {
		var m struct {
			Type      string          `json:"type"`
			Source    string          `json:"source"`
			Content   json.RawMessage `json:"content"`
			ID        string          `json:"id"`
			CreatedAt *lettaTime      `json:"created_at"`
			Target    string          `json:"target"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			return fmt.Errorf("autogen: message %d of the team's thread: %w", i, err)
		}
		var msgs []map[string]any
		var err error
		switch m.Type {
		case "TextMessage", "StopMessage", "HandoffMessage", "ToolCallSummaryMessage", "MultiModalMessage", "StructuredMessage":
			msg := map[string]any{"type": "ai", "name": m.Source}
			if m.Source == "user" {
				msg = map[string]any{"type": "human"}
			}
			var content any
			if err = json.Unmarshal(m.Content, &content); err == nil {
				msg["content"] = autogenContent(content)
			}
			if m.Type == "HandoffMessage" && m.Target != "" {
				msg["additional_kwargs"] = map[string]any{"handoff_to": m.Target}
			}
			msgs = []map[string]any{msg}
		case "ToolCallRequestEvent":
			msgs, err = autogenToolCalls(m.Content, m.Source)
		case "ToolCallExecutionEvent":
			msgs, err = autogenToolResults(m.Content)
		default:
			a.events["autogen events "+m.Type+" (not conversation)"]++
			continue
		}
		if err != nil {
			t.Unsupported = unsupported("message %d (%s): %v", i, m.Type, err)
			return nil
		}
		var at time.Time
		if m.CreatedAt != nil {
			at = m.CreatedAt.Time
		}
		for _, msg := range msgs {
			if m.ID != "" && len(msgs) == 1 {
				msg["id"] = m.ID
			}
			t.add(msg, at)
		}
	}
	return nil
}

// autogenContent is a message's content: a string as it is; a multimodal list with its
// strings as text blocks and images as image blocks (their data kept as AutoGen wrote it).
func autogenContent(c any) any {
	list, ok := c.([]any)
	if !ok {
		return c
	}
	out := make([]any, 0, len(list))
	for _, p := range list {
		if s, ok := p.(string); ok {
			out = append(out, map[string]any{"type": "text", "text": s})
			continue
		}
		out = append(out, map[string]any{"type": "image", "image": p})
	}
	return out
}

// autogenToolCalls is an agent's request of FunctionCalls as one AI message.
func autogenToolCalls(raw json.RawMessage, source string) ([]map[string]any, error) {
	var calls []struct {
		ID        string `json:"id"`
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	if err := json.Unmarshal(raw, &calls); err != nil {
		return nil, fmt.Errorf("function calls: %v", err)
	}
	tc := make([]any, 0, len(calls))
	for _, c := range calls {
		var args any = map[string]any{}
		if c.Arguments != "" {
			if err := json.Unmarshal([]byte(c.Arguments), &args); err != nil {
				args = c.Arguments // as the model wrote it: not JSON
			}
		}
		tc = append(tc, map[string]any{"name": c.Name, "args": args, "id": c.ID})
	}
	m := map[string]any{"type": "ai", "content": "", "tool_calls": tc}
	if source != "" {
		m["name"] = source
	}
	return []map[string]any{m}, nil
}

// autogenToolResults is each FunctionExecutionResult as a tool message.
func autogenToolResults(raw json.RawMessage) ([]map[string]any, error) {
	var results []struct {
		Content string `json:"content"`
		Name    string `json:"name"`
		CallID  string `json:"call_id"`
		IsError bool   `json:"is_error"`
	}
	if err := json.Unmarshal(raw, &results); err != nil {
		return nil, fmt.Errorf("function results: %v", err)
	}
	out := make([]map[string]any, 0, len(results))
	for _, r := range results {
		status := "success"
		if r.IsError {
			status = "error"
		}
		out = append(out, map[string]any{"type": "tool", "content": r.Content, "tool_call_id": r.CallID, "name": r.Name, "status": status})
	}
	return out, nil
}

// autogenLLMMessage is one message of a model context (autogen_core.models).
func autogenLLMMessage(raw json.RawMessage) ([]map[string]any, error) {
	var m struct {
		Type    string          `json:"type"`
		Source  string          `json:"source"`
		Content json.RawMessage `json:"content"`
		Thought *string         `json:"thought"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	switch m.Type {
	case "UserMessage", "SystemMessage":
		var content any
		if err := json.Unmarshal(m.Content, &content); err != nil {
			return nil, err
		}
		typ := "human"
		if m.Type == "SystemMessage" {
			typ = "system"
		}
		return []map[string]any{{"type": typ, "content": autogenContent(content)}}, nil
	case "AssistantMessage":
		var text string
		if json.Unmarshal(m.Content, &text) == nil {
			msg := map[string]any{"type": "ai", "content": text, "name": m.Source}
			if m.Thought != nil {
				msg["additional_kwargs"] = map[string]any{"thought": *m.Thought}
			}
			return []map[string]any{msg}, nil
		}
		msgs, err := autogenToolCalls(m.Content, m.Source)
		if err == nil && m.Thought != nil {
			msgs[0]["additional_kwargs"] = map[string]any{"thought": *m.Thought}
		}
		return msgs, err
	case "FunctionExecutionResultMessage":
		return autogenToolResults(m.Content)
	}
	return nil, errors.New("type " + m.Type)
}

// Source names what the file held, for the memories' provenance.
func (a *AutoGenState) Source() string { return a.kind }

// Threads yields the conversation, when the file holds one.
func (a *AutoGenState) Threads(_ context.Context, fn func(Thread) error) error {
	if a.thread == nil {
		return nil
	}
	return fn(*a.thread)
}

// StoreItems yields a ListMemory's contents.
func (a *AutoGenState) StoreItems(_ context.Context, fn func(StoreItem) error) error {
	for _, it := range a.items {
		if err := fn(it); err != nil {
			return err
		}
	}
	return nil
}

// leftOut counts what is not conversation (leftOutReporter).
func (a *AutoGenState) leftOut() ([]LeftOut, string) {
	var out []LeftOut
	for _, what := range slices.Sorted(maps.Keys(a.events)) {
		out = append(out, LeftOut{What: what, Count: a.events[what]})
	}
	return out, ""
}
