package controllers

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/test/importers"
)

// The controller tests run the real controllers (MemoryStore, MemorySnapshot,
// MemoryRestore, snapshot schedules) in a manager against a real kube-apiserver and etcd
// (envtest, binaries from bin/k8s) and the real backends that hack/services.sh starts.
// There is no kubelet, so nothing here needs Pods to run: tests check the Jobs and play
// the kubelet's part.

const operatorNamespace = "memory-operator-system"

var (
	k8sClient client.Client
	testMgr   ctrl.Manager
	// operatorConfig is the manager's REST config: the operator's ServiceAccount.
	operatorConfig *rest.Config
)

// operatorServiceAccount is the identity the manager runs as in the tests, as the
// chart installs it.
const operatorServiceAccount = "memory-operator"

// operatorIdentity installs the generated ClusterRole (config/rbac/role.yaml), binds
// it to the operator's ServiceAccount and returns cfg impersonating that account.
func operatorIdentity(ctx context.Context, admin client.Client, cfg *rest.Config) (*rest.Config, error) {
	raw, err := os.ReadFile(filepath.Join("..", "config", "rbac", "role.yaml"))
	if err != nil {
		return nil, err
	}
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict(raw, &role); err != nil {
		return nil, fmt.Errorf("config/rbac/role.yaml: %w", err)
	}
	role.Name = "memory-operator-manager"
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: operatorServiceAccount, Namespace: operatorNamespace}},
	}
	for _, obj := range []client.Object{&role, binding} {
		if err := admin.Create(ctx, obj); err != nil {
			return nil, err
		}
	}
	c := rest.CopyConfig(cfg)
	// What the API server authenticates a ServiceAccount token as.
	c.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + operatorNamespace + ":" + operatorServiceAccount,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + operatorNamespace, "system:authenticated"},
	}
	return c, nil
}

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		msg := "controller tests need a control plane: KUBEBUILDER_ASSETS is unset"
		if os.Getenv("CI") != "" {
			fmt.Fprintln(os.Stderr, "FAIL: "+msg)
			return 1
		}
		// Said where it is seen without -v (testutil.Announce), unless -short asked for it.
		flag.Parse()
		if !testing.Short() {
			testutil.Announce("SKIP controllers: every test not run, the Guarantee tests among them: " + msg + ". " + testutil.HowToRun + ".")
		}
		return 0
	}
	// The controllers' log is kept (at debug level) for the leak check after the run.
	logFile, err := os.CreateTemp("", "controllers-log-*.txt")
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		return 1
	}
	defer func() { _ = os.Remove(logFile.Name()) }()
	ctrl.SetLogger(zap.New(zap.WriteTo(io.MultiWriter(logSink(), logFile)), zap.UseDevMode(true), zap.Level(zapcore.DebugLevel)))

	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: starting envtest: %v\n", err)
		return 1
	}
	defer func() { _ = env.Stop() }()

	scheme := newTestScheme()
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: client: %v\n", err)
		return 1
	}

	// The manager runs with the operator's real permissions: the ClusterRole that
	// `make manifests` generates from the +kubebuilder:rbac markers (and the chart
	// ships, TestChartRBACMatchesMarkers), bound to the operator's ServiceAccount, which
	// its clients impersonate. The tests' own client stays an administrator.
	mgrCfg, err := operatorIdentity(context.Background(), k8sClient, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: the operator's identity: %v\n", err)
		return 1
	}
	operatorConfig = mgrCfg
	mgr, err := ctrl.NewManager(mgrCfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&batchv1.Job{}:       {Label: ManagedJobSelector()},
			&appsv1.Deployment{}: {Label: ManagedGatewaySelector()},
			&corev1.Service{}:    {Label: ManagedGatewaySelector()},
		}},
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: manager: %v\n", err)
		return 1
	}
	testMgr = mgr
	if err := newReconciler(mgr.GetClient(), mgr.GetAPIReader()).SetupWithManager(mgr); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: setup: %v\n", err)
		return 1
	}
	backends := &ClusterMemoryBackendReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: scheme,
		Recorder: mgr.GetEventRecorder("memory-operator"), OperatorNamespace: operatorNamespace, Clock: clock.RealClock{}}
	if err := backends.SetupWithManager(mgr); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: setup ClusterMemoryBackend: %v\n", err)
		return 1
	}
	if err := newSnapshotReconciler(mgr.GetClient(), mgr.GetAPIReader(), clock.RealClock{}).SetupWithManager(mgr); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: setup MemorySnapshot: %v\n", err)
		return 1
	}
	if err := newRestoreReconciler(mgr.GetClient(), mgr.GetAPIReader(), clock.RealClock{}).SetupWithManager(mgr); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: setup MemoryRestore: %v\n", err)
		return 1
	}
	// The manager's scheduler runs on a clock stopped before any test store existed, so
	// it never reaches a slot by itself: schedule tests drive their own reconcilers with
	// fake clocks, and the one in the manager only exercises the wiring (and agrees with
	// them on everything else, being the same code).
	if err := newScheduleReconciler(mgr.GetClient(), mgr.GetAPIReader(), clocktesting.NewFakePassiveClock(managerScheduleEpoch)).SetupWithManager(mgr); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: setup SnapshotSchedule: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()

	if err := k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: objectMeta("", operatorNamespace)}); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: namespace: %v\n", err)
		cancel()
		return 1
	}

	code := m.Run()
	if code == 0 {
		// After every test: no secret value in the logs, Events, status, termination
		// messages or the specs of the objects the operator made.
		if err := checkNoSecretLeaks(ctx, k8sClient, logFile.Name()); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
			code = 1
		}
	}
	importers.Cleanup() // the LangGraph template databases of the import tests
	cancel()
	select {
	case err := <-done:
		if err != nil {
			fmt.Fprintf(os.Stderr, "manager stopped with an error: %v\n", err)
		}
	case <-time.After(30 * time.Second):
	}
	return code
}

// newReconciler builds the reconciler as main.go does; tests also build a second one to
// act as a restarted operator.
func newReconciler(c client.Client, reader client.Reader) *MemoryStoreReconciler {
	return &MemoryStoreReconciler{
		Client:            c,
		APIReader:         reader,
		Scheme:            c.Scheme(),
		Recorder:          testMgr.GetEventRecorder("memory-operator"),
		OperatorNamespace: operatorNamespace,
		GatewayImage:      testWorkerImage,
		CutoverGrace:      time.Second,
	}
}

// testWorkerImage is the image the snapshot Jobs of the tests name; no kubelet runs it.
const testWorkerImage = "ghcr.io/amemory/memory-operator:test"

// managerScheduleEpoch is the stopped time of the manager's snapshot scheduler.
var managerScheduleEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// newSnapshotReconciler builds the MemorySnapshot reconciler as main.go does, with the
// given clock; tests build more to act as a restarted operator or to move time.
func newSnapshotReconciler(c client.Client, reader client.Reader, clk clock.PassiveClock) *MemorySnapshotReconciler {
	return &MemorySnapshotReconciler{
		Client:      c,
		APIReader:   reader,
		Scheme:      c.Scheme(),
		Recorder:    testMgr.GetEventRecorder("memory-operator"),
		Clock:       clk,
		WorkerImage: testWorkerImage,
	}
}

// newRestoreReconciler builds the MemoryRestore reconciler as main.go does, with the
// given clock; tests build more to act as a restarted operator.
func newRestoreReconciler(c client.Client, reader client.Reader, clk clock.PassiveClock) *MemoryRestoreReconciler {
	return &MemoryRestoreReconciler{
		Client:      c,
		APIReader:   reader,
		Scheme:      c.Scheme(),
		Recorder:    testMgr.GetEventRecorder("memory-operator"),
		Clock:       clk,
		WorkerImage: testWorkerImage,
	}
}

// newScheduleReconciler builds the snapshot scheduler with the given clock.
func newScheduleReconciler(c client.Client, reader client.Reader, clk clock.PassiveClock) *SnapshotScheduleReconciler {
	return &SnapshotScheduleReconciler{
		Client:    c,
		APIReader: reader,
		Scheme:    c.Scheme(),
		Recorder:  testMgr.GetEventRecorder("memory-operator"),
		Clock:     clk,
	}
}

// logSink keeps test output readable: the controller's logs (expected errors included)
// are shown only with TEST_VERBOSE_LOGS set; tests assert on conditions and events.
func logSink() io.Writer {
	if os.Getenv("TEST_VERBOSE_LOGS") != "" {
		return os.Stderr
	}
	return io.Discard
}

func newTestScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(memoryv1alpha1.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	return scheme
}
