package controllers

import (
	"context"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// restoresForSnapshot wakes the unfinished restores that read a snapshot that appeared
// or changed, so a restore applied together with its snapshot starts as soon as the
// snapshot succeeds (and fails as soon as it fails).
func (r *MemoryRestoreReconciler) restoresForSnapshot(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.restoresIndexed(ctx, obj, restoreSnapshotField)
}

// restoresForStore wakes the unfinished restores into a store that appeared or changed,
// so a restore waiting for its target starts as soon as the target is Ready.
func (r *MemoryRestoreReconciler) restoresForStore(ctx context.Context, obj client.Object) []reconcile.Request {
	return r.restoresIndexed(ctx, obj, restoreTargetField)
}

func (r *MemoryRestoreReconciler) restoresIndexed(ctx context.Context, obj client.Object, field string) []reconcile.Request {
	var list memoryv1alpha1.MemoryRestoreList
	if err := r.List(ctx, &list, client.InNamespace(obj.GetNamespace()), client.MatchingFields{field: obj.GetName()}); err != nil {
		logf.FromContext(ctx).Error(err, "Listing MemoryRestores", "index", field)
		return nil
	}
	return unfinishedRestores(list.Items, func(*memoryv1alpha1.MemoryRestore) bool { return true })
}

// secretWaits are the reasons a restore waits on a Secret: any of its own, its target's
// connection Secret or embedder token, or its snapshot's object-storage credentials.
var secretWaits = []string{memoryv1alpha1.ReasonSecretNotFound, memoryv1alpha1.ReasonSecretKeyMissing, memoryv1alpha1.ReasonInvalidKey}

// restoresForSecret wakes the restores of the Secret's namespace that wait on a Secret.
func (r *MemoryRestoreReconciler) restoresForSecret(ctx context.Context, obj client.Object) []reconcile.Request {
	var list memoryv1alpha1.MemoryRestoreList
	if err := r.List(ctx, &list, client.InNamespace(obj.GetNamespace())); err != nil {
		logf.FromContext(ctx).Error(err, "Listing MemoryRestores for a Secret event")
		return nil
	}
	return unfinishedRestores(list.Items, func(rs *memoryv1alpha1.MemoryRestore) bool {
		return waitsFor(rs, secretWaits...)
	})
}

// restoresForConfigMap wakes the restores of the ConfigMap's namespace that wait for it
// as their scope map.
func (r *MemoryRestoreReconciler) restoresForConfigMap(ctx context.Context, obj client.Object) []reconcile.Request {
	var list memoryv1alpha1.MemoryRestoreList
	if err := r.List(ctx, &list, client.InNamespace(obj.GetNamespace())); err != nil {
		logf.FromContext(ctx).Error(err, "Listing MemoryRestores for a ConfigMap event")
		return nil
	}
	return unfinishedRestores(list.Items, func(rs *memoryv1alpha1.MemoryRestore) bool {
		m := rs.Spec.Mapping
		return m != nil && m.From != nil && m.From.ConfigMapKeyRef != nil && m.From.ConfigMapKeyRef.Name == obj.GetName() &&
			waitsFor(rs, memoryv1alpha1.ReasonConfigMapNotFound, memoryv1alpha1.ReasonConfigMapKeyMissing)
	})
}

// waitsFor reports whether the restore has no Job yet and waits for one of the reasons.
func waitsFor(rs *memoryv1alpha1.MemoryRestore, reasons ...string) bool {
	c := meta.FindStatusCondition(rs.Status.Conditions, memoryv1alpha1.ConditionProgressing)
	return rs.Status.JobName == "" && c != nil && slices.Contains(reasons, c.Reason)
}

func unfinishedRestores(items []memoryv1alpha1.MemoryRestore, also func(*memoryv1alpha1.MemoryRestore) bool) []reconcile.Request {
	var requests []reconcile.Request
	for i := range items {
		if rs := &items[i]; !rs.IsDone() && also(rs) {
			requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(rs)})
		}
	}
	return requests
}
