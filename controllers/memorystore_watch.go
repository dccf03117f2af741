package controllers

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// storesForSecret maps a Secret to the stores that own it or read it (credentials, the
// embedder's token, the gateway's certificate), so creating a missing Secret or
// rotating one takes effect at once, not after a backoff.
func (r *MemoryStoreReconciler) storesForSecret(ctx context.Context, obj client.Object) []reconcile.Request {
	if ref := metav1.GetControllerOf(obj); ref != nil && ref.Kind == "MemoryStore" {
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: ref.Name}}}
	}
	var stores memoryv1alpha1.MemoryStoreList
	opts := []client.ListOption{}
	if obj.GetNamespace() != r.OperatorNamespace {
		opts = append(opts, client.InNamespace(obj.GetNamespace()))
	}
	if err := r.List(ctx, &stores, opts...); err != nil {
		logf.FromContext(ctx).Error(err, "Listing MemoryStores for a Secret event")
		return nil
	}
	var backends memoryv1alpha1.ClusterMemoryBackendList
	if obj.GetNamespace() == r.OperatorNamespace {
		if err := r.List(ctx, &backends); err != nil {
			logf.FromContext(ctx).Error(err, "Listing ClusterMemoryBackends for a Secret event")
		}
	}
	usesSecret := map[string]bool{} // ClusterMemoryBackends that reference this Secret
	for i := range backends.Items {
		if referencesSecret(backends.Items[i].Spec.BackendSpec, obj.GetName()) {
			usesSecret[backends.Items[i].Name] = true
		}
	}

	var requests []reconcile.Request
	for i := range stores.Items {
		s := &stores.Items[i]
		b := s.Spec.Backend
		match := false
		switch {
		case b.ClusterBackend != "":
			match = usesSecret[b.ClusterBackend]
		case s.Namespace == obj.GetNamespace() && b.Postgres != nil:
			match = referencesSecret(memoryv1alpha1.BackendSpec{Postgres: *b.Postgres, Milvus: b.Milvus, ObjectStorage: b.ObjectStorage}, obj.GetName())
		}
		if match || (s.Namespace == obj.GetNamespace() && readsOwnSecret(s, obj.GetName())) {
			requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(s)})
		}
	}
	return requests
}

// readsOwnSecret reports whether the store reads the Secret name of its own namespace
// besides its backends': the embedder's token, the gateway's certificate.
func readsOwnSecret(s *memoryv1alpha1.MemoryStore, name string) bool {
	for _, ref := range embedderAPIKeyRefs(s) {
		if ref.Name == name {
			return true
		}
	}
	return s.Spec.Gateway != nil && s.Spec.Gateway.TLS != nil && s.Spec.Gateway.TLS.SecretName == name
}

func referencesSecret(b memoryv1alpha1.BackendSpec, name string) bool {
	if b.Postgres.AdminSecret.Name == name {
		return true
	}
	if b.Milvus != nil && b.Milvus.CredentialsSecret != nil && b.Milvus.CredentialsSecret.Name == name {
		return true
	}
	return b.ObjectStorage != nil && b.ObjectStorage.CredentialsSecret.Name == name
}

// storesForBackend maps a ClusterMemoryBackend to the stores that use it.
func (r *MemoryStoreReconciler) storesForBackend(ctx context.Context, obj client.Object) []reconcile.Request {
	var stores memoryv1alpha1.MemoryStoreList
	if err := r.List(ctx, &stores); err != nil {
		logf.FromContext(ctx).Error(err, "Listing MemoryStores for a ClusterMemoryBackend event")
		return nil
	}
	var requests []reconcile.Request
	for i := range stores.Items {
		if stores.Items[i].Spec.Backend.ClusterBackend == obj.GetName() {
			requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&stores.Items[i])})
		}
	}
	return requests
}

// storeOfRestore maps a restore that completed successfully to its target store, whose
// status records the last restore it received.
func storeOfRestore(_ context.Context, obj client.Object) []reconcile.Request {
	restore, ok := obj.(*memoryv1alpha1.MemoryRestore)
	if !ok || !restore.Succeeded() || restore.Spec.DryRun {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: restore.Namespace, Name: restore.Spec.TargetRef.Name}}}
}

// storeOfPreChangeSnapshot is the store a finished pre-change snapshot was taken
// for: the deletion or migration waiting for it goes on at once rather than at its
// next look (memorystore_prechange.go).
func storeOfPreChangeSnapshot(_ context.Context, obj client.Object) []reconcile.Request {
	snap, ok := obj.(*memoryv1alpha1.MemorySnapshot)
	if !ok || snap.Labels[memoryv1alpha1.LabelPreChange] == "" || !snap.IsDone() {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: snap.Namespace, Name: snap.Spec.StoreRef.Name}}}
}
