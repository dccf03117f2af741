package controllers

import (
	"context"

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

// Field indexes of MemoryRestores: the snapshot they read and the store they write.
const (
	restoreSnapshotField = ".spec.source.snapshotRef.name"
	restoreTargetField   = ".spec.targetRef.name"
)

// MemoryRestoreReconciler runs every MemoryRestore once, as a Job, once its snapshot has
// succeeded and its target store is Ready, and records what the Job reported.
type MemoryRestoreReconciler struct {
	client.Client
	// APIReader reads Secrets, ConfigMaps and Pods (never cached) and confirms a Job the
	// cache has not seen.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	// Clock stamps start and completion times; tests use a fake one.
	Clock clock.PassiveClock
	// WorkerImage is the image restore Jobs run: the operator's own.
	WorkerImage string
}

// +kubebuilder:rbac:groups=memory.amemory.io,resources=memoryrestores,verbs=get;list;watch
// +kubebuilder:rbac:groups=memory.amemory.io,resources=memoryrestores/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=memory.amemory.io,resources=memoryrestores/finalizers,verbs=update
// +kubebuilder:rbac:groups=memory.amemory.io,resources=memorysnapshots,verbs=get;list;watch
// +kubebuilder:rbac:groups=memory.amemory.io,resources=memorystores,verbs=get;list;watch
// +kubebuilder:rbac:groups=memory.amemory.io,resources=clustermemorybackends,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=list
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile moves one restore forward: fetch; once done, nothing (a restore never runs
// twice); otherwise wait for its snapshot, target and Secrets, start its Job or follow
// it; then record status.
func (r *MemoryRestoreReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	restore := &memoryv1alpha1.MemoryRestore{}
	if err := r.Get(ctx, req.NamespacedName, restore); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !restore.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}

	original := restore.DeepCopy()
	if restore.IsDone() {
		// Never run again; only bring the summary conditions up to date (a restore
		// finished by an older operator has none).
		return ctrl.Result{}, r.patchStatus(ctx, original, restore)
	}
	result, err := r.run(ctx, restore)
	if perr := r.patchStatus(ctx, original, restore); perr != nil {
		logf.FromContext(ctx).Error(perr, "Failed to record status")
		if err == nil {
			return ctrl.Result{}, perr
		}
	}
	return result, err
}

// SetupWithManager wires the watches: restores, their Jobs (every status change: a Job's
// progress is all in its status), the snapshots and stores they wait for, and the
// Secrets and ConfigMaps they need (metadata only).
func (r *MemoryRestoreReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	indexer := mgr.GetFieldIndexer()
	if err := indexer.IndexField(context.Background(), &memoryv1alpha1.MemoryRestore{}, restoreSnapshotField,
		func(obj client.Object) []string {
			if ref := obj.(*memoryv1alpha1.MemoryRestore).Spec.Source.SnapshotRef; ref != nil {
				return []string{ref.Name}
			}
			return nil
		}); err != nil {
		return err
	}
	if err := indexer.IndexField(context.Background(), &memoryv1alpha1.MemoryRestore{}, restoreTargetField,
		func(obj client.Object) []string {
			return []string{obj.(*memoryv1alpha1.MemoryRestore).Spec.TargetRef.Name}
		}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&memoryv1alpha1.MemoryRestore{}).
		Owns(&batchv1.Job{}).
		Watches(&memoryv1alpha1.MemorySnapshot{}, handler.EnqueueRequestsFromMapFunc(r.restoresForSnapshot)).
		Watches(&memoryv1alpha1.MemoryStore{}, handler.EnqueueRequestsFromMapFunc(r.restoresForStore)).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.restoresForSecret), builder.OnlyMetadata).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.restoresForConfigMap), builder.OnlyMetadata).
		WithOptions(controller.Options{
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](minRetryDelay, maxRetryDelay),
		}).
		Named("memoryrestore").
		Complete(r)
}

func (r *MemoryRestoreReconciler) resolver() packageResolver {
	return packageResolver{client: r.Client, secrets: r.APIReader}
}
