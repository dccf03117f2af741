package controllers

import (
	"context"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// ArchivalReconciler runs a store's archival on its spec.archival schedule: one archive
// Job per slot (named after the slot, so a restart or a second reconciler can neither
// skip nor repeat one), never two at a time, none while the store is not Ready. It
// records each run's result, from the worker's termination message, in
// status.archival and the Archival condition, and exports per-store metrics.
type ArchivalReconciler struct {
	client.Client
	// APIReader reads Secrets and Pods (never cached), confirms a Job the cache has not
	// seen and re-reads a store after a write conflict.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	// Clock is the schedule's time and each run's clock; tests use a fake one.
	Clock clock.PassiveClock
	// WorkerImage is the image archive Jobs run: the operator's own.
	WorkerImage string
}

// +kubebuilder:rbac:groups=memory.amemory.io,resources=memorystores,verbs=get;list;watch
// +kubebuilder:rbac:groups=memory.amemory.io,resources=memorystores/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=memory.amemory.io,resources=clustermemorybackends,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=pods,verbs=list
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile follows the store's archive Job, starts the slot that is due, prunes old
// Jobs and records the archival's state (its condition and status.archival, nothing
// else of the store's status). A store that is gone, or going, loses its metrics.
func (r *ArchivalReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return storePart[archivalState]{what: "archival", forget: forgetArchivalMetrics, current: currentArchivalState,
		reconcile: r.reconcileArchival, patch: r.patchArchivalStatus, announce: r.announce}.run(ctx, r.Client, req)
}

// SetupWithManager watches stores (spec changes, the Ready condition changing, and
// deletion: the store's status changes often otherwise, not least by this reconciler)
// and the archive Jobs they own (every status change: a Job's progress is all in its
// status).
func (r *ArchivalReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&memoryv1alpha1.MemoryStore{}, builder.WithPredicates(archivalStoreChanged())).
		Owns(&batchv1.Job{}).
		WithOptions(controller.Options{
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](minRetryDelay, maxRetryDelay),
		}).
		Named("archival").
		Complete(r)
}

// archivalStoreChanged lets through the store updates archival acts on: a new spec
// generation, Ready turning on or off (a delayed run starts once the store is Ready),
// and the start of deletion.
func archivalStoreChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			before, ok1 := e.ObjectOld.(*memoryv1alpha1.MemoryStore)
			after, ok2 := e.ObjectNew.(*memoryv1alpha1.MemoryStore)
			if !ok1 || !ok2 {
				return true
			}
			return before.Generation != after.Generation ||
				before.IsReady() != after.IsReady() ||
				before.DeletionTimestamp.IsZero() != after.DeletionTimestamp.IsZero()
		},
	}
}
