package querycache_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/querycache"
	"github.com/amemory/memory-operator/internal/querycache/querycachetest"
	"github.com/amemory/memory-operator/internal/testutil"
)

// tenantClient provisions a tenant as the operator does and connects as its own
// Redis user, which has nothing but provision.RedisCommands on mem:<tenant>:*.
func tenantClient(t *testing.T) (*redis.Client, *redis.Client, provision.Names) {
	t.Helper()
	srv := testutil.RedisServer(t)
	admin := provision.RedisConn{Address: srv.Addr, Username: srv.User, Password: srv.Password}
	names, err := provision.NamesFor(testutil.UniqueName("qc-"), "")
	if err != nil {
		t.Fatal(err)
	}
	const password = "qc-test-password-1"
	if err := provision.EnsureRedisTenant(t.Context(), admin, names, "ns/"+names.Tenant, password, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = provision.DeleteRedisTenant(context.Background(), admin, names, "ns/"+names.Tenant) })
	user := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: names.RedisUser, Password: password})
	t.Cleanup(func() { _ = user.Close() })
	root := redis.NewClient(&redis.Options{Addr: srv.Addr, Username: srv.User, Password: srv.Password})
	t.Cleanup(func() { _ = root.Close() })
	return user, root, names
}

// TestRedisConformance runs the suite as the store's own Redis user, with a generous
// timeout (the suite checks behaviour, not speed): its privileges are enough.
func TestRedisConformance(t *testing.T) {
	querycachetest.Run(t, func(t *testing.T) querycache.Backend {
		user, _, names := tenantClient(t)
		return querycache.NewRedis(user, names.Tenant, querycache.RedisOptions{Namespace: "epoch", Timeout: 2 * time.Second})
	})
}

// TestRedisKeys: entries live under mem:<tenant>:qc:<namespace>:, each with a TTL no
// longer than its expiry; a server that lost its scripts gets them again.
func TestRedisKeys(t *testing.T) {
	ctx := t.Context()
	user, root, names := tenantClient(t)
	if err := root.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	b := querycache.NewRedis(user, names.Tenant, querycache.RedisOptions{Namespace: "e1", Timeout: 2 * time.Second})
	b.Set(ctx, "user:1", "k", 1, []byte("data"), time.Now().Add(time.Minute))
	if _, l := b.Get(ctx, "user:1", "k", 1); l != querycache.Found {
		t.Fatalf("Get = %v", l)
	}
	keys, err := root.Keys(ctx, "mem:"+names.Tenant+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || !strings.HasPrefix(keys[0], querycache.RedisPrefix(names.Tenant)+"e1:") {
		t.Fatalf("keys %q, want one under %se1:", keys, querycache.RedisPrefix(names.Tenant))
	}
	ttl, err := root.PTTL(ctx, keys[0]).Result()
	if err != nil || ttl <= 0 || ttl > time.Minute {
		t.Fatalf("TTL %v, %v; want within a minute", ttl, err)
	}
	// Another namespace (a store made again under the same name) sees none of it.
	other := querycache.NewRedis(user, names.Tenant, querycache.RedisOptions{Namespace: "e2", Timeout: 2 * time.Second})
	if _, l := other.Get(ctx, "user:1", "k", 1); l != querycache.Missing {
		t.Fatalf("another namespace: %v", l)
	}
}

// TestRedisUnavailableIsAMiss: a Redis that accepts connections and never answers,
// and one that refuses them, are misses within the timeout, never errors; after a
// failure the backend does not wait on Redis again until its backoff has passed.
func TestRedisUnavailableIsAMiss(t *testing.T) {
	ctx := t.Context()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = silent.Close() })
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = c.Close() })
		}
	}()
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := refused.Addr().String()
	_ = refused.Close()

	for name, addr := range map[string]string{"silent": silent.Addr().String(), "refused": refusedAddr} {
		t.Run(name, func(t *testing.T) {
			// The gateway's client settings: its own timeouts are seconds.
			rdb := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second,
				WriteTimeout: 2 * time.Second, MaxRetries: 1})
			t.Cleanup(func() { _ = rdb.Close() })
			b := querycache.NewRedis(rdb, "t", querycache.RedisOptions{Timeout: 100 * time.Millisecond, Backoff: time.Hour})
			c := querycache.New(b, querycache.Options{})
			start := time.Now()
			res, err := c.Lookup(ctx, querycache.Query{Scope: "user:1", Key: "k", Version: 1})
			if err != nil || res.Outcome != querycache.Miss {
				t.Fatalf("Lookup = %+v, %v; want a miss", res, err)
			}
			if d := time.Since(start); d > time.Second {
				t.Fatalf("the first lookup took %v", d)
			}
			start = time.Now()
			c.Put(ctx, querycache.Query{Scope: "user:1", Key: "k", Version: 1}, nil, []byte("x"), time.Time{})
			if _, l := b.Get(ctx, "user:1", "k", 1); l != querycache.Unavailable {
				t.Fatalf("Get within the backoff = %v", l)
			}
			if d := time.Since(start); d > 20*time.Millisecond {
				t.Fatalf("within the backoff, a store and a lookup took %v", d)
			}
			if st := c.Stats(); st.Misses != 1 || st.Unavailable != 1 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}
