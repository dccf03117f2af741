//go:build e2e

// Package e2e runs the operator the way its users do: the Helm chart installed with
// the locally built image into a real single-node cluster (hack/cluster.sh), the
// manager under the chart's ServiceAccount and RBAC, Jobs and gateways as real Pods in
// namespaces that enforce the restricted Pod Security level, and PostgreSQL, MinIO and
// Milvus Lite on the host, reached by the Pods at the cluster bridge's address.
// `make e2e` (hack/e2e.sh) sets all of that up; the assertions are on data (rows,
// vectors, objects), status, Events and the manager's metrics.
package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	memoryv1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// env is what hack/e2e.sh hands the test.
type env struct {
	root, kubeconfig, image, helm, kubectl, debugDir string
	// previousChart is the chart of the previous chart version (hack/e2e.sh extracts
	// it from git), installed first and then upgraded.
	previousChart string
	// previousImage is that version's operator image (hack/e2e.sh builds it from
	// the same commit), which the previous chart is installed with.
	previousImage string
	// imageDigest is the image's digest on the node: the upgraded release pins it.
	imageDigest                                string
	pgHost, pgPort, pgUser, pgPassword         string
	s3Endpoint, s3Access, s3Secret, milvusAddr string
}

const (
	operatorNS = "memory-operator-system"
	tenantNS   = "e2e-tenant"
	release    = "memory-operator"
)

func loadEnv(t *testing.T) env {
	t.Helper()
	root, _ := filepath.Abs("../..")
	e := env{root: root, kubeconfig: os.Getenv("KUBECONFIG"), image: os.Getenv("E2E_IMAGE"), previousChart: os.Getenv("E2E_PREVIOUS_CHART"), previousImage: os.Getenv("E2E_PREVIOUS_IMAGE"), imageDigest: os.Getenv("E2E_IMAGE_DIGEST"),
		helm: filepath.Join(root, "bin/helm"), kubectl: filepath.Join(root, "bin/cluster/kubectl"), debugDir: filepath.Join(root, "bin/e2e-debug"),
		pgHost: os.Getenv("MEMORY_TEST_PG_HOST"), pgPort: os.Getenv("MEMORY_TEST_PG_PORT"), pgUser: os.Getenv("MEMORY_TEST_PG_USER"),
		pgPassword: os.Getenv("MEMORY_TEST_PG_PASSWORD"), s3Endpoint: os.Getenv("MEMORY_TEST_S3_ENDPOINT"),
		s3Access: os.Getenv("MEMORY_TEST_S3_ACCESS_KEY"), s3Secret: os.Getenv("MEMORY_TEST_S3_SECRET_KEY"), milvusAddr: os.Getenv("MEMORY_TEST_MILVUS_ADDR")}
	if e.kubeconfig == "" || e.image == "" || e.previousChart == "" || e.previousImage == "" || e.imageDigest == "" || e.pgHost == "" || e.s3Endpoint == "" || e.milvusAddr == "" {
		t.Fatal("the end-to-end tests run through `make e2e` (hack/e2e.sh): KUBECONFIG, E2E_IMAGE, E2E_IMAGE_DIGEST, E2E_PREVIOUS_CHART, E2E_PREVIOUS_IMAGE and MEMORY_TEST_* must be set")
	}
	return e
}

// suite holds the clients of one run.
type suite struct {
	env
	t     *testing.T
	ctx   context.Context
	kube  crclient.Client
	pg    *pgxpool.Pool
	s3    *minio.Client
	http  *http.Client
	start time.Time
	// ids are the memory_ids the gateway gave the memories the test named (a client's
	// ID is made unique to its scope).
	ids map[string]string
	// snapshotKey is the hex AES-256 key of Secret snapshot-key, made once.
	snapshotKey string
}

func newSuite(t *testing.T) *suite {
	e := loadEnv(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = memoryv1.AddToScheme(scheme)
	kube, err := crclient.New(cfg, crclient.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	t.Cleanup(cancel)
	pg, err := pgxpool.New(ctx, fmt.Sprintf("postgres://%s:%s@%s:%s/postgres?sslmode=disable", e.pgUser, e.pgPassword, e.pgHost, e.pgPort))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pg.Close)
	s3, err := minio.New(e.s3Endpoint, &minio.Options{Creds: credentials.NewStaticV4(e.s3Access, e.s3Secret, "")})
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	return &suite{env: e, t: t, ctx: ctx, kube: kube, pg: pg, s3: s3, http: &http.Client{Timeout: 20 * time.Second,
		// A connection per request: a kept-alive one stays on the Pod (or the route) it
		// was opened to through kube-proxy, past rollouts and new Services' rules; an
		// agent's client in the cluster meets the same, and its own timeouts handle it.
		Transport: &http.Transport{DisableKeepAlives: true}}, start: time.Now(),
		snapshotKey: hex.EncodeToString(key)}
}

// run runs a command and returns its output; it fails the test on error.
func (s *suite) run(stdin string, name string, args ...string) string {
	s.t.Helper()
	out, err := s.try(stdin, name, args...)
	if err != nil {
		s.t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return out
}

func (s *suite) try(stdin string, name string, args ...string) (string, error) {
	c := exec.CommandContext(s.ctx, name, args...)
	c.Env = append(os.Environ(), "KUBECONFIG="+s.kubeconfig, "HELM_CACHE_HOME="+filepath.Join(s.root, "bin/e2e-run/helm/cache"),
		"HELM_CONFIG_HOME="+filepath.Join(s.root, "bin/e2e-run/helm/config"), "HELM_DATA_HOME="+filepath.Join(s.root, "bin/e2e-run/helm/data"))
	c.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	return out.String(), err
}

func (s *suite) apply(yaml string) {
	s.t.Helper()
	s.run(yaml, s.kubectl, "apply", "--server-side", "--field-manager=e2e", "-f", "-")
}

// eventually polls cond until it returns true, failing with its last message.
func (s *suite) eventually(what string, timeout time.Duration, cond func() (bool, string)) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, msg := cond()
		if ok {
			return
		}
		if msg != "" {
			last = msg
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: not within %s (last: %s)", what, timeout, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// condition waits for obj's condition typ to be True, failing early when the object
// is Stalled.
func (s *suite) condition(obj crclient.Object, typ string, timeout time.Duration) {
	s.t.Helper()
	key := crclient.ObjectKeyFromObject(obj)
	s.eventually(fmt.Sprintf("%T %s %s", obj, key, typ), timeout, func() (bool, string) {
		if err := s.kube.Get(s.ctx, key, obj); err != nil {
			return false, err.Error()
		}
		conds := conditionsOf(obj)
		if st := meta.FindStatusCondition(conds, "Stalled"); st != nil && st.Status == "True" {
			s.t.Fatalf("%T %s stalled: %s: %s", obj, key, st.Reason, st.Message)
		}
		c := meta.FindStatusCondition(conds, typ)
		if c == nil {
			return false, "no condition yet"
		}
		return c.Status == "True", c.Reason + ": " + c.Message
	})
}

func conditionsOf(obj crclient.Object) []metav1.Condition {
	switch o := obj.(type) {
	case *memoryv1.MemoryStore:
		return o.Status.Conditions
	case *memoryv1.MemorySnapshot:
		return o.Status.Conditions
	case *memoryv1.MemoryRestore:
		return o.Status.Conditions
	case *memoryv1.ClusterMemoryBackend:
		return o.Status.Conditions
	}
	return nil
}

// scalar runs a query returning one value as the admin.
func (s *suite) scalar(q string, args ...any) any {
	s.t.Helper()
	var v any
	if err := s.pg.QueryRow(s.ctx, q, args...).Scan(&v); err != nil {
		s.t.Fatalf("%s: %v", q, err)
	}
	return v
}

// api calls a gateway through its Service's ClusterIP (kube-proxy's rules route it
// from the host as from a Pod).
func (s *suite) api(base, key, method, path string, body, out any) int {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequestWithContext(s.ctx, method, base+path, rd)
	req.Header.Set("x-api-key", key)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := s.http.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v after %s; the gateways then:\n%s", method, path, err, time.Since(start).Round(time.Millisecond), s.gatewayDiagnosis())
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			s.t.Fatalf("%s %s: %v: %s", method, path, err, raw)
		}
	}
	if resp.StatusCode >= 300 {
		s.t.Logf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode
}

func (s *suite) secretValue(ns, name, key string) string {
	s.t.Helper()
	var sec corev1.Secret
	if err := s.kube.Get(s.ctx, crclient.ObjectKey{Namespace: ns, Name: name}, &sec); err != nil {
		s.t.Fatalf("secret %s/%s: %v", ns, name, err)
	}
	v, ok := sec.Data[key]
	if !ok {
		s.t.Fatalf("secret %s/%s has no key %q", ns, name, key)
	}
	return string(v)
}

// event waits for an Event of the reason about an object: the operator records
// Events asynchronously, after the status they announce is already visible.
func (s *suite) event(ns, kind, name, reason string) {
	s.t.Helper()
	s.eventually(fmt.Sprintf("%s %s/%s: a %s event", kind, ns, name, reason), 30*time.Second, func() (bool, string) {
		got := s.events(ns, kind, name)
		return slices.Contains(got, reason), fmt.Sprint(got)
	})
}

// events returns the reasons of the Events about an object.
func (s *suite) events(ns, kind, name string) []string {
	s.t.Helper()
	var list corev1.EventList
	if err := s.kube.List(s.ctx, &list, crclient.InNamespace(ns)); err != nil {
		s.t.Fatal(err)
	}
	var reasons []string
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}

// gatewayDiagnosis is a few lines on every gateway Pod of the tenant namespace (its
// image, readiness, termination and last log lines): what a failed call's message
// carries, since the debug bundle does not outlive a CI machine.
func (s *suite) gatewayDiagnosis() string {
	var b strings.Builder
	for _, p := range s.pods(tenantNS, map[string]string{"app.kubernetes.io/component": "gateway"}) {
		ready := false
		for _, c := range p.Status.Conditions {
			ready = ready || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
		}
		fmt.Fprintf(&b, "  pod %s ip %s image %s ready %v deleting %v\n", p.Name, p.Status.PodIP, p.Spec.Containers[0].Image, ready, p.DeletionTimestamp != nil)
		logs, _ := s.try("", s.kubectl, "logs", "-n", tenantNS, p.Name, "--tail=4")
		for _, l := range strings.Split(strings.TrimSpace(logs), "\n") {
			fmt.Fprintf(&b, "    %.300s\n", l)
		}
	}
	endpoints, _ := s.try("", s.kubectl, "get", "endpointslices", "-n", tenantNS, "-o",
		`go-template={{range .items}}  {{.metadata.name}}:{{range .endpoints}} {{index .addresses 0}}(ready={{.conditions.ready}} terminating={{.conditions.terminating}}){{end}}{{"\n"}}{{end}}`)
	return b.String() + endpoints
}

// dumpDebugBundle writes what a human needs to see why a run failed: every object of
// the namespaces involved, Events, Pod logs and the operator's logs.
func (s *suite) dumpDebugBundle() {
	_ = os.RemoveAll(s.debugDir)
	_ = os.MkdirAll(s.debugDir, 0o755)
	write := func(name, content string) { _ = os.WriteFile(filepath.Join(s.debugDir, name), []byte(content), 0o644) }
	for _, ns := range []string{operatorNS, tenantNS} {
		out, _ := s.try("", s.kubectl, "get", "all,configmaps,memorystores,memorysnapshots,memoryrestores,leases,networkpolicies,poddisruptionbudgets,roles,rolebindings,serviceaccounts",
			"-n", ns, "-o", "yaml", "--show-managed-fields=false")
		write(ns+"-objects.yaml", out)
		// Secrets: names and keys only, never values.
		secrets, _ := s.try("", s.kubectl, "get", "secrets", "-n", ns, "-o", `go-template={{range .items}}{{.metadata.name}}:{{range $k, $v := .data}} {{$k}}{{end}}{{"\n"}}{{end}}`)
		write(ns+"-secrets.txt", secrets)
		ev, _ := s.try("", s.kubectl, "get", "events", "-n", ns, "--sort-by=.lastTimestamp", "-o", "wide")
		write(ns+"-events.txt", ev)
		pods, _ := s.try("", s.kubectl, "get", "pods", "-n", ns, "-o", "name")
		for _, p := range strings.Fields(pods) {
			logs, _ := s.try("", s.kubectl, "logs", "-n", ns, p, "--all-containers", "--prefix", "--tail=2000")
			write(ns+"-"+strings.TrimPrefix(p, "pod/")+".log", logs)
		}
	}
	cluster, _ := s.try("", s.kubectl, "get", "clustermemorybackends,nodes", "-o", "yaml")
	write("cluster-objects.yaml", cluster)
	s.t.Logf("debug bundle in %s", s.debugDir)
}
