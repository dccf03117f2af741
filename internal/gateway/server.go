// Package gateway is the memory gateway: the HTTP API a store's agents call to
// remember, search, recall and forget, over the memory layer (package service). It
// serves three ways in over one set of rules: a native JSON API under /v1, the
// LangGraph Store API under /store, and MCP at /mcp. Every call is authenticated with
// an API key and confined to the scopes the key allows; no call reads or writes
// outside them, and no search runs without a scope.
//
// It knows nothing of Kubernetes: the operator deploys it (memory-operator gateway)
// with a keys file and the store's own database role.
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/langgraphns"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/service"
)

// Server is the gateway's HTTP handler over one store's memory layer.
type Server struct {
	mem     *service.Memory
	keys    *keyRing
	ns      *langgraphns.Mapper
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	// halfLives rank search results by effective score, as recall does.
	halfLives memory.HalfLives

	limiters sync.Map // key name -> *rate.Limiter
	mux      *http.ServeMux
	// ready reports whether the backends answer (readyz).
	ready func(ctx context.Context) error
	// sessions is the short-term tier (sessions.go); redisSessions says it is Redis.
	sessions      *service.Sessions
	redisSessions bool
	// cache, when set, serves searches (cache.go), from cacheBackend.
	cache        *service.SearchCache
	cacheBackend string
}

// NewServer builds the handler. keysFile is loaded now; a missing or invalid file is
// an error (the gateway does not start without keys).
func NewServer(mem *service.Memory, cfg Config, log *slog.Logger, m *metrics) (*Server, error) {
	cfg = cfg.WithDefaults()
	keys, err := loadKeyRing(cfg.KeysFile)
	if err != nil {
		return nil, err
	}
	ns, err := langgraphns.New(cfg.NamespaceRules)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.NewJSONHandler(io.Discard, nil))
	}
	if m == nil {
		m = newMetrics(nil)
	}
	s := &Server{mem: mem, keys: keys, ns: ns, cfg: cfg, log: log, metrics: m, halfLives: memory.DefaultHalfLives()}
	s.ready = func(ctx context.Context) error {
		_, err := mem.Store().ServerTime(ctx)
		return err
	}
	s.UseShortTerm(mem.Store().Sessions(cfg.Options()))
	s.routes()
	return s, nil
}

// ReloadKeys re-reads the keys file if it changed. The run loop calls it every few
// seconds; a bad file keeps the keys in use and is reported.
func (s *Server) ReloadKeys() error {
	err := s.keys.reload(false)
	s.metrics.keys.Set(float64(s.keys.count()))
	if err != nil {
		s.metrics.keyReloadErrors.Inc()
	}
	return err
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// route registers an authenticated API route. write routes refuse read-only keys.
func (s *Server) route(pattern string, write bool, h func(w http.ResponseWriter, r *http.Request, k *Key) error) {
	name := pattern
	s.mux.Handle(pattern, s.instrument(name, func(w http.ResponseWriter, r *http.Request) error {
		k, err := s.authenticate(w, r)
		if err != nil {
			return err
		}
		if write && k.ReadOnly {
			return errf(http.StatusForbidden, CodeReadOnly, "key %q is read-only", k.Name)
		}
		// Every door gets the same deadline; the key's name picks its share of the
		// embedder (embed.Bounded).
		ctx, cancel := context.WithTimeoutCause(embed.WithCaller(r.Context(), k.Name), s.cfg.RequestTimeout, errRequestTime)
		defer cancel()
		r = r.WithContext(ctx)
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
		return inTime(ctx, h(w, r, k))
	}))
}

func (s *Server) routes() {
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(OpenAPIDocument)
	})
	s.nativeRoutes()
	s.sessionRoutes()
	s.langgraphRoutes()
	s.mcpRoutes()
	s.mux.Handle("/", s.instrument("unknown", func(http.ResponseWriter, *http.Request) error {
		return errf(http.StatusNotFound, CodeNotFound, "no such route")
	}))
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	if err := s.ready(ctx); err != nil {
		s.log.Warn("not ready: PostgreSQL is not answering", "error", err.Error())
		http.Error(w, "PostgreSQL is not answering", http.StatusServiceUnavailable)
		return
	}
	if s.keys.count() == 0 {
		http.Error(w, "no API keys", http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}

// authenticate finds the caller's key (x-api-key, or Authorization: Bearer) and
// applies its rate limit.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (*Key, error) {
	k, err := s.keyFor(r.Header.Get("X-Api-Key"), r.Header.Get("Authorization"))
	if err != nil {
		return nil, err
	}
	w.Header().Set("X-Memory-Key", k.Name)
	return k, nil
}

// keyFor finds the key presented (x-api-key, or authorization "Bearer <key>") and
// applies its rate limit: every door authenticates through it.
func (s *Server) keyFor(apiKey, authorization string) (*Key, error) {
	presented := apiKey
	if presented == "" {
		if v, ok := strings.CutPrefix(authorization, "Bearer "); ok {
			presented = strings.TrimSpace(v)
		}
	}
	if presented == "" {
		return nil, errf(http.StatusUnauthorized, CodeUnauthenticated, "an API key is required (header x-api-key or Authorization: Bearer)")
	}
	k := s.keys.lookup(presented)
	if k == nil {
		return nil, errf(http.StatusUnauthorized, CodeUnauthenticated, "the API key is not valid")
	}
	l := s.limiter(k.Name)
	res := l.Reserve()
	if d := res.Delay(); d > 0 {
		res.Cancel()
		s.metrics.rateLimited.WithLabelValues(k.Name).Inc()
		e := errf(http.StatusTooManyRequests, CodeRateLimited, "rate limit of key %q exceeded (%v requests/s, burst %d)", k.Name, s.cfg.RateLimit, s.cfg.RateBurst)
		e.retryAfter = int(math.Ceil(d.Seconds()))
		return nil, e
	}
	return k, nil
}

func (s *Server) limiter(name string) *rate.Limiter {
	if l, ok := s.limiters.Load(name); ok {
		return l.(*rate.Limiter)
	}
	l, _ := s.limiters.LoadOrStore(name, rate.NewLimiter(rate.Limit(s.cfg.RateLimit), s.cfg.RateBurst))
	return l.(*rate.Limiter)
}

// checkScope refuses a scope the key does not allow, or one that is not a scope.
func checkScope(k *Key, sp *string) error {
	// Every door takes a scope as it is spelled and stores it in NFC, so a user
	// written composed and decomposed is one user.
	*sp = memory.NormalizeScope(*sp)
	scope := *sp
	if scope == "" {
		return errf(http.StatusBadRequest, CodeInvalidScope, "scope is required: every call names the scope it reads or writes")
	}
	if err := memory.ValidateScope(scope); err != nil {
		return errf(http.StatusBadRequest, CodeInvalidScope, "%v", err)
	}
	if !k.Allows(scope) {
		return errf(http.StatusForbidden, CodeScopeForbidden, "key %q may not use scope %s", k.Name, scope)
	}
	return nil
}

// checkID refuses what no memory_id can be (a NUL, a character outside the ID
// alphabet, over MaxIDLen) before it reaches the database: a permanent 400, where the
// database's refusal would read as an outage.
func checkID(field, id string) error {
	if err := memory.ValidateID(id); err != nil {
		return errf(http.StatusBadRequest, CodeInvalidRequest, "%s: %v", field, err)
	}
	return nil
}

// maxReasonLen bounds a forget's reason (it goes to the audit record).
const maxReasonLen = 1024

func checkReason(reason string) error {
	if err := memory.CheckText(reason); err != nil {
		return errf(http.StatusBadRequest, CodeInvalidRequest, "reason: %v", err)
	}
	if len(reason) > maxReasonLen {
		return errf(http.StatusBadRequest, CodeInvalidRequest, "reason: is %d bytes long (at most %d)", len(reason), maxReasonLen)
	}
	return nil
}

// checkQuery refuses a search query that cannot be searched: empty or blank, or
// holding a NUL. Every door (native, LangGraph, MCP) uses it.
func checkQuery(q string) error {
	if err := memory.CheckText(q); err != nil {
		return errf(http.StatusBadRequest, CodeInvalidRequest, "query: %v", err)
	}
	if strings.TrimSpace(q) == "" {
		return errf(http.StatusBadRequest, CodeInvalidRequest, "query is required (use /v1/recall to rank without one)")
	}
	return nil
}

// statusWriter records the status code for metrics and logs.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush lets streaming responses (MCP) through.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// instrument turns a handler's error into its response and records metrics and a log
// line (route, status, duration, key name: never content or keys).
func (s *Server) instrument(route string, h func(w http.ResponseWriter, r *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		err := h(sw, r)
		if err != nil {
			s.writeError(sw, r, err)
		}
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		s.metrics.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
		s.metrics.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
		if code >= 500 {
			s.log.Error("request failed", "route", route, "status", code, "key", sw.Header().Get("X-Memory-Key"),
				"duration", time.Since(start).String(), "error", errorText(err))
		} else {
			s.log.Debug("request", "route", route, "status", code, "key", sw.Header().Get("X-Memory-Key"), "duration", time.Since(start).String())
		}
	})
}

// errorText is what a log line may say about an error: its text, which the layers
// below keep free of memory content (they name IDs, scopes and fields).
func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// decode reads a JSON body into v, refusing unknown fields, trailing data and bodies
// over the limit, with the error a client can act on.
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooLarge *http.MaxBytesError
		var syntax *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &tooLarge):
			return errf(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "request body is larger than %d bytes", tooLarge.Limit)
		case errors.Is(err, io.EOF):
			return errf(http.StatusBadRequest, CodeInvalidRequest, "request body is empty")
		case strings.HasPrefix(err.Error(), "json: unknown field"):
			return errf(http.StatusBadRequest, CodeUnknownField, "%s", strings.TrimPrefix(err.Error(), "json: "))
		case errors.As(err, &syntax), errors.Is(err, io.ErrUnexpectedEOF):
			return errf(http.StatusBadRequest, CodeInvalidJSON, "request body is not valid JSON: %v", err)
		case errors.As(err, &typ):
			return errf(http.StatusBadRequest, CodeInvalidRequest, "field %q: want %s, got JSON %s", typ.Field, typ.Type, typ.Value)
		}
		return errf(http.StatusBadRequest, CodeInvalidRequest, "request body: %v", err)
	}
	if dec.More() {
		return errf(http.StatusBadRequest, CodeInvalidJSON, "request body has data after the JSON value")
	}
	if _, err := dec.Token(); err != io.EOF {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return errf(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "request body is larger than %d bytes", tooLarge.Limit)
		}
		return errf(http.StatusBadRequest, CodeInvalidJSON, "request body has data after the JSON value")
	}
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	return json.NewEncoder(w).Encode(v)
}
