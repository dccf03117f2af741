package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// scheduleExpiry sets status.expiresAt on a finished snapshot with a TTL (its completion
// time plus the TTL) and asks to be woken then.
func (r *MemorySnapshotReconciler) scheduleExpiry(snap *memoryv1alpha1.MemorySnapshot) ctrl.Result {
	if snap.Spec.TTL == nil {
		return ctrl.Result{}
	}
	if snap.Status.ExpiresAt == nil {
		end := snap.Status.CompletionTime
		if end == nil {
			end = r.now()
		}
		at := metav1.NewTime(end.Add(snap.Spec.TTL.Duration))
		snap.Status.ExpiresAt = &at
	}
	return ctrl.Result{RequeueAfter: max(snap.Status.ExpiresAt.Sub(r.now().Time), time.Second)}
}

// expired reports whether a finished snapshot's TTL has passed.
func (r *MemorySnapshotReconciler) expired(snap *memoryv1alpha1.MemorySnapshot) bool {
	return snap.IsDone() && snap.Spec.TTL != nil && snap.Status.ExpiresAt != nil && !r.now().Before(snap.Status.ExpiresAt)
}

// keepManaged records, instead of deleting, an expired snapshot that a GitOps tool
// manages (unless spec.ttlDeletesGitOpsManaged): the tool would create it again and a
// new snapshot be taken. It reports whether the snapshot is kept.
func (r *MemorySnapshotReconciler) keepManaged(snap *memoryv1alpha1.MemorySnapshot) bool {
	manager := gitOpsManager(snap)
	if manager == "" || snap.Spec.TTLDeletesGitOpsManaged {
		return false
	}
	if !meta.IsStatusConditionFalse(snap.Status.Conditions, memoryv1alpha1.ConditionExpired) {
		msg := fmt.Sprintf("TTL %s passed at %s, but %s manages this snapshot: it and its package are kept. "+
			"Remove it from Git to delete it, or set spec.ttlDeletesGitOpsManaged and exclude it from pruning and self-heal",
			snap.Spec.TTL.Duration, snap.Status.ExpiresAt.UTC().Format(time.RFC3339), manager)
		snap.SetCondition(memoryv1alpha1.ConditionExpired, metav1.ConditionFalse, memoryv1alpha1.ReasonTTLKept, msg)
		r.Recorder.Eventf(snap, nil, corev1.EventTypeNormal, memoryv1alpha1.ReasonTTLKept, "Expire", "%s", msg)
	}
	return true
}

// expire deletes the package, then the snapshot. A package that cannot be reached keeps
// the snapshot (retried with backoff): deleting it would lose track of the data.
func (r *MemorySnapshotReconciler) expire(ctx context.Context, snap *memoryv1alpha1.MemorySnapshot) (ctrl.Result, error) {
	if err := deleteSnapshotAndPackage(ctx, r.Client, r.resolver(), r.packages(), snap); err != nil {
		r.Recorder.Eventf(snap, nil, corev1.EventTypeWarning, "ExpiryFailed", "Expire",
			"TTL passed, but deleting the package failed: %v", err)
		return ctrl.Result{}, err
	}
	r.Recorder.Eventf(snap, nil, corev1.EventTypeNormal, memoryv1alpha1.ReasonExpired, "Expire",
		"Deleted the snapshot and its package: TTL %s passed at %s", snap.Spec.TTL.Duration, snap.Status.ExpiresAt.UTC().Format(time.RFC3339))
	logf.FromContext(ctx).Info("Expired snapshot deleted", "expiresAt", snap.Status.ExpiresAt)
	return ctrl.Result{}, nil
}

// deleteSnapshotAndPackage removes a finished snapshot's package objects, then the
// snapshot (only the object it was given: a snapshot created again under the same name
// is left alone). A snapshot that never wrote a package has nothing to remove.
func deleteSnapshotAndPackage(ctx context.Context, c client.Client, resolver packageResolver, packages PackageStore,
	snap *memoryv1alpha1.MemorySnapshot) error {
	if loc := snap.Status.Location; loc != nil && loc.Prefix != "" {
		access, err := resolver.access(ctx, snap, nil, false)
		if err != nil {
			return err
		}
		if err := packages.Delete(ctx, access); err != nil {
			return fmt.Errorf("deleting package %s: %w", access, err)
		}
	}
	err := c.Delete(ctx, snap, client.Preconditions{UID: &snap.UID})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
