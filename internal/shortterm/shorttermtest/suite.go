// Package shorttermtest is the conformance suite of the short-term backends: Redis
// and PostgreSQL run the same cases, so a store behaves the same on either.
package shorttermtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/shortterm"
)

// New returns a fresh, empty backend with opts (its own key prefix or schema).
type New func(t *testing.T, opts shortterm.Options) shortterm.Store

// Run runs every case against the backend newStore makes.
func Run(t *testing.T, newStore New) {
	cases := []struct {
		name string
		fn   func(*testing.T, New)
	}{
		{"AppendNumbersAndKeepsContent", appendNumbers},
		{"WindowLastAndAsOf", windowLastAndAsOf},
		{"Owner", owner},
		{"Full", full},
		{"ExpiresAfterInactivity", expires},
		{"ReadTouches", readTouches},
		{"Summarize", summarize},
		{"End", end},
		{"ForgetOwner", forgetOwner},
		{"IdleAndPromoted", idle},
		{"ConcurrentAppends", concurrentAppends},
		{"RefusesBadInput", badInput},
		{"ExportLiveSessions", exportLive},
		{"ExportPages", exportPages},
		{"ExportPagesBySize", exportLargePages},
		{"ImportRoundTrip", importRoundTrip},
		{"ImportIsIdempotent", importIdempotent},
		{"ImportedLikeAnyOther", importLikeAnyOther},
		{"ImportExpiredOnArrival", importExpired},
		{"ImportRefusesBadInput", importBadInput},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newStore) })
	}
}

var ctx = context.Background()

func turn(role, content string) shortterm.NewTurn {
	return shortterm.NewTurn{Role: role, Content: json.RawMessage(content)}
}

func mustAppend(t *testing.T, st shortterm.Store, session, owner string, now time.Time, turns ...shortterm.NewTurn) []shortterm.Turn {
	t.Helper()
	out, err := st.Append(ctx, shortterm.Append{Session: session, Owner: owner, Turns: turns, Now: now})
	if err != nil {
		t.Fatalf("append to %s: %v", session, err)
	}
	return out
}

func mustWindow(t *testing.T, st shortterm.Store, q shortterm.WindowQuery) shortterm.Session {
	t.Helper()
	if q.Now.IsZero() {
		q.Now = time.Now()
	}
	s, err := st.Window(ctx, q)
	if err != nil {
		t.Fatalf("window of %s: %v", q.Session, err)
	}
	return s
}

func wantGone(t *testing.T, st shortterm.Store, session string) {
	t.Helper()
	if s, err := st.Window(ctx, shortterm.WindowQuery{Session: session, Now: time.Now()}); !errors.Is(err, shortterm.ErrNotFound) {
		t.Fatalf("window of %s: %d turns, err %v; want ErrNotFound", session, len(s.Turns), err)
	}
}

func seqs(turns []shortterm.Turn) []int64 {
	out := make([]int64, len(turns))
	for i, t := range turns {
		out[i] = t.Seq
	}
	return out
}

func wantSeqs(t *testing.T, what string, turns []shortterm.Turn, want ...int64) {
	t.Helper()
	if got := seqs(turns); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: turns %v, want %v", what, got, want)
	}
}

func appendNumbers(t *testing.T, newStore New) {
	st := newStore(t, shortterm.Options{})
	now := time.Now().Truncate(time.Millisecond)
	got := mustAppend(t, st, "session:a", "user:1", now,
		turn("user", `"我住朝阳区"`), turn("assistant", `{ "text": "好的", "tool_calls": [ {"name": "x"} ] }`))
	wantSeqs(t, "first append", got, 1, 2)
	more := mustAppend(t, st, "session:a", "user:1", now.Add(time.Second), turn("user", `"谢谢"`))
	wantSeqs(t, "second append", more, 3)
	s := mustWindow(t, st, shortterm.WindowQuery{Session: "session:a"})
	wantSeqs(t, "window", s.Turns, 1, 2, 3)
	if s.Owner != "user:1" || s.LastSeq != 3 || s.Promoted != 0 {
		t.Errorf("session: owner %q, last %d, promoted %d", s.Owner, s.LastSeq, s.Promoted)
	}
	// Content comes back as compact JSON, byte for byte, whatever the backend.
	if c := string(s.Turns[1].Content); c != `{"text":"好的","tool_calls":[{"name":"x"}]}` {
		t.Errorf("content: %s", c)
	}
	if s.Turns[0].Role != "user" || string(s.Turns[0].Content) != `"我住朝阳区"` {
		t.Errorf("turn 1: %+v", s.Turns[0])
	}
	if !s.Turns[0].At.Equal(now) || !s.Turns[2].At.Equal(now.Add(time.Second)) {
		t.Errorf("times: %v %v, want %v and a second later", s.Turns[0].At, s.Turns[2].At, now)
	}
	if !s.LastActive.Equal(now.Add(time.Second)) {
		t.Errorf("last active %v, want %v", s.LastActive, now.Add(time.Second))
	}
	wantGone(t, st, "session:nobody")
}

func windowLastAndAsOf(t *testing.T, newStore New) {
	st := newStore(t, shortterm.Options{})
	base := time.Now().Truncate(time.Millisecond).Add(-time.Minute)
	for i := range 10 {
		mustAppend(t, st, "session:w", "", base.Add(time.Duration(i)*time.Second), turn("user", fmt.Sprintf(`"turn %d"`, i+1)))
	}
	wantSeqs(t, "last 3", mustWindow(t, st, shortterm.WindowQuery{Session: "session:w", Last: 3}).Turns, 8, 9, 10)
	wantSeqs(t, "as of turn 5's time", mustWindow(t, st, shortterm.WindowQuery{Session: "session:w", AsOf: base.Add(4 * time.Second)}).Turns, 1, 2, 3, 4, 5)
	wantSeqs(t, "last 2 as of turn 5's time", mustWindow(t, st, shortterm.WindowQuery{Session: "session:w", Last: 2, AsOf: base.Add(4500 * time.Millisecond)}).Turns, 4, 5)
	wantSeqs(t, "as of before the first", mustWindow(t, st, shortterm.WindowQuery{Session: "session:w", AsOf: base.Add(-time.Second)}).Turns)
	// With no owner the session owns itself: a forget of it removes it.
	if n, err := st.ForgetOwner(ctx, "session:w"); err != nil || n != 1 {
		t.Fatalf("forget session:w: %d, %v", n, err)
	}
	wantGone(t, st, "session:w")
}

func owner(t *testing.T, newStore New) {
	st := newStore(t, shortterm.Options{})
	now := time.Now()
	mustAppend(t, st, "session:o", "user:1", now, turn("user", `"hi"`))
	_, err := st.Append(ctx, shortterm.Append{Session: "session:o", Owner: "user:2", Turns: []shortterm.NewTurn{turn("user", `"mine now"`)}, Now: now})
	if !errors.Is(err, shortterm.ErrOwner) {
		t.Fatalf("append as another owner: %v, want ErrOwner", err)
	}
	wantSeqs(t, "after the refused append", mustWindow(t, st, shortterm.WindowQuery{Session: "session:o"}).Turns, 1)
	// An append that names no owner keeps the session's.
	mustAppend(t, st, "session:o", "", now, turn("assistant", `"hello"`))
	if s := mustWindow(t, st, shortterm.WindowQuery{Session: "session:o"}); s.Owner != "user:1" || s.LastSeq != 2 {
		t.Fatalf("after an append without an owner: owner %q, last %d", s.Owner, s.LastSeq)
	}
	if n, err := st.ForgetOwner(ctx, "user:1"); err != nil || n != 1 {
		t.Fatalf("ForgetOwner(user:1) = %d, %v", n, err)
	}
}

func full(t *testing.T, newStore New) {
	st := newStore(t, shortterm.Options{MaxTurns: 5})
	now := time.Now()
	mustAppend(t, st, "session:f", "", now, turn("user", `"1"`), turn("user", `"2"`), turn("user", `"3"`), turn("user", `"4"`))
	_, err := st.Append(ctx, shortterm.Append{Session: "session:f", Turns: []shortterm.NewTurn{turn("user", `"5"`), turn("user", `"6"`)}, Now: now})
	if !errors.Is(err, shortterm.ErrSessionFull) {
		t.Fatalf("append past the limit: %v, want ErrSessionFull", err)
	}
	// Nothing of the refused append was stored, and a summary makes room.
	wantSeqs(t, "after the refused append", mustWindow(t, st, shortterm.WindowQuery{Session: "session:f"}).Turns, 1, 2, 3, 4)
	if _, err := st.Summarize(ctx, shortterm.Summary{Session: "session:f", Through: 3, Content: json.RawMessage(`"1 to 3"`), Now: now}); err != nil {
		t.Fatal(err)
	}
	wantSeqs(t, "after room was made", mustAppend(t, st, "session:f", "", now, turn("user", `"5"`), turn("user", `"6"`), turn("user", `"7"`)), 5, 6, 7)
}

func expires(t *testing.T, newStore New) {
	st := newStore(t, shortterm.Options{TTL: time.Second})
	mustAppend(t, st, "session:e", "user:1", time.Now(), turn("user", `"soon gone"`))
	time.Sleep(1300 * time.Millisecond)
	wantGone(t, st, "session:e")
	if _, err := st.Purge(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	// A new session of the same name starts over.
	wantSeqs(t, "after expiry", mustAppend(t, st, "session:e", "user:2", time.Now(), turn("user", `"again"`)), 1)
	if _, err := st.End(ctx, "session:e"); err != nil {
		t.Fatal(err)
	}
	if n, err := st.ForgetOwner(ctx, "user:1"); err != nil || n != 0 {
		t.Fatalf("forget of an owner whose session expired: %d, %v", n, err)
	}
}

func readTouches(t *testing.T, newStore New) {
	st := newStore(t, shortterm.Options{TTL: 1500 * time.Millisecond})
	mustAppend(t, st, "session:touched", "", time.Now(), turn("user", `"kept alive by reads"`))
	mustAppend(t, st, "session:left", "", time.Now(), turn("user", `"read without touching"`))
	time.Sleep(time.Second)
	mustWindow(t, st, shortterm.WindowQuery{Session: "session:touched", Touch: true})
	mustWindow(t, st, shortterm.WindowQuery{Session: "session:left"})
	time.Sleep(time.Second)
	wantSeqs(t, "touched", mustWindow(t, st, shortterm.WindowQuery{Session: "session:touched"}).Turns, 1)
	wantGone(t, st, "session:left")
}

func summarize(t *testing.T, newStore New) {
	st := newStore(t, shortterm.Options{})
	base := time.Now().Truncate(time.Millisecond).Add(-time.Minute)
	for i := range 6 {
		mustAppend(t, st, "session:s", "", base.Add(time.Duration(i)*time.Second), turn("user", fmt.Sprintf(`"turn %d"`, i+1)))
	}
	gone, err := st.Summarize(ctx, shortterm.Summary{Session: "session:s", Through: 4, Content: json.RawMessage(`{"text":"turns 1-4"}`), Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	wantSeqs(t, "replaced", gone, 1, 2, 3, 4)
	w := mustWindow(t, st, shortterm.WindowQuery{Session: "session:s"})
	wantSeqs(t, "after the summary", w.Turns, 4, 5, 6)
	if w.Turns[0].Role != shortterm.RoleSummary || string(w.Turns[0].Content) != `{"text":"turns 1-4"}` || !w.Turns[0].At.Equal(base.Add(3*time.Second)) {
		t.Errorf("summary turn: %+v (want the time of turn 4, %v)", w.Turns[0], base.Add(3*time.Second))
	}
	wantSeqs(t, "as of turn 4's time", mustWindow(t, st, shortterm.WindowQuery{Session: "session:s", AsOf: base.Add(3 * time.Second)}).Turns, 4)
	if _, err := st.Summarize(ctx, shortterm.Summary{Session: "session:s", Through: 7, Content: json.RawMessage(`"x"`), Now: time.Now()}); !errors.Is(err, shortterm.ErrPastLast) {
		t.Errorf("a summary past the last turn: %v, want ErrPastLast", err)
	}
	if _, err := st.Summarize(ctx, shortterm.Summary{Session: "session:s", Through: 3, Content: json.RawMessage(`"x"`), Now: time.Now()}); !errors.Is(err, shortterm.ErrNothing) {
		t.Errorf("a summary of turns already summarized: %v, want ErrNothing", err)
	}
	// A summary may replace an earlier summary with the turns after it.
	gone, err = st.Summarize(ctx, shortterm.Summary{Session: "session:s", Through: 5, Content: json.RawMessage(`"turns 1-5"`), Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	wantSeqs(t, "replaced again", gone, 4, 5)
	wantSeqs(t, "appended after summaries", mustAppend(t, st, "session:s", "", time.Now(), turn("user", `"7"`)), 7)
	wantSeqs(t, "window", mustWindow(t, st, shortterm.WindowQuery{Session: "session:s"}).Turns, 5, 6, 7)
	if _, err := st.Summarize(ctx, shortterm.Summary{Session: "session:none", Through: 1, Content: json.RawMessage(`"x"`), Now: time.Now()}); !errors.Is(err, shortterm.ErrNotFound) {
		t.Errorf("summary of no session: %v", err)
	}
}

func end(t *testing.T, newStore New) {
	st := newStore(t, shortterm.Options{})
	mustAppend(t, st, "session:end", "user:1", time.Now(), turn("user", `"a"`), turn("assistant", `"b"`))
	s, err := st.End(ctx, "session:end")
	if err != nil {
		t.Fatal(err)
	}
	wantSeqs(t, "ended", s.Turns, 1, 2)
	if s.Owner != "user:1" || s.LastSeq != 2 {
		t.Errorf("ended session: %+v", s)
	}
	wantGone(t, st, "session:end")
	if _, err := st.End(ctx, "session:end"); !errors.Is(err, shortterm.ErrNotFound) {
		t.Errorf("end twice: %v", err)
	}
	if n, err := st.ForgetOwner(ctx, "user:1"); err != nil || n != 0 {
		t.Errorf("forget after end: %d, %v", n, err)
	}
}

func forgetOwner(t *testing.T, newStore New) {
	st := newStore(t, shortterm.Options{})
	now := time.Now()
	mustAppend(t, st, "session:a1", "user:a", now, turn("user", `"1"`))
	mustAppend(t, st, "session:a2", "user:a", now, turn("user", `"2"`))
	mustAppend(t, st, "session:b1", "user:b", now, turn("user", `"3"`))
	n, err := st.ForgetOwner(ctx, "user:a")
	if err != nil || n != 2 {
		t.Fatalf("forget user:a: %d, %v; want 2", n, err)
	}
	wantGone(t, st, "session:a1")
	wantGone(t, st, "session:a2")
	wantSeqs(t, "user:b's session", mustWindow(t, st, shortterm.WindowQuery{Session: "session:b1"}).Turns, 1)
	if n, err := st.ForgetOwner(ctx, "user:nobody"); err != nil || n != 0 {
		t.Errorf("forget of an owner without sessions: %d, %v", n, err)
	}
	// A forgotten owner's session name may be used again, from 1.
	wantSeqs(t, "reused", mustAppend(t, st, "session:a1", "user:a", now, turn("user", `"new"`)), 1)
	if idle, err := st.Idle(ctx, now.Add(time.Hour), 100); err != nil || len(idle) != 2 {
		t.Errorf("idle after the forget: %v, %v; want session:a1 and session:b1", idle, err)
	}
}

func idle(t *testing.T, newStore New) {
	st := newStore(t, shortterm.Options{})
	now := time.Now().Truncate(time.Millisecond)
	mustAppend(t, st, "session:old", "user:1", now.Add(-10*time.Second), turn("user", `"1"`), turn("user", `"2"`), turn("user", `"3"`))
	mustAppend(t, st, "session:new", "user:1", now, turn("user", `"1"`))
	list := func(what string, want ...string) []shortterm.Session {
		t.Helper()
		got, err := st.Idle(ctx, now.Add(-5*time.Second), 10)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range got {
			ids = append(ids, s.ID)
			if len(s.Turns) != 0 {
				t.Errorf("%s: Idle returned turns", what)
			}
		}
		if fmt.Sprint(ids) != fmt.Sprint(want) {
			t.Fatalf("%s: idle %v, want %v", what, ids, want)
		}
		return got
	}
	got := list("first", "session:old")
	if got[0].LastSeq != 3 || got[0].Promoted != 0 || got[0].Owner != "user:1" || !got[0].LastActive.Equal(now.Add(-10*time.Second)) {
		t.Errorf("idle session: %+v", got[0])
	}
	if err := st.MarkPromoted(ctx, "session:old", 2); err != nil {
		t.Fatal(err)
	}
	if got := list("part promoted", "session:old"); got[0].Promoted != 2 {
		t.Errorf("promoted %d, want 2", got[0].Promoted)
	}
	if err := st.MarkPromoted(ctx, "session:old", 3); err != nil {
		t.Fatal(err)
	}
	list("all promoted")
	// A promoted mark never goes back, and one for a session that is gone is fine.
	if err := st.MarkPromoted(ctx, "session:old", 1); err != nil {
		t.Fatal(err)
	}
	if err := st.MarkPromoted(ctx, "session:gone", 1); err != nil {
		t.Fatal(err)
	}
	if s := mustWindow(t, st, shortterm.WindowQuery{Session: "session:old"}); s.Promoted != 3 {
		t.Errorf("promoted went back to %d", s.Promoted)
	}
	// New turns of an idle session are offered again.
	mustAppend(t, st, "session:old", "user:1", now.Add(-8*time.Second), turn("user", `"4"`))
	if got := list("after another turn", "session:old"); got[0].Promoted != 3 || got[0].LastSeq != 4 {
		t.Errorf("idle again: %+v", got[0])
	}
}

func concurrentAppends(t *testing.T, newStore New) {
	st := newStore(t, shortterm.Options{})
	const writers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				_, err := st.Append(ctx, shortterm.Append{Session: "session:busy", Owner: "user:1", Now: time.Now(),
					Turns: []shortterm.NewTurn{turn("user", fmt.Sprintf(`{"w":%d,"i":%d}`, w, i))}})
				if err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	s := mustWindow(t, st, shortterm.WindowQuery{Session: "session:busy"})
	if len(s.Turns) != writers*each {
		t.Fatalf("%d turns, want %d", len(s.Turns), writers*each)
	}
	next := map[int]int{}
	for i, tn := range s.Turns {
		if tn.Seq != int64(i+1) {
			t.Fatalf("turn %d numbered %d", i, tn.Seq)
		}
		var c struct{ W, I int }
		if err := json.Unmarshal(tn.Content, &c); err != nil {
			t.Fatal(err)
		}
		if c.I != next[c.W] {
			t.Fatalf("writer %d's turn %d came before its turn %d", c.W, c.I, next[c.W])
		}
		next[c.W]++
	}
}

func badInput(t *testing.T, newStore New) {
	st := newStore(t, shortterm.Options{})
	now := time.Now()
	for _, a := range []shortterm.Append{
		{Session: "", Turns: []shortterm.NewTurn{turn("user", `"x"`)}},
		{Session: "nokind", Turns: []shortterm.NewTurn{turn("user", `"x"`)}},
		{Session: "session:x"},
		{Session: "session:x", Turns: []shortterm.NewTurn{turn("", `"x"`)}},
		{Session: "session:x", Turns: []shortterm.NewTurn{turn("user", `{"unclosed": `)}},
		{Session: "session:x", Turns: []shortterm.NewTurn{turn("user", "")}},
		{Session: "session:x", Turns: []shortterm.NewTurn{turn(shortterm.RoleSummary, `"x"`)}},
		{Session: "session:x", Owner: "bad owner", Turns: []shortterm.NewTurn{turn("user", `"x"`)}},
		{Session: "session:x", Turns: []shortterm.NewTurn{turn("user", "\"\xff\"")}},
	} {
		a.Now = now
		if _, err := st.Append(ctx, a); err == nil {
			t.Errorf("append %+v was taken", a)
		}
	}
	wantGone(t, st, "session:x")
}
