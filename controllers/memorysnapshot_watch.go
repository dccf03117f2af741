package controllers

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// snapshotsForStore wakes the unfinished snapshots of a store that appeared or changed,
// so a snapshot waiting for its store starts as soon as the store is Ready.
func (r *MemorySnapshotReconciler) snapshotsForStore(ctx context.Context, obj client.Object) []reconcile.Request {
	var list memoryv1alpha1.MemorySnapshotList
	if err := r.List(ctx, &list, client.InNamespace(obj.GetNamespace()), client.MatchingFields{storeRefField: obj.GetName()}); err != nil {
		logf.FromContext(ctx).Error(err, "Listing MemorySnapshots for a MemoryStore event")
		return nil
	}
	return unfinished(list.Items, func(*memoryv1alpha1.MemorySnapshot) bool { return true })
}

// snapshotsForSecret wakes the snapshots of the Secret's namespace that wait to start
// and need this Secret: their key, their destination's credentials, or their store's
// connection Secret or object-storage credentials.
func (r *MemorySnapshotReconciler) snapshotsForSecret(ctx context.Context, obj client.Object) []reconcile.Request {
	var list memoryv1alpha1.MemorySnapshotList
	if err := r.List(ctx, &list, client.InNamespace(obj.GetNamespace())); err != nil {
		logf.FromContext(ctx).Error(err, "Listing MemorySnapshots for a Secret event")
		return nil
	}
	return unfinished(list.Items, func(s *memoryv1alpha1.MemorySnapshot) bool {
		return s.Status.JobName == "" && r.needsSecret(ctx, s, obj.GetName())
	})
}

func (r *MemorySnapshotReconciler) needsSecret(ctx context.Context, s *memoryv1alpha1.MemorySnapshot, name string) bool {
	if k := s.Spec.Encryption.KeySecret; k != nil && k.Name == name {
		return true
	}
	if d := s.Spec.Destination; d != nil && d.CredentialsSecret != nil && d.CredentialsSecret.Name == name {
		return true
	}
	store := &memoryv1alpha1.MemoryStore{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: s.Spec.StoreRef.Name}, store); err != nil {
		return false
	}
	if store.WorkerSecretName() == name {
		return true
	}
	o := store.Spec.Backend.ObjectStorage
	return o != nil && o.CredentialsSecret.Name == name
}

func unfinished(items []memoryv1alpha1.MemorySnapshot, also func(*memoryv1alpha1.MemorySnapshot) bool) []reconcile.Request {
	var requests []reconcile.Request
	for i := range items {
		if s := &items[i]; !s.IsDone() && also(s) {
			requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(s)})
		}
	}
	return requests
}
