package importer

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/test/importers"
)

// TestLangChainHistoryMatchesLangChain: the PostgresChatMessageHistory reader sees
// every session's messages exactly as langchain-postgres returns them, and each
// session's turns become episodic memories of session:<id> with tool calls kept
// structured.
func TestLangChainHistoryMatchesLangChain(t *testing.T) {
	exp := importers.Generate(t, importers.Options{})
	if exp.LangChain == nil || len(exp.LangChain.Sessions) == 0 {
		t.Fatal("the generator wrote no LangChain history")
	}
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, exp.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	src, err := OpenLangChainPostgresHistory(ctx, pool, "", exp.LangChain.Table)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Thread{}
	if err := src.Threads(ctx, func(th Thread) error { got[th.ID] = th; return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(exp.LangChain.Sessions) {
		t.Fatalf("%d sessions read, langchain-postgres has %d", len(got), len(exp.LangChain.Sessions))
	}
	for _, s := range exp.LangChain.Sessions {
		th := got[s.SessionID]
		if th.Unsupported != nil || len(th.Messages) != len(s.Messages) {
			t.Fatalf("session %s: %d messages (%v), want %d", s.SessionID, len(th.Messages), th.Unsupported, len(s.Messages))
		}
		for i, m := range s.Messages {
			want := map[string]any{}
			_ = json.Unmarshal(m.Raw, &want)
			want["type"] = m.Type
			if !sameJSON(t, th.Messages[i], mustRaw(want)) {
				t.Fatalf("session %s message %d:\n got  %s\n want %s", s.SessionID, i, mustJSON(th.Messages[i]), mustJSON(want))
			}
		}
	}
	var items []memory.Item
	st, err := ImportLangGraph(ctx, src, LangGraphOptions{Rules: Rules{ScopeTemplate: "session:{thread}", Now: time.Now(), Source: "langchain-postgres"}},
		func(it memory.Item) error { items = append(items, it); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if st.Imported != int64(len(exp.LangChain.Sessions)) || len(items) == 0 {
		t.Fatalf("stats %+v", st)
	}
	calls := 0
	for _, it := range items {
		if it.Scope[:8] != "session:" || it.MemoryType != memory.Episodic {
			t.Fatalf("memory %+v", it)
		}
		var c struct {
			Messages []map[string]any `json:"messages"`
		}
		_ = json.Unmarshal(it.Content, &c)
		for _, m := range c.Messages {
			if tc, ok := m["tool_calls"].([]any); ok {
				if _, obj := tc[0].(map[string]any)["args"].(map[string]any); !obj {
					t.Fatalf("tool call args not an object: %v", tc[0])
				}
				calls++
			}
		}
	}
	if calls == 0 {
		t.Fatal("no tool call came through (the generator writes some)")
	}
}

func mustRaw(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}
