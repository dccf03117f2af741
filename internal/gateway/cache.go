package gateway

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/amemory/memory-operator/internal/memory/service"
	"github.com/amemory/memory-operator/internal/querycache"
)

// The query cache: search results kept per scope and query for a while, served only
// while the scope is unchanged (service.SearchCache explains why a forgotten or
// superseded memory is never served from it). It sits in front of the searches of
// the native API, gRPC and MCP (/v1/search, a recall with a query and no
// recent_turns, search_memories); recall windows and LangGraph searches go to the
// store each time. The store's Redis holds it when the store has one (shared by the
// replicas), the gateway's memory otherwise.

// QueryCache configures the query cache.
type QueryCache struct {
	// QueryCacheTTL is how long a result may be served at most (0: no cache).
	QueryCacheTTL time.Duration
	// QueryCacheSemantic, above 0, also serves a query whose embedding is at least
	// this similar to a cached query's of the same scope and parameters.
	QueryCacheSemantic float64
	// QueryCacheMaxBytes bounds the in-process cache (0: querycache.DefaultMaxBytes).
	QueryCacheMaxBytes int64
}

// Register adds the query cache's flags.
func (c *QueryCache) Register(fs *flag.FlagSet) {
	fs.DurationVar(&c.QueryCacheTTL, "query-cache-ttl", 0, "serve a scope's search results from a cache for up to this long while the scope is unchanged (0: no cache)")
	fs.Float64Var(&c.QueryCacheSemantic, "query-cache-semantic-threshold", 0, "also serve a query whose embedding is at least this similar to a cached one's (0: exact queries only)")
	fs.Int64Var(&c.QueryCacheMaxBytes, "query-cache-max-bytes", 0, "most bytes of results the in-process cache holds (0: 16 MiB; with Redis, Redis's own memory limit applies)")
}

// Args renders c as the flags Register parses (unset values left out).
func (c QueryCache) Args() []string {
	var args []string
	if c.QueryCacheTTL > 0 {
		args = append(args, "--query-cache-ttl="+c.QueryCacheTTL.String())
	}
	if c.QueryCacheSemantic > 0 {
		args = append(args, "--query-cache-semantic-threshold="+strconv.FormatFloat(c.QueryCacheSemantic, 'g', -1, 64))
	}
	if c.QueryCacheMaxBytes > 0 {
		args = append(args, "--query-cache-max-bytes="+strconv.FormatInt(c.QueryCacheMaxBytes, 10))
	}
	return args
}

// Validate checks the query cache's settings.
func (c QueryCache) Validate() error {
	switch {
	case c.QueryCacheTTL < 0 || (c.QueryCacheTTL > 0 && c.QueryCacheTTL < time.Second):
		return fmt.Errorf("--query-cache-ttl %s: 0 (off) or at least 1s", c.QueryCacheTTL)
	case c.QueryCacheSemantic < 0 || c.QueryCacheSemantic >= 1:
		return fmt.Errorf("--query-cache-semantic-threshold %v: in [0, 1) (0: off)", c.QueryCacheSemantic)
	case c.QueryCacheSemantic > 0 && c.QueryCacheTTL == 0:
		return fmt.Errorf("--query-cache-semantic-threshold needs --query-cache-ttl")
	case c.QueryCacheMaxBytes < 0:
		return fmt.Errorf("--query-cache-max-bytes must be positive")
	}
	return nil
}

// useQueryCache puts the store's searches behind a cache on rdb (nil: in-process),
// with its counters in reg.
func (g *Gateway) useQueryCache(ctx context.Context, rdb *redis.Client) error {
	c := g.cfg.QueryCache
	if c.QueryCacheTTL == 0 {
		return nil
	}
	var b querycache.Backend = querycache.NewMemory(c.QueryCacheMaxBytes, nil)
	backend := "in-process"
	if rdb != nil {
		// The schema's epoch names the entries: a store made again under the same
		// name never meets the old one's.
		epoch, err := g.Memory.Store().ScopeVersionsEpoch(ctx)
		if err != nil {
			return fmt.Errorf("query cache: %w", err)
		}
		b = querycache.NewRedis(rdb, g.cfg.RedisTenant, querycache.RedisOptions{Namespace: epoch})
		backend = "Redis"
	}
	sc := service.NewSearchCache(g.Memory, querycache.New(b, querycache.Options{TTL: c.QueryCacheTTL, SemanticThreshold: c.QueryCacheSemantic}))
	g.Server.cache, g.Server.cacheBackend = sc, backend
	stat := func(name, help string, f func(querycache.Stats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "memory_gateway_query_cache_" + name + "_total", Help: help},
			func() float64 { return float64(f(sc.Stats())) })
	}
	g.reg.MustRegister(
		stat("hits", "Searches served from the query cache, the same query's entry.", func(s querycache.Stats) int64 { return s.Hits }),
		stat("semantic_hits", "Searches served from the query cache, a similar query's entry.", func(s querycache.Stats) int64 { return s.SemanticHits }),
		stat("misses", "Searches the query cache could not serve (searched and cached).", func(s querycache.Stats) int64 { return s.Misses }),
		stat("invalidations", "Query cache entries dropped because their scope changed since.", func(s querycache.Stats) int64 { return s.Invalidations }),
		stat("unavailable", "Query cache lookups Redis did not answer in time (searched without the cache).", func(s querycache.Stats) int64 { return s.Unavailable }),
	)
	g.log.Info("Query cache", "backend", backend, "ttl", c.QueryCacheTTL.String(), "semanticThreshold", c.QueryCacheSemantic)
	return nil
}

// StatsResponse is GET /v1/stats: how the gateway's tiers are doing.
type StatsResponse struct {
	// QueryCache is present while the cache is on.
	QueryCache *QueryCacheStats `json:"query_cache,omitempty"`
	// ShortTerm is where sessions are kept: Redis or PostgreSQL.
	ShortTerm string `json:"short_term"`
}

// QueryCacheStats are the query cache's counters since the gateway started.
type QueryCacheStats struct {
	Backend       string  `json:"backend"`
	TTLSeconds    float64 `json:"ttl_seconds"`
	Hits          int64   `json:"hits"`
	SemanticHits  int64   `json:"semantic_hits"`
	Misses        int64   `json:"misses"`
	Invalidations int64   `json:"invalidations"`
	Unavailable   int64   `json:"unavailable"`
	// HitRate is (hits + semantic_hits) / all lookups (0 before any).
	HitRate float64 `json:"hit_rate"`
}

func (s *Server) stats(w http.ResponseWriter, _ *http.Request, _ *Key) error {
	out := StatsResponse{ShortTerm: "PostgreSQL"}
	if s.redisSessions {
		out.ShortTerm = "Redis"
	}
	if s.cache != nil {
		st := s.cache.Stats()
		out.QueryCache = &QueryCacheStats{Backend: s.cacheBackend, TTLSeconds: s.cfg.QueryCacheTTL.Seconds(), Hits: st.Hits, SemanticHits: st.SemanticHits,
			Misses: st.Misses, Invalidations: st.Invalidations, Unavailable: st.Unavailable, HitRate: st.HitRate()}
	}
	return writeJSON(w, http.StatusOK, out)
}
