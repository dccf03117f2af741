package importer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
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
type LettaAgentFile struct {
	file lettaFile
}

type lettaFile struct {
	Agents []lettaAgent `json:"agents"`
	Blocks []lettaBlock `json:"blocks"`
}

type lettaAgent struct {
	ID       string         `json:"id"`
	Name     string         `json:"name"`
	BlockIDs []string       `json:"block_ids"`
	Messages []lettaMessage `json:"messages"`
}

type lettaBlock struct {
	ID          string         `json:"id"`
	Label       string         `json:"label"`
	Value       string         `json:"value"`
	Description *string        `json:"description"`
	Limit       *int64         `json:"limit"`
	ReadOnly    bool           `json:"read_only"`
	Metadata    map[string]any `json:"metadata"`
}

type lettaMessage struct {
	ID          string           `json:"id"`
	Role        string           `json:"role"`
	Content     json.RawMessage  `json:"content"`
	Name        *string          `json:"name"`
	ToolCalls   []map[string]any `json:"tool_calls"`
	ToolCallID  *string          `json:"tool_call_id"`
	ToolReturns []map[string]any `json:"tool_returns"`
	CreatedAt   *time.Time       `json:"created_at"`
}

// maxAgentFile bounds the file read into memory.
const maxAgentFile = 512 << 20

// OpenLettaAgentFile reads and parses path.
func OpenLettaAgentFile(path string) (*LettaAgentFile, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("letta agent file: %w", err)
	}
	if st.Size() > maxAgentFile {
		return nil, fmt.Errorf("letta agent file: %s is %d bytes, over the %d-byte limit", path, st.Size(), maxAgentFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("letta agent file: %w", err)
	}
	return ParseLettaAgentFile(b)
}

// ParseLettaAgentFile parses an agent file's bytes.
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
	var f lettaFile
	if err := json.Unmarshal([]byte(trimmed), &f); err != nil {
		return nil, fmt.Errorf("letta agent file: not JSON in the agent file schema: %w", err)
	}
	if len(f.Agents) == 0 {
		return nil, errors.New("letta agent file: no agents")
	}
	return &LettaAgentFile{file: f}, nil
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
			typ := lettaRoles[m.Role]
			if typ == "" {
				t.Unsupported = unsupported("message %d has role %q", i, m.Role)
				break
			}
			var content any
			if len(m.Content) > 0 {
				if err := json.Unmarshal(m.Content, &content); err != nil {
					t.Unsupported = unsupported("message %d content: %v", i, err)
					break
				}
			}
			msg := map[string]any{"type": typ, "content": content, "id": m.ID}
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
			if m.CreatedAt != nil {
				if t.FirstActivity.IsZero() || m.CreatedAt.Before(t.FirstActivity) {
					t.FirstActivity = m.CreatedAt.UTC()
				}
				if m.CreatedAt.After(t.LastActivity) {
					t.LastActivity = m.CreatedAt.UTC()
				}
			}
			t.Messages = append(t.Messages, msg)
		}
		if err := fn(t); err != nil {
			return err
		}
	}
	return nil
}

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
			now := time.Now().UTC()
			if err := fn(StoreItem{Namespace: []string{"agents", agentSlug(a)}, Key: b.Label, Value: raw, CreatedAt: now, UpdatedAt: now}); err != nil {
				return err
			}
		}
	}
	return nil
}
