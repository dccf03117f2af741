package redisstore_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/amemory/memory-operator/internal/shortterm"
	"github.com/amemory/memory-operator/internal/shortterm/redisstore"
	"github.com/amemory/memory-operator/internal/shortterm/shorttermtest"
	"github.com/amemory/memory-operator/internal/testutil"
)

// admin connects to the test Redis as its admin.
func admin(t *testing.T) *redis.Client {
	t.Helper()
	srv := testutil.RedisServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: srv.User, Password: srv.Password})
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("redis at %s: %v", srv.Addr, err)
	}
	return rdb
}

func TestConformance(t *testing.T) {
	rdb := admin(t)
	shorttermtest.Run(t, func(_ *testing.T, opts shortterm.Options) shortterm.Store {
		return redisstore.New(rdb, testutil.UniqueName("st"), opts)
	})
}

// TestImportExpiresLikeAnySession: an imported session's keys (turns, state, its
// owner's set) expire when its last activity says, by Redis's own clock, and it is
// in the indexes an append files a session in.
func TestImportExpiresLikeAnySession(t *testing.T) {
	rdb := admin(t)
	tenant := testutil.UniqueName("st")
	st := redisstore.New(rdb, tenant, shortterm.Options{TTL: time.Hour})
	now := time.Now()
	sess := shortterm.Session{ID: "session:imp", Owner: "user:1", LastSeq: 2, Promoted: 1, LastActive: now.Add(-20 * time.Minute),
		Turns: []shortterm.Turn{{Seq: 2, Role: "user", Content: json.RawMessage(`"x"`), At: now.Add(-20 * time.Minute)}}}
	if ok, err := st.Import(t.Context(), sess, now); err != nil || !ok {
		t.Fatalf("import: %v, %v", ok, err)
	}
	p := redisstore.Prefix(tenant)
	for _, key := range []string{p + "t:session:imp", p + "s:session:imp", p + "o:user:1"} {
		left, err := rdb.PTTL(t.Context(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if left > 40*time.Minute || left < 39*time.Minute {
			t.Errorf("%s expires in %v, want the 40 minutes the session has left", key, left)
		}
	}
	for key, want := range map[string]float64{p + "idle": float64(sess.LastActive.UnixMilli()), p + "sessions": 0,
		p + "expiry": float64(sess.LastActive.Add(time.Hour).UnixMilli())} {
		if score, err := rdb.ZScore(t.Context(), key, "session:imp").Result(); err != nil || score != want {
			t.Errorf("%s holds session:imp at %v (%v), want %v", key, score, err, want)
		}
	}
}

// TestIndexesLoseExpiredSessions: the sorted sets keep no member of a session Redis
// expired once Purge ran (the sweep runs it), whether or not Idle or Export came
// across it, so they do not grow with every session there ever was.
func TestIndexesLoseExpiredSessions(t *testing.T) {
	rdb := admin(t)
	tenant := testutil.UniqueName("st")
	ctx := t.Context()
	st := redisstore.New(rdb, tenant, shortterm.Options{TTL: time.Second})
	now := time.Now()
	for _, id := range []string{"session:1", "session:2", "session:3"} {
		if _, err := st.Append(ctx, shortterm.Append{Session: id, Turns: []shortterm.NewTurn{{Role: "user", Content: json.RawMessage(`"x"`)}}, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	p := redisstore.Prefix(tenant)
	if score, err := rdb.ZScore(ctx, p+"expiry", "session:1").Result(); err != nil || score != float64(now.Add(time.Second).UnixMilli()) {
		t.Errorf("session:1 filed to expire at %v (%v), want %d", score, err, now.Add(time.Second).UnixMilli())
	}
	if err := st.MarkPromoted(ctx, "session:2", 1); err != nil { // out of the idle set
		t.Fatal(err)
	}
	members := func() int64 {
		var n int64
		for _, key := range []string{p + "idle", p + "sessions", p + "expiry"} {
			c, err := rdb.ZCard(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			n += c
		}
		return n
	}
	if n := members(); n != 8 {
		t.Fatalf("%d members in the sorted sets, want 8", n)
	}
	var purged int
	testutil.Eventually(t, "the sessions expired and purged", func() (bool, error) {
		n, err := st.Purge(ctx, time.Now())
		purged += n
		return members() == 0, err
	})
	if purged != 3 {
		t.Errorf("Purge counted %d sessions, want 3", purged)
	}
}
