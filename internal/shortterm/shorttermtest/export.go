package shorttermtest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/shortterm"
)

// exportAll returns what st exports at now.
func exportAll(t *testing.T, st shortterm.Store, now time.Time) []shortterm.Session {
	t.Helper()
	var out []shortterm.Session
	if err := st.Export(ctx, now, func(s shortterm.Session) error {
		out = append(out, s)
		return nil
	}); err != nil {
		t.Fatalf("export: %v", err)
	}
	return out
}

func ids(sessions []shortterm.Session) []string {
	out := make([]string, len(sessions))
	for i, s := range sessions {
		out[i] = s.ID
	}
	return out
}

func wantIDs(t *testing.T, what string, sessions []shortterm.Session, want ...string) {
	t.Helper()
	if got := ids(sessions); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: sessions %v, want %v", what, got, want)
	}
}

// sameSession fails unless got is want: state and turns, byte for byte.
func sameSession(t *testing.T, what string, got, want shortterm.Session) {
	t.Helper()
	if got.ID != want.ID || got.Owner != want.Owner || got.LastSeq != want.LastSeq || got.Promoted != want.Promoted || !got.LastActive.Equal(want.LastActive) {
		t.Fatalf("%s: session %s owner %q last %d promoted %d active %v; want %s owner %q last %d promoted %d active %v", what,
			got.ID, got.Owner, got.LastSeq, got.Promoted, got.LastActive, want.ID, want.Owner, want.LastSeq, want.Promoted, want.LastActive)
	}
	if len(got.Turns) != len(want.Turns) {
		t.Fatalf("%s: %s has turns %v, want %v", what, got.ID, seqs(got.Turns), seqs(want.Turns))
	}
	for i, g := range got.Turns {
		w := want.Turns[i]
		if g.Seq != w.Seq || g.Role != w.Role || string(g.Content) != string(w.Content) || !g.At.Equal(w.At) {
			t.Fatalf("%s: %s turn %d is %d %s %s at %v; want %d %s %s at %v", what, got.ID, i,
				g.Seq, g.Role, g.Content, g.At, w.Seq, w.Role, w.Content, w.At)
		}
	}
}

// conversation fills st with sessions of every shape an export meets, as of now:
// summarized and partly promoted, owned by itself, with JSON objects for content,
// and one that expired by now (session:c).
func conversation(t *testing.T, st shortterm.Store, now time.Time) {
	t.Helper()
	mustAppend(t, st, "session:b", "user:1", now.Add(-time.Minute), turn("user", `"我住朝阳区"`),
		turn("assistant", `{ "text": "好的", "tool_calls": [ {"name": "x"} ] }`))
	mustAppend(t, st, "session:b", "", now.Add(-30*time.Second), turn("user", `"3"`), turn("tool", `{"result":[1,2]}`))
	if _, err := st.Summarize(ctx, shortterm.Summary{Session: "session:b", Through: 2, Content: json.RawMessage(`{"text":"1 and 2"}`), Now: now.Add(-20 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if err := st.MarkPromoted(ctx, "session:b", 3); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, st, "session:a", "", now, turn("user", `"mine"`))
	mustAppend(t, st, "session:c", "user:2", now.Add(-st.TTL()-time.Second), turn("user", `"expired by now"`))
}

func exportLive(t *testing.T, newStore New) {
	st := newStore(t, shortterm.Options{})
	now := time.Now().Truncate(time.Millisecond)
	conversation(t, st, now)
	got := exportAll(t, st, now)
	wantIDs(t, "export", got, "session:a", "session:b")
	for _, s := range got {
		sameSession(t, "export against window", s, mustWindow(t, st, shortterm.WindowQuery{Session: s.ID, Now: now}))
	}
	b := got[1]
	wantSeqs(t, "session:b", b.Turns, 2, 3, 4)
	if b.Owner != "user:1" || b.LastSeq != 4 || b.Promoted != 3 || !b.LastActive.Equal(now.Add(-20*time.Second)) || b.Turns[0].Role != shortterm.RoleSummary {
		t.Errorf("session:b exported as %+v", b)
	}
	if a := got[0]; a.Owner != "session:a" || a.LastSeq != 1 || !a.LastActive.Equal(now) {
		t.Errorf("session:a exported as %+v", a)
	}
	// Later, the sessions expire by their last activity.
	ttl := st.TTL()
	wantIDs(t, "export just before session:b expires", exportAll(t, st, now.Add(ttl-20*time.Second-time.Millisecond)), "session:a", "session:b")
	wantIDs(t, "export once session:b expired", exportAll(t, st, now.Add(ttl-20*time.Second)), "session:a")
	wantIDs(t, "export once all expired", exportAll(t, st, now.Add(ttl)))

	// An error of fn stops the export and comes back.
	stop := errors.New("stop")
	calls := 0
	err := st.Export(ctx, now, func(shortterm.Session) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Errorf("export whose fn fails: %v after %d calls; want stop after 1", err, calls)
	}
}

func importRoundTrip(t *testing.T, newStore New) {
	src, dst := newStore(t, shortterm.Options{}), newStore(t, shortterm.Options{})
	now := time.Now().Truncate(time.Millisecond)
	conversation(t, src, now)
	exported := exportAll(t, src, now)
	for _, s := range exported {
		if ok, err := dst.Import(ctx, s, now); err != nil || !ok {
			t.Fatalf("import of %s: %v, %v; want true", s.ID, ok, err)
		}
	}
	back := exportAll(t, dst, now)
	wantIDs(t, "export of the imported", back, ids(exported)...)
	for i, s := range back {
		sameSession(t, "re-exported", s, exported[i])
		sameSession(t, "window of the imported", mustWindow(t, dst, shortterm.WindowQuery{Session: s.ID, Now: now}),
			mustWindow(t, src, shortterm.WindowQuery{Session: s.ID, Now: now}))
	}
	// The session goes on where it was: numbers after LastSeq, its owner kept.
	wantSeqs(t, "append after the import", mustAppend(t, dst, "session:b", "user:1", now, turn("user", `"5"`)), 5)
	if _, err := dst.Append(ctx, shortterm.Append{Session: "session:b", Owner: "user:9", Turns: []shortterm.NewTurn{turn("user", `"x"`)}, Now: now}); !errors.Is(err, shortterm.ErrOwner) {
		t.Errorf("append to the imported session as another owner: %v, want ErrOwner", err)
	}
	w := mustWindow(t, dst, shortterm.WindowQuery{Session: "session:b", Now: now, AsOf: now.Add(-35 * time.Second)})
	wantSeqs(t, "as of before turn 3", w.Turns, 2)
}

// imported is a session to import, last active at active, owned by user:1.
func imported(id string, active time.Time) shortterm.Session {
	return shortterm.Session{ID: id, Owner: "user:1", LastSeq: 5, Promoted: 1, LastActive: active, Turns: []shortterm.Turn{
		{Seq: 4, Role: shortterm.RoleSummary, Content: json.RawMessage(`"1 to 4"`), At: active.Add(-2 * time.Minute)},
		{Seq: 5, Role: "user", Content: json.RawMessage(`{"text":"five"}`), At: active},
	}}
}

func importIdempotent(t *testing.T, newStore New) {
	st := newStore(t, shortterm.Options{})
	now := time.Now().Truncate(time.Millisecond)
	s := imported("session:i", now.Add(-time.Minute))
	if ok, err := st.Import(ctx, s, now); err != nil || !ok {
		t.Fatalf("import: %v, %v; want true", ok, err)
	}
	if ok, err := st.Import(ctx, s, now); err != nil || ok {
		t.Fatalf("import again: %v, %v; want false", ok, err)
	}
	sameSession(t, "after two imports", mustWindow(t, st, shortterm.WindowQuery{Session: "session:i", Now: now}), s)
	// Appended to since, the session is never overwritten by the import.
	mustAppend(t, st, "session:i", "", now, turn("assistant", `"six"`))
	if ok, err := st.Import(ctx, s, now); err != nil || ok {
		t.Fatalf("import over a session appended to: %v, %v; want false", ok, err)
	}
	w := mustWindow(t, st, shortterm.WindowQuery{Session: "session:i", Now: now})
	wantSeqs(t, "after the import over it", w.Turns, 4, 5, 6)
	if w.LastSeq != 6 || !w.LastActive.Equal(now) {
		t.Errorf("session after the import over it: last %d, active %v", w.LastSeq, w.LastActive)
	}
	// Nor a session that was never imported, whoever the import says owns it.
	mustAppend(t, st, "session:live", "user:2", now, turn("user", `"live"`))
	other := imported("session:live", now)
	if ok, err := st.Import(ctx, other, now); err != nil || ok {
		t.Fatalf("import over a live session: %v, %v; want false", ok, err)
	}
	w = mustWindow(t, st, shortterm.WindowQuery{Session: "session:live", Now: now})
	if w.Owner != "user:2" || w.LastSeq != 1 || len(w.Turns) != 1 || string(w.Turns[0].Content) != `"live"` {
		t.Errorf("live session after an import over it: %+v", w)
	}
}

func importLikeAnyOther(t *testing.T, newStore New) {
	st := newStore(t, shortterm.Options{})
	now := time.Now().Truncate(time.Millisecond)
	x1 := imported("session:x1", now.Add(-10*time.Minute))
	x2 := imported("session:x2", now.Add(-time.Minute))
	x2.Promoted = 5 // all offered: not idle
	y := imported("session:y", now.Add(-2*time.Minute))
	y.Owner = "" // its own, as for an append
	for _, s := range []shortterm.Session{x1, x2, y} {
		if ok, err := st.Import(ctx, s, now); err != nil || !ok {
			t.Fatalf("import of %s: %v, %v", s.ID, ok, err)
		}
	}
	idle, err := st.Idle(ctx, now.Add(-5*time.Minute), 10)
	if err != nil {
		t.Fatal(err)
	}
	wantIDs(t, "idle for 5 minutes", idle, "session:x1")
	if s := idle[0]; s.Owner != "user:1" || s.LastSeq != 5 || s.Promoted != 1 || !s.LastActive.Equal(x1.LastActive) {
		t.Errorf("idle imported session: %+v", s)
	}
	if idle, err = st.Idle(ctx, now, 10); err != nil {
		t.Fatal(err)
	}
	wantIDs(t, "idle now", idle, "session:x1", "session:y")
	if err := st.MarkPromoted(ctx, "session:x1", 5); err != nil {
		t.Fatal(err)
	}
	if idle, err = st.Idle(ctx, now, 10); err != nil {
		t.Fatal(err)
	}
	wantIDs(t, "idle after the promotion", idle, "session:y")

	if n, err := st.ForgetOwner(ctx, "user:1"); err != nil || n != 2 {
		t.Fatalf("forget user:1: %d, %v; want its 2 imported sessions", n, err)
	}
	wantGone(t, st, "session:x1")
	wantGone(t, st, "session:x2")
	y.Owner = "session:y"
	wantIDs(t, "export after the forget", exportAll(t, st, now), "session:y")
	if n, err := st.ForgetOwner(ctx, "session:y"); err != nil || n != 1 {
		t.Fatalf("forget session:y, which owns itself: %d, %v", n, err)
	}
	if ok, err := st.Import(ctx, y, now); err != nil || !ok {
		t.Fatalf("import of session:y again after its forget: %v, %v; want true", ok, err)
	}
	ended, err := st.End(ctx, "session:y")
	if err != nil {
		t.Fatal(err)
	}
	sameSession(t, "ended", ended, y)
	wantIDs(t, "export after the end", exportAll(t, st, now))
	if _, err := st.Purge(ctx, now); err != nil {
		t.Fatal(err)
	}
}

func importExpired(t *testing.T, newStore New) {
	st := newStore(t, shortterm.Options{})
	now := time.Now().Truncate(time.Millisecond)
	ttl := st.TTL()
	for _, active := range []time.Time{now.Add(-ttl), now.Add(-ttl - time.Second), now.Add(-24 * time.Hour)} {
		if ok, err := st.Import(ctx, imported("session:late", active), now); err != nil || ok {
			t.Fatalf("import of a session last active %v before now: %v, %v; want false", now.Sub(active), ok, err)
		}
	}
	wantGone(t, st, "session:late")
	wantIDs(t, "export", exportAll(t, st, now))
	// One that has a minute left lives that minute.
	s := imported("session:late", now.Add(-ttl+time.Minute))
	if ok, err := st.Import(ctx, s, now); err != nil || !ok {
		t.Fatalf("import of a session with a minute left: %v, %v; want true", ok, err)
	}
	sameSession(t, "imported with a minute left", mustWindow(t, st, shortterm.WindowQuery{Session: "session:late", Now: now}), s)
	wantIDs(t, "export a minute later", exportAll(t, st, now.Add(time.Minute)))
}

func importBadInput(t *testing.T, newStore New) {
	st := newStore(t, shortterm.Options{MaxTurns: 3})
	now := time.Now().Truncate(time.Millisecond)
	good := func() shortterm.Session { return imported("session:bad", now) }
	for _, c := range []struct {
		what string
		edit func(*shortterm.Session)
	}{
		{"no id", func(s *shortterm.Session) { s.ID = "" }},
		{"an id that is no scope", func(s *shortterm.Session) { s.ID = "nokind" }},
		{"an owner that is no scope", func(s *shortterm.Session) { s.Owner = "bad owner" }},
		{"no last activity", func(s *shortterm.Session) { s.LastActive = time.Time{} }},
		{"no turns", func(s *shortterm.Session) { s.Turns = nil }},
		{"more turns than the store holds", func(s *shortterm.Session) {
			s.LastSeq = 8
			for i := range 3 {
				s.Turns = append(s.Turns, shortterm.Turn{Seq: int64(6 + i), Role: "user", Content: json.RawMessage(`"x"`), At: now})
			}
		}},
		{"turn 0", func(s *shortterm.Session) { s.Turns[0].Seq = 0 }},
		{"a number twice", func(s *shortterm.Session) { s.Turns[0].Seq = 5 }},
		{"numbers going back", func(s *shortterm.Session) { s.Turns[0].Seq, s.Turns[1].Seq = 5, 4 }},
		{"a turn past last seq", func(s *shortterm.Session) { s.LastSeq = 4 }},
		{"promoted below 0", func(s *shortterm.Session) { s.Promoted = -1 }},
		{"promoted past last seq", func(s *shortterm.Session) { s.Promoted = 6 }},
		{"content not JSON", func(s *shortterm.Session) { s.Turns[1].Content = json.RawMessage(`{"unclosed": `) }},
		{"no content", func(s *shortterm.Session) { s.Turns[1].Content = nil }},
		{"content not UTF-8", func(s *shortterm.Session) { s.Turns[1].Content = json.RawMessage("\"\xff\"") }},
		{"content too long", func(s *shortterm.Session) {
			s.Turns[1].Content = json.RawMessage(`"` + strings.Repeat("x", shortterm.MaxTurnBytes) + `"`)
		}},
		{"no role", func(s *shortterm.Session) { s.Turns[1].Role = "" }},
		{"a turn without a time", func(s *shortterm.Session) { s.Turns[1].At = time.Time{} }},
	} {
		s := good()
		c.edit(&s)
		if ok, err := st.Import(ctx, s, now); err == nil || ok {
			t.Errorf("import of a session with %s: %v, %v; want an error", c.what, ok, err)
		} else if c.what == "more turns than the store holds" && !errors.Is(err, shortterm.ErrSessionFull) {
			t.Errorf("import of %s: %v, want ErrSessionFull", c.what, err)
		}
	}
	wantGone(t, st, "session:bad")
	wantIDs(t, "export after the refused imports", exportAll(t, st, now))
	if ok, err := st.Import(ctx, good(), now); err != nil || !ok {
		t.Fatalf("import of the good session: %v, %v", ok, err)
	}
}

func exportPages(t *testing.T, newStore New) {
	st := newStore(t, shortterm.Options{})
	now := time.Now().Truncate(time.Millisecond)
	const n = 300
	for i := range n {
		turns := make([]shortterm.NewTurn, 1+i%3)
		for k := range turns {
			turns[k] = turn("user", fmt.Sprintf(`{"i":%d,"k":%d}`, i, k))
		}
		mustAppend(t, st, fmt.Sprintf("session:p%03d", i), fmt.Sprintf("user:%d", i%7), now.Add(-time.Duration(i)*time.Millisecond), turns...)
	}
	ended := mustWindow(t, st, shortterm.WindowQuery{Session: "session:p250", Now: now})
	var got []shortterm.Session
	err := st.Export(ctx, now, func(s shortterm.Session) error {
		if len(got) == 0 {
			// A session that ends during the export is left out, or passed as it was.
			if _, err := st.End(ctx, "session:p250"); err != nil {
				return err
			}
		}
		got = append(got, s)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	next := 0
	for _, s := range got {
		if s.ID == "session:p250" {
			sameSession(t, "the ended session", s, ended)
		}
		if next == 250 && s.ID != "session:p250" {
			next++ // left out
		}
		if want := fmt.Sprintf("session:p%03d", next); s.ID != want {
			t.Fatalf("exported %s where %s was due", s.ID, want)
		}
		if len(s.Turns) != 1+next%3 || s.Owner != fmt.Sprintf("user:%d", next%7) || s.LastSeq != int64(1+next%3) {
			t.Fatalf("%s exported with %d turns, owner %s, last %d", s.ID, len(s.Turns), s.Owner, s.LastSeq)
		}
		for k, tn := range s.Turns {
			if want := fmt.Sprintf(`{"i":%d,"k":%d}`, next, k); tn.Seq != int64(k+1) || string(tn.Content) != want {
				t.Fatalf("%s turn %d: %d %s, want %d %s", s.ID, k, tn.Seq, tn.Content, k+1, want)
			}
		}
		next++
	}
	if next != n {
		t.Fatalf("exported through session %d of %d", next, n)
	}
}

// exportLargePages: pages end by bytes too, with sessions of large turns, more than
// one page's worth.
func exportLargePages(t *testing.T, newStore New) {
	big := newStore(t, shortterm.Options{})
	now := time.Now().Truncate(time.Millisecond)
	const sessions, turns = 12, 6
	filler := strings.Repeat("x", shortterm.MaxTurnBytes-100)
	for i := range sessions {
		nt := make([]shortterm.NewTurn, turns)
		for k := range nt {
			nt[k] = turn("user", fmt.Sprintf(`"%d %d %s"`, i, k, filler))
		}
		mustAppend(t, big, fmt.Sprintf("session:big%02d", i), "", now, nt...)
	}
	if sessions*turns*len(filler) <= shortterm.ExportPageBytes {
		t.Fatalf("the large sessions hold %d bytes, a page %d: make them larger", sessions*turns*len(filler), shortterm.ExportPageBytes)
	}
	all := exportAll(t, big, now)
	if len(all) != sessions {
		t.Fatalf("exported %d large sessions of %d", len(all), sessions)
	}
	for i, s := range all {
		if s.ID != fmt.Sprintf("session:big%02d", i) || len(s.Turns) != turns {
			t.Fatalf("large session %d exported as %s with %d turns", i, s.ID, len(s.Turns))
		}
		for k, tn := range s.Turns {
			if want := fmt.Sprintf(`"%d %d %s"`, i, k, filler); string(tn.Content) != want {
				t.Fatalf("%s turn %d: %d bytes, not what was appended", s.ID, k, len(tn.Content))
			}
		}
	}
}
