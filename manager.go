package main

import (
	"flag"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/controllers"
)

// newScheme registers the kinds the manager works with.
func newScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(memoryv1alpha1.AddToScheme(scheme))
	return scheme
}

// runManager starts the controllers and blocks until the process is signalled.
func runManager(args []string) int {
	var metricsAddr, probeAddr, operatorNS, workerImage string
	var leaderElect bool
	fs := flag.CommandLine // carries controller-runtime's --kubeconfig flag
	fs.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address of the Prometheus metrics endpoint; 0 disables it.")
	fs.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address of the health and readiness probes.")
	fs.BoolVar(&leaderElect, "leader-elect", false, "Elect a leader so that only one replica reconciles at a time.")
	fs.StringVar(&operatorNS, "operator-namespace", envOr("POD_NAMESPACE", "memory-operator-system"),
		"Namespace holding the Secrets of ClusterMemoryBackends (defaults to $POD_NAMESPACE).")
	fs.StringVar(&workerImage, "worker-image", os.Getenv("WORKER_IMAGE"),
		"Image of the worker Jobs (snapshots, restores, archival) and the gateways: the operator's own (defaults to $WORKER_IMAGE).")
	opts := zap.Options{}
	opts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")

	scheme := newScheme()
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         leaderElect,
		LeaderElectionID:       "memory-operator.memory.amemory.io",
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			// Only the operator's own Jobs are watched and cached, not every Job in the cluster.
			&batchv1.Job{}: {Label: controllers.ManagedJobSelector()},
			// Likewise only the gateways' Deployments and Services.
			&appsv1.Deployment{}: {Label: controllers.ManagedGatewaySelector()},
			&corev1.Service{}:    {Label: controllers.ManagedGatewaySelector()},
		}},
		Client: client.Options{
			// Secrets are read straight from the API server and never cached, so the
			// operator holds no credentials in memory beyond a reconcile.
			Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}},
		},
	})
	if err != nil {
		log.Error(err, "Unable to create the manager")
		return 1
	}
	if workerImage == "" {
		log.Info("No --worker-image (or $WORKER_IMAGE): MemorySnapshots, MemoryRestores, archival runs, restore drills and gateways will wait until the operator is restarted with one")
	}
	c, reader, scheme, recorder := mgr.GetClient(), mgr.GetAPIReader(), mgr.GetScheme(), mgr.GetEventRecorder("memory-operator")
	reconcilers := []struct {
		name string
		r    interface{ SetupWithManager(ctrl.Manager) error }
	}{
		{"MemoryStore", &controllers.MemoryStoreReconciler{Client: c, APIReader: reader, Scheme: scheme, Recorder: recorder,
			OperatorNamespace: operatorNS, GatewayImage: workerImage}},
		{"ClusterMemoryBackend", &controllers.ClusterMemoryBackendReconciler{Client: c, APIReader: reader, Scheme: scheme, Recorder: recorder,
			OperatorNamespace: operatorNS, Clock: clock.RealClock{}}},
		{"MemorySnapshot", &controllers.MemorySnapshotReconciler{Client: c, APIReader: reader, Scheme: scheme, Recorder: recorder,
			Clock: clock.RealClock{}, WorkerImage: workerImage}},
		{"MemoryRestore", &controllers.MemoryRestoreReconciler{Client: c, APIReader: reader, Scheme: scheme, Recorder: recorder,
			Clock: clock.RealClock{}, WorkerImage: workerImage}},
		{"SnapshotSchedule", &controllers.SnapshotScheduleReconciler{Client: c, APIReader: reader, Scheme: scheme, Recorder: recorder,
			Clock: clock.RealClock{}}},
		{"Archival", &controllers.ArchivalReconciler{Client: c, APIReader: reader, Scheme: scheme, Recorder: recorder,
			Clock: clock.RealClock{}, WorkerImage: workerImage}},
		{"RestoreDrill", &controllers.RestoreDrillReconciler{Client: c, APIReader: reader, Scheme: scheme, Recorder: recorder,
			Clock: clock.RealClock{}, WorkerImage: workerImage, OperatorNamespace: operatorNS}},
	}
	for _, rc := range reconcilers {
		if err := rc.r.SetupWithManager(mgr); err != nil {
			log.Error(err, "Unable to set up the controller", "controller", rc.name)
			return 1
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "Unable to set up the health check")
		return 1
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		log.Error(err, "Unable to set up the ready check")
		return 1
	}
	log.Info("Starting manager", "version", version, "operatorNamespace", operatorNS, "workerImage", workerImage)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "Manager exited with an error")
		return 1
	}
	return 0
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
