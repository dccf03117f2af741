package importer

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/amemory/memory-operator/test/importers"
)

// TestLlamaIndexMatchesLlamaIndex: each of LlamaIndex's stores (a persisted
// SimpleChatStore, a SQLiteChatStore, a Memory's SQLite history with its archived part)
// is read key by key as the store itself returns it: every message, its role, its text
// or blocks, its OpenAI-style tool calls and results; and imports as turns in the user's
// scope, tool calls structured.
func TestLlamaIndexMatchesLlamaIndex(t *testing.T) {
	exp := importers.GenerateLlamaIndex(t, 6, 2, 4)
	ctx := context.Background()
	for store, file := range map[string]string{"json": "chat_store.json", "sqlite": "chat_store.db", "memory": "memory.db"} {
		t.Run(store, func(t *testing.T) {
			src, err := OpenLlamaIndexChatStore(ctx, filepath.Join(exp.Dir, file), "")
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			got := map[string]Thread{}
			if err := src.Threads(ctx, func(th Thread) error { got[th.ID] = th; return nil }); err != nil {
				t.Fatal(err)
			}
			want := exp.Stores[store]
			if len(want) != len(exp.Keys) || len(got) != len(want) {
				t.Fatalf("%d keys read, the store has %d (of %d)", len(got), len(want), len(exp.Keys))
			}
			for key, msgs := range want {
				th := got[key]
				if th.Unsupported != nil || len(th.Messages) != len(msgs) {
					t.Fatalf("key %s: %d messages (%v), the store has %d", key, len(th.Messages), th.Unsupported, len(msgs))
				}
				for i, m := range msgs {
					var role string
					var blocks []map[string]any
					var kw map[string]any
					_ = json.Unmarshal(m["role"], &role)
					_ = json.Unmarshal(m["blocks"], &blocks)
					_ = json.Unmarshal(m["additional_kwargs"], &kw)
					gm := th.Messages[i]
					if gm["type"] != llamaRoles[role] {
						t.Fatalf("key %s message %d: type %v, role %s", key, i, gm["type"], role)
					}
					switch c := gm["content"].(type) {
					case string:
						if len(blocks) != 1 || blocks[0]["text"] != c {
							t.Fatalf("key %s message %d: content %q, blocks %v", key, i, c, blocks)
						}
					case []any:
						if len(c) != len(blocks) || len(c) < 2 {
							t.Fatalf("key %s message %d: %d parts, %d blocks", key, i, len(c), len(blocks))
						}
						for j, p := range c {
							if p.(map[string]any)["text"] != blocks[j]["text"] {
								t.Fatalf("key %s message %d part %d: %v, block %v", key, i, j, p, blocks[j])
							}
						}
					}
					if id, _ := kw["tool_call_id"].(string); id != "" && gm["tool_call_id"] != id {
						t.Fatalf("key %s message %d: tool_call_id %v, want %s", key, i, gm["tool_call_id"], id)
					}
				}
				if store == "memory" && (th.LastActivity.IsZero() || th.LastActivity.Before(th.FirstActivity)) {
					t.Fatalf("key %s: Memory's times %s - %s", key, th.FirstActivity, th.LastActivity)
				}
				// The conversion: a turn per user message, the tool call structured.
				rules := Rules{UserPattern: regexp.MustCompile(`^u-(?P<user>[^:]+):`), SkipZombies: true, Now: time.Now(), Source: src.Source()}
				res := rules.Convert(th)
				if res.Outcome != Imported || len(res.Items) != 4 {
					t.Fatalf("key %s: %s (%s), %d memories", key, res.Outcome, res.Problem, len(res.Items))
				}
				var turn struct {
					Messages []struct {
						Role      string           `json:"role"`
						ToolCalls []map[string]any `json:"tool_calls"`
					} `json:"messages"`
				}
				if err := json.Unmarshal(res.Items[0].Content, &turn); err != nil || len(turn.Messages) != 4 || turn.Messages[1].ToolCalls == nil {
					t.Fatalf("key %s first turn: %s", key, res.Items[0].Content)
				}
				if args, _ := turn.Messages[1].ToolCalls[0]["args"].(map[string]any); args["order_id"] == nil {
					t.Fatalf("key %s: tool call args %v, want them parsed", key, turn.Messages[1].ToolCalls[0])
				}
			}
		})
	}
}
