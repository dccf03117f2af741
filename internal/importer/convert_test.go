package importer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
)

// realMessages are the messages LangGraph's serializer wrote (testdata/jsonplus).
func realMessages(t *testing.T) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "jsonplus", "messages.msgpack"))
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := decodeMessages("msgpack", b, false)
	if err != nil {
		t.Fatal(err)
	}
	return msgs
}

func TestConvertTurns(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	msgs := realMessages(t)
	// Two user turns: the fixture's, then a second one.
	second := []map[string]any{{"type": "human", "content": "还是老规矩，先确认地址", "id": "m5"}, {"type": "ai", "content": "好的", "id": "m6"}}
	th := Thread{ID: "u-42:sess-1", Metadata: map[string]any{"user_id": "42"}, LastActivity: now.Add(-time.Hour), Messages: append(msgs, second...)}
	r := Rules{UserMetadataKey: "user_id", Source: "langgraph-checkpoint-postgres@3.2.0", Now: now, SkipZombies: true, InactiveAfter: 7 * 24 * time.Hour}
	res := r.Convert(th)
	if res.Outcome != Imported || len(res.Items) != 2 {
		t.Fatalf("convert: %+v", res)
	}
	// Messages decoded for an import (their provider metadata left out, unread)
	// convert to the very same memories.
	b, err := os.ReadFile(filepath.Join("testdata", "jsonplus", "messages.msgpack"))
	if err != nil {
		t.Fatal(err)
	}
	lean, err := decodeMessages("msgpack", b, true)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(lean) == fmt.Sprint(msgs) {
		t.Fatal("the fixture's messages carry no metadata to leave out")
	}
	leanTh := th
	leanTh.Messages = append(lean, second...)
	if got := r.Convert(leanTh); !reflect.DeepEqual(got, res) {
		t.Fatalf("converted from messages decoded for an import:\n%+v\nwant\n%+v", got, res)
	}
	first := res.Items[0]
	if first.Scope != "user:42" || first.MemoryType != memory.Episodic || first.Source != r.Source || first.Validate() != nil {
		t.Fatalf("first turn: %+v (%v)", first, first.Validate())
	}
	var c struct {
		ThreadID string           `json:"thread_id"`
		Turn     int              `json:"turn"`
		Messages []map[string]any `json:"messages"`
	}
	if err := json.Unmarshal(first.Content, &c); err != nil {
		t.Fatal(err)
	}
	// The system prompt is left out; user, tool call, tool result, reply stay in order.
	var roles []string
	for _, m := range c.Messages {
		roles = append(roles, m["role"].(string))
	}
	if strings.Join(roles, ",") != "user,assistant,tool,assistant" || c.ThreadID != th.ID || c.Turn != 0 {
		t.Fatalf("turn 0: %s", first.Content)
	}
	call := c.Messages[1]["tool_calls"].([]any)[0].(map[string]any)
	if args, ok := call["args"].(map[string]any); !ok || args["order_id"] != "A-17" || call["name"] != "lookup_order" {
		t.Fatalf("tool call not structured: %v", call)
	}
	if _, ok := c.Messages[3]["content"].([]any); !ok {
		t.Fatalf("list content not kept as a list: %v", c.Messages[3]["content"])
	}
	if c.Messages[2]["tool_call_id"] != "call_1" {
		t.Fatalf("tool result lost its call id: %v", c.Messages[2])
	}
	// Reruns give the same memories (idempotent import).
	again := r.Convert(th)
	if again.Items[0].MemoryID != first.MemoryID || string(again.Items[0].Content) != string(first.Content) {
		t.Fatal("a rerun converts differently")
	}

	// Selection.
	for name, c := range map[string]struct {
		th   Thread
		want Outcome
	}{
		"zombie: error":    {Thread{ID: "t1", Metadata: th.Metadata, Messages: msgs[:2], Errored: true, LastActivity: now}, SkipZombie},
		"zombie: no reply": {Thread{ID: "t2", Metadata: th.Metadata, Messages: msgs[1:2], LastActivity: now}, SkipZombie},
		"inactive":         {Thread{ID: "t3", Metadata: th.Metadata, Messages: msgs, LastActivity: now.Add(-10 * 24 * time.Hour)}, SkipInactive},
		"no user":          {Thread{ID: "t4", Messages: msgs, LastActivity: now}, SkipNoUser},
		"unsupported":      {Thread{ID: "t5", Unsupported: unsupported("pickle")}, Unsupported},
		"empty":            {Thread{ID: "t6", LastActivity: now}, SkipEmpty},
	} {
		if got := r.Convert(c.th); got.Outcome != c.want || got.Problem == "" || len(got.Items) != 0 {
			t.Errorf("%s: %+v, want %s", name, got, c.want)
		}
	}

	// The user from a pattern on the thread id; working memory of a recent session.
	r2 := Rules{UserPattern: regexp.MustCompile(`^u-(?P<user>[^:]+):`), Now: now, KeepWorking: true, WorkingWindow: 7 * 24 * time.Hour}
	res = r2.Convert(Thread{ID: "u-77:sess-9", Messages: msgs, LastActivity: now})
	if res.Outcome != Imported || res.Items[0].Scope != "user:77" {
		t.Fatalf("user from thread id: %+v", res)
	}
	var working int
	for _, it := range res.Items {
		if it.MemoryType == memory.Working {
			working++
			if it.Scope != "session:u-77:sess-9" {
				t.Fatalf("working memory scope %s", it.Scope)
			}
		}
	}
	if working != 4 {
		t.Fatalf("working memories: %d, want 4 (system left out)", working)
	}
}

// TestOpenAIToolCallsParsed: provider-raw tool calls carry JSON-string arguments;
// they are parsed into objects, never kept as strings.
func TestOpenAIToolCallsParsed(t *testing.T) {
	m := map[string]any{"type": "ai", "content": "", "additional_kwargs": map[string]any{"tool_calls": []any{
		map[string]any{"id": "c1", "type": "function", "function": map[string]any{"name": "refund", "arguments": `{"order":"A-1","amount":12.5}`}}}}}
	out := messageContent(m)
	args := out["tool_calls"].([]any)[0].(map[string]any)["args"]
	if a, ok := args.(map[string]any); !ok || a["order"] != "A-1" {
		t.Fatalf("args = %#v", args)
	}
}

// TestFirstProblemIsAProblem: threads the rules leave out on purpose are counted but
// are not reported as the import's first problem; an unsupported thread is.
func TestFirstProblemIsAProblem(t *testing.T) {
	now := time.Now()
	src := sliceSource{threads: []Thread{
		{ID: "idle", Metadata: map[string]any{"user_id": "1"}, LastActivity: now.Add(-30 * 24 * time.Hour), Messages: []map[string]any{{"type": "human", "content": "x"}}},
		{ID: "zombie", Metadata: map[string]any{"user_id": "1"}, LastActivity: now, Errored: true},
		{ID: "pickled", Unsupported: unsupported("a pickled value")},
	}}
	st, err := ImportLangGraph(t.Context(), src, LangGraphOptions{Rules: Rules{UserMetadataKey: "user_id", SkipZombies: true, InactiveAfter: 7 * 24 * time.Hour, Now: now}},
		func(memory.Item) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if st.Inactive != 1 || st.Zombie != 1 || st.Unsupported != 1 || !strings.Contains(st.FirstProblem, "pickled") {
		t.Fatalf("stats %+v", st)
	}
}

type sliceSource struct{ threads []Thread }

func (s sliceSource) Threads(_ context.Context, fn func(Thread) error) error {
	for _, t := range s.threads {
		if err := fn(t); err != nil {
			return err
		}
	}
	return nil
}

func (sliceSource) StoreItems(context.Context, func(StoreItem) error) error { return nil }

// TestConvertInOrderStopsOnEmitError: an error from the consumer ends the import
// with that error (the reader stops, nothing hangs), whatever is in flight.
func TestConvertInOrderStopsOnEmitError(t *testing.T) {
	stop := errors.New("disk full")
	for _, workers := range []int{1, 2, 8} {
		emitted := 0
		each := func(_ context.Context, fn func(Thread) error) error {
			for i := range 10_000 {
				if err := fn(Thread{ID: fmt.Sprintf("t%05d", i)}); err != nil {
					return err
				}
			}
			return nil
		}
		err := convertInOrder(context.Background(), each, Rules{}, workers, func(Result) error {
			if emitted++; emitted == 100 {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) || emitted != 100 {
			t.Fatalf("workers %d: err %v after %d results", workers, err, emitted)
		}
	}
}

// TestConvertInOrderKeepsSourceOrder: results arrive in the source's order whatever
// the workers' timing.
func TestConvertInOrderKeepsSourceOrder(t *testing.T) {
	each := func(_ context.Context, fn func(Thread) error) error {
		for i := range 5000 {
			if err := fn(Thread{ID: fmt.Sprintf("t%05d", i), Unsupported: unsupported("n%d", i)}); err != nil {
				return err
			}
		}
		return nil
	}
	next := 0
	err := convertInOrder(context.Background(), each, Rules{}, 4, func(res Result) error {
		if want := fmt.Sprintf("thread t%05d:", next); !strings.HasPrefix(res.Problem, want) {
			return fmt.Errorf("result %d is %q", next, res.Problem)
		}
		next++
		return nil
	})
	if err != nil || next != 5000 {
		t.Fatalf("%v after %d results", err, next)
	}
}
