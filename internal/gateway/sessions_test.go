package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/testutil"
)

// forEachShortTermBackend runs fn on a gateway whose sessions are in PostgreSQL and
// on one whose sessions are in Redis: one behaviour, two backends.
func forEachShortTermBackend(t *testing.T, o envOptions, fn func(t *testing.T, e *env)) {
	for _, redis := range []bool{false, true} {
		name := "postgres"
		if redis {
			name = "redis"
		}
		t.Run(name, func(t *testing.T) {
			o := o
			o.redis = redis
			fn(t, newEnv(t, o))
		})
	}
}

func sessionPath(session string, rest string) string {
	return "/v1/sessions/" + url.PathEscape(session) + rest
}

// TestSessionAPI: append, read (last N, as of a time), summarize, promote and end,
// with the scope rules of every other call; turns promoted into the owner's memories
// are found by search; a forget of the owner ends their sessions.
func TestSessionAPI(t *testing.T) {
	agent := newTestKey(t, "agent", false, "user:1", "session:*")
	other := newTestKey(t, "other", false, "user:2", "session:*")
	reader := newTestKey(t, "reader", true, "user:1", "session:*")
	forEachShortTermBackend(t, envOptions{keys: []testKey{agent, other, reader}}, func(t *testing.T, e *env) {
		a, o, ro := agent.plain, other.plain, reader.plain
		p := sessionPath("session:chat-1", "")
		var app AppendResponse
		e.must(201, a, "POST", sessionPath("session:chat-1", "/turns"), AppendRequest{Owner: "user:1", Turns: []TurnIn{
			{Role: "user", Content: JSONValue(`"I just moved to Lisbon"`)},
			{Role: "assistant", Content: JSONValue(`{"text":"Welcome to Lisbon!","tool_calls":[]}`)},
		}}, &app)
		if len(app.Turns) != 2 || app.Turns[0].Seq != 1 || app.Turns[1].Seq != 2 || app.ExpiresAt.Before(time.Now().Add(29*time.Minute)) {
			t.Fatalf("append = %+v", app)
		}
		// Turn 3 is stored at a later millisecond than turn 2 (times are kept to the ms).
		mid := app.Turns[1].At
		for !time.Now().Truncate(time.Millisecond).After(mid) {
			runtime.Gosched()
		}
		e.must(201, a, "POST", sessionPath("session:chat-1", "/turns"), AppendRequest{Turns: []TurnIn{{Role: "user", Content: JSONValue(`"my cat is called Miso"`)}}}, nil)

		var s SessionResponse
		e.must(200, a, "GET", p+"?last=2", nil, &s)
		if s.Owner != "user:1" || s.LastSeq != 3 || len(s.Turns) != 2 || s.Turns[0].Seq != 2 || string(s.Turns[1].Content) != `"my cat is called Miso"` {
			t.Fatalf("last 2 = %+v", s)
		}
		e.must(200, ro, "GET", p+"?as_of="+url.QueryEscape(mid.UTC().Format(time.RFC3339Nano)), nil, &s)
		if len(s.Turns) != 2 || s.Turns[1].Seq != 2 {
			t.Fatalf("as of the middle = %+v", s)
		}

		// Scope rules: another user's key sees no such session, a key without the
		// owner cannot append as that owner, a reader cannot write.
		e.wantError(404, CodeNotFound, o, "GET", p, nil)
		e.wantError(404, CodeNotFound, o, "DELETE", p, nil)
		e.wantError(409, CodeConflict, o, "POST", sessionPath("session:chat-1", "/turns"), AppendRequest{Owner: "user:2", Turns: []TurnIn{{Role: "user", Content: JSONValue(`"x"`)}}})
		e.wantError(403, CodeScopeForbidden, o, "POST", sessionPath("session:chat-9", "/turns"), AppendRequest{Owner: "user:1", Turns: []TurnIn{{Role: "user", Content: JSONValue(`"x"`)}}})
		e.wantError(403, CodeReadOnly, ro, "POST", sessionPath("session:chat-1", "/turns"), AppendRequest{Turns: []TurnIn{{Role: "user", Content: JSONValue(`"x"`)}}})
		e.wantError(403, CodeScopeForbidden, a, "GET", sessionPath("user:2", ""), nil)
		// Bad input.
		e.wantError(400, CodeInvalidScope, a, "GET", sessionPath("nope", ""), nil)
		e.wantError(400, CodeInvalidRequest, a, "POST", sessionPath("session:chat-1", "/turns"), AppendRequest{})
		e.wantError(400, CodeInvalidRequest, a, "POST", sessionPath("session:chat-1", "/turns"), AppendRequest{Turns: []TurnIn{{Role: "", Content: JSONValue(`"x"`)}}})
		e.wantError(400, CodeInvalidRequest, a, "POST", sessionPath("session:chat-1", "/turns"), AppendRequest{Turns: []TurnIn{{Role: "summary", Content: JSONValue(`"x"`)}}})
		e.wantError(400, CodeInvalidRequest, a, "GET", p+"?last=-1", nil)
		e.wantError(400, CodeInvalidRequest, a, "GET", p+"?as_of=yesterday", nil)
		e.wantError(404, CodeNotFound, a, "GET", sessionPath("session:never", ""), nil)

		e.wantError(400, CodeInvalidRequest, a, "POST", p+"/summary", SummaryRequest{Through: 9, Content: JSONValue(`"too far"`)})
		var before ListResponse
		if e.must(200, a, "GET", "/v1/scopes/user:1/memories", nil, &before); len(before.Memories) != 0 {
			t.Fatalf("a refused summary promoted %d turns", len(before.Memories))
		}
		// A summary replaces turns 1..2; with promotion at the end (the default) they
		// are kept as memories first.
		var sum SummaryResponse
		e.must(200, a, "POST", p+"/summary", SummaryRequest{Through: 2, Content: JSONValue(`"moved to Lisbon"`)}, &sum)
		if sum.Replaced != 2 {
			t.Fatalf("summary = %+v", sum)
		}
		e.must(200, a, "GET", p, nil, &s)
		if len(s.Turns) != 2 || s.Turns[0].Role != "summary" || s.Turns[0].Seq != 2 || s.PromotedThrough != 2 {
			t.Fatalf("after the summary = %+v", s)
		}
		var sr SearchResponse
		e.must(200, a, "POST", "/v1/search", SearchRequest{Scope: "user:1", Query: "Lisbon"}, &sr)
		if len(sr.Results) != 2 { // both turns 1 and 2 name it
			t.Fatalf("search for the promoted turns found %d", len(sr.Results))
		}
		for _, r := range sr.Results {
			if r.Memory.MemoryType != "episodic" || !strings.Contains(string(r.Memory.Content), "Lisbon") {
				t.Fatalf("search for the promoted turns: %s %s", r.Memory.MemoryType, r.Memory.Content)
			}
		}
		var pr PromoteResponse
		e.must(200, a, "POST", p+"/promote", PromoteRequest{}, &pr)
		if pr.Promoted != 1 {
			t.Fatalf("promote = %+v", pr)
		}
		var end EndResponse
		e.must(200, a, "DELETE", p, nil, &end)
		if end.Turns != 2 || end.Promoted != 0 {
			t.Fatalf("end = %+v", end)
		}
		e.wantError(404, CodeNotFound, a, "GET", p, nil)
		var list ListResponse
		e.must(200, a, "GET", "/v1/scopes/user:1/memories", nil, &list)
		if len(list.Memories) != 3 {
			t.Fatalf("%d memories promoted, want 3 (turns 1..3)", len(list.Memories))
		}

		// A forget of the owner ends their sessions before anything else.
		e.must(201, a, "POST", sessionPath("session:chat-2", "/turns"), AppendRequest{Owner: "user:1", Turns: []TurnIn{{Role: "user", Content: JSONValue(`"secret"`)}}}, nil)
		e.must(200, a, "POST", "/v1/forget", ForgetRequest{Scope: "user:1"}, nil)
		e.wantError(404, CodeNotFound, a, "GET", sessionPath("session:chat-2", ""), nil)
		e.must(200, a, "GET", "/v1/scopes/user:1/memories", nil, &list)
		if len(list.Memories) != 0 {
			t.Fatalf("%d memories after the forget", len(list.Memories))
		}

		// MCP: the same calls.
		ms := mcpSession(t, e, a)
		res := callTool(t, ms, "append_turns", map[string]any{"session": "session:m", "owner": "user:1", "turns": []any{
			map[string]any{"role": "user", "text": "book a table for two"}, map[string]any{"role": "tool", "content": map[string]any{"ok": true}}}})
		var ma AppendResponse
		structuredOut(t, res, &ma)
		if len(ma.Turns) != 2 {
			t.Fatalf("append_turns = %s", toolText(res))
		}
		var mw SessionResponse
		structuredOut(t, callTool(t, ms, "get_session", map[string]any{"session": "session:m", "last": 1}), &mw)
		if len(mw.Turns) != 1 || string(mw.Turns[0].Content) != `{"ok":true}` {
			t.Fatalf("get_session = %+v", mw)
		}
		var me EndResponse
		structuredOut(t, callTool(t, ms, "end_session", map[string]any{"session": "session:m"}), &me)
		if me.Promoted != 2 {
			t.Fatalf("end_session = %+v", me)
		}
		res = callTool(t, mcpSession(t, e, o), "get_session", map[string]any{"session": "session:m"})
		if !res.IsError || !strings.Contains(toolText(res), CodeNotFound) {
			t.Fatalf("get_session of an ended session: %s", toolText(res))
		}
	})
}

// TestSessionSweepInTheGateway: the gateway's own sweep promotes an idle session
// before it expires, so its turns outlive the TTL as memories.
func TestSessionSweepInTheGateway(t *testing.T) {
	defer func(d time.Duration) { sweepEvery = d }(sweepEvery)
	sweepEvery = 200 * time.Millisecond
	k := newTestKey(t, "agent", false, "user:1", "session:*")
	forEachShortTermBackend(t, envOptions{keys: []testKey{k}, config: func(c *Config) { c.SessionTTL = 10 * time.Second }}, func(t *testing.T, e *env) {
		e.must(201, k.plain, "POST", sessionPath("session:idle", "/turns"), AppendRequest{Owner: "user:1", Turns: []TurnIn{{Role: "user", Content: JSONValue(`"the door code is 4711"`)}}}, nil)
		// The lead is half the TTL: promoted after about 5 s idle, before the 10 s expiry.
		appended := time.Now()
		testutil.Eventually(t, "the idle session promoted", func() (bool, error) {
			var list ListResponse
			e.must(200, k.plain, "GET", "/v1/scopes/user:1/memories", nil, &list)
			switch {
			case len(list.Memories) == 1 && !strings.Contains(string(list.Memories[0].Content), "4711"):
				return true, fmt.Errorf("promoted %s", list.Memories[0].Content)
			case len(list.Memories) == 1:
				return true, nil
			case time.Since(appended) > 9*time.Second:
				return true, errors.New("not promoted before it expired")
			}
			return false, nil
		})
	})
}

// TestSessionConfigArgs: the short-term flags round-trip and bad values are refused.
func TestSessionConfigArgs(t *testing.T) {
	base := []string{"--schema=s", "--keys-file=k", "--dimension=8"}
	c, err := ParseArgs(append(base, "--session-ttl=10m", "--promote=OnRequest", "--redis-address=r:6379", "--redis-user=u", "--redis-tenant=t"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ParseArgs(c.Args(), io.Discard)
	if err != nil || again.ShortTerm != c.ShortTerm {
		t.Fatalf("round trip = %+v, %v; want %+v", again.ShortTerm, err, c.ShortTerm)
	}
	for args, want := range map[string]string{
		"--promote=Sometimes":    "--promote",
		"--session-ttl=1s":       "--session-ttl",
		"--redis-address=r:6379": "--redis-tenant",
		"--redis-user=u":         "need --redis-address",
		"--session-max-turns=-1": "--session-max-turns",
	} {
		if _, err := ParseArgs(append(base, args), io.Discard); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %s", args, err, want)
		}
	}
}

// TestFaultsRedis: with Redis behind Toxiproxy, a Redis that is down or too slow makes
// session calls answer 503 short_term_unavailable within a few seconds, and a forget
// is refused before anything is forgotten; long-term writes, searches and recalls go
// on unaffected; when Redis is back the sessions are there again.
func TestFaultsRedis(t *testing.T) {
	faults := testutil.NewFaults(t)
	k := newTestKey(t, "k", false, "user:1", "session:*")
	proxy, addr := faults.Proxy("redis", testutil.RedisServer(t).Addr)
	e := newEnv(t, envOptions{keys: []testKey{k}, redis: true, config: func(c *Config) { c.RedisAddress = addr }})
	p := sessionPath("session:f", "")
	turn := AppendRequest{Owner: "user:1", Turns: []TurnIn{{Role: "user", Content: JSONValue(`"before the fault"`)}}}
	e.must(201, k.plain, "POST", p+"/turns", turn, nil)
	e.must(201, k.plain, "POST", "/v1/memories", NewMemory{Scope: "user:1", MemoryType: memory.Semantic, Content: json.RawMessage(`{"text":"likes jasmine tea"}`)}, nil)

	longTerm := func(phase string) {
		t.Helper()
		e.must(201, k.plain, "POST", "/v1/memories", NewMemory{Scope: "user:1", MemoryType: memory.Semantic, Content: json.RawMessage(`{"text":"` + phase + `"}`)}, nil)
		var sr SearchResponse
		e.must(200, k.plain, "POST", "/v1/search", SearchRequest{Scope: "user:1", Query: "jasmine tea"}, &sr)
		if len(sr.Results) == 0 {
			t.Fatalf("%s: search found nothing", phase)
		}
		e.must(200, k.plain, "POST", "/v1/recall", RecallRequest{Scope: "user:1"}, nil)
	}
	shortTermDown := func(phase string) {
		t.Helper()
		start := time.Now()
		e.wantError(503, CodeShortTermDown, k.plain, "GET", p, nil)
		e.wantError(503, CodeShortTermDown, k.plain, "POST", p+"/turns", turn)
		e.wantError(503, CodeShortTermDown, k.plain, "POST", "/v1/forget", ForgetRequest{Scope: "user:1"})
		if d := time.Since(start); d > 15*time.Second {
			t.Fatalf("%s: three refusals took %s", phase, d)
		}
	}

	if err := proxy.Disable(); err != nil {
		t.Fatal(err)
	}
	shortTermDown("redis down")
	longTerm("written while redis was down")
	if err := proxy.Enable(); err != nil {
		t.Fatal(err)
	}
	if _, err := proxy.AddToxic("slow", "latency", "downstream", 1, toxiproxy.Attributes{"latency": 5000}); err != nil {
		t.Fatal(err)
	}
	shortTermDown("redis slow")
	longTerm("written while redis was slow")
	if err := proxy.RemoveToxic("slow"); err != nil {
		t.Fatal(err)
	}
	var s SessionResponse
	e.must(200, k.plain, "GET", p, nil, &s)
	if len(s.Turns) != 1 {
		t.Fatalf("after the faults: %+v", s)
	}
	var list ListResponse
	e.must(200, k.plain, "GET", "/v1/scopes/user:1/memories", nil, &list)
	if len(list.Memories) != 3 {
		t.Fatalf("%d memories after the faults, want 3: the refused forgets forgot nothing", len(list.Memories))
	}
}
