package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/provision"
)

// How often a ClusterMemoryBackend's backends are checked again: its status says
// whether stores can be provisioned on it now, not only when it was created.
const (
	backendRecheck = 5 * time.Minute
	// backendRetry paces checks while a backend is unreachable or a Secret missing.
	backendRetry = 30 * time.Second
)

// ClusterMemoryBackendReconciler checks, changing nothing, that a ClusterMemoryBackend
// can host stores: its Secrets are there, PostgreSQL lets its admin create roles and
// schemas, Milvus answers, the bucket exists (or may be created). Stores do the
// provisioning; this only reports, so a platform team and its GitOps tool see a broken
// backend before the first tenant does.
type ClusterMemoryBackendReconciler struct {
	client.Client
	// APIReader reads Secrets straight from the API server (never cached).
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	// OperatorNamespace holds the backends' Secrets.
	OperatorNamespace string
	Clock             clock.PassiveClock
}

// +kubebuilder:rbac:groups=memory.amemory.io,resources=clustermemorybackends,verbs=get;list;watch
// +kubebuilder:rbac:groups=memory.amemory.io,resources=clustermemorybackends/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=memory.amemory.io,resources=memorystores,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile checks one backend and records what it found.
func (r *ClusterMemoryBackendReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cb := &memoryv1alpha1.ClusterMemoryBackend{}
	if err := r.Get(ctx, req.NamespacedName, cb); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cb.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	// A generation not seen yet says so before the checks (each may wait for a
	// connection timeout).
	if cb.Status.ObservedGeneration != cb.Generation {
		original := cb.DeepCopy()
		cb.Status.ObservedGeneration = cb.Generation
		markReconciling(&cb.Status.Conditions, cb.Generation, memoryv1alpha1.ReasonProvisioning,
			fmt.Sprintf("Checking the backends of generation %d", cb.Generation))
		if _, err := patchStatusIfChanged(ctx, r.Client, original, cb, original.Status, cb.Status); err != nil {
			return ctrl.Result{}, err
		}
	}

	original := cb.DeepCopy()
	s := r.check(ctx, cb)
	stores, err := r.storesUsing(ctx, cb.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	now := metav1.NewTime(r.Clock.Now())
	cb.Status.ObservedGeneration = cb.Generation
	cb.Status.LastChecked = &now
	cb.Status.Stores = stores
	setSummary(&cb.Status.Conditions, cb.Generation, s)
	if _, err := patchStatusIfChanged(ctx, r.Client, original, cb, original.Status, cb.Status); err != nil {
		return ctrl.Result{}, err
	}
	r.emitTransition(original, cb)
	if s.state == working {
		return ctrl.Result{RequeueAfter: backendRetry}, nil
	}
	return ctrl.Result{RequeueAfter: backendRecheck}, nil
}

// check reads the backend's credentials and checks each backend, stopping at the
// first failure.
func (r *ClusterMemoryBackendReconciler) check(ctx context.Context, cb *memoryv1alpha1.ClusterMemoryBackend) summary {
	rb, err := resolveBackendSpec(ctx, r.APIReader, cb.Spec.BackendSpec, r.OperatorNamespace)
	if err != nil {
		return checkFailed(ctx, err)
	}
	pg, err := provision.CheckPostgres(ctx, rb.postgres)
	if err != nil {
		return checkFailed(ctx, err)
	}
	found := []string{pg + " can host stores"}
	if cb.Spec.VectorEngine == memoryv1alpha1.EnginePGVector {
		ext, err := provision.CheckPGVector(ctx, rb.postgres)
		if err != nil {
			return checkFailed(ctx, err)
		}
		found = append(found, "with "+ext)
	}
	if rb.milvus != nil {
		if err := provision.CheckMilvus(ctx, *rb.milvus); err != nil {
			return checkFailed(ctx, err)
		}
		found = append(found, "Milvus "+rb.milvus.Address+" answers")
	}
	if rb.s3 != nil {
		if err := provision.CheckObjectStore(ctx, *rb.s3); err != nil {
			return checkFailed(ctx, err)
		}
		found = append(found, fmt.Sprintf("bucket %s at %s is usable", rb.s3.Bucket, rb.s3.Endpoint))
	}
	return summary{state: done, reason: memoryv1alpha1.ReasonProvisioned, message: strings.Join(found, "; ")}
}

// checkFailed is the summary of a failed check, with the reason the store controller
// would report for the same failure.
func checkFailed(ctx context.Context, err error) summary {
	var se *stepError
	if errors.As(err, &se) {
		return failing(se.reason, se.message)
	}
	var pe *provision.Error
	if !errors.As(err, &pe) {
		logf.FromContext(ctx).Error(err, "Checking a ClusterMemoryBackend")
		return failing(memoryv1alpha1.ReasonBackendError, err.Error())
	}
	return failing(string(pe.Reason), pe.Error())
}

// storesUsing counts the MemoryStores on the backend.
func (r *ClusterMemoryBackendReconciler) storesUsing(ctx context.Context, name string) (int32, error) {
	var stores memoryv1alpha1.MemoryStoreList
	if err := r.List(ctx, &stores); err != nil {
		return 0, err
	}
	var n int32
	for i := range stores.Items {
		if stores.Items[i].Spec.Backend.ClusterBackend == name {
			n++
		}
	}
	return n, nil
}

// emitTransition announces a backend becoming usable, or a new reason it is not.
func (r *ClusterMemoryBackendReconciler) emitTransition(original, cb *memoryv1alpha1.ClusterMemoryBackend) {
	before := meta.FindStatusCondition(original.Status.Conditions, memoryv1alpha1.ConditionReady)
	after := meta.FindStatusCondition(cb.Status.Conditions, memoryv1alpha1.ConditionReady)
	if after == nil || (before != nil && before.Status == after.Status && before.Reason == after.Reason) {
		return
	}
	switch {
	case after.Status == metav1.ConditionTrue:
		r.Recorder.Eventf(cb, nil, corev1.EventTypeNormal, "Ready", "Check", "%s", after.Message)
	case after.Reason != memoryv1alpha1.ReasonProvisioning:
		r.Recorder.Eventf(cb, nil, corev1.EventTypeWarning, after.Reason, "Check", "%s", after.Message)
	}
}

// SetupWithManager wires the watches: backends, the Secrets in the operator's
// namespace they reference (metadata only), and the stores that use them (for the
// count).
func (r *ClusterMemoryBackendReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&memoryv1alpha1.ClusterMemoryBackend{}).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.backendsForSecret), builder.OnlyMetadata).
		Watches(&memoryv1alpha1.MemoryStore{}, handler.EnqueueRequestsFromMapFunc(backendOfStore)).
		Named("clustermemorybackend").
		Complete(r)
}

// backendsForSecret maps a Secret in the operator's namespace to the backends that
// reference it.
func (r *ClusterMemoryBackendReconciler) backendsForSecret(ctx context.Context, obj client.Object) []reconcile.Request {
	if obj.GetNamespace() != r.OperatorNamespace {
		return nil
	}
	var backends memoryv1alpha1.ClusterMemoryBackendList
	if err := r.List(ctx, &backends); err != nil {
		logf.FromContext(ctx).Error(err, "Listing ClusterMemoryBackends for a Secret event")
		return nil
	}
	var requests []reconcile.Request
	for i := range backends.Items {
		if referencesSecret(backends.Items[i].Spec.BackendSpec, obj.GetName()) {
			requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&backends.Items[i])})
		}
	}
	return requests
}

// backendOfStore maps a store to the backend it uses, if any.
func backendOfStore(_ context.Context, obj client.Object) []reconcile.Request {
	store, ok := obj.(*memoryv1alpha1.MemoryStore)
	if !ok || store.Spec.Backend.ClusterBackend == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: store.Spec.Backend.ClusterBackend}}}
}
