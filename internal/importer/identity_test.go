package importer

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
)

// TestUnicodeIdentities: users and threads named in any language land in their own
// scope, one per user whatever the spelling (composed or decomposed), by metadata, by
// thread-id pattern and for working memory under session:{thread}.
func TestUnicodeIdentities(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	msgs := []map[string]any{{"type": "human", "content": "hallo", "id": "m1"}, {"type": "ai", "content": "こんにちは", "id": "m2"}}
	thread := func(id string, meta map[string]any) Thread {
		return Thread{ID: id, Metadata: meta, LastActivity: now.Add(-time.Hour), Messages: msgs}
	}
	byMeta := Rules{UserMetadataKey: "user_id", UserPattern: regexp.MustCompile(`^(?:u|ü)-(?P<user>[^:]+):`), Now: now, KeepWorking: true}
	for _, c := range []struct {
		rules         Rules
		th            Thread
		scope, wscope string
	}{
		{byMeta, thread("t-1", map[string]any{"user_id": "zoë-ユーザー"}), "user:zoë-ユーザー", "session:t-1"},
		{byMeta, thread("t-2", map[string]any{"user_id": "zoe\u0308-ユーザー"}), "user:zoë-ユーザー", "session:t-2"}, // the same user, decomposed
		{byMeta, thread("u-用户123:sess-1", nil), "user:用户123", "session:u-用户123:sess-1"},
		{byMeta, thread("u\u0308-𠮷野家:sess/2", nil), "user:𠮷野家", "session:ü-𠮷野家:sess/2"}, // the pattern's ü matches a decomposed ü
		{Rules{ScopeTemplate: "session:{thread}", Now: now}, thread("tenant:acme/thread/zoe\u0308", nil), "session:tenant:acme/thread/zoë", ""},
	} {
		res := c.rules.Convert(c.th)
		if res.Outcome != Imported || len(res.Items) == 0 {
			t.Fatalf("%q: %+v", c.th.ID, res)
		}
		for _, it := range res.Items {
			want := c.scope
			if it.MemoryType == memory.Working {
				want = c.wscope
			}
			if it.Scope != want {
				t.Fatalf("%q: a %s memory in %q, want %q", c.th.ID, it.MemoryType, it.Scope, want)
			}
			if err := it.Validate(); err != nil {
				t.Fatalf("%q: %v", c.th.ID, err)
			}
		}
	}
	// What no scope can hold is skipped as having no usable user, and the problem
	// shows the thread id quoted: it cannot forge a line of the log or status.
	for _, th := range []Thread{thread("x\nINFO import done", map[string]any{"user_id": "a b"}), thread("t-3", map[string]any{"user_id": "😀"})} {
		res := byMeta.Convert(th)
		if res.Outcome != SkipNoUser || strings.ContainsAny(res.Problem, "\n\r") {
			t.Fatalf("%q: %+v", th.ID, res)
		}
	}
	if res := byMeta.Convert(Thread{ID: "x\ny", Unsupported: unsupported("pickle")}); !strings.HasPrefix(res.Problem, `thread "x\ny": `) {
		t.Fatalf("problem %q", res.Problem)
	}
	if res := byMeta.Convert(Thread{ID: "u-1:sess-3", Unsupported: unsupported("pickle")}); !strings.HasPrefix(res.Problem, "thread u-1:sess-3: ") {
		t.Fatalf("problem %q: a plain id is shown as it is", res.Problem)
	}
}

// TestLettaAgentSlugs: an agent named in any script keeps its name in its scope.
func TestLettaAgentSlugs(t *testing.T) {
	for name, want := range map[string]string{
		"Support Bot":  "support-bot", // as before
		"客服助手":         "客服助手",
		"Zoë Bot":      "zoë-bot",
		"Zoe\u0308":    "zoë",
		"😀 helper":     "helper",
		"İstanbul":     "istanbul", // simple case mapping
		"Ελένη/Αθήνα":  "ελένη-αθήνα",
		" \u0301 Mark": "mark",
	} {
		got := agentSlug(lettaAgent{ID: "agent-1", Name: name})
		if got != want {
			t.Errorf("agentSlug(%q) = %q, want %q", name, got, want)
		}
		if err := memory.ValidateScope("agent:" + got); err != nil {
			t.Errorf("agentSlug(%q) = %q: %v", name, got, err)
		}
	}
}
