package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/memory/service"
	"github.com/amemory/memory-operator/internal/shortterm"
	"github.com/amemory/memory-operator/internal/shortterm/redisstore"
	"github.com/amemory/memory-operator/internal/testutil"
)

// forEachShortTerm runs fn once per short-term backend (PostgreSQL, Redis) over a
// fresh store on the pgindex engine.
func forEachShortTerm(t *testing.T, opts shortterm.Options, fn func(t *testing.T, e *env, st shortterm.Store)) {
	t.Run("postgres", func(t *testing.T) {
		e := newEnv(t, backends[0], nil)
		fn(t, e, e.store.Sessions(opts))
	})
	t.Run("redis", func(t *testing.T) {
		srv := testutil.RedisServer(t)
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: srv.User, Password: srv.Password})
		t.Cleanup(func() { _ = rdb.Close() })
		e := newEnv(t, backends[0], nil)
		fn(t, e, redisstore.New(rdb, testutil.UniqueName("svc"), opts))
	})
}

func turns(texts ...string) []shortterm.NewTurn {
	out := make([]shortterm.NewTurn, len(texts))
	for i, s := range texts {
		c, _ := json.Marshal(s)
		out[i] = shortterm.NewTurn{Role: "user", Content: c}
	}
	return out
}

// promoted returns the turn texts stored as memories of scope, by session and number.
func promoted(t *testing.T, e *env, scope string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := e.store.Export(t.Context(), pgstore.ExportFilter{Scopes: []string{scope}}, func(it memory.Item) error {
		if it.Source != service.SourceSession {
			return nil // written by an agent, not promoted
		}
		var c service.TurnContent
		if err := json.Unmarshal(it.Content, &c); err != nil {
			return err
		}
		var text string
		_ = json.Unmarshal(c.Content, &text)
		k := fmt.Sprintf("%s#%d", c.Session, c.Seq)
		if _, dup := out[k]; dup {
			return fmt.Errorf("turn %s stored twice", k)
		}
		if it.MemoryType != memory.Episodic {
			return fmt.Errorf("turn %s stored as %s", k, it.MemoryType)
		}
		out[k] = text
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSessionPromotion: turns become episodic memories of the session's owner on
// request, on a summary and at the end, each once however often it is promoted.
func TestSessionPromotion(t *testing.T) {
	forEachShortTerm(t, shortterm.Options{}, func(t *testing.T, e *env, st shortterm.Store) {
		ctx := t.Context()
		s := service.NewSessions(st, e.mem, service.SessionOptions{PromoteOnEnd: true})
		if _, err := s.Append(ctx, shortterm.Append{Session: "session:a", Owner: "user:1", Turns: turns("I moved to Lisbon", "my cat is Miso", "hello"), Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if n, err := s.Promote(ctx, "session:a", 2); err != nil || n != 2 {
			t.Fatalf("Promote through 2 = %d, %v", n, err)
		}
		// Two replicas promoting at once store each turn once.
		other := service.NewSessions(st, e.mem, service.SessionOptions{PromoteOnEnd: true})
		var wg sync.WaitGroup
		for _, p := range []*service.Sessions{s, other} {
			wg.Go(func() {
				if _, err := p.Promote(ctx, "session:a", 0); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if got := promoted(t, e, "user:1"); len(got) != 3 || got["session:a#1"] != "I moved to Lisbon" {
			t.Fatalf("promoted %v", got)
		}
		// A summary keeps what it replaces.
		if _, err := s.Append(ctx, shortterm.Append{Session: "session:a", Owner: "user:1", Turns: turns("I prefer tea", "goodbye"), Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		replaced, err := s.Summarize(ctx, shortterm.Summary{Session: "session:a", Through: 4, Content: json.RawMessage(`"moved, cat, tea"`), Now: time.Now()})
		if err != nil || len(replaced) != 4 {
			t.Fatalf("Summarize = %d turns, %v", len(replaced), err)
		}
		if got := promoted(t, e, "user:1"); len(got) != 4 || got["session:a#4"] != "I prefer tea" {
			t.Fatalf("after the summary, promoted %v", got)
		}
		// The end keeps the rest and removes the session. The summary took the number
		// of the last turn it replaced, promoted already: the turns are kept, not it.
		ended, err := s.End(ctx, "session:a", true)
		if err != nil || ended.Promoted != 1 {
			t.Fatalf("End = %+v, %v", ended, err)
		}
		if got := promoted(t, e, "user:1"); len(got) != 5 || got["session:a#5"] != "goodbye" {
			t.Fatalf("after the end, promoted %v", got)
		}
		if _, err := s.Window(ctx, shortterm.WindowQuery{Session: "session:a", Now: time.Now()}); err == nil {
			t.Fatal("the session outlived its end")
		}
		// A session without an owner promotes into its own scope.
		if _, err := s.Append(ctx, shortterm.Append{Session: "session:b", Turns: turns("alone"), Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if n, err := s.Promote(ctx, "session:b", 0); err != nil || n != 1 || len(promoted(t, e, "session:b")) != 1 {
			t.Fatalf("Promote of an owner-less session = %d, %v", n, err)
		}
	})
}

// TestSessionSweepPromotesBeforeExpiry: with PromoteOnEnd, a session idle for its
// TTL less the lead is promoted by the sweep before it expires, once; without it,
// nothing is promoted.
func TestSessionSweepPromotesBeforeExpiry(t *testing.T) {
	forEachShortTerm(t, shortterm.Options{TTL: 4 * time.Second}, func(t *testing.T, e *env, st shortterm.Store) {
		ctx := t.Context()
		s := service.NewSessions(st, e.mem, service.SessionOptions{PromoteOnEnd: true, PromoteLead: 2 * time.Second})
		start := time.Now()
		if _, err := s.Append(ctx, shortterm.Append{Session: "session:s", Owner: "user:s", Turns: turns("remember the milk"), Now: start}); err != nil {
			t.Fatal(err)
		}
		if res, err := s.Sweep(ctx, start.Add(time.Second)); err != nil || res.Sessions != 0 {
			t.Fatalf("sweep before the lead = %+v, %v", res, err)
		}
		res, err := s.Sweep(ctx, start.Add(2500*time.Millisecond))
		if err != nil || res.Sessions != 1 || res.Promoted != 1 {
			t.Fatalf("sweep within the lead = %+v, %v", res, err)
		}
		if res, err := s.Sweep(ctx, start.Add(3*time.Second)); err != nil || res.Sessions != 0 {
			t.Fatalf("second sweep = %+v, %v", res, err)
		}
		if got := promoted(t, e, "user:s"); got["session:s#1"] != "remember the milk" {
			t.Fatalf("promoted %v", got)
		}
		off := service.NewSessions(st, e.mem, service.SessionOptions{})
		if _, err := off.Append(ctx, shortterm.Append{Session: "session:t", Owner: "user:t", Turns: turns("kept only on request"), Now: start}); err != nil {
			t.Fatal(err)
		}
		if res, err := off.Sweep(ctx, start.Add(3*time.Second)); err != nil || res.Sessions != 0 || len(promoted(t, e, "user:t")) != 0 {
			t.Fatalf("sweep without PromoteOnEnd = %+v, %v", res, err)
		}
	})
}

// TestGuaranteeForgetRacingPromotion races promotions (on request and by sweeps) of
// a user's sessions against forgets of the user: after each forget, no turn appended
// before it began is stored, in memory or in a session.
func TestGuaranteeForgetRacingPromotion(t *testing.T) {
	forEachShortTerm(t, shortterm.Options{TTL: time.Hour}, func(t *testing.T, e *env, st shortterm.Store) {
		ctx := t.Context()
		s := service.NewSessions(st, e.mem, service.SessionOptions{PromoteOnEnd: true, PromoteLead: time.Hour})
		const rounds = 25
		for round := range rounds {
			session := fmt.Sprintf("session:r%d", round)
			if _, err := s.Append(ctx, shortterm.Append{Session: session, Owner: "user:x", Turns: turns(fmt.Sprintf("secret %d", round), "more"), Now: time.Now()}); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			// attempts counts the promoters' calls; alive, the promoters still running.
			var attempts, alive atomic.Int64
			alive.Store(2)
			// waitAttempts lets the promoters make n more calls (fewer if they stopped).
			waitAttempts := func(n int64) {
				for target := attempts.Load() + n; attempts.Load() < target && alive.Load() > 0; {
					runtime.Gosched()
				}
			}
			for w := range 2 {
				wg.Go(func() {
					defer alive.Add(-1)
					for {
						attempts.Add(1)
						select {
						case <-stop:
							return
						default:
						}
						var err error
						if w == 0 {
							_, err = s.Promote(ctx, session, 0)
						} else {
							// Half an hour on: within the lead of every session.
							_, err = s.Sweep(ctx, time.Now().Add(31*time.Minute))
						}
						if err != nil && !errors.Is(err, shortterm.ErrNotFound) {
							t.Error(err)
							return
						}
					}
				})
			}
			// The forget lands after a varying number of promotions.
			waitAttempts(int64(round % 5))
			if _, err := s.ClearScope(ctx, "user:x"); err != nil {
				t.Fatal(err)
			}
			if _, err := e.mem.Forget(ctx, "user:x", "", "test"); err != nil {
				t.Fatal(err)
			}
			// Promotions still running after the forget must not bring it back.
			waitAttempts(4)
			close(stop)
			wg.Wait()
			if got := promoted(t, e, "user:x"); len(got) != 0 {
				t.Fatalf("round %d: after the forget, stored %v", round, got)
			}
			if _, err := st.Window(ctx, shortterm.WindowQuery{Session: session, Now: time.Now()}); err == nil {
				t.Fatalf("round %d: the session outlived the forget", round)
			}
		}
	})
}

// TestGuaranteeForgetBetweenReadAndWrite: a forget that lands after a promotion read
// the turns and before it wrote them: the promotion stores nothing, and the user's
// memories written after the forget are kept.
func TestGuaranteeForgetBetweenReadAndWrite(t *testing.T) {
	forEachShortTerm(t, shortterm.Options{}, func(t *testing.T, e *env, st shortterm.Store) {
		ctx := t.Context()
		s := service.NewSessions(st, e.mem, service.SessionOptions{PromoteOnEnd: true})
		if _, err := s.Append(ctx, shortterm.Append{Session: "session:r", Owner: "user:x", Turns: turns("a secret"), Now: time.Now()}); err != nil {
			t.Fatal(err)
		}
		service.SetAfterRead(s, func() {
			if _, err := s.ClearScope(ctx, "user:x"); err != nil {
				t.Error(err)
			}
			if _, err := e.mem.Forget(ctx, "user:x", "", "test"); err != nil {
				t.Error(err)
			}
			if _, err := e.mem.Remember(ctx, memory.Item{MemoryType: memory.Semantic, Scope: "user:x", Content: json.RawMessage(`{"text":"came back"}`)}); err != nil {
				t.Error(err)
			}
		})
		if n, err := s.Promote(ctx, "session:r", 0); err != nil || n != 0 {
			t.Fatalf("Promote across a forget = %d, %v; want nothing promoted", n, err)
		}
		if got := promoted(t, e, "user:x"); len(got) != 0 {
			t.Fatalf("after the forget, stored %v", got)
		}
		if n, err := e.store.Count(ctx); err != nil || n != 1 {
			t.Fatalf("%d memories, %v; want the one written after the forget", n, err)
		}
	})
}

// TestClearScope: a forget of a scope removes the sessions it owns and the session
// of its name, and no other.
func TestClearScope(t *testing.T) {
	forEachShortTerm(t, shortterm.Options{}, func(t *testing.T, e *env, st shortterm.Store) {
		ctx := context.Background()
		s := service.NewSessions(st, e.mem, service.SessionOptions{})
		for _, a := range []shortterm.Append{
			{Session: "session:1", Owner: "user:a"}, {Session: "session:2", Owner: "user:a"},
			{Session: "session:3", Owner: "user:b"}, {Session: "session:4"},
		} {
			a.Turns, a.Now = turns("x"), time.Now()
			if _, err := s.Append(ctx, a); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := s.ClearScope(ctx, "user:a"); err != nil || n != 2 {
			t.Fatalf("ClearScope(user:a) = %d, %v", n, err)
		}
		if n, err := s.ClearScope(ctx, "session:4"); err != nil || n != 1 {
			t.Fatalf("ClearScope(session:4) = %d, %v", n, err)
		}
		if n, err := s.ClearScope(ctx, "session:3"); err != nil || n != 1 {
			t.Fatalf("ClearScope(session:3), owned by user:b = %d, %v", n, err)
		}
		if n, err := s.ClearScope(ctx, "user:nobody"); err != nil || n != 0 {
			t.Fatalf("ClearScope(user:nobody) = %d, %v", n, err)
		}
	})
}

// TestSessionSweepGoesOnPastAFailure: a session whose promotion fails (a turn the
// store's embedder limit refuses) is reported and retried, and the sweep promotes the
// other sessions all the same.
func TestSessionSweepGoesOnPastAFailure(t *testing.T) {
	e := newEnv(t, backends[0], nil)
	mem, err := service.NewWith(e.store, e.index, e.emb, service.Options{InputLimit: embed.Limit{MaxInputBytes: 200, Overflow: embed.Refuse}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	s := service.NewSessions(e.store.Sessions(shortterm.Options{TTL: time.Hour}), mem, service.SessionOptions{PromoteOnEnd: true})
	start := time.Now()
	if _, err := s.Append(ctx, shortterm.Append{Session: "session:long", Owner: "user:l", Turns: turns(strings.Repeat("far too long ", 40)), Now: start}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, shortterm.Append{Session: "session:short", Owner: "user:s", Turns: turns("short enough"), Now: start.Add(time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Sweep(ctx, start.Add(56*time.Minute)) // within the 5-minute lead
	if err == nil || !strings.Contains(err.Error(), "session:long") || res.Failed != 1 || res.Sessions != 1 {
		t.Fatalf("sweep = %+v, %v; want session:long failed and session:short promoted", res, err)
	}
	if got := promoted(t, e, "user:s"); got["session:short#1"] != "short enough" {
		t.Fatalf("promoted %v", got)
	}
}
