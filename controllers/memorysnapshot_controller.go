package controllers

import (
	"context"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// waitRecheck is how often a snapshot waiting for its store or a Secret looks again,
// on top of the watches that wake it as soon as they appear.
const waitRecheck = 30 * time.Second

// storeRefField indexes MemorySnapshots by the store they export.
const storeRefField = ".spec.storeRef.name"

// MemorySnapshotReconciler runs every MemorySnapshot once, as a Job, records what the
// package holds, and deletes the snapshot and its package when its TTL has passed.
type MemorySnapshotReconciler struct {
	client.Client
	// APIReader reads Secrets (never cached) and confirms a Job the cache has not seen.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	// Clock stamps start, completion and expiry times; tests use a fake one.
	Clock clock.PassiveClock
	// WorkerImage is the image snapshot Jobs run: the operator's own.
	WorkerImage string
	// Packages reads manifests and removes packages (object storage through minio-go
	// when nil).
	Packages PackageStore
}

// +kubebuilder:rbac:groups=memory.amemory.io,resources=memorysnapshots,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=memory.amemory.io,resources=memorysnapshots/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=memory.amemory.io,resources=memorysnapshots/finalizers,verbs=update
// +kubebuilder:rbac:groups=memory.amemory.io,resources=memorystores,verbs=get;list;watch
// +kubebuilder:rbac:groups=memory.amemory.io,resources=clustermemorybackends,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=list
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile moves one snapshot forward: fetch; expire it when its TTL has passed; once
// done, nothing else (a snapshot never runs twice); otherwise start its Job or follow
// it; then record status.
func (r *MemorySnapshotReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)

	snap := &memoryv1alpha1.MemorySnapshot{}
	if err := r.Get(ctx, req.NamespacedName, snap); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !snap.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	original := snap.DeepCopy()
	if r.expired(snap) {
		if !r.keepManaged(snap) {
			return r.expire(ctx, snap)
		}
		return ctrl.Result{}, r.patchStatus(ctx, original, snap)
	}

	var result ctrl.Result
	var err error
	if !snap.IsDone() {
		result, err = r.run(ctx, snap)
	}
	if snap.IsDone() {
		result = r.scheduleExpiry(snap)
	}
	if perr := r.patchStatus(ctx, original, snap); perr != nil {
		log.Error(perr, "Failed to record status")
		if err == nil {
			return ctrl.Result{}, perr
		}
	}
	return result, err
}

// SetupWithManager wires the watches: snapshots, their Jobs (every status change, no
// generation filter: a Job's progress is all in its status), the stores they wait for
// and the Secrets they need (metadata only).
func (r *MemorySnapshotReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.Packages == nil {
		r.Packages = minioPackages{}
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &memoryv1alpha1.MemorySnapshot{}, storeRefField,
		func(obj client.Object) []string {
			return []string{obj.(*memoryv1alpha1.MemorySnapshot).Spec.StoreRef.Name}
		}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&memoryv1alpha1.MemorySnapshot{}).
		Owns(&batchv1.Job{}).
		Watches(&memoryv1alpha1.MemoryStore{}, handler.EnqueueRequestsFromMapFunc(r.snapshotsForStore)).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.snapshotsForSecret), builder.OnlyMetadata).
		WithOptions(controller.Options{
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](minRetryDelay, maxRetryDelay),
		}).
		Named("memorysnapshot").
		Complete(r)
}

func (r *MemorySnapshotReconciler) resolver() packageResolver {
	return packageResolver{client: r.Client, secrets: r.APIReader}
}
