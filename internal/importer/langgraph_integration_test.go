package importer

import (
	"context"
	"encoding/json"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/langgraphns"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/snapshot"
	"github.com/amemory/memory-operator/test/importers"
)

// The rules of the seed-000 migration: the user from checkpoint metadata, or from the
// thread id; threads idle for more than 7 days and zombie sessions left out.
func seedRules(now time.Time, source string) Rules {
	return Rules{UserMetadataKey: "user_id", UserPattern: regexp.MustCompile(`^u-(?P<user>[^:]+):`),
		SkipZombies: true, InactiveAfter: 7 * 24 * time.Hour, Now: now, Source: source}
}

var storeRules = []langgraphns.Rule{
	{Namespace: []string{"memories", "{user}", "*"}, Scope: "user:{user}"},
	{Namespace: []string{"procedures", "{agent}"}, Scope: "agent:{agent}"},
}

// readers opens the generated data with both readers.
func readers(t *testing.T, exp importers.Expected) map[string]LangGraphSource {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, exp.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	pg, err := OpenLangGraphPostgres(ctx, pool, "")
	if err != nil {
		t.Fatal(err)
	}
	lite, err := OpenLangGraphSQLite(ctx, exp.SQLitePath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lite.Close() })
	return map[string]LangGraphSource{"postgres": pg, "sqlite": lite}
}

// TestLangGraphReadersMatchLangGraph: both readers see every thread exactly as
// LangGraph's own get_state does (every message, in order, field for field), with
// its metadata, times and error state; threads whose answer is a pending write (a
// parallel branch interrupted the superstep) included, and imported, not zombies.
func TestLangGraphReadersMatchLangGraph(t *testing.T) {
	exp := importers.Generate(t, importers.Options{PendingWrites: 8, CustomState: 6})
	pending := exp.ThreadsIn(importers.PendingWrite)
	if len(pending) != 8 {
		t.Fatalf("%d threads with a pending answer generated, want 8", len(pending))
	}
	for _, th := range pending {
		if n := len(th.Messages); n != 2 || th.Messages[n-1].Type != "ai" {
			t.Fatalf("thread %s: get_state shows %d messages, want the question and the pending answer", th.ThreadID, n)
		}
	}
	for name, src := range readers(t, exp) {
		t.Run(name, func(t *testing.T) {
			got := map[string]Thread{}
			if err := src.Threads(context.Background(), func(th Thread) error {
				got[th.ID] = th
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(exp.Threads) {
				t.Fatalf("read %d threads, LangGraph has %d", len(got), len(exp.Threads))
			}
			for _, want := range exp.Threads {
				th, ok := got[want.ThreadID]
				switch {
				case !ok:
					t.Fatalf("thread %s not read", want.ThreadID)
				case th.Unsupported != nil:
					t.Fatalf("thread %s: %v", want.ThreadID, th.Unsupported)
				case len(th.Messages) != len(want.Messages):
					t.Fatalf("thread %s: %d messages, LangGraph has %d", want.ThreadID, len(th.Messages), len(want.Messages))
				case !th.LastActivity.Equal(want.LastTS):
					t.Fatalf("thread %s: last activity %s, LangGraph's ts %s", want.ThreadID, th.LastActivity, want.LastTS)
				case th.FirstActivity.Sub(want.FirstTS).Abs() > time.Second:
					t.Fatalf("thread %s: first activity %s, LangGraph's first ts %s", want.ThreadID, th.FirstActivity, want.FirstTS)
				case th.Errored != (want.Scenario == importers.ZombieError && len(want.Errors) > 0):
					t.Fatalf("thread %s (%s, %s): errored %v, errors %v", want.ThreadID, want.Scenario, want.Detail, th.Errored, want.Errors)
				}
				if want.MetadataUserID != nil && th.Metadata["user_id"] != *want.MetadataUserID {
					t.Fatalf("thread %s: metadata user_id %v, want %s", want.ThreadID, th.Metadata["user_id"], *want.MetadataUserID)
				}
				for i, m := range want.Messages {
					if !sameJSON(t, th.Messages[i], m.Raw) {
						t.Fatalf("thread %s message %d:\n got  %s\n want %s", want.ThreadID, i, mustJSON(th.Messages[i]), m.Raw)
					}
				}
				channels, err := th.ChannelValues()
				if err != nil || len(channels) != len(want.Channels) {
					t.Fatalf("thread %s: channels %v (%v), LangGraph has %d", want.ThreadID, channels, err, len(want.Channels))
				}
				for name, v := range want.Channels {
					if name == "tags" { // a Python set: its order is the process's hashing, not data
						v, channels[name] = sortedJSONList(t, v), sortedJSONList(t, json.RawMessage(mustJSON(channels[name])))
					}
					if !sameJSON(t, channels[name], v) {
						t.Fatalf("thread %s channel %s:\n got  %s\n want %s", want.ThreadID, name, mustJSON(channels[name]), v)
					}
				}
				if want.Scenario == importers.CustomState {
					checkCustomState(t, th, want, name)
				}
				if want.Scenario == importers.PendingWrite {
					if res := seedRules(time.Now(), name).Convert(th); res.Outcome != Imported || len(res.Items) != 1 {
						t.Fatalf("thread %s with a pending answer: %s (%s), %d memories", want.ThreadID, res.Outcome, res.Problem, len(res.Items))
					}
				}
			}
		})
	}
}

// checkCustomState: a thread of an app with state beyond messages imports its mapped
// channel (profile) as LangGraph's reviver reads it, names the others it leaves out,
// and keeps the Pydantic object in its answer's additional_kwargs.
func checkCustomState(t *testing.T, th Thread, want importers.Thread, source string) {
	t.Helper()
	rules := seedRules(time.Now(), source)
	rules.StateChannels = []StateChannel{{Channel: "profile", Key: "profile"}}
	res := rules.Convert(th)
	if res.Outcome != Imported || len(res.Keyed) != 1 || res.Keyed[0].Key != "profile" || res.Keyed[0].MemoryType != memory.Semantic {
		t.Fatalf("thread %s: %s (%s), keyed %+v", want.ThreadID, res.Outcome, res.Problem, res.Keyed)
	}
	if !sameJSON(t, res.Keyed[0].Content, want.Channels["profile"]) {
		t.Fatalf("thread %s: profile memory %s, LangGraph's %s", want.ThreadID, res.Keyed[0].Content, want.Channels["profile"])
	}
	if got := strings.Join(res.LeftOutChannels, ","); got != "last_seen,notes,prefs,tags" {
		t.Fatalf("thread %s: channels left out %s", want.ThreadID, got)
	}
	var turn struct {
		Messages []map[string]any `json:"messages"`
	}
	if len(res.Items) != 1 || json.Unmarshal(res.Items[0].Content, &turn) != nil || len(turn.Messages) != 2 {
		t.Fatalf("thread %s: turns %+v", want.ThreadID, res.Items)
	}
	kw, _ := turn.Messages[1]["additional_kwargs"].(map[string]any)
	if c, _ := kw["citation"].(map[string]any); c["source"] != "kb" {
		t.Fatalf("thread %s: the answer's additional_kwargs %v, want the citation", want.ThreadID, turn.Messages[1])
	}
}

// sortedJSONList is a JSON list of strings, sorted.
func sortedJSONList(t *testing.T, raw json.RawMessage) json.RawMessage {
	t.Helper()
	var l []string
	if err := json.Unmarshal(raw, &l); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	slices.Sort(l)
	b, _ := json.Marshal(l)
	return b
}

func sameJSON(t *testing.T, got any, want json.RawMessage) bool {
	t.Helper()
	var a, b any
	ga, _ := json.Marshal(got)
	if json.Unmarshal(ga, &a) != nil || json.Unmarshal(want, &b) != nil {
		return false
	}
	return reflect.DeepEqual(a, b)
}

// TestImportLangGraphSeedMigration: the seed-000 rules on real LangGraph data, from
// both checkpointers: kept threads become one episodic memory per user turn in the
// user's scope, with every message structured (tool calls and arguments as JSON);
// old and zombie threads are left out and counted; store items become semantic
// memories with their key; the memories are written as a package in scope order.
func TestImportLangGraphSeedMigration(t *testing.T) {
	exp := importers.Generate(t, importers.Options{})
	now := time.Now()
	for name, src := range readers(t, exp) {
		t.Run(name, func(t *testing.T) {
			var items []memory.Item
			st, err := ImportLangGraph(context.Background(), src, LangGraphOptions{Rules: seedRules(now, "langgraph-checkpoint-"+name+"@test"), Namespaces: storeRules},
				func(it memory.Item) error { items = append(items, it); return nil })
			if err != nil {
				t.Fatal(err)
			}
			normal, old := exp.ThreadsIn(importers.Normal), exp.ThreadsIn(importers.Old)
			zombies := exp.ThreadsIn(importers.ZombieError, importers.ZombieNoReply)
			// A thread idle beyond the window counts as inactive, zombie or not.
			idleZombies := 0
			for _, z := range zombies {
				if now.Sub(z.LastTS) > 7*24*time.Hour {
					idleZombies++
				}
			}
			if st.Threads != int64(len(exp.Threads)) || st.Imported != int64(len(normal)) || st.Inactive != int64(len(old)+idleZombies) ||
				st.Zombie != int64(len(zombies)-idleZombies) || st.Unsupported != 0 || st.NoUser != 0 {
				t.Fatalf("stats %+v; LangGraph has %d threads: %d normal, %d old, %d zombie (%d of them idle)", st, len(exp.Threads), len(normal), len(old), len(zombies), idleZombies)
			}
			store := exp.Store
			if name == "sqlite" {
				store = exp.SQLiteStore
			}
			if st.StoreItems != int64(len(store)) || st.StoreSkipped != 0 {
				t.Fatalf("store: %+v, LangGraph has %d items (problem: %s)", st, len(store), st.FirstProblem)
			}
			byThread := map[string][]memory.Item{}
			for _, it := range items {
				if err := it.Validate(); err != nil {
					t.Fatalf("invalid memory %s: %v", it.MemoryID, err)
				}
				if it.MemoryType == memory.Episodic {
					var c struct {
						ThreadID string `json:"thread_id"`
					}
					_ = json.Unmarshal(it.Content, &c)
					byThread[c.ThreadID] = append(byThread[c.ThreadID], it)
				}
			}
			for _, th := range zombies {
				if len(byThread[th.ThreadID]) > 0 || strings.Contains(joinContent(items), th.Marker) {
					t.Fatalf("zombie thread %s (%s) was imported", th.ThreadID, th.Detail)
				}
			}
			for _, th := range old {
				if len(byThread[th.ThreadID]) > 0 {
					t.Fatalf("old thread %s was imported", th.ThreadID)
				}
			}
			for _, th := range normal {
				checkTurns(t, th, byThread[th.ThreadID])
			}

			// The package: every memory, in scope order, readable by the restore
			// engine's reader.
			objects := snapshot.DirObjects{Root: t.TempDir()}
			st2, m, err := WritePackage(context.Background(), PackageOptions{Objects: objects, Prefix: "import/", Unencrypted: true, SortBudget: 64 << 10},
				func(fn func(memory.Item) error) (Stats, error) {
					return ImportLangGraph(context.Background(), src, LangGraphOptions{Rules: seedRules(now, "x"), Namespaces: storeRules}, fn)
				})
			if err != nil {
				t.Fatal(err)
			}
			if m.Counts.Items != st2.Items || st2.Items != int64(len(items)) {
				t.Fatalf("package holds %d items, the import made %d", m.Counts.Items, len(items))
			}
			r, err := snapshot.Open(context.Background(), objects, "import/", nil)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			if err := r.Items(context.Background(), func(memory.Item) error { n++; return nil }); err != nil || n != len(items) {
				t.Fatalf("read back %d items (%v), want %d", n, err, len(items))
			}
		})
	}
}

func joinContent(items []memory.Item) string {
	var b strings.Builder
	for _, it := range items {
		b.Write(it.Content)
	}
	return b.String()
}

// checkTurns holds one kept thread's memories to LangGraph's own messages.
func checkTurns(t *testing.T, th importers.Thread, items []memory.Item) {
	t.Helper()
	if len(items) != th.Turns {
		t.Fatalf("thread %s: %d memories, LangGraph has %d user turns", th.ThreadID, len(items), th.Turns)
	}
	var msgs []map[string]any
	for i, it := range items {
		if it.Scope != "user:"+*th.UserID {
			t.Fatalf("thread %s (user from %s): scope %s, want user:%s", th.ThreadID, th.UserFrom, it.Scope, *th.UserID)
		}
		var c struct {
			Turn     int              `json:"turn"`
			Messages []map[string]any `json:"messages"`
		}
		if err := json.Unmarshal(it.Content, &c); err != nil || c.Turn != i {
			t.Fatalf("thread %s memory %d: turn %d (%v)", th.ThreadID, i, c.Turn, err)
		}
		if c.Messages[0]["role"] != "user" {
			t.Fatalf("thread %s turn %d does not start with the user: %v", th.ThreadID, i, c.Messages[0])
		}
		msgs = append(msgs, c.Messages...)
	}
	var want []importers.Message
	for _, m := range th.Messages {
		if m.Type != "system" {
			want = append(want, m)
		}
	}
	if len(msgs) != len(want) {
		t.Fatalf("thread %s: %d messages imported, LangGraph has %d", th.ThreadID, len(msgs), len(want))
	}
	for i, w := range want {
		got := msgs[i]
		if got["role"] != roles[w.Type] || !reflect.DeepEqual(got["content"], w.Data["content"]) || got["id"] != w.Data["id"] {
			t.Fatalf("thread %s message %d:\n got  %v\n want %s", th.ThreadID, i, got, w.Raw)
		}
		calls, _ := w.Data["tool_calls"].([]any)
		gotCalls, _ := got["tool_calls"].([]any)
		if len(calls) != len(gotCalls) {
			t.Fatalf("thread %s message %d: %d tool calls, LangGraph has %d", th.ThreadID, i, len(gotCalls), len(calls))
		}
		for j, c := range calls {
			wc, gc := c.(map[string]any), gotCalls[j].(map[string]any)
			if _, isObj := gc["args"].(map[string]any); !isObj || !reflect.DeepEqual(gc["args"], wc["args"]) || gc["name"] != wc["name"] {
				t.Fatalf("thread %s message %d call %d: %v, want %v", th.ThreadID, i, j, gc, wc)
			}
		}
		if w.Type == "tool" && got["tool_call_id"] != w.Data["tool_call_id"] {
			t.Fatalf("thread %s message %d: tool_call_id %v, want %v", th.ThreadID, i, got["tool_call_id"], w.Data["tool_call_id"])
		}
	}
}

// plainSource hides a reader's encoded path: ImportLangGraph then reads every thread
// with its messages decoded, as Threads gives them.
type plainSource struct{ LangGraphSource }

// TestLangGraphPostgresElision: the database leaves out only the messages of threads
// the rules leave out anyway (ended in an error, idle), the import makes exactly the
// memories and counts it makes when it reads everything, and an elided thread's
// messages, fetched, are the ones Threads reads.
func TestLangGraphPostgresElision(t *testing.T) {
	exp := importers.Generate(t, importers.Options{})
	pg := readers(t, exp)["postgres"].(*LangGraphPostgres)
	ctx := context.Background()
	rules := seedRules(time.Now(), "x")

	full := map[string]Thread{}
	if err := pg.Threads(ctx, func(th Thread) error { full[th.ID] = th; return nil }); err != nil {
		t.Fatal(err)
	}
	elided, skippable := 0, 0
	err := pg.threadsEncoded(ctx, rules, func(th Thread) error {
		if !rules.NeedsMessages(full[th.ID]) {
			skippable++
		}
		if th.fetch == nil {
			return nil
		}
		elided++
		if rules.NeedsMessages(th) {
			t.Errorf("thread %s: messages elided, but the rules need them", th.ID)
		}
		if err := th.decode(ctx, false); err != nil {
			return err
		}
		if !reflect.DeepEqual(th.Messages, full[th.ID].Messages) || len(th.Messages) == 0 {
			t.Errorf("thread %s: fetched %d messages, Threads read %d", th.ID, len(th.Messages), len(full[th.ID].Messages))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// langgraph writes ts with microseconds: every thread the rules skip on its
	// error or its age is elided.
	if elided == 0 || elided != skippable {
		t.Fatalf("%d threads elided, %d skippable without their messages", elided, skippable)
	}

	run := func(src LangGraphSource) ([]memory.Item, Stats) {
		var items []memory.Item
		st, err := ImportLangGraph(ctx, src, LangGraphOptions{Rules: rules, Namespaces: storeRules},
			func(it memory.Item) error { items = append(items, it); return nil })
		if err != nil {
			t.Fatal(err)
		}
		return items, st
	}
	gotItems, gotStats := run(pg)
	wantItems, wantStats := run(plainSource{pg})
	if !reflect.DeepEqual(gotStats, wantStats) || !reflect.DeepEqual(gotItems, wantItems) {
		t.Fatalf("with elision: %d items, %+v; reading everything: %d items, %+v", len(gotItems), gotStats, len(wantItems), wantStats)
	}
}

// TestLangGraphPostgresPages: threads read in pages of any size, one of them ending
// exactly at the last thread, are the threads of one pass, in the same order.
func TestLangGraphPostgresPages(t *testing.T) {
	exp := importers.Generate(t, importers.Options{})
	pg := readers(t, exp)["postgres"].(*LangGraphPostgres)
	ctx := context.Background()
	read := func(page int) []Thread {
		pg.page = page
		defer func() { pg.page = 0 }()
		var out []Thread
		if err := pg.Threads(ctx, func(th Thread) error { out = append(out, th); return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	all := read(0)
	if len(all) < 10 || len(all) >= threadPageSize {
		t.Fatalf("%d threads: want more than a few pages of 3, within one default page", len(all))
	}
	for _, page := range []int{1, 3, len(all), len(all) - 1, len(all) + 1} {
		got := read(page)
		if len(got) != len(all) {
			t.Fatalf("pages of %d: %d threads, want %d", page, len(got), len(all))
		}
		for i := range all {
			if got[i].ID != all[i].ID || !reflect.DeepEqual(got[i].Messages, all[i].Messages) || got[i].Errored != all[i].Errored {
				t.Fatalf("pages of %d: thread %d is %s, want %s", page, i, got[i].ID, all[i].ID)
			}
		}
	}
}
