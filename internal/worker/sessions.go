package worker

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/shortterm"
	"github.com/amemory/memory-operator/internal/shortterm/redisstore"
	"github.com/amemory/memory-operator/internal/snapshot"
)

// EnvRedisPassword holds the password of the store's Redis user (the connection
// Secret's redisPassword), for the Jobs that read or write its sessions.
const EnvRedisPassword = "MEMORY_REDIS_PASSWORD"

// SessionsConfig says where a store keeps its short-term sessions, for a snapshot
// that carries them and a restore that writes them back: in Redis, as the store's
// own user, under its key prefix, or (no address) in the store's PostgreSQL.
type SessionsConfig struct {
	// SessionTTL is the store's session TTL (0: shortterm.DefaultTTL): a session
	// is live until it has been idle this long.
	SessionTTL time.Duration
	// RedisAddress, RedisUser and RedisTenant: the store's Redis (its password in
	// EnvRedisPassword) and its key prefix mem:<tenant>:.
	RedisAddress, RedisUser, RedisTenant string
}

// Register adds the flags of c.
func (c *SessionsConfig) Register(fs *flag.FlagSet) {
	fs.DurationVar(&c.SessionTTL, "session-ttl", 0, "the store's session TTL (0: 30m)")
	fs.StringVar(&c.RedisAddress, "redis-address", "", "the store's Redis host:port, when it keeps sessions there (password in "+EnvRedisPassword+")")
	fs.StringVar(&c.RedisUser, "redis-user", "", "the store's Redis user")
	fs.StringVar(&c.RedisTenant, "redis-tenant", "", "the store's Redis key prefix is mem:<tenant>:")
}

// Args renders c as the flags Register parses (unset values left out).
func (c SessionsConfig) Args() []string {
	var args []string
	if c.SessionTTL > 0 {
		args = append(args, "--session-ttl="+c.SessionTTL.String())
	}
	for _, f := range [][2]string{{"redis-address", c.RedisAddress}, {"redis-user", c.RedisUser}, {"redis-tenant", c.RedisTenant}} {
		if f[1] != "" {
			args = append(args, "--"+f[0]+"="+f[1])
		}
	}
	return args
}

// validate checks c.
func (c SessionsConfig) validate() error {
	switch {
	case c.SessionTTL < 0:
		return errors.New("--session-ttl must be positive")
	case c.RedisAddress != "" && c.RedisTenant == "":
		return errors.New("--redis-address needs --redis-tenant")
	case c.RedisAddress == "" && (c.RedisUser != "" || c.RedisTenant != ""):
		return errors.New("--redis-user and --redis-tenant need --redis-address")
	}
	return nil
}

// open returns the store's short-term tier and a function that closes it.
func (c SessionsConfig) open(ctx context.Context, store *pgstore.Store, password string) (shortterm.Store, func(), error) {
	opts := shortterm.Options{TTL: c.SessionTTL}.WithDefaults()
	if c.RedisAddress == "" {
		return store.Sessions(opts), func() {}, nil
	}
	rdb := redis.NewClient(&redis.Options{Addr: c.RedisAddress, Username: c.RedisUser, Password: password,
		DialTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, nil, fmt.Errorf("the store's Redis at %s does not answer: %w", c.RedisAddress, err)
	}
	return redisstore.New(rdb, c.RedisTenant, opts), func() { _ = rdb.Close() }, nil
}

// packageSession is s as a package carries it.
func packageSession(s shortterm.Session) snapshot.Session {
	out := snapshot.Session{ID: s.ID, Owner: s.Owner, LastSeq: s.LastSeq, Promoted: s.Promoted, LastActive: s.LastActive,
		Turns: make([]snapshot.SessionTurn, len(s.Turns))}
	for i, t := range s.Turns {
		out.Turns[i] = snapshot.SessionTurn{Seq: t.Seq, Role: t.Role, Content: t.Content, At: t.At}
	}
	return out
}
