package importer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/amemory/memory-operator/internal/memory"
)

// LettaAgentFile reads a Letta Agent File (.af, research/importers.md 5): each agent
// is a thread (its messages, in order, with their tool calls) and its memory blocks
// are store items in namespace ("agents", <agent>) keyed by label, so with the default
// namespace rules they become semantic memories of agent:<agent>. Agents are named
// by a slug of their name (or their file-local id). Files that are a JSON string
// holding the JSON (as several published samples are) are read too.
//
// Two schemas are read: the agent file of Letta 0.8 and later (a list of agents, the
// blocks beside them, referenced by id) and the earlier one of Letta 0.6 and 0.7 (the
// files of letta-ai/agent-file before 2025-10: one agent at the top level, agent_type,
// its blocks inline as core_memory, messages without ids, times without a zone, which
// Letta writes in UTC). The import is deterministic: a block is dated by its own times,
// else by the file's export time, else by its agent's last message. Blocks no agent
// uses are counted in Stats.LeftOut, not imported.
type LettaAgentFile struct {
	file       lettaFile
	unattached []lettaBlock // blocks no agent references
}

type lettaFile struct {
	Agents    []lettaAgent `json:"agents"`
	Blocks    []lettaBlock `json:"blocks"`
	CreatedAt *lettaTime   `json:"created_at"` // when the file was exported (2025-11 and later)
}

// lettaLegacyFile is the agent file of Letta 0.6 and 0.7: the agent itself.
type lettaLegacyFile struct {
	AgentType  string         `json:"agent_type"`
	Name       string         `json:"name"`
	Version    string         `json:"version"`
	CreatedAt  *lettaTime     `json:"created_at"`
	UpdatedAt  *lettaTime     `json:"updated_at"`
	CoreMemory []lettaBlock   `json:"core_memory"`
	Messages   []lettaMessage `json:"messages"`
}

type lettaAgent struct {
	ID       string         `json:"id"`
	Name     string         `json:"name"`
	BlockIDs []string       `json:"block_ids"`
	Messages []lettaMessage `json:"messages"`
}

type lettaBlock struct {
	ID          string     `json:"id"`
	Label       string     `json:"label"`
	Value       string     `json:"value"`
	Description *string    `json:"description"`
	Limit       *int64     `json:"limit"`
	ReadOnly    bool       `json:"read_only"`
	CreatedAt   *lettaTime `json:"created_at"` // legacy files only
	UpdatedAt   *lettaTime `json:"updated_at"`
}

type lettaMessage struct {
	ID          string           `json:"id"`
	Role        string           `json:"role"`
	Content     json.RawMessage  `json:"content"`
	Name        *string          `json:"name"`
	ToolCalls   []map[string]any `json:"tool_calls"`
	ToolCallID  *string          `json:"tool_call_id"`
	ToolReturns []map[string]any `json:"tool_returns"`
	CreatedAt   *lettaTime       `json:"created_at"`
}

// lettaTime is a time as Letta writes it: RFC 3339, or (Letta 0.6 and 0.7) without a
// zone, meaning UTC.
type lettaTime struct{ time.Time }

func (t *lettaTime) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a time must be a string: %w", err)
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999"} {
		if v, err := time.Parse(layout, s); err == nil {
			t.Time = v.UTC()
			return nil
		}
	}
	return fmt.Errorf("time %q is neither RFC 3339 nor a UTC time without a zone", s)
}

// maxAgentFile bounds the file read into memory.
const maxAgentFile = 512 << 20

// OpenLettaAgentFile reads and parses path.
func OpenLettaAgentFile(path string) (*LettaAgentFile, error) {
	b, err := readSourceFile("letta agent file", path, maxAgentFile)
	if err != nil {
		return nil, err
	}
	return ParseLettaAgentFile(b)
}

// ParseLettaAgentFile parses an agent file's bytes, in either schema.
func ParseLettaAgentFile(b []byte) (*LettaAgentFile, error) {
	trimmed := strings.TrimSpace(string(b))
	if strings.HasPrefix(trimmed, `"`) {
		// Double-encoded: a JSON string whose value is the file.
		var inner string
		if err := json.Unmarshal([]byte(trimmed), &inner); err != nil {
			return nil, fmt.Errorf("letta agent file: not JSON: %w", err)
		}
		trimmed = inner
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(trimmed), &top); err != nil {
		return nil, fmt.Errorf("letta agent file: not a JSON object: %w", err)
	}
	var f lettaFile
	switch {
	case top["agents"] != nil:
		if err := json.Unmarshal([]byte(trimmed), &f); err != nil {
			return nil, fmt.Errorf("letta agent file (the schema of Letta 0.8 and later): %w", err)
		}
		if len(f.Agents) == 0 {
			return nil, errors.New("letta agent file: its list of agents is empty")
		}
	case top["agent_type"] != nil || top["core_memory"] != nil:
		var legacy lettaLegacyFile
		if err := json.Unmarshal([]byte(trimmed), &legacy); err != nil {
			return nil, fmt.Errorf("letta agent file (the single-agent schema of Letta 0.6 and 0.7): %w", err)
		}
		f = legacy.agentFile()
	default:
		keys := slices.Sorted(maps.Keys(top))
		if len(keys) > 12 {
			keys = append(keys[:12], "…")
		}
		return nil, fmt.Errorf("letta agent file: neither schema it reads (Letta 0.8 and later: a list of agents; Letta 0.6 and 0.7: one agent with agent_type and core_memory); its top-level keys are %s",
			strings.Join(keys, ", "))
	}
	l := &LettaAgentFile{file: f}
	used := map[string]bool{}
	for _, a := range f.Agents {
		for _, id := range a.BlockIDs {
			used[id] = true
		}
	}
	for _, bl := range f.Blocks {
		if !used[bl.ID] {
			l.unattached = append(l.unattached, bl)
		}
	}
	return l, nil
}

// agentFile is the legacy file in the current schema: one agent, its core memory as
// its blocks (ids made up: the legacy schema has none).
func (l lettaLegacyFile) agentFile() lettaFile {
	a := lettaAgent{Name: l.Name, Messages: l.Messages}
	if strings.TrimSpace(a.Name) == "" {
		a.Name = "agent"
	}
	f := lettaFile{Agents: []lettaAgent{a}, CreatedAt: l.UpdatedAt}
	for i, b := range l.CoreMemory {
		b.ID = fmt.Sprintf("core-memory-%d", i)
		f.Blocks = append(f.Blocks, b)
		f.Agents[0].BlockIDs = append(f.Agents[0].BlockIDs, b.ID)
	}
	return f
}

// leftOut counts the blocks no agent uses (leftOutReporter).
func (l *LettaAgentFile) leftOut() ([]LeftOut, string) {
	if len(l.unattached) == 0 {
		return nil, ""
	}
	return []LeftOut{{What: "letta memory blocks attached to no agent", Count: int64(len(l.unattached))}},
		fmt.Sprintf("letta block %s (label %s) is attached to no agent: left out", shown(l.unattached[0].ID), shown(l.unattached[0].Label))
}

// agentSlug names an agent in scopes and namespaces: its name lowercased and
// NFC-normalised, letters and digits of any script kept (with their combining
// marks), -_.@ too, anything else turned into '-'; its id when it has no name.
func agentSlug(a lettaAgent) string {
	name := a.Name
	if strings.TrimSpace(name) == "" {
		name = a.ID
	}
	var b strings.Builder
	base := false // the last rune kept can carry a combining mark
	for _, r := range memory.NormalizeScope(strings.ToLower(strings.TrimSpace(name))) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r >= utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsNumber(r)):
			b.WriteRune(r)
			base = true
		case r >= utf8.RuneSelf && unicode.Is(unicode.M, r) && base:
			b.WriteRune(r)
		case r == '-', r == '_', r == '.', r == '@':
			b.WriteRune(r)
			base = false
		default:
			b.WriteByte('-')
			base = false
		}
	}
	return strings.Trim(b.String(), "-")
}

// lettaRoles maps Letta roles to LangChain message types.
var lettaRoles = map[string]string{"user": "human", "assistant": "ai", "tool": "tool", "system": "system"}

// Threads yields each agent's messages as a thread named by its slug.
func (l *LettaAgentFile) Threads(_ context.Context, fn func(Thread) error) error {
	for _, a := range l.file.Agents {
		t := Thread{ID: agentSlug(a), Metadata: map[string]any{"agent_id": a.ID, "agent_name": a.Name}}
		for i, m := range a.Messages {
			msg, err := lettaToMessage(m)
			if err != nil {
				t.Unsupported = unsupported("message %d: %v", i, err)
				break
			}
			var at time.Time
			if m.CreatedAt != nil {
				at = m.CreatedAt.Time
			}
			t.add(msg, at)
		}
		if err := fn(t); err != nil {
			return err
		}
	}
	return nil
}

// lettaToMessage is a Letta message as a LangChain message dict. Letta packs what
// arrives on the user role as JSON events: "user_message" (what the user said, in
// "message") becomes a human message of that text; its own events ("heartbeat",
// "login", "system_alert": automated messages hidden from the user) become system
// messages, which, like the system prompt, are not memory.
func lettaToMessage(m lettaMessage) (map[string]any, error) {
	typ := lettaRoles[m.Role]
	if typ == "" {
		return nil, fmt.Errorf("role %q", m.Role)
	}
	var content any
	if len(m.Content) > 0 {
		if err := json.Unmarshal(m.Content, &content); err != nil {
			return nil, fmt.Errorf("content: %v", err)
		}
	}
	if typ == "human" {
		if event, text, ok := lettaUserEvent(content); ok {
			if event == "user_message" {
				content = text
			} else {
				typ = "system"
			}
		}
	}
	msg := map[string]any{"type": typ, "content": content}
	if m.ID != "" {
		msg["id"] = m.ID
	}
	if m.Name != nil {
		msg["name"] = *m.Name
	}
	if m.ToolCallID != nil {
		msg["tool_call_id"] = *m.ToolCallID
	}
	if len(m.ToolReturns) > 0 {
		msg["artifact"] = map[string]any{"tool_returns": m.ToolReturns}
	}
	if len(m.ToolCalls) > 0 {
		raw := make([]any, len(m.ToolCalls))
		for j, c := range m.ToolCalls {
			raw[j] = c
		}
		msg["tool_calls"] = openAIToolCalls(raw) // arguments are JSON strings: parsed
	}
	return msg, nil
}

// lettaUserEvents are the event types Letta packs into user-role messages.
var lettaUserEvents = map[string]bool{"user_message": true, "heartbeat": true, "login": true, "system_alert": true}

// lettaUserEvent recognises a packed event: the message's only text (a string, or one
// text part) is a JSON object whose "type" is one of lettaUserEvents. For a
// user_message, text is what the user said.
func lettaUserEvent(content any) (event, text string, ok bool) {
	var s string
	switch c := content.(type) {
	case string:
		s = c
	case []any:
		if len(c) != 1 {
			return "", "", false
		}
		part, _ := c[0].(map[string]any)
		if part["type"] != "text" {
			return "", "", false
		}
		s, _ = part["text"].(string)
	}
	if !strings.HasPrefix(strings.TrimSpace(s), "{") {
		return "", "", false
	}
	var packed struct {
		Type    string  `json:"type"`
		Message *string `json:"message"`
	}
	if json.Unmarshal([]byte(s), &packed) != nil || !lettaUserEvents[packed.Type] {
		return "", "", false
	}
	if packed.Type == "user_message" {
		if packed.Message == nil {
			return "", "", false // not the shape Letta packs: kept as written
		}
		return packed.Type, *packed.Message, true
	}
	return packed.Type, "", true
}

// blockTimes dates a block deterministically: by its own times (legacy files), else
// the file's export time, else its agent's last message, else (a file dated nowhere)
// 2000-01-01 UTC, so that the same file always imports alike.
func (l *LettaAgentFile) blockTimes(a lettaAgent, b lettaBlock) (created, updated time.Time) {
	switch {
	case b.CreatedAt != nil:
		created = b.CreatedAt.Time
	case b.UpdatedAt != nil:
		created = b.UpdatedAt.Time
	case l.file.CreatedAt != nil:
		created = l.file.CreatedAt.Time
	default:
		for _, m := range a.Messages {
			if m.CreatedAt != nil && m.CreatedAt.After(created) {
				created = m.CreatedAt.Time
			}
		}
		if created.IsZero() {
			created = undatedBlock
		}
	}
	updated = created
	if b.UpdatedAt != nil && b.UpdatedAt.After(created) {
		updated = b.UpdatedAt.Time
	}
	return created, updated
}

// undatedBlock dates the blocks of a file that holds no time at all.
var undatedBlock = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// StoreItems yields each agent's memory blocks in namespace ("agents", <slug>), keyed
// by label.
func (l *LettaAgentFile) StoreItems(_ context.Context, fn func(StoreItem) error) error {
	blocks := map[string]lettaBlock{}
	for _, b := range l.file.Blocks {
		blocks[b.ID] = b
	}
	for _, a := range l.file.Agents {
		for _, id := range a.BlockIDs {
			b, ok := blocks[id]
			if !ok {
				return fmt.Errorf("letta agent file: agent %s names block %s, which the file does not hold", a.ID, id)
			}
			v := map[string]any{"value": b.Value}
			if b.Description != nil {
				v["description"] = *b.Description
			}
			if b.Limit != nil {
				v["limit"] = *b.Limit
			}
			if b.ReadOnly {
				v["read_only"] = true
			}
			raw, err := json.Marshal(v)
			if err != nil {
				return err
			}
			created, updated := l.blockTimes(a, b)
			if err := fn(StoreItem{Namespace: []string{"agents", agentSlug(a)}, Key: b.Label, Value: raw, CreatedAt: created, UpdatedAt: updated}); err != nil {
				return err
			}
		}
	}
	return nil
}
