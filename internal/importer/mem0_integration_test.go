package importer

import (
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/test/importers"
)

// TestMem0MatchesMem0: every memory mem0's own get() returns imports, and nothing else:
// its text, ids and metadata kept, keyed by its mem0 id in its user's scope (its
// agent's or run's when it has no user), dated as mem0 dated it, with the text each
// update replaced as its history; deleted memories never come back and are counted.
func TestMem0MatchesMem0(t *testing.T) {
	exp := importers.GenerateMem0(t, importers.Mem0Options{})
	ctx := context.Background()
	src, err := OpenMem0(ctx, filepath.Join(exp.Dir, "chroma"), filepath.Join(exp.Dir, "history.db"), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = src.Close() })
	got := map[string]memory.Item{}
	st, err := ImportLangGraph(ctx, src, LangGraphOptions{Rules: Rules{Source: "mem0", Now: time.Now()}}, func(it memory.Item) error {
		if err := it.Validate(); err != nil {
			t.Fatalf("%s: %v", it.Key, err)
		}
		got[it.Key] = it
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(exp.Memories) == 0 || len(got) != len(exp.Memories) || st.StoreItems != int64(len(got)) || st.StoreSkipped != 0 {
		t.Fatalf("imported %d memories (stats %+v), mem0 has %d", len(got), st, len(exp.Memories))
	}
	for _, id := range exp.Deleted {
		if _, back := got[id]; back {
			t.Fatalf("deleted memory %s imported", id)
		}
	}
	if len(st.LeftOut) != 1 || st.LeftOut[0].Count != int64(len(exp.Deleted)) {
		t.Fatalf("left out %+v, want the %d deleted memories counted", st.LeftOut, len(exp.Deleted))
	}
	scopes := map[string]bool{}
	for id, want := range exp.Memories {
		it, ok := got[id]
		if !ok {
			t.Fatalf("memory %s (%q) not imported", id, want.Memory)
		}
		scope := "user:" + want.UserID
		switch {
		case want.UserID == "" && want.AgentID != "":
			scope = "agent:" + want.AgentID
		case want.UserID == "" && want.RunID != "":
			scope = "session:" + want.RunID
		}
		scopes[it.Scope] = true
		var c struct {
			Text     string         `json:"text"`
			Mem0ID   string         `json:"mem0_id"`
			Role     string         `json:"role"`
			UserID   string         `json:"user_id"`
			AgentID  string         `json:"agent_id"`
			RunID    string         `json:"run_id"`
			Metadata map[string]any `json:"metadata"`
		}
		if err := json.Unmarshal(it.Content, &c); err != nil {
			t.Fatal(err)
		}
		wantMeta := want.Metadata
		if len(wantMeta) == 0 {
			wantMeta = nil
		}
		switch {
		case it.Scope != memory.NormalizeScope(scope) || it.MemoryType != memory.Semantic:
			t.Fatalf("memory %s in %s (%s), want %s", id, it.Scope, it.MemoryType, scope)
		case c.Text != want.Memory || c.Mem0ID != id || c.Role != want.Role || c.UserID != want.UserID || c.AgentID != want.AgentID || c.RunID != want.RunID:
			t.Fatalf("memory %s: %s, mem0 has %+v", id, it.Content, want)
		case !reflect.DeepEqual(c.Metadata, wantMeta):
			t.Fatalf("memory %s: metadata %v, mem0 has %v", id, c.Metadata, wantMeta)
		case !it.CreatedAt.Equal(want.CreatedAt) || !it.UpdatedAt.Equal(want.UpdatedAt):
			t.Fatalf("memory %s dated %s / %s, mem0 %s / %s", id, it.CreatedAt, it.UpdatedAt, want.CreatedAt, want.UpdatedAt)
		}
		var olds []string
		for _, h := range want.History {
			if h.Event == "UPDATE" && h.OldMemory != nil {
				olds = append(olds, *h.OldMemory)
			}
		}
		var hist []string
		for i, r := range it.History {
			var old struct{ Text string }
			if err := json.Unmarshal(r.Content, &old); err != nil || r.SupersededAt.Before(r.UpdatedAt) || i > 0 && r.UpdatedAt.Before(it.History[i-1].SupersededAt) {
				t.Fatalf("memory %s history %d: %+v", id, i, r)
			}
			hist = append(hist, old.Text)
		}
		if !slices.Equal(hist, olds) {
			t.Fatalf("memory %s: history %q, mem0 replaced %q", id, hist, olds)
		}
	}
	for _, s := range []string{"user:zoë-ユーザー", "agent:support", "session:run-anonymous"} {
		if !scopes[memory.NormalizeScope(s)] {
			t.Errorf("no memory in %s", s)
		}
	}
}
