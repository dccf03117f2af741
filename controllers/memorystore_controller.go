// Package controllers holds the reconcilers. They decide what should exist and record
// status; the work against backends lives in internal/provision.
package controllers

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// Retry pacing: failures back off exponentially between these bounds, so an unreachable
// backend is retried promptly at first and never hammered.
const (
	minRetryDelay = time.Second
	maxRetryDelay = 5 * time.Minute
	// conflictRecheck is how often a store blocked by something only a human can fix
	// (dimension mismatch, tenant conflict) is looked at again; watches catch spec fixes.
	conflictRecheck = 10 * time.Minute
)

// MemoryStoreReconciler provisions a MemoryStore's backends and its connection Secret.
type MemoryStoreReconciler struct {
	client.Client
	// APIReader reads Secrets straight from the API server: the manager caches only
	// their metadata, so credentials are never held in the operator's cache.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	// OperatorNamespace holds the Secrets of ClusterMemoryBackends.
	OperatorNamespace string
	// GatewayImage is the image the gateway Deployments run: the operator's own.
	GatewayImage string
	// CutoverGrace is how long an embedding switch's cutover waits, once every
	// gateway pod serves the new index, for the pods replaced to end (0: the gateway
	// pods' termination grace period). Tests shorten it.
	CutoverGrace time.Duration
}

// +kubebuilder:rbac:groups=memory.amemory.io,resources=memorystores,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=memory.amemory.io,resources=memorystores/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=memory.amemory.io,resources=memorystores/finalizers,verbs=update
// +kubebuilder:rbac:groups=memory.amemory.io,resources=clustermemorybackends,verbs=get;list;watch
// +kubebuilder:rbac:groups=memory.amemory.io,resources=memoryrestores,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=list
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile brings one MemoryStore to its declared state: fetch, handle deletion, make
// sure the finalizer is set, provision step by step, then record status.
func (r *MemoryStoreReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)

	store := &memoryv1alpha1.MemoryStore{}
	if err := r.Get(ctx, req.NamespacedName, store); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !store.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, store)
	}
	if !controllerutil.ContainsFinalizer(store, memoryv1alpha1.FinalizerName) {
		patch := client.MergeFrom(store.DeepCopy())
		controllerutil.AddFinalizer(store, memoryv1alpha1.FinalizerName)
		if err := r.Patch(ctx, store, patch); err != nil {
			return ctrl.Result{}, err
		}
	}

	// A generation not seen yet says so first: provisioning can take a while, and
	// until its status says otherwise a store must not look done.
	if store.Status.ObservedGeneration != store.Generation {
		original := store.DeepCopy()
		store.Status.ObservedGeneration = store.Generation
		markReconciling(&store.Status.Conditions, store.Generation, memoryv1alpha1.ReasonProvisioning,
			fmt.Sprintf("Provisioning backends for generation %d", store.Generation))
		store.Status.Phase = store.DerivePhase()
		if _, err := patchStatusIfChanged(ctx, r.Client, original, store, original.Status, store.Status); err != nil {
			return ctrl.Result{}, err
		}
	}

	original := store.DeepCopy()
	result, err := r.provision(ctx, store)
	if !store.IsReady() {
		if gerr := r.gatewayWhileNotReady(ctx, store); gerr != nil && err == nil {
			err = gerr
		}
	}
	if perr := r.patchStatus(ctx, original, store); perr != nil {
		log.Error(perr, "Failed to record status")
		if err == nil {
			return ctrl.Result{}, perr
		}
	}
	return result, err
}

// SetupWithManager wires the watches: MemoryStores, their connection Secrets, Secrets
// they reference (metadata only), the ClusterMemoryBackends they use, restores
// that completed into them (status.lastRestore), the snapshots a deletion or an
// upgrade's migration waits for once they finished, and their gateways' Deployments
// (the events that change readiness) and Services.
func (r *MemoryStoreReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&memoryv1alpha1.MemoryStore{}).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.storesForSecret), builder.OnlyMetadata).
		Watches(&memoryv1alpha1.ClusterMemoryBackend{}, handler.EnqueueRequestsFromMapFunc(r.storesForBackend)).
		Watches(&memoryv1alpha1.MemoryRestore{}, handler.EnqueueRequestsFromMapFunc(storeOfRestore)).
		Watches(&memoryv1alpha1.MemorySnapshot{}, handler.EnqueueRequestsFromMapFunc(storeOfPreChangeSnapshot)).
		Owns(&appsv1.Deployment{}, builder.WithPredicates(gatewayDeploymentChanged)).
		Owns(&corev1.Service{}).
		// The re-embed Job of an embedding switch (memorystore_switch.go).
		Owns(&batchv1.Job{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			return o.GetLabels()["app.kubernetes.io/component"] == reembedContainer
		}))).
		WithOptions(controller.Options{
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](minRetryDelay, maxRetryDelay),
		}).
		Named("memorystore").
		Complete(r)
}
