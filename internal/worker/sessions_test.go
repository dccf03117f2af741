package worker

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/restore"
	"github.com/amemory/memory-operator/internal/shortterm"
	"github.com/amemory/memory-operator/internal/shortterm/redisstore"
	"github.com/amemory/memory-operator/internal/testutil"
)

// TestSnapshotCarriesSessionsAndRestoreBringsThemBack: a snapshot with
// includeSessions carries the live sessions of a store that keeps them in PostgreSQL
// (an expired one left out), and a restore writes them into a store that keeps them
// in Redis: mapped like scopes, turns, numbers and promotion mark kept; never over a
// session the target has, never one whose owner the target forgot after it began;
// a rerun adds nothing.
func TestSnapshotCarriesSessionsAndRestoreBringsThemBack(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	now := time.Now().Truncate(time.Millisecond)
	src := f.store.Sessions(shortterm.Options{TTL: 30 * time.Minute})
	appendAt := func(st shortterm.Store, session, owner string, at time.Time, texts ...string) {
		t.Helper()
		a := shortterm.Append{Session: session, Owner: owner, Now: at}
		for _, x := range texts {
			c, _ := json.Marshal(x)
			a.Turns = append(a.Turns, shortterm.NewTurn{Role: "user", Content: c})
		}
		if _, err := st.Append(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	appendAt(src, "session:a", "user:1", now.Add(-10*time.Minute), "I moved to Lisbon", "my cat is Miso", "I like oolong")
	if _, err := src.Summarize(ctx, shortterm.Summary{Session: "session:a", Through: 1, Content: json.RawMessage(`"lives in Lisbon"`), Now: now.Add(-9 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := src.MarkPromoted(ctx, "session:a", 1); err != nil {
		t.Fatal(err)
	}
	appendAt(src, "session:b", "user:2", now.Add(-5*time.Minute), "from the package")
	appendAt(src, "session:c", "user:3", now.Add(-5*time.Minute), "said before the target forgot user:3")
	appendAt(src, "session:old", "user:4", now.Add(-40*time.Minute), "idle past the TTL")

	cfg := f.config("with-sessions/")
	cfg.IncludeSessions, cfg.Sessions = true, SessionsConfig{SessionTTL: 30 * time.Minute}
	m, err := RunSnapshot(ctx, cfg, f.sec, RunOptions{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if m.Sessions == nil || m.Sessions.Count != 3 {
		t.Fatalf("the package's sessions: %+v (want 3: the expired one left out)", m.Sessions)
	}
	want, err := src.Window(ctx, shortterm.WindowQuery{Session: "session:a", Now: now})
	if err != nil {
		t.Fatal(err)
	}

	// The target keeps sessions in Redis; it has its own session:b, and forgot
	// user:3 after session:c began.
	srv := testutil.RedisServer(t)
	tenant := testutil.UniqueName("wk")
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: srv.User, Password: srv.Password})
	t.Cleanup(func() { _ = rdb.Close() })
	dst := redisstore.New(rdb, tenant, shortterm.Options{TTL: 30 * time.Minute})
	t.Cleanup(func() { _, _ = dst.ForgetOwner(context.Background(), "user:2") })
	appendAt(dst, "session:b", "user:2", now.Add(-time.Minute), "the target's own conversation")
	target := f.targetSchema(t)
	if _, err := pgstore.New(f.pool, target).Forget(ctx, "user:3", "erasure", "test"); err != nil {
		t.Fatal(err)
	}
	rc := f.restoreConfig(target, "with-sessions/")
	rc.ScopeMap = []ScopeRule{{From: "user:1", To: "user:dbc0a3"}}
	rc.Sessions = SessionsConfig{SessionTTL: 30 * time.Minute, RedisAddress: srv.Addr, RedisUser: srv.User, RedisTenant: tenant}
	sec := f.restoreSecrets()
	sec.RedisPassword = srv.Password
	sum, err := RunRestore(ctx, rc, sec, RunOptions{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if got := sum.Sessions; got == nil || *got != (restore.SessionsResult{Read: 3, Restored: 1, Existing: 1, Forgotten: 1}) {
		t.Fatalf("sessions restored: %+v", got)
	}
	t.Cleanup(func() { _, _ = dst.ForgetOwner(context.Background(), "user:dbc0a3") })
	got, err := dst.Window(ctx, shortterm.WindowQuery{Session: "session:a", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if got.Owner != "user:dbc0a3" || got.LastSeq != want.LastSeq || got.Promoted != 1 || len(got.Turns) != len(want.Turns) {
		t.Fatalf("session:a in the target = %+v, want the source's %+v with its owner mapped", got, want)
	}
	for i := range got.Turns {
		w, g := want.Turns[i], got.Turns[i]
		if g.Seq != w.Seq || g.Role != w.Role || string(g.Content) != string(w.Content) || !g.At.Equal(w.At) {
			t.Fatalf("turn %d = %+v, want %+v", i, g, w)
		}
	}
	b, err := dst.Window(ctx, shortterm.WindowQuery{Session: "session:b", Now: now})
	if err != nil || len(b.Turns) != 1 || string(b.Turns[0].Content) != `"the target's own conversation"` {
		t.Fatalf("the target's own session:b: %+v, %v", b, err)
	}
	if _, err := dst.Window(ctx, shortterm.WindowQuery{Session: "session:c", Now: now}); !errors.Is(err, shortterm.ErrNotFound) {
		t.Fatalf("session:c of the forgotten user:3: %v", err)
	}

	// Again (another MemoryRestore of the same package): nothing new.
	rc.AllowRepeat, rc.RestoreUID = true, "second"
	sum, err = RunRestore(ctx, rc, sec, RunOptions{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if got := sum.Sessions; got == nil || got.Restored != 0 || got.Existing != 2 {
		t.Fatalf("a rerun: %+v", got)
	}
	// skipSessions: left out.
	rc.SkipSessions, rc.RestoreUID = true, "third"
	if sum, err = RunRestore(ctx, rc, sec, RunOptions{Now: now}); err != nil || sum.Sessions != nil {
		t.Fatalf("skipSessions: %+v, %v", sum.Sessions, err)
	}
}
