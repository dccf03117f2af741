package main

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"time"

	"github.com/amemory/memory-operator/internal/gateway"
	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/vector/engine"
)

// sessionsOptions configure the sessions section.
type sessionsOptions struct {
	calls    int // calls per row
	sessions int // distinct sessions the calls spread over
}

// benchSessions measures the short-term tier through the gateway: appending a turn
// and reading a session's last 20 turns at 1, 8 and 32 clients, with the sessions in
// Redis (as the store's own Redis user) and in the store's PostgreSQL, the same calls
// to two gateway processes over one store, side by side.
func (e *env) benchSessions(ctx context.Context, o sessionsOptions) error {
	addr := os.Getenv("MEMORY_TEST_REDIS_ADDR")
	if addr == "" {
		return errors.New("MEMORY_TEST_REDIS_ADDR unset: run through `make bench` (SERVICES with redis)")
	}
	fmt.Printf("\nSessions benchmark: %d calls a row over %d sessions, through the gateway, sessions in Redis (the store's own user) and in PostgreSQL\n\n", o.calls, o.sessions)
	st, _, cleanup, err := e.gwStore(ctx, engine.Postgres)
	if err != nil {
		return err
	}
	defer cleanup()
	admin := provision.RedisConn{Address: addr, Username: os.Getenv("MEMORY_TEST_REDIS_USER"), Password: os.Getenv("MEMORY_TEST_REDIS_PASSWORD")}
	const password = "bench-redis-password"
	if err := provision.EnsureRedisTenant(ctx, admin, st.names, "bench", password, ""); err != nil {
		return err
	}
	defer func() { _ = provision.DeleteRedisTenant(context.Background(), admin, st.names, "bench") }()

	cfg := gateway.Config{StoreNamespace: "bench", StoreName: st.names.Tenant, Schema: st.names.Schema,
		Vectors: st.vectors, Dimension: gwDim, Metric: "COSINE", Embedder: "Hashing",
		DedupThreshold: seedDedup, RateLimit: 1e9, RateBurst: 1 << 30, MaxBodyBytes: gateway.DefaultMaxBodyBytes,
		// Both tiers on: the query cache too (in Redis for the Redis gateway), for
		// the RSS at 32 clients.
		QueryCache: gateway.QueryCache{QueryCacheTTL: 5 * time.Minute}}
	pgGw, err := e.startGatewayProcess(ctx, st.agentURI, cfg)
	if err != nil {
		return err
	}
	defer pgGw.stop()
	cfg.RedisAddress, cfg.RedisUser, cfg.RedisTenant = addr, st.names.RedisUser, st.names.Tenant
	cfg.StoreNamespace = "bench-redis"
	redisGw, err := e.startGatewayProcessEnv(ctx, st.agentURI, []string{gateway.EnvRedisPassword + "=" + password}, cfg)
	if err != nil {
		return err
	}
	defer redisGw.stop()

	via := map[string]*gwCaller{
		"Redis":      {url: redisGw.url, key: redisGw.key, hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}},
		"PostgreSQL": {url: pgGw.url, key: pgGw.key, hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}},
	}
	session := func(r *mrand.Rand) string { return fmt.Sprintf("session:b%d", r.IntN(o.sessions)) }
	appendTurn := func(c *gwCaller) func(context.Context, *mrand.Rand) error {
		return func(ctx context.Context, r *mrand.Rand) error {
			s := session(r)
			return c.call(ctx, "POST", "/v1/sessions/"+s+"/turns", gateway.AppendRequest{Owner: "user:" + s[len("session:"):],
				Turns: []gateway.TurnIn{{Role: "user", Content: gateway.JSONValue(fmt.Sprintf("%q", gwText(r, 12)))}}}, nil)
		}
	}
	readWindow := func(c *gwCaller) func(context.Context, *mrand.Rand) error {
		return func(ctx context.Context, r *mrand.Rand) error {
			return c.call(ctx, "GET", "/v1/sessions/"+session(r)+"?last=20", nil, nil)
		}
	}
	cachedSearch := func(c *gwCaller) func(context.Context, *mrand.Rand) error {
		return func(ctx context.Context, r *mrand.Rand) error {
			return c.call(ctx, "POST", "/v1/search", gateway.SearchRequest{Scope: fmt.Sprintf("user:b%d", r.IntN(o.sessions)), Query: gwWords[r.IntN(4)], TopK: 10}, nil)
		}
	}
	// Every session holds turns before the reads: one append round first.
	for _, c := range via {
		for i := range o.sessions {
			s := fmt.Sprintf("session:b%d", i)
			if err := c.call(ctx, "POST", "/v1/sessions/"+s+"/turns", gateway.AppendRequest{Owner: "user:b" + fmt.Sprint(i),
				Turns: []gateway.TurnIn{{Role: "user", Content: gateway.JSONValue(`"hello"`)}}}, nil); err != nil {
				return err
			}
		}
	}
	fmt.Printf("%-24s %8s %22s %22s %12s\n", "", "clients", "Redis p50 / p99", "PostgreSQL p50 / p99", "p50 ratio")
	for _, row := range []struct {
		name string
		f    func(c *gwCaller) func(context.Context, *mrand.Rand) error
	}{{"append a turn", appendTurn}, {"read the last 20 turns", readWindow}, {"search (query cache)", cachedSearch}} {
		for _, clients := range []int{1, 8, 32} {
			res := map[string]gwResult{}
			for _, name := range []string{"Redis", "PostgreSQL"} {
				r, err := runLoad(ctx, clients, o.calls, 1, row.f(via[name]))
				if err != nil {
					return fmt.Errorf("%s, %s: %w", row.name, name, err)
				}
				res[name] = r
			}
			rd, pg := res["Redis"], res["PostgreSQL"]
			fmt.Printf("%-24s %8d %10.2f / %6.2f ms %10.2f / %6.2f ms %11.2fx\n", row.name, clients,
				msf(rd.p50), msf(rd.p99), msf(pg.p50), msf(pg.p99), ratio(rd.p50, pg.p50))
		}
	}
	fmt.Printf("\ngateway peak RSS: Redis %d MiB, PostgreSQL %d MiB (target <= 128 MiB at 32 clients)\n",
		redisGw.hwmKB()/1024, pgGw.hwmKB()/1024)
	fmt.Println("ratio: Redis's p50 over PostgreSQL's (below 1: Redis is faster).")
	return nil
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
