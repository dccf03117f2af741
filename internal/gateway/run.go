package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/redis/go-redis/v9"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/memory/service"
	"github.com/amemory/memory-operator/internal/shortterm/redisstore"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
)

// Secrets are the gateway's credentials, from the environment.
type Secrets struct {
	PostgresURI    string
	EmbedderAPIKey string
	// RedisPassword is the store's Redis user's (EnvRedisPassword).
	RedisPassword string
	// Milvus is the store's own Milvus user (engine.EnvMilvusUsername/Password).
	Milvus engine.Login
}

// SecretsFromEnv reads Secrets from EnvPostgresURI, EnvEmbedderAPIKey and the Milvus
// login's variables.
func SecretsFromEnv() Secrets {
	return Secrets{PostgresURI: os.Getenv(EnvPostgresURI), EmbedderAPIKey: os.Getenv(EnvEmbedderAPIKey), Milvus: engine.LoginFromEnv(),
		RedisPassword: os.Getenv(EnvRedisPassword)}
}

// Background work intervals (variables: tests shorten them).
var (
	keysReloadEvery = 2 * time.Second
	drainEvery      = time.Second
	// drainMinAge leaves fresh index work to its writer, which indexes right after
	// committing; the drainer takes over what is older.
	drainMinAge  = 10 * time.Second
	pendingEvery = 10 * time.Second
	// termsEvery is how often the gateway makes the lexical postings restores and
	// imports owe (a search makes them too, when it gets there first).
	termsEvery = 5 * time.Second
)

// drainBatch is how much pending index work one drain step takes.
const drainBatch = 100

// Retrying failed index work (variables: tests shorten them). drainBackoff is the
// wait before the n-th retry of one memory's work: 1 s doubling to 10 min; after
// drainMaxAttempts failed attempts (about 40 minutes) the work is parked, listed with
// its error until retried (GET /v1/index/pending, memoryctl pending). While a backend
// is down (the index, PostgreSQL, the embedder not answering at all) no memory is
// charged an attempt: the drainer itself waits, drainPause, and tries again.
var (
	drainMaxAttempts = 12
	drainBackoff     = func(n int) time.Duration {
		return min(time.Second<<min(n-1, 20), 10*time.Minute)
	}
	drainPause = func(n int) time.Duration {
		return min(time.Second<<min(n-1, 20), time.Minute)
	}
)

// Gateway is a running gateway process's parts (tests drive it in-process).
type Gateway struct {
	Server *Server
	Memory *service.Memory
	pool   *pgxpool.Pool
	index  *lazyIndex
	reg    *prometheus.Registry
	cfg    Config
	log    *slog.Logger
	// redis is the short-term tier's client (nil: sessions in PostgreSQL).
	redis *redis.Client
	// grpcAddr is where the gRPC API listens, once it does (a string).
	grpcAddr atomic.Value

	// The drainer's own backoff after a backend failure (drain's goroutine only).
	drainFailures    int
	drainPausedUntil time.Time
}

// Open builds the gateway from its configuration: the store's pool (as the store's
// own role), its vector index and embedder, the memory layer and the HTTP handler. It
// contacts no backend: a gateway whose database or index is down still starts, is not
// ready until PostgreSQL answers, and indexes what it acknowledged once the index is
// back. The one exception is a standalone gateway asked for --embedder-roles=auto or
// --dedup-threshold=auto: it asks the embedder at startup (resolveEmbedder) and does
// not start without an answer, rather than guess a convention or run with an
// uncalibrated threshold. The operator always passes both resolved.
func Open(ctx context.Context, cfg Config, sec Secrets, log *slog.Logger) (*Gateway, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if sec.PostgresURI == "" {
		return nil, fmt.Errorf("no PostgreSQL connection: set %s", EnvPostgresURI)
	}
	pcfg, err := pgxpool.ParseConfig(sec.PostgresURI)
	if err != nil {
		return nil, errors.New("PostgreSQL: the connection URI does not parse") // never echo it: it holds the password
	}
	pcfg.MaxConns = max(pcfg.MaxConns, 32)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL: %w", err)
	}
	spec := vector.Spec{Dimension: cfg.Dimension, Metric: vector.Metric(strings.ToUpper(cfg.Metric))}
	if err := spec.Validate(); err != nil {
		pool.Close()
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	emb, err := resolveEmbedder(ctx, &cfg, sec, log)
	if err != nil {
		pool.Close()
		return nil, err
	}
	li := &lazyIndex{spec: spec}
	li.dial = func(ctx context.Context) (vector.Index, func(), error) {
		return cfg.Open(ctx, pool, cfg.Schema, spec, sec.Milvus)
	}
	if !cfg.External() {
		// An index in the store's own PostgreSQL needs no dialling: open it now.
		if li.ix, li.closeFn, err = li.dial(ctx); err != nil {
			pool.Close()
			return nil, err
		}
	}
	store := pgstore.New(pool, cfg.Schema).WithVectorsTable(cfg.Table())
	opts := service.Options{InputLimit: cfg.InputLimit()}
	if t, ok := li.ix.(service.TxIndex); ok {
		opts.TxIndex = t // in the store's schema, on the same pool: batches index in their transaction
	}
	mem, err := service.NewWith(store, li, emb, opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv, err := NewServer(mem, cfg, log, newMetrics(reg))
	if err != nil {
		pool.Close()
		return nil, err
	}
	srv.ready = func(ctx context.Context) error {
		v, err := pgstore.Version(ctx, pool, cfg.Schema)
		if err != nil {
			return err
		}
		if v < pgstore.LatestVersion {
			return fmt.Errorf("store schema %s is at version %d; this gateway needs %d (the operator migrates it)", cfg.Schema, v, pgstore.LatestVersion)
		}
		return nil
	}
	g := &Gateway{Server: srv, Memory: mem, pool: pool, index: li, reg: reg, cfg: cfg, log: log}
	if cfg.RedisAddress != "" {
		// The client's own messages (a dial that failed, again at each call while
		// Redis is down) go to the structured log, at debug: the 503s say it already.
		redis.SetLogger(redisLog{log})
		// Connected lazily: a Redis that is down makes session calls 503, nothing else.
		g.redis = redis.NewClient(&redis.Options{Addr: cfg.RedisAddress, Username: cfg.RedisUser, Password: sec.RedisPassword,
			DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, MaxRetries: 1})
		srv.UseShortTerm(redisstore.New(g.redis, cfg.RedisTenant, cfg.Options()))
		srv.redisSessions = true
	}
	if err := g.useQueryCache(ctx, g.redis); err != nil {
		g.Close()
		return nil, err
	}
	log.Info("Short-term tier", "backend", g.shortTermBackend(), "sessionTTL", cfg.Options().TTL.String(), "promote", cfg.Promote)
	return g, nil
}

func (g *Gateway) shortTermBackend() string {
	if g.redis != nil {
		return "Redis"
	}
	return "PostgreSQL"
}

// resolveEmbedder builds the store's embedder, bounded per caller, with its roles
// convention (Auto resolved by probing the server) and, for --dedup-threshold=auto,
// the threshold calibrated for it (cfg is updated with both).
func resolveEmbedder(ctx context.Context, cfg *Config, sec Secrets, log *slog.Logger) (embed.Embedder, error) {
	var emb embed.Embedder = embed.NewHashing(cfg.Dimension)
	if cfg.Embedder == "OpenAI" {
		ecfg := embed.Config{BaseURL: cfg.EmbedderEndpoint, Model: cfg.EmbeddingModel, Dimension: cfg.Dimension, APIKey: sec.EmbedderAPIKey, Roles: cfg.EmbedderRoles}
		if ecfg.Roles.Convention == embed.ConventionAuto {
			roles, err := embed.DetectRoles(ctx, ecfg)
			if err != nil {
				return nil, fmt.Errorf("--embedder-roles=auto: %w", err)
			}
			ecfg.Roles = roles
		}
		o, err := embed.NewOpenAI(ecfg)
		if err != nil {
			return nil, err
		}
		emb = o
	}
	cfg.EmbedderRoles = emb.Roles()
	log.Info("Embedder", "model", emb.Model(), "dimension", emb.Dimension(), "roles", emb.Roles().String())
	// Every key gets its own share of the embedder, each call its time (see route).
	emb = embed.NewBounded(emb, embed.BoundOptions{PerCaller: cfg.EmbedderConcurrency, Timeout: cfg.EmbedderTimeout})
	if cfg.DedupAuto {
		c, err := embed.Calibrate(ctx, emb)
		if err != nil {
			return nil, fmt.Errorf("--dedup-threshold=auto: %w", err)
		}
		cfg.DedupThreshold, cfg.DedupAuto = c.Threshold, false
		log.Info("Calibrated the near-duplicate threshold", "dedupThreshold", c.Threshold, "distinctMax", c.DistinctMax,
			"distinctP999", c.DistinctP999, "distinctP99", c.DistinctP99, "restatementsFolded", c.RestatementsFolded,
			"restatements", c.Restatements, "model", c.Model, "roles", c.Roles.String())
	}
	return emb, nil
}

// Close releases the backends.
func (g *Gateway) Close() {
	if g.redis != nil {
		_ = g.redis.Close()
	}
	g.index.close()
	g.pool.Close()
}

// Background runs the gateway's background work until ctx ends: keys reload, the
// pending-index drainer and the backlog metrics.
func (g *Gateway) Background(ctx context.Context) {
	var wg sync.WaitGroup
	every := func(d time.Duration, f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(d)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					f()
				}
			}
		}()
	}
	var lastKeyErr string
	every(keysReloadEvery, func() {
		err := g.Server.ReloadKeys()
		if msg := errorText(err); msg != lastKeyErr {
			if err != nil {
				g.log.Error("keys file refused; the keys in use stay", "error", msg)
			} else {
				g.log.Info("keys reloaded", "keys", g.Server.keys.count())
			}
			lastKeyErr = msg
		}
	})
	every(drainEvery, func() { g.drain(ctx) })
	every(termsEvery, func() { g.indexTerms(ctx) })
	every(pendingEvery, func() { g.pendingMetrics(ctx) })
	every(sweepEvery, func() { g.sweepSessions(ctx) })
	wg.Wait()
}

// drain works off due pending index work until none is left or a backend fails;
// after a backend failure it waits (drainPause, growing) before trying again.
func (g *Gateway) drain(ctx context.Context) {
	if time.Now().Before(g.drainPausedUntil) {
		return
	}
	for ctx.Err() == nil && g.index.available() {
		res, err := g.Memory.DrainPending(ctx, service.DrainOptions{Batch: drainBatch, MinAge: drainMinAge,
			Retry: pgstore.RetryPolicy{Backoff: drainBackoff, MaxAttempts: drainMaxAttempts}})
		m := g.Server.metrics
		m.drained.WithLabelValues("done").Add(float64(res.Done))
		m.drained.WithLabelValues("failed").Add(float64(res.Failed))
		m.drained.WithLabelValues("parked").Add(float64(res.Parked))
		if res.Parked > 0 {
			g.log.Warn("background indexing parked memories that kept failing", "parked", res.Parked)
		}
		if err != nil {
			g.drainFailures++
			pause := drainPause(g.drainFailures)
			g.drainPausedUntil = time.Now().Add(pause)
			if ctx.Err() == nil {
				g.log.Warn("background indexing failed; will retry", "retryIn", pause.String(), "error", err.Error())
			}
			return
		}
		g.drainFailures = 0
		if res.Done+res.Failed+res.Parked < drainBatch {
			return
		}
	}
}

// indexTerms makes the lexical postings that restores and imports left owed (see
// pgstore.Store.IndexPendingTerms), so that no agent's first search of a restored
// scope waits for them.
func (g *Gateway) indexTerms(ctx context.Context) {
	n, err := g.Memory.Store().IndexPendingTerms(ctx)
	if err != nil && ctx.Err() == nil {
		g.log.Warn("lexical indexing of restored scopes failed; will retry", "error", err.Error())
		return
	}
	if n > 0 {
		g.log.Info("indexed the words of restored or imported scopes", "scopes", n)
	}
}

func (g *Gateway) pendingMetrics(ctx context.Context) {
	st, err := g.Memory.Pending(ctx)
	if err != nil {
		return
	}
	g.Server.metrics.pending.Set(float64(st.Count))
	g.Server.metrics.pendingParked.Set(float64(st.Parked))
	if st.Count > 0 {
		g.Server.metrics.pendingOldest.Set(time.Since(st.Oldest).Seconds())
	} else {
		g.Server.metrics.pendingOldest.Set(0)
	}
}

// MetricsHandler serves the gateway's Prometheus metrics.
func (g *Gateway) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{})
}

// Run serves the gateway until ctx ends, then drains in-flight requests for up to
// cfg.ShutdownGrace.
func Run(ctx context.Context, cfg Config, sec Secrets, log *slog.Logger) error {
	g, err := Open(ctx, cfg, sec, log)
	if err != nil {
		return err
	}
	defer g.Close()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	return g.Serve(ctx, ln)
}

// Serve serves the API on ln (and metrics on cfg.MetricsListen) until ctx ends.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	go g.Background(bg)

	api := &http.Server{Handler: g.Server, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(g.log.Handler(), slog.LevelWarn)}
	if g.cfg.TLSCertFile != "" {
		certs, err := newCertReloader(g.cfg.TLSCertFile, g.cfg.TLSKeyFile)
		if err != nil {
			return err
		}
		api.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.get}
		ln = tls.NewListener(ln, api.TLSConfig)
	}
	servers := []*http.Server{api}
	errc := make(chan error, 3)
	go func() { errc <- api.Serve(ln) }()
	if g.cfg.GRPCListen != "" {
		stop, err := g.serveGRPC(bg, api.TLSConfig, errc)
		if err != nil {
			_ = api.Close()
			return err
		}
		defer stop(g.cfg.ShutdownGrace)
	}
	if g.cfg.MetricsListen != "" {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", g.MetricsHandler())
		ms := &http.Server{Addr: g.cfg.MetricsListen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, ms)
		go func() { errc <- ms.ListenAndServe() }()
	}
	g.log.Info("gateway serving", "store", g.cfg.StoreNamespace+"/"+g.cfg.StoreName, "address", ln.Addr().String(),
		"tls", g.cfg.TLSCertFile != "", "vectorEngine", g.cfg.VectorEngine, "keys", g.Server.keys.count())
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), g.cfg.ShutdownGrace)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(sctx)
	}
	return nil
}

// lazyIndex connects to an external index (Milvus) on first use and again after a
// failed connect, so a gateway starts while Milvus is down and writes are
// acknowledged (their index work stays pending) until it is back.
//
// It also bounds every call (indexCallTimeout) and, after a failure, fails calls
// fast for indexRetryAfter before letting one through again: the Milvus SDK retries
// an unreachable server for about 20 s per call, and a write must not wait that long
// for an index it does not need in order to be acknowledged.
type lazyIndex struct {
	spec vector.Spec
	dial func(context.Context) (vector.Index, func(), error)

	mu        sync.Mutex
	ix        vector.Index
	closeFn   func()
	downUntil time.Time
	lastErr   error
}

// Index call bounds (variables: tests shorten them).
var (
	connectTimeout   = 5 * time.Second
	indexCallTimeout = 5 * time.Second
	indexRetryAfter  = 5 * time.Second
)

// errIndexDown is returned without calling the index while it is considered down.
var errIndexDown = errors.New("the vector index failed moments ago; not retried yet")

func (l *lazyIndex) get(ctx context.Context) (vector.Index, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ix != nil {
		return l.ix, nil
	}
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	ix, closeFn, err := l.dial(cctx)
	if err != nil {
		return nil, fmt.Errorf("connecting to the vector index: %w", err)
	}
	l.ix, l.closeFn = ix, closeFn
	return ix, nil
}

// available reports whether calls go through now.
func (l *lazyIndex) available() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !time.Now().Before(l.downUntil)
}

// do runs f against the index with the bounds above.
func (l *lazyIndex) do(ctx context.Context, f func(context.Context, vector.Index) error) error {
	l.mu.Lock()
	if time.Now().Before(l.downUntil) {
		err := l.lastErr
		l.mu.Unlock()
		return fmt.Errorf("%w: %w", errIndexDown, err)
	}
	l.mu.Unlock()
	ix, err := l.get(ctx)
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, indexCallTimeout)
		err = f(cctx, ix)
		cancel()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		l.downUntil, l.lastErr = time.Time{}, nil
	case ctx.Err() == nil: // the index failed, not the caller
		l.downUntil, l.lastErr = time.Now().Add(indexRetryAfter), err
	}
	return err
}

func (l *lazyIndex) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closeFn != nil {
		l.closeFn()
	}
}

func (l *lazyIndex) Spec() vector.Spec { return l.spec }

func (l *lazyIndex) Upsert(ctx context.Context, e []vector.Entry) error {
	return l.do(ctx, func(ctx context.Context, ix vector.Index) error { return ix.Upsert(ctx, e) })
}

func (l *lazyIndex) Delete(ctx context.Context, ids []string) error {
	return l.do(ctx, func(ctx context.Context, ix vector.Index) error { return ix.Delete(ctx, ids) })
}

func (l *lazyIndex) DeleteScope(ctx context.Context, scope string) error {
	return l.do(ctx, func(ctx context.Context, ix vector.Index) error { return ix.DeleteScope(ctx, scope) })
}

func (l *lazyIndex) Search(ctx context.Context, q vector.Query) (hits []vector.Hit, err error) {
	err = l.do(ctx, func(ctx context.Context, ix vector.Index) error {
		hits, err = ix.Search(ctx, q)
		return err
	})
	return hits, err
}

// SearchMany answers many searches in one index call (vector.SearchMany: one round
// trip where the index can, else a few at a time), under the index's bounds.
func (l *lazyIndex) SearchMany(ctx context.Context, qs []vector.Query) (out [][]vector.Hit, err error) {
	err = l.do(ctx, func(ctx context.Context, ix vector.Index) error {
		out, err = vector.SearchMany(ctx, ix, qs, 4)
		return err
	})
	return out, err
}

// errNoChangeTracker: the index cannot search what changed since a mark; the
// caller searches everything instead. Not a failure of the index.
var errNoChangeTracker = errors.New("the vector index cannot search what changed since a mark")

// tracker is the index as a vector.ChangeTracker. It never dials: the engines that
// track changes live in the store's database and are opened at startup, and a
// Milvus that is down must not cost each batch a connection attempt here.
func (l *lazyIndex) tracker() (vector.ChangeTracker, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ct, ok := l.ix.(vector.ChangeTracker); ok {
		return ct, nil
	}
	return nil, errNoChangeTracker
}

// Mark and SearchSince let a batch's near-duplicate check search while it waits
// for its locks (vector.ChangeTracker), under the index's bounds.
func (l *lazyIndex) Mark(ctx context.Context) (m vector.Mark, err error) {
	ct, err := l.tracker()
	if err != nil {
		return "", err
	}
	err = l.do(ctx, func(ctx context.Context, _ vector.Index) error {
		m, err = ct.Mark(ctx)
		return err
	})
	return m, err
}

func (l *lazyIndex) SearchSince(ctx context.Context, m vector.Mark, qs []vector.Query) (hits [][]vector.Hit, changed map[string]bool, err error) {
	ct, err := l.tracker()
	if err != nil {
		return nil, nil, err
	}
	err = l.do(ctx, func(ctx context.Context, _ vector.Index) error {
		hits, changed, err = ct.SearchSince(ctx, m, qs)
		return err
	})
	return hits, changed, err
}

// certReloader serves the TLS certificate, re-reading the files when they change (a
// rotated Secret needs no restart).
type certReloader struct {
	certFile, keyFile string
	mu                sync.Mutex
	cert              *tls.Certificate
	sum               [sha256.Size]byte // of the files the certificate was loaded from
	checked           time.Time
}

func newCertReloader(certFile, keyFile string) (*certReloader, error) {
	c := &certReloader{certFile: certFile, keyFile: keyFile}
	if _, err := c.get(nil); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cert != nil && time.Since(c.checked) < keysReloadEvery {
		return c.cert, nil
	}
	c.checked = time.Now()
	certPEM, err1 := os.ReadFile(c.certFile)
	keyPEM, err2 := os.ReadFile(c.keyFile)
	if err := errors.Join(err1, err2); err != nil {
		if c.cert != nil {
			return c.cert, nil // the Secret being swapped: keep serving the last good pair
		}
		return nil, fmt.Errorf("TLS certificate: %w", err)
	}
	sum := sha256.Sum256(append(append(certPEM, 0), keyPEM...))
	if c.cert != nil && sum == c.sum {
		return c.cert, nil
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if c.cert != nil {
			return c.cert, nil // mid-rotation (one file new, one old): keep serving the last good pair
		}
		return nil, fmt.Errorf("TLS certificate: %w", err)
	}
	c.cert, c.sum = &cert, sum
	return c.cert, nil
}

// sweepSessions promotes sessions about to expire (promote OnEnd) and purges the
// expired ones the backend does not expire itself. Replicas may sweep at once:
// promotion is idempotent.
func (g *Gateway) sweepSessions(ctx context.Context) {
	res, err := g.Server.Sessions().Sweep(ctx, time.Now())
	if err != nil && ctx.Err() == nil {
		g.log.Warn("session sweep: some sessions were not promoted; retried at the next sweep", "failed", res.Failed, "error", err.Error())
	}
	if res.Sessions > 0 || res.Purged > 0 {
		g.log.Info("sessions swept", "promotedSessions", res.Sessions, "promotedTurns", res.Promoted, "purged", res.Purged)
	}
}

// redisLog passes go-redis's messages to the gateway's log.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis client: "+fmt.Sprintf(format, v...))
}
