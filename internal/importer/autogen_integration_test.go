package importer

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/test/importers"
)

// TestAutoGenMatchesAutoGen: what autogen-agentchat saves imports: a team's thread (the
// user's task, the agent's tool call with its arguments, the tool's result, its answers,
// each dated as AutoGen dated it) as one conversation, memory queries counted not
// imported; an agent's own model context likewise; a ListMemory's contents as semantic
// memories of the memory's agent scope, their metadata kept.
func TestAutoGenMatchesAutoGen(t *testing.T) {
	exp := importers.GenerateAutoGen(t, 4)
	ctx := context.Background()
	rules := Rules{ScopeTemplate: "session:{thread}", SkipZombies: true, Now: time.Now().Add(time.Hour), Source: "autogen"}
	for n, conv := range exp.Conversations {
		team, err := OpenAutoGenState(filepath.Join(exp.Dir, "team-"+n+".json"), "")
		if err != nil {
			t.Fatal(err)
		}
		var th Thread
		if err := team.Threads(ctx, func(t Thread) error { th = t; return nil }); err != nil {
			t.Fatal(err)
		}
		var events, conversational int
		for _, m := range conv.Thread {
			var typ string
			_ = json.Unmarshal(m["type"], &typ)
			switch typ {
			case "MemoryQueryEvent":
				events++
			case "ToolCallExecutionEvent":
				var results []any
				_ = json.Unmarshal(m["content"], &results)
				conversational += len(results)
			default:
				conversational++
			}
		}
		if th.ID != "team-"+n || th.Unsupported != nil || len(th.Messages) != conversational || th.LastActivity.IsZero() {
			t.Fatalf("team %s: thread %s, %d messages (%v), AutoGen's thread has %d conversational", n, th.ID, len(th.Messages), th.Unsupported, conversational)
		}
		var calls, results int
		for _, m := range th.Messages {
			if tc, ok := m["tool_calls"].([]any); ok {
				args := tc[0].(map[string]any)["args"].(map[string]any)
				if !strings.HasPrefix(args["order_id"].(string), "A-") {
					t.Fatalf("team %s: tool call %v", n, tc)
				}
				calls++
			}
			if m["type"] == "tool" {
				results++
			}
		}
		if calls != 1 || results != 1 {
			t.Fatalf("team %s: %d tool calls, %d results", n, calls, results)
		}
		res := rules.Convert(th)
		if res.Outcome != Imported || len(res.Items) != 1 || res.Items[0].Scope != "session:team-"+n {
			t.Fatalf("team %s: %s (%s), %+v", n, res.Outcome, res.Problem, res.Items)
		}
		st, err := ImportLangGraph(ctx, team, LangGraphOptions{Rules: rules}, func(memory.Item) error { return nil })
		if err != nil || len(st.LeftOut) == 0 || !strings.Contains(st.LeftOut[len(st.LeftOut)-1].What, "MemoryQueryEvent") ||
			st.LeftOut[len(st.LeftOut)-1].Count != int64(events) {
			t.Fatalf("team %s: left out %+v (%v), want %d memory query events counted", n, st.LeftOut, err, events)
		}

		agent, err := OpenAutoGenState(filepath.Join(exp.Dir, "agent-"+n+".json"), "")
		if err != nil {
			t.Fatal(err)
		}
		var at Thread
		_ = agent.Threads(ctx, func(t Thread) error { at = t; return nil })
		if at.Unsupported != nil || len(at.Messages) < len(conv.Context) || at.Messages[0]["type"] != "human" {
			t.Fatalf("agent %s: %d messages (%v), its context has %d", n, len(at.Messages), at.Unsupported, len(conv.Context))
		}
	}

	mem, err := OpenAutoGenState(filepath.Join(exp.Dir, "memory.json"), "")
	if err != nil {
		t.Fatal(err)
	}
	var items []memory.Item
	st, err := ImportLangGraph(ctx, mem, LangGraphOptions{Rules: rules}, func(it memory.Item) error { items = append(items, it); return nil })
	if err != nil || len(items) != len(exp.Memory) || st.StoreSkipped != 0 {
		t.Fatalf("ListMemory: %d memories (%v, %+v), AutoGen has %d", len(items), err, st, len(exp.Memory))
	}
	for i, it := range items {
		var c struct {
			Content  any            `json:"content"`
			MimeType string         `json:"mime_type"`
			Metadata map[string]any `json:"metadata"`
		}
		if err := json.Unmarshal(it.Content, &c); err != nil || it.Scope != "agent:support_prefs" || it.MemoryType != memory.Semantic {
			t.Fatalf("ListMemory item %d: %+v in %s", i, it, it.Scope)
		}
		if !sameJSON(t, c.Content, exp.Memory[i]["content"]) || !sameJSON(t, c.MimeType, exp.Memory[i]["mime_type"]) {
			t.Fatalf("ListMemory item %d: %s, AutoGen has %s", i, it.Content, exp.Memory[i]["content"])
		}
	}
	if _, err := ParseAutoGenState([]byte(`{"type": "SocietyOfMindAgentState"}`), "x"); err == nil || !strings.Contains(err.Error(), "SocietyOfMindAgentState") {
		t.Fatalf("an unknown state: %v", err)
	}
}
