package querycache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is the backend shared by a store's gateway replicas: one hash per entry,
// mem:<tenant>:qc:<namespace>:<hash of scope and key>, holding the version (v) and
// the data (d), with the entry's expiry as the key's TTL. Two Lua scripts keep each
// lookup and store one atomic round trip, and call only commands the store's Redis
// user already has (HMGET, HGET, HSET, PEXPIRE, DEL; provision.RedisCommands).
//
// A Redis that does not answer within Timeout is a miss (Get: Unavailable) and a
// store skipped, never an error; after a failure the backend does not try again for
// Backoff, so a Redis that is down costs searches nothing but the first timeout.
// Each call runs in a goroutine of its own and is abandoned at the timeout, since a
// go-redis client without ContextTimeoutEnabled waits for its own ReadTimeout
// whatever the context says; an abandoned call ends by that timeout.
type Redis struct {
	rdb     redis.UniversalClient
	prefix  string
	timeout time.Duration
	backoff time.Duration
	// downUntil is when to try Redis again after a failure (Unix nanoseconds).
	downUntil atomic.Int64
}

// RedisOptions configure the Redis backend.
type RedisOptions struct {
	// Namespace separates caches within the tenant's prefix: the store's
	// pgstore.Store.ScopeVersionsEpoch, so that a store made again under the same
	// name never meets the entries of the one before.
	Namespace string
	// Timeout bounds each call (0: DefaultRedisTimeout).
	Timeout time.Duration
	// Backoff is how long a failure keeps the backend from trying Redis (0:
	// DefaultRedisBackoff).
	Backoff time.Duration
}

// Defaults of RedisOptions.
const (
	DefaultRedisTimeout = 50 * time.Millisecond
	DefaultRedisBackoff = time.Second
)

// RedisPrefix is where a tenant's query cache lives: inside its store's prefix
// (mem:<tenant>:, which its Redis user is limited to).
func RedisPrefix(tenant string) string { return "mem:" + tenant + ":qc:" }

// NewRedis returns the Redis backend of tenant's store over rdb (connected as the
// store's own Redis user).
func NewRedis(rdb redis.UniversalClient, tenant string, o RedisOptions) *Redis {
	if o.Timeout <= 0 {
		o.Timeout = DefaultRedisTimeout
	}
	if o.Backoff <= 0 {
		o.Backoff = DefaultRedisBackoff
	}
	return &Redis{rdb: rdb, prefix: RedisPrefix(tenant) + o.Namespace + ":", timeout: o.Timeout, backoff: o.Backoff}
}

// entryKey hashes scope and key: any scope and key make a key of fixed length, and
// no two pairs share one.
func (r *Redis) entryKey(scope, key string) string {
	h := sha256.New()
	h.Write([]byte(strconv.Itoa(len(scope))))
	h.Write([]byte{0})
	h.Write([]byte(scope))
	h.Write([]byte(key))
	return r.prefix + hex.EncodeToString(h.Sum(nil)[:20])
}

// getScript: KEYS entry; ARGV version. Returns {1, data} for the version asked,
// {2} after dropping an older one, {0} otherwise.
var getScript = redis.NewScript(`
local r = redis.call('HMGET', KEYS[1], 'v', 'd')
if not r[1] then return {0} end
local v, want = tonumber(r[1]), tonumber(ARGV[1])
if v == want then return {1, r[2]} end
if v < want then
	redis.call('DEL', KEYS[1])
	return {2}
end
return {0}
`)

// setScript: KEYS entry; ARGV version, data, ttl in ms. An entry of a newer version
// stays.
var setScript = redis.NewScript(`
local v = redis.call('HGET', KEYS[1], 'v')
if v and tonumber(v) > tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'd', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`)

// errTimeout is a call abandoned at the backend's timeout.
var errTimeout = errors.New("querycache: redis did not answer in time")

// call runs fn with the backend's timeout, unless Redis failed within the backoff;
// a failure starts the backoff.
func (r *Redis) call(ctx context.Context, fn func(ctx context.Context) error) error {
	if time.Now().UnixNano() < r.downUntil.Load() {
		return errTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		err = errTimeout
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		r.downUntil.Store(time.Now().Add(r.backoff).UnixNano())
	}
	return err
}

// Get implements Backend.
func (r *Redis) Get(ctx context.Context, scope, key string, version int64) ([]byte, Lookup) {
	var res []any
	err := r.call(ctx, func(ctx context.Context) error {
		var err error
		res, err = getScript.Run(ctx, r.rdb, []string{r.entryKey(scope, key)}, version).Slice()
		return err
	})
	if err != nil || len(res) == 0 {
		return nil, Unavailable
	}
	switch code, _ := res[0].(int64); code {
	case 1:
		if len(res) == 2 {
			if s, ok := res[1].(string); ok {
				return []byte(s), Found
			}
		}
		return nil, Missing
	case 2:
		return nil, Stale
	}
	return nil, Missing
}

// Set implements Backend.
func (r *Redis) Set(ctx context.Context, scope, key string, version int64, data []byte, expiresAt time.Time) {
	ttl := time.Until(expiresAt).Milliseconds()
	if ttl <= 0 {
		return
	}
	_ = r.call(ctx, func(ctx context.Context) error {
		return setScript.Run(ctx, r.rdb, []string{r.entryKey(scope, key)}, version, data, ttl).Err()
	})
}
