package redisstore_test

import (
	"context"
	"testing"

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
