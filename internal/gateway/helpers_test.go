package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/vector/milvus"
	"github.com/amemory/memory-operator/internal/vector/pgvector"
)

// testDim is the tests' vector dimension (hashing embedder).
const testDim = 256

// testKey is a key the test gave the gateway: its plaintext and entry.
type testKey struct {
	plain string
	entry KeyEntry
}

func newTestKey(t testing.TB, name string, readOnly bool, scopes ...string) testKey {
	t.Helper()
	k, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return testKey{plain: k, entry: KeyEntry{Name: name, SHA256: HashKey(k), Scopes: scopes, ReadOnly: readOnly}}
}

func writeKeys(t testing.TB, path string, keys ...testKey) {
	t.Helper()
	f := KeyFile{}
	for _, k := range keys {
		f.Keys = append(f.Keys, k.entry)
	}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeFileAtomic(path, b); err != nil {
		t.Fatal(err)
	}
}

// writeFileAtomic replaces path, as the kubelet does for a mounted Secret.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// env is one provisioned store with a gateway serving it on loopback.
type env struct {
	t        testing.TB
	url      string
	gw       *Gateway
	cfg      Config
	names    provision.Names
	admin    provision.PostgresConn
	agent    provision.PostgresConn
	keysFile string
	client   *http.Client
	stop     func()
	logs     *syncBuffer
	// milvusLogin is the store's own Milvus user (milvusAuth).
	milvusLogin engine.Login
	// redisPassword is the password of cfg.RedisUser (redis).
	redisPassword string
}

type envOptions struct {
	engine string // Postgres (default), PGVector (the PostgreSQL 16 server) or Milvus
	milvus string // Milvus address (default: the shared test server)
	// milvusAuth: milvus is the Milvus server with authentication (or a proxy to it);
	// the store gets its own Milvus user, which the gateway logs in as.
	milvusAuth bool
	keys       []testKey
	dedup      float64
	rate       float64
	burst      int
	maxBody    int64
	rules      []NamespaceRule
	noService  bool // provision only: the caller starts the gateway
	// logs, when set, receives the gateway's log (JSON lines).
	logs *syncBuffer
	// config, when set, adjusts the gateway's configuration before it starts.
	config func(*Config)
	// redis keeps the short-term tier in the test Redis (default: PostgreSQL).
	redis bool
}

// syncBuffer collects the gateway's log.
type syncBuffer = testutil.SyncBuffer

// newEnv provisions a store as the operator does (schema, agent role, vectors) and
// serves a gateway over it that connects as the store's own agent role.
func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	ctx := context.Background()
	pg := testutil.PostgresParts(t)
	if o.engine == engine.PGVector {
		pg = testutil.PGVectorParts(t)
	}
	admin := provision.PostgresConn{Host: pg.Host, Port: pg.PortNumber, Database: "postgres", SSLMode: "disable", User: pg.User, Password: pg.Password}
	names, err := provision.NamesFor(testutil.UniqueName("gw-"), "")
	if err != nil {
		t.Fatal(err)
	}
	pw := provision.Passwords{Agent: "agent-" + testutil.UniqueName("pw"), Worker: "worker-" + testutil.UniqueName("pw")}
	owner := "test/" + names.Tenant
	if _, err := provision.EnsurePostgres(ctx, admin, names, owner, pw); err != nil {
		t.Fatal(err)
	}
	if o.engine == "" {
		o.engine = "Postgres"
	}
	spec := vector.Spec{Dimension: testDim, Metric: vector.Cosine}
	var mc *provision.MilvusConn
	if o.engine == "Milvus" {
		if o.milvus == "" {
			o.milvus = testutil.MilvusAddr(t)
		}
		mc = &provision.MilvusConn{Address: o.milvus}
		if o.milvusAuth {
			m := testutil.MilvusAuth(t)
			mc.Username, mc.Password = m.User, m.Password
		}
	}
	if o.engine == engine.PGVector {
		_, err = provision.EnsurePGVector(ctx, admin, names, spec, pgvector.Params{})
	} else {
		_, err = provision.EnsureVectors(ctx, admin, mc, names, milvus.Owner{ID: owner}, spec)
	}
	if err != nil {
		t.Fatal(err)
	}
	var login engine.Login
	if o.milvusAuth {
		login = engine.Login{Username: names.MilvusUser, Password: testutil.UniqueName("milvus-pw-")}
		ensureMilvusTenant(t, *mc, names, owner, login.Password)
	}
	t.Cleanup(func() {
		if mc != nil {
			if o.milvusAuth {
				_ = provision.DeleteMilvusTenant(context.Background(), *mc, names, milvus.Owner{ID: owner})
			}
			_ = provision.DeleteVectors(context.Background(), admin, mc, names, milvus.Owner{ID: owner})
		}
		if err := provision.DeletePostgres(context.Background(), admin, names, owner); err != nil {
			t.Errorf("DeletePostgres: %v", err)
		}
	})
	dir := t.TempDir()
	e := &env{t: t, names: names, admin: admin, keysFile: filepath.Join(dir, KeysFileName), logs: o.logs, milvusLogin: login}
	writeKeys(t, e.keysFile, o.keys...)
	e.cfg = Config{StoreNamespace: "test", StoreName: names.Tenant, Listen: "127.0.0.1:0", Schema: names.Schema,
		Vectors: engine.Vectors{VectorEngine: o.engine}, Dimension: testDim, Metric: "COSINE", Embedder: "Hashing", KeysFile: e.keysFile,
		DedupThreshold: o.dedup, RateLimit: 10000, RateBurst: 10000, MaxBodyBytes: 1 << 20, NamespaceRules: o.rules,
		ShutdownGrace: time.Second}
	if o.engine == "Milvus" {
		e.cfg.MilvusAddress, e.cfg.Collection = o.milvus, names.Collection
	}
	if o.rate > 0 {
		e.cfg.RateLimit, e.cfg.RateBurst = o.rate, o.burst
	}
	if o.maxBody > 0 {
		e.cfg.MaxBodyBytes = o.maxBody
	}
	if o.redis {
		srv := testutil.RedisServer(t)
		e.cfg.RedisAddress, e.cfg.RedisUser, e.cfg.RedisTenant, e.redisPassword = srv.Addr, srv.User, names.Tenant, srv.Password
	}
	if o.config != nil {
		o.config(&e.cfg)
	}
	e.agent = admin
	e.agent.User, e.agent.Password = names.Role, pw.Agent
	e.client = &http.Client{Timeout: 60 * time.Second, Transport: newValidator(t)}
	if o.noService {
		return e
	}
	e.start(e.agentURI(t))
	return e
}

// ensureMilvusTenant makes the store's Milvus user, waiting (as the operator's
// requeues do) while the server has not applied it yet.
func ensureMilvusTenant(t testing.TB, root provision.MilvusConn, names provision.Names, owner, password string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := provision.EnsureMilvusTenant(context.Background(), root, names, owner, password, password)
		if err == nil {
			return
		}
		if !errors.Is(err, provision.ErrMilvusTenantPending) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
	}
}

// agentURI is the store's agent login (what the connection Secret's uri holds).
func (e *env) agentURI(testing.TB) string { return e.agent.URL(nil) }

// start serves a gateway over the store, connecting with uri.
func (e *env) start(uri string) {
	t := e.t
	var log *slog.Logger
	if e.logs != nil {
		log = slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	g, err := Open(context.Background(), e.cfg, Secrets{PostgresURI: uri, Milvus: e.milvusLogin, RedisPassword: e.redisPassword}, log)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := g.Serve(ctx, ln); err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	e.gw, e.url = g, "http://"+ln.Addr().String()
	var once sync.Once
	e.stop = func() {
		once.Do(func() {
			cancel()
			<-done
			g.Close()
		})
	}
	t.Cleanup(e.stop)
}

// call makes a request to the gateway (see testutil.APICall).
func (e *env) call(key, method, path string, body, out any) (int, []byte) {
	e.t.Helper()
	return testutil.APICall(e.t, e.client, e.url, key, method, path, body, out)
}

// must is call that expects the status.
func (e *env) must(want int, key, method, path string, body, out any) []byte {
	e.t.Helper()
	code, raw := e.call(key, method, path, body, out)
	if code != want {
		e.t.Fatalf("%s %s: status %d, want %d: %s", method, path, code, want, raw)
	}
	return raw
}

// wantError expects an error response with the status and code.
func (e *env) wantError(status int, code, key, method, path string, body any) ErrorBody {
	e.t.Helper()
	got, raw := e.call(key, method, path, body, nil)
	var eb ErrorBody
	if err := json.Unmarshal(raw, &eb); err != nil {
		e.t.Fatalf("%s %s: error body %q: %v", method, path, raw, err)
	}
	if got != status || eb.Error.Code != code {
		e.t.Fatalf("%s %s: got %d %q (%s), want %d %q", method, path, got, eb.Error.Code, eb.Error.Message, status, code)
	}
	return eb
}

// validator checks every request the tests send and every response the gateway
// gives against the OpenAPI document the gateway serves (kin-openapi's validator), so
// the document is proven on live traffic, errors included.
type validator struct {
	t      testing.TB
	router routers.Router
	next   http.RoundTripper
}

func newValidator(t testing.TB) *validator {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(OpenAPIDocument)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the OpenAPI document is not valid: %v", err)
	}
	doc.Servers = nil
	r, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &validator{t: t, router: r, next: http.DefaultTransport}
}

func (v *validator) RoundTrip(req *http.Request) (*http.Response, error) {
	route, params, err := v.router.FindRoute(req)
	if err != nil || strings.HasPrefix(req.URL.Path, "/mcp") {
		// Not an API route (unknown paths, MCP): nothing to check against.
		return v.next.RoundTrip(req)
	}
	var reqBody []byte
	if req.Body != nil {
		reqBody, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	reqErr := openapi3filter.ValidateRequest(req.Context(), in)
	req.Body = io.NopCloser(bytes.NewReader(reqBody))
	resp, err := v.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	{
		// Every response, error or not, must match the document.
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
			Options: &openapi3filter.Options{IncludeResponseStatus: true}}
		out.SetBodyBytes(body)
		if err := openapi3filter.ValidateResponse(req.Context(), out); err != nil {
			v.t.Errorf("%s %s: response %d does not match the OpenAPI document: %v\n%s", req.Method, req.URL.Path, resp.StatusCode, err, body)
		}
	}
	if reqErr != nil && resp.StatusCode < 300 {
		v.t.Errorf("%s %s: the gateway accepted a request the OpenAPI document rejects: %v", req.Method, req.URL.Path, reqErr)
	}
	return resp, nil
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
