package importer

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
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
		`"{\"agents\":[]}"`, `{"agents":[{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}]}`, "\xff", `null`,
		`{"agent_type":"memgpt_agent","name":"a","core_memory":[{"label":"human","value":"x","created_at":"2025-04-01T03:47:27"}],` +
			`"messages":[{"role":"user","content":[{"type":"text","text":"{\"type\":\"user_message\",\"message\":\"hi\"}"}],"created_at":"2025-04-01T03:47:27.1"}]}`} {
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

// readPublished reads a published agent file of testdata/letta/published (gzipped).
func readPublished(t *testing.T, name string) []byte {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "letta", "published", name+".af.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestLettaPublishedFiles: the agent files letta-ai/agent-file published, in both
// schemas (Letta 0.6 and 0.7: one agent at the top level; 0.8 and later: a list),
// import: every agent's conversation, the user's words unpacked from Letta's
// user_message events, its blocks as semantic memories, blocks attached to no agent
// counted; twice alike, to the memory and its dates.
func TestLettaPublishedFiles(t *testing.T) {
	for _, tc := range []struct {
		file        string
		scope       string
		threads     int64 // imported threads
		turns       int   // episodic memories that start with the user: one per user_message
		blocks      int
		unattached  int64
		firstSaid   string // what the user said first
		firstSaidAt time.Time
	}{
		{"memgpt_agent_with_convo-53ac528", "agent:memgpt_agent_with_convo", 1, 19, 2, 0,
			"ok I changed your model to 4.5, hopefully you are", time.Time{}},
		{"memgpt_agent_with_convo-11b649a", "agent:memgpt_agent", 1, 23, 2, 0,
			"hi my name is actually sarah not chad ", time.Date(2025, 4, 1, 3, 51, 8, 745024000, time.UTC)},
		{"composio_github_star_agent-53ac528", "agent:composio_github_star_agent", 1, 1, 2, 0,
			"please star the repository https://github.com/lett", time.Time{}},
		{"outreach_workflow_agent-11b649a", "agent:outreach_workflow_agent", 1, 1, 0, 0, "charles packer", time.Time{}},
		{"ezra-e661de5", "agent:ezra-super", 0, 0, 21, 35, "", time.Time{}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			raw := readPublished(t, tc.file)
			run := func() ([]memory.Item, Stats) {
				src, err := ParseLettaAgentFile(raw)
				if err != nil {
					t.Fatal(err)
				}
				var items []memory.Item
				// Now is far past the files: their dates must come from the files.
				rules := Rules{ScopeTemplate: "agent:{thread}", Now: time.Now().Add(24 * time.Hour), Source: "letta-agent-file"}
				st, err := ImportLangGraph(context.Background(), src, LangGraphOptions{Rules: rules},
					func(it memory.Item) error { items = append(items, it); return nil })
				if err != nil {
					t.Fatal(err)
				}
				return items, st
			}
			items, st := run()
			again, st2 := run()
			if !reflect.DeepEqual(items, again) || !reflect.DeepEqual(st, st2) {
				t.Fatal("the same file imported twice differs")
			}
			type turn struct {
				Messages []struct {
					Role    string `json:"role"`
					Content any    `json:"content"`
				} `json:"messages"`
			}
			var userTurns []memory.Item
			var first turn
			blocks := 0
			for _, it := range items {
				if err := it.Validate(); err != nil || it.Scope != tc.scope {
					t.Fatalf("memory %s in %s: %v", it.MemoryID, it.Scope, err)
				}
				if it.CreatedAt.After(time.Now()) {
					t.Errorf("memory %s dated %s: not from the file", it.MemoryID, it.CreatedAt)
				}
				if it.Key != "" {
					blocks++
					continue
				}
				var tu turn
				if err := json.Unmarshal(it.Content, &tu); err != nil || len(tu.Messages) == 0 {
					t.Fatalf("turn: %s", it.Content)
				}
				if tu.Messages[0].Role == "user" {
					if len(userTurns) == 0 {
						first = tu
					}
					userTurns = append(userTurns, it)
				}
			}
			if st.Imported != tc.threads || len(userTurns) != tc.turns || blocks != tc.blocks || st.StoreItems != int64(tc.blocks) {
				t.Fatalf("stats %+v: %d user turns, %d blocks; want %d threads, %d turns, %d blocks", st, len(userTurns), blocks, tc.threads, tc.turns, tc.blocks)
			}
			var unattached int64
			for _, l := range st.LeftOut {
				if l.What == "letta memory blocks attached to no agent" {
					unattached = l.Count
				}
			}
			if unattached != tc.unattached || (tc.unattached > 0) != strings.Contains(st.FirstProblem, "attached to no agent") {
				t.Fatalf("unattached blocks counted %d (%+v, %q), want %d", unattached, st.LeftOut, st.FirstProblem, tc.unattached)
			}
			if tc.turns == 0 {
				return
			}
			said, _ := first.Messages[0].Content.(string)
			if !strings.HasPrefix(said, tc.firstSaid) {
				t.Fatalf("first user turn starts with %v, want the user saying %q", first.Messages[0].Content, tc.firstSaid)
			}
			// Each turn is dated by its own messages (zone-less times are UTC): the first
			// one by the end of its exchange, after the user spoke and before the next turn.
			if !tc.firstSaidAt.IsZero() {
				at := userTurns[0].CreatedAt
				if at.Before(tc.firstSaidAt) || at.After(tc.firstSaidAt.Add(time.Minute)) || !at.Before(userTurns[1].CreatedAt) {
					t.Errorf("first user turn dated %s, want shortly after %s and before the next turn (%s)", at, tc.firstSaidAt, userTurns[1].CreatedAt)
				}
			}
		})
	}
}

// TestLettaPublishedFilesWithoutAConversation: agents whose file holds no user turn
// (only Letta's own login event) are counted, and their blocks still import.
func TestLettaPublishedFilesWithoutAConversation(t *testing.T) {
	for _, name := range []string{"customer_service-11b649a", "deep_research_agent-922ef41", "memgpt_agent-2362a20"} {
		src, err := ParseLettaAgentFile(readPublished(t, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var blocks int
		st, err := ImportLangGraph(context.Background(), src, LangGraphOptions{Rules: Rules{ScopeTemplate: "agent:{thread}", Now: time.Now(), SkipZombies: true}},
			func(it memory.Item) error {
				if it.Key != "" {
					blocks++
				}
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
		if st.Threads != 1 || st.Imported+st.Zombie+st.Empty != 1 || blocks == 0 || int64(blocks) != st.StoreItems {
			t.Errorf("%s: stats %+v, %d blocks", name, st, blocks)
		}
	}
}

// TestLettaSchemaErrors: a file in neither schema is refused naming both and what the
// file holds instead, never "no agents".
func TestLettaSchemaErrors(t *testing.T) {
	_, err := ParseLettaAgentFile([]byte(`{"name": "x", "llm_config": {}}`))
	if err == nil || !strings.Contains(err.Error(), "Letta 0.6 and 0.7") || !strings.Contains(err.Error(), "top-level keys are llm_config, name") {
		t.Fatalf("error %v", err)
	}
	_, err = ParseLettaAgentFile([]byte(`{"agent_type": "memgpt_agent", "messages": [{"role": "user", "created_at": "yesterday"}]}`))
	if err == nil || !strings.Contains(err.Error(), `time "yesterday"`) {
		t.Fatalf("error %v", err)
	}
}
