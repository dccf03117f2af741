package provision_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/shortterm"
	"github.com/amemory/memory-operator/internal/shortterm/redisstore"
	"github.com/amemory/memory-operator/internal/shortterm/shorttermtest"
	"github.com/amemory/memory-operator/internal/testutil"
)

func redisAdmin(t *testing.T) provision.RedisConn {
	t.Helper()
	s := testutil.RedisServer(t)
	return provision.RedisConn{Address: s.Addr, Username: s.User, Password: s.Password}
}

func redisTenant(t *testing.T, admin provision.RedisConn, owner, password string) provision.Names {
	t.Helper()
	names, err := provision.NamesFor(testutil.UniqueName("rd-"), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := provision.EnsureRedisTenant(t.Context(), admin, names, owner, password, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = provision.DeleteRedisTenant(context.Background(), admin, names, owner) })
	return names
}

func login(t *testing.T, addr, user, password string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: password})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestRedisTenantRunsTheShortTermTier: the store's own Redis user, with nothing but
// the privileges EnsureRedisTenant grants, passes the short-term conformance suite:
// the privileges are enough.
func TestRedisTenantRunsTheShortTermTier(t *testing.T) {
	admin := redisAdmin(t)
	// A server that lost its scripts (a restart, SCRIPT FLUSH) gets them again.
	if err := login(t, admin.Address, admin.Username, admin.Password).ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	shorttermtest.Run(t, func(t *testing.T, opts shortterm.Options) shortterm.Store {
		// Each case is a store of its own, with its own user.
		names := redisTenant(t, admin, "ns/a", "pw-a-123456")
		return redisstore.New(login(t, admin.Address, names.RedisUser, "pw-a-123456"), names.Tenant, opts)
	})
}

// TestRedisTenantIsolation: a store's user reads and writes its own keys only, runs no
// command it was not given, and another store's user cannot reach its keys.
func TestRedisTenantIsolation(t *testing.T) {
	admin := redisAdmin(t)
	a := redisTenant(t, admin, "ns/a", "pw-a-123456")
	b := redisTenant(t, admin, "ns/b", "pw-b-123456")
	ca := login(t, admin.Address, a.RedisUser, "pw-a-123456")
	ctx := t.Context()
	own := redisstore.Prefix(a.Tenant) + "t:session:1"
	if err := ca.RPush(ctx, own, "x").Err(); err != nil {
		t.Fatalf("write to its own key: %v", err)
	}
	for _, cmd := range [][]any{
		{"RPUSH", redisstore.Prefix(b.Tenant) + "t:session:1", "x"},
		{"LRANGE", redisstore.Prefix(b.Tenant) + "t:session:1", 0, -1},
		{"GET", "memory-operator:owner:" + a.Tenant},
		{"SET", "memory-operator:owner:" + a.Tenant, "me"},
		{"KEYS", "*"},
		{"SCAN", 0},
		{"FLUSHALL"},
		{"CONFIG", "GET", "*"},
		{"ACL", "LIST"},
		{"SCRIPT", "FLUSH"},
		{"PUBLISH", "c", "m"},
		{"EVAL", "return redis.call('GET', KEYS[1])", 1, redisstore.Prefix(b.Tenant) + "x"},
		{"EVAL", "return redis.call('FLUSHALL')", 0},
	} {
		err := ca.Do(ctx, cmd...).Err()
		if err == nil || !strings.Contains(err.Error(), "NOPERM") && !strings.Contains(err.Error(), "can't run this command") {
			t.Errorf("%v as %s: %v, want NOPERM", cmd, a.RedisUser, err)
		}
	}
	// A wrong password is refused.
	if err := login(t, admin.Address, a.RedisUser, "wrong-password").Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("login with a wrong password: %v", err)
	}
}

// TestRedisTenantLifecycle: a rotation keeps the previous password until the next
// reconcile; a tenant another store owns is TenantConflict and untouched; deletion
// removes the user and every key of the prefix, and nothing of another tenant.
func TestRedisTenantLifecycle(t *testing.T) {
	admin := redisAdmin(t)
	ctx := t.Context()
	names := redisTenant(t, admin, "ns/a", "first-password")
	other := redisTenant(t, admin, "ns/o", "other-password")
	if err := provision.EnsureRedisTenant(ctx, admin, names, "ns/a", "second-password", "first-password"); err != nil {
		t.Fatal(err)
	}
	for _, pw := range []string{"first-password", "second-password"} {
		if err := login(t, admin.Address, names.RedisUser, pw).Ping(ctx).Err(); err != nil {
			t.Fatalf("during the rotation, %s: %v", pw, err)
		}
	}
	if err := provision.EnsureRedisTenant(ctx, admin, names, "ns/a", "second-password", ""); err != nil {
		t.Fatal(err)
	}
	if err := login(t, admin.Address, names.RedisUser, "first-password").Ping(ctx).Err(); err == nil {
		t.Fatal("the previous password outlived the rotation")
	}
	err := provision.EnsureRedisTenant(ctx, admin, names, "ns/intruder", "third-password", "")
	if provision.ReasonOf(err) != provision.ReasonTenantConflict {
		t.Fatalf("another store's claim = %v, want TenantConflict", err)
	}
	if err := provision.DeleteRedisTenant(ctx, admin, names, "ns/intruder"); provision.ReasonOf(err) != provision.ReasonTenantConflict {
		t.Fatalf("another store's delete = %v, want TenantConflict", err)
	}
	c := login(t, admin.Address, names.RedisUser, "second-password")
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("the owner's user after the refused claim: %v", err)
	}
	for i := range 2500 {
		if err := c.RPush(ctx, redisstore.Prefix(names.Tenant)+"t:session:"+string(rune('a'+i%26))+strings.Repeat("x", i%50), "t").Err(); err != nil {
			t.Fatal(err)
		}
	}
	oc := login(t, admin.Address, other.RedisUser, "other-password")
	if err := oc.RPush(ctx, redisstore.Prefix(other.Tenant)+"t:session:1", "kept").Err(); err != nil {
		t.Fatal(err)
	}
	if err := provision.DeleteRedisTenant(ctx, admin, names, "ns/a"); err != nil {
		t.Fatal(err)
	}
	ac := login(t, admin.Address, admin.Username, admin.Password)
	if n, err := ac.Keys(ctx, redisstore.Prefix(names.Tenant)+"*").Result(); err != nil || len(n) != 0 {
		t.Fatalf("keys left after the delete: %d, %v", len(n), err)
	}
	if err := login(t, admin.Address, names.RedisUser, "second-password").Ping(ctx).Err(); err == nil {
		t.Fatal("the user outlived the delete")
	}
	if n, err := ac.LLen(ctx, redisstore.Prefix(other.Tenant)+"t:session:1").Result(); err != nil || n != 1 {
		t.Fatalf("the other tenant's key after the delete: %d, %v", n, err)
	}
	if err := provision.DeleteRedisTenant(ctx, admin, names, "ns/a"); err != nil {
		t.Fatalf("a second delete: %v", err)
	}
}
