package provision

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/amemory/memory-operator/internal/shortterm/redisstore"
)

// RedisConn is a Redis server and a login on it.
type RedisConn struct {
	Address, Username, Password string
}

func (c RedisConn) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: c.Address, Username: c.Username, Password: c.Password,
		DialTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, MaxRetries: 1})
}

// RedisCommands are what a store's Redis user (Names.RedisUser) may run, found by
// running the short-term conformance suite as that user against Redis 7.0: the
// scripts of redisstore (EVALSHA, with EVAL when the server lost them) and the
// commands they call, and the connection's own handshake (HELLO, AUTH, PING, CLIENT
// SETINFO through @connection). Keys are confined to the store's prefix
// (mem:<tenant>:*) by the user's key pattern, which Redis also applies to the commands
// a script calls. ZRANGEBYLEX pages an export through the store's own index of its
// sessions (<prefix>sessions). Nothing else: no KEYS or SCAN, no FLUSH*, no CONFIG,
// no ACL, no pub/sub channels, and no SCRIPT FLUSH.
var RedisCommands = []string{
	"+@connection", "-client|kill", "-client|list", "-client|pause", "-client|no-evict", "-client|unpause",
	"+evalsha", "+eval", "+script|load", "+script|exists",
	"+del", "+hget", "+hmget", "+hset", "+llen", "+lpush", "+lrange", "+ltrim", "+pexpire", "+pttl",
	"+rpush", "+sadd", "+smembers", "+srem", "+zadd", "+zrangebylex", "+zrangebyscore", "+zrem",
}

// redisOwnerKey marks which store owns a tenant's keys and user, outside the store's
// own key pattern (its user cannot change it).
func redisOwnerKey(tenant string) string { return "memory-operator:owner:" + tenant }

// EnsureRedisTenant makes the store's Redis user, limited to its key prefix and the
// commands of RedisCommands, with password (and previous, kept during a rotation until
// the next call without it), and checks the login works. A tenant another store owns
// (its owner mark) is TenantConflict, and nothing is touched.
func EnsureRedisTenant(ctx context.Context, admin RedisConn, names Names, owner, password, previous string) error {
	what := "Redis " + admin.Address
	c := admin.client()
	defer func() { _ = c.Close() }()
	if err := claimRedisTenant(ctx, c, names, owner); err != nil {
		return classifyRedis(what, err)
	}
	rules := []string{"reset", "on", ">" + password}
	if previous != "" && previous != password {
		rules = append(rules, ">"+previous)
	}
	rules = append(rules, "~"+redisstore.Prefix(names.Tenant)+"*", "resetchannels", "-@all")
	rules = append(rules, RedisCommands...)
	args := []any{"ACL", "SETUSER", names.RedisUser}
	for _, r := range rules {
		args = append(args, r)
	}
	if err := c.Do(ctx, args...).Err(); err != nil {
		// Redis quotes a modifier it refuses: never let a password reach a status.
		msg := err.Error()
		for _, p := range []string{password, previous} {
			if p != "" {
				msg = strings.ReplaceAll(msg, p, "***")
			}
		}
		return classifyRedis(what, fmt.Errorf("ACL SETUSER %s: %s", names.RedisUser, msg))
	}
	login := RedisConn{Address: admin.Address, Username: names.RedisUser, Password: password}
	lc := login.client()
	defer func() { _ = lc.Close() }()
	if err := lc.Ping(ctx).Err(); err != nil {
		return classifyRedis(what, fmt.Errorf("the store's user %s cannot log in: %w", names.RedisUser, err))
	}
	return nil
}

// claimRedisTenant sets the tenant's owner mark to owner unless another store holds it.
func claimRedisTenant(ctx context.Context, c *redis.Client, names Names, owner string) error {
	key := redisOwnerKey(names.Tenant)
	if err := c.SetNX(ctx, key, owner, 0).Err(); err != nil {
		return err
	}
	have, err := c.Get(ctx, key).Result()
	if err != nil {
		return err
	}
	if have != owner {
		return &Error{Reason: ReasonTenantConflict, Err: fmt.Errorf("redis: tenant %s belongs to another store (%s)", names.Tenant, have)}
	}
	return nil
}

// DeleteRedisTenant removes the store's user, its keys and its owner mark. A tenant
// another store owns is TenantConflict and is left alone; one never made is no error.
func DeleteRedisTenant(ctx context.Context, admin RedisConn, names Names, owner string) error {
	what := "Redis " + admin.Address
	c := admin.client()
	defer func() { _ = c.Close() }()
	key := redisOwnerKey(names.Tenant)
	have, err := c.Get(ctx, key).Result()
	switch {
	case errors.Is(err, redis.Nil):
		have = owner // nothing claimed it: the user and keys, if any, are this store's leftovers
	case err != nil:
		return classifyRedis(what, err)
	}
	if have != owner {
		return classifyRedis(what, &Error{Reason: ReasonTenantConflict, Err: fmt.Errorf("redis: tenant %s belongs to another store (%s)", names.Tenant, have)})
	}
	// The user first: nothing writes new keys while they are removed.
	if err := c.Do(ctx, "ACL", "DELUSER", names.RedisUser).Err(); err != nil {
		return classifyRedis(what, err)
	}
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, redisstore.Prefix(names.Tenant)+"*", 1000).Result()
		if err != nil {
			return classifyRedis(what, err)
		}
		if len(keys) > 0 {
			if err := c.Unlink(ctx, keys...).Err(); err != nil {
				return classifyRedis(what, err)
			}
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	return classifyRedis(what, c.Del(ctx, key).Err())
}

// classifyRedis gives a Redis failure its reason.
func classifyRedis(what string, err error) error {
	if err == nil {
		return nil
	}
	var pe *Error
	if errors.As(err, &pe) {
		return err
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "WRONGPASS"), strings.Contains(msg, "NOAUTH"):
		return &Error{Reason: ReasonAuthenticationFailed, Err: fmt.Errorf("%s: %w", what, err)}
	case strings.Contains(msg, "NOPERM"):
		return &Error{Reason: ReasonPermissionDenied, Err: fmt.Errorf("%s: %w", what, err)}
	}
	return classify(what, err)
}
