package importer

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
)

// TestLettaAgentFile: a .af in the published schema (testdata/letta, also in its
// double-encoded form) becomes the agent's memory blocks as semantic memories keyed
// by label, and its conversation as episodic memories with the tool calls parsed
// into JSON, all in agent:<agent>.
func TestLettaAgentFile(t *testing.T) {
	for _, name := range []string{"support.af", "support-double-encoded.af"} {
		t.Run(name, func(t *testing.T) {
			src, err := OpenLettaAgentFile(filepath.Join("testdata", "letta", name))
			if err != nil {
				t.Fatal(err)
			}
			var items []memory.Item
			st, err := ImportLangGraph(context.Background(), src, LangGraphOptions{Rules: Rules{ScopeTemplate: "agent:{thread}", Now: time.Now(), Source: "letta-agent-file"}},
				func(it memory.Item) error { items = append(items, it); return nil })
			if err != nil {
				t.Fatal(err)
			}
			if st.Imported != 1 || st.StoreItems != 2 || st.StoreSkipped != 0 || len(items) != 3 {
				t.Fatalf("stats %+v, %d items", st, len(items))
			}
			byKey := map[string]memory.Item{}
			for _, it := range items {
				if it.Scope != "agent:support-bot" || it.Validate() != nil {
					t.Fatalf("memory %+v (%v)", it, it.Validate())
				}
				byKey[it.Key] = it
			}
			human := byKey["human"]
			if human.MemoryType != memory.Semantic || !jsonHas(t, human.Content, "value", "Prefers hot coffee. Confirm the address before asking for a delivery time.") {
				t.Fatalf("human block: %s", human.Content)
			}
			turn := byKey[""]
			var c struct {
				Messages []map[string]any `json:"messages"`
			}
			if err := json.Unmarshal(turn.Content, &c); err != nil || len(c.Messages) != 4 {
				t.Fatalf("turn: %s", turn.Content)
			}
			args := c.Messages[1]["tool_calls"].([]any)[0].(map[string]any)["args"].(map[string]any)
			if args["order_id"] != "A-17" || len(args["fields"].([]any)) != 2 {
				t.Fatalf("tool call args: %v", args)
			}
			if !turn.CreatedAt.Equal(time.Date(2026, 11, 20, 8, 0, 8, 0, time.UTC)) {
				t.Fatalf("turn time %s", turn.CreatedAt)
			}
		})
	}
	for name, b := range map[string]string{"not json": "{", "no agents": `{"agents": []}`, "string of not json": `"{"`} {
		if _, err := ParseLettaAgentFile([]byte(b)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	if _, err := OpenLettaAgentFile(filepath.Join(t.TempDir(), "missing.af")); err == nil || !os.IsNotExist(unwrapAll(err)) {
		t.Errorf("missing file: %v", err)
	}
}

func jsonHas(t *testing.T, raw json.RawMessage, key, want string) bool {
	t.Helper()
	var m map[string]any
	return json.Unmarshal(raw, &m) == nil && m[key] == want
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

// FuzzParseLettaAgentFile: any bytes given as a .af either parse or fail with an
// error; a parsed file converts without a panic.
func FuzzParseLettaAgentFile(f *testing.F) {
	for _, seed := range []string{`{}`, `[]`, `{"agents":[{"id":"a","memory_blocks":[{"label":"human","value":"x"}],"messages":[]}]}`,
		`"{\"agents\":[]}"`, `{"agents":[{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}]}`, "\xff", `null`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(_ *testing.T, b []byte) {
		af, err := ParseLettaAgentFile(b)
		if err != nil {
			return
		}
		rules := Rules{ScopeTemplate: "agent:{thread}", Now: time.Now()}
		_, _ = ImportLangGraph(context.Background(), af, LangGraphOptions{Rules: rules}, func(memory.Item) error { return nil })
	})
}
