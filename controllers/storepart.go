package controllers

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// storePart is the reconcile loop of a controller that owns one part of a
// MemoryStore's status (a condition and a status field) and runs the store's Jobs of
// one kind on a schedule: archival and restore drills. S is that part as the
// reconcile wants it.
type storePart[S any] struct {
	// what names the part in logs ("archival", "restore drill").
	what string
	// forget deletes the store's metrics, once it is gone or going (its Jobs go with it
	// through their owner references).
	forget    func(namespace, name string)
	current   func(*memoryv1alpha1.MemoryStore) S
	reconcile func(context.Context, *memoryv1alpha1.MemoryStore, *S) (ctrl.Result, error)
	// patch writes the part; announce emits Events and metrics once it is written.
	patch    func(context.Context, *memoryv1alpha1.MemoryStore, S) error
	announce func(*memoryv1alpha1.MemoryStore, S)
}

func (p storePart[S]) run(ctx context.Context, c client.Reader, req ctrl.Request) (ctrl.Result, error) {
	store := &memoryv1alpha1.MemoryStore{}
	if err := c.Get(ctx, req.NamespacedName, store); err != nil {
		if apierrors.IsNotFound(err) {
			p.forget(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !store.DeletionTimestamp.IsZero() {
		p.forget(store.Namespace, store.Name)
		return ctrl.Result{}, nil
	}
	want := p.current(store)
	result, err := p.reconcile(ctx, store, &want)
	if perr := p.patch(ctx, store, want); perr != nil {
		logf.FromContext(ctx).Error(perr, "Failed to record the "+p.what+"'s status")
		if err == nil {
			return ctrl.Result{}, perr
		}
		return result, err
	}
	p.announce(store, want)
	return result, err
}

// patchStorePart writes one part of the store's status, which apply sets on a store,
// and nothing else: other reconcilers write the rest of the same status, so the
// patch carries only what changed, under an optimistic lock; on a conflict the store
// is read again (through reader) and the part applied again.
func patchStorePart(ctx context.Context, c client.Client, reader client.Reader, store *memoryv1alpha1.MemoryStore,
	apply func(*memoryv1alpha1.MemoryStore)) error {
	attempt := 0
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if attempt++; attempt > 1 {
			if err := reader.Get(ctx, client.ObjectKeyFromObject(store), store); err != nil {
				return err
			}
		}
		original := store.DeepCopy()
		apply(store)
		_, err := patchStatusIfChanged(ctx, c, original, store, original.Status, store.Status)
		return err
	})
}
