package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/provision"
)

// reconcileDelete releases a store. It removes the gateway first; then, with
// reclaimPolicy Delete, it removes the collection,
// the object prefix, and the schema and role (in that order: PostgreSQL, the system of
// record, goes last); with Retain it leaves them. The finalizer is removed only when
// that is done, so a backend that is down delays deletion instead of leaking data.
func (r *MemoryStoreReconciler) reconcileDelete(ctx context.Context, store *memoryv1alpha1.MemoryStore) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(store, memoryv1alpha1.FinalizerName) {
		return ctrl.Result{}, nil
	}
	log := logf.FromContext(ctx)

	// The gateway goes first: agents stop reaching the store before its data is
	// dropped, and a store of the same name created again does not find it owned by
	// this one (garbage collection would remove it, but later).
	if _, err := r.deleteGatewayObjects(ctx, store); err != nil {
		return ctrl.Result{}, err
	}

	// A restore drill's scratch copy is never data: it goes whatever the policy, and
	// before the store's roles, which hold grants on it.
	if err := r.dropScratch(ctx, store); err != nil {
		return ctrl.Result{}, err
	}

	if store.ReclaimPolicyOrDefault() == memoryv1alpha1.ReclaimDelete {
		// Nothing is dropped before a snapshot of it succeeded (unless the store says
		// otherwise); agents reach it no more, so the snapshot is its last state.
		if wait, err := r.waitForPreChangeSnapshot(ctx, store, changeDelete); wait || err != nil {
			return ctrl.Result{RequeueAfter: preChangeRecheck}, err
		}
		original := store.DeepCopy()
		reclaimed, err := r.deleteBackends(ctx, store)
		if err != nil {
			reason := memoryv1alpha1.ReasonCleanupFailed
			var se *stepError
			if errors.As(err, &se) {
				reason = se.reason
			}
			store.SetCondition(memoryv1alpha1.ConditionReady, metav1.ConditionFalse, reason, "Deleting: "+err.Error())
			if perr := r.patchStatus(ctx, original, store); perr != nil {
				log.Error(perr, "Failed to record status")
			}
			return ctrl.Result{}, err
		}
		// Reclaimed says what was deleted; a store whose backends were all someone
		// else's (BackendsKept) reclaimed nothing and says nothing of the kind.
		if len(reclaimed) > 0 {
			r.Recorder.Eventf(store, nil, corev1.EventTypeNormal, "Reclaimed", "Delete",
				"Deleted %s of tenant %s", strings.Join(reclaimed, ", "), store.Spec.Tenant)
			log.Info("Reclaimed store backends", "tenant", store.Spec.Tenant, "deleted", reclaimed)
		} else {
			log.Info("Reclaimed nothing: no backend was this store's", "tenant", store.Spec.Tenant)
		}
	} else {
		log.Info("Retaining store backends", "tenant", store.Spec.Tenant)
	}

	// The Secrets would be garbage-collected through their owner reference, but not
	// before a store of the same name could be created again and find them owned by
	// the old one.
	for _, name := range []string{store.ConnectionSecretNameOrDefault(), store.WorkerSecretName()} {
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: store.Namespace, Name: name}}
		if err := r.Get(ctx, client.ObjectKeyFromObject(secret), secret); err == nil && metav1.IsControlledBy(secret, store) {
			if err := r.Delete(ctx, secret); client.IgnoreNotFound(err) != nil {
				return ctrl.Result{}, err
			}
		} else if client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, err
		}
	}

	patch := client.MergeFrom(store.DeepCopy())
	controllerutil.RemoveFinalizer(store, memoryv1alpha1.FinalizerName)
	return ctrl.Result{}, client.IgnoreNotFound(r.Patch(ctx, store, patch))
}

// deleteBackends deletes what of the tenant's backends is this store's and returns what
// it deleted, for the Reclaimed event.
func (r *MemoryStoreReconciler) deleteBackends(ctx context.Context, store *memoryv1alpha1.MemoryStore) ([]string, error) {
	rb, err := r.resolveBackend(ctx, store)
	if err != nil {
		return nil, err
	}
	names, err := provision.NamesFor(store.Spec.Tenant, rb.basePrefix())
	if err != nil {
		return nil, err
	}
	names = servingNames(store, names)
	// The schema's owner mark says whose the tenant's backends are (provisioning makes
	// and marks it first). A store that lost a TenantConflict provisioned nothing:
	// everything there is another store's, and nothing is deleted.
	own, whose, err := provision.SchemaOwnership(ctx, rb.postgres, names, ownerOf(store))
	if err != nil {
		return nil, err
	}
	if own == provision.OwnedByOther {
		r.Recorder.Eventf(store, nil, corev1.EventTypeWarning, "BackendsKept", "Delete",
			"Deleted nothing of tenant %s: its backends are not this store's (%s)", store.Spec.Tenant, whose)
		return nil, nil
	}
	deleted, err := r.deleteMilvus(ctx, store, rb, names, own)
	if err != nil {
		return nil, err
	}
	if rb.redis != nil {
		// Sessions are short-lived by design: the user and every key of the prefix go
		// (also those of a store that moved its sessions to PostgreSQL since; nothing
		// when it never had any, and nothing of a tenant another store owns).
		// For a store whose sessions are in PostgreSQL now, that cleanup is best effort:
		// a Redis that does not answer does not hold its deletion back.
		bestEffort := store.Status.ShortTerm != nil && store.Status.ShortTerm.Store == memoryv1alpha1.ShortTermPostgres
		err := provision.DeleteRedisTenant(ctx, *rb.redis, names, ownerOf(store))
		switch {
		case provision.ReasonOf(err) == provision.ReasonTenantConflict || err != nil && bestEffort:
			r.Recorder.Eventf(store, nil, corev1.EventTypeWarning, "BackendsKept", "Delete", "Left the Redis user and keys alone: %v", err)
		case err != nil:
			return nil, err
		default:
			deleted = append(deleted, "Redis user "+names.RedisUser+" and its sessions")
		}
	}
	if rb.s3 != nil {
		err := provision.DeleteObjectStore(ctx, *rb.s3, names, ownerOf(store))
		switch {
		case provision.ReasonOf(err) == provision.ReasonTenantConflict:
			r.Recorder.Eventf(store, nil, corev1.EventTypeWarning, "BackendsKept", "Delete", "Left the object prefix alone: %v", err)
		case err != nil:
			return nil, err
		default:
			deleted = append(deleted, "object prefix "+names.Prefix+" (snapshots kept)")
		}
	}
	if own == provision.NoSchema {
		return deleted, nil
	}
	if err := provision.DeletePostgres(ctx, rb.postgres, names, ownerOf(store)); err != nil {
		return nil, err
	}
	// PostgreSQL goes last, but it is the system of record: it leads the list.
	return append([]string{"schema " + names.Schema + " and its roles"}, deleted...), nil
}

// deleteMilvus removes the store's Milvus user and role, then its collection, and
// returns what it deleted. The user goes first (its removal checks the collection is
// this store's, so it must still be there); the collection only with a schema of ours,
// and only if it carries this store's mark (DeleteVectors): another store's stays. A
// store on another engine has nothing in Milvus.
func (r *MemoryStoreReconciler) deleteMilvus(ctx context.Context, store *memoryv1alpha1.MemoryStore, rb *resolvedBackend,
	names provision.Names, own provision.Ownership) ([]string, error) {
	var deleted []string
	usesMilvus := rb.milvus != nil && (store.Status.Vector == nil || store.Status.Vector.Engine == provision.EngineMilvus)
	if !usesMilvus {
		return nil, nil
	}
	if own != provision.OwnedByUs {
		r.Recorder.Eventf(store, nil, corev1.EventTypeWarning, "BackendsKept", "Delete",
			"Left Milvus collection %s in place: no schema of this store says it is its own", names.Collection)
		return nil, nil
	}
	if rb.milvus.Username != "" {
		err := provision.DeleteMilvusTenant(ctx, *rb.milvus, names, vectorOwner(store, names))
		switch {
		case provision.ReasonOf(err) == provision.ReasonTenantConflict:
			r.Recorder.Eventf(store, nil, corev1.EventTypeWarning, "BackendsKept", "Delete", "Left the Milvus user alone: %v", err)
		case err != nil:
			return nil, err
		default:
			deleted = append(deleted, "Milvus user "+names.MilvusUser+" and role "+names.MilvusRole)
		}
	}
	err := provision.DeleteVectors(ctx, rb.postgres, rb.milvus, names, vectorOwner(store, names))
	switch {
	case provision.ReasonOf(err) == provision.ReasonTenantConflict:
		r.Recorder.Eventf(store, nil, corev1.EventTypeWarning, "BackendsKept", "Delete", "Left the Milvus collection alone: %v", err)
	case err != nil:
		return nil, err
	default:
		deleted = append(deleted, "Milvus collection "+strings.Join(append([]string{names.Collection}, names.Generations...), ", "))
	}
	return deleted, nil
}

// preChangeRecheck is how often a deletion waiting for its snapshot looks again.
const preChangeRecheck = 5 * time.Second

// dropScratch drops the scratch copy a restore drill may have left: one must go when a
// drill was running (its copy holds up to a store's size); otherwise there is none
// unless the operator stopped between making one and recording it, and a backend
// that does not answer does not hold the deletion back for that.
func (r *MemoryStoreReconciler) dropScratch(ctx context.Context, store *memoryv1alpha1.MemoryStore) error {
	st := store.Status.RestoreDrill
	if st == nil || store.Status.Postgres == nil {
		return nil
	}
	err := func() error {
		rb, err := r.resolveBackend(ctx, store)
		if err != nil {
			return err
		}
		names, err := provision.NamesFor(store.Spec.Tenant, rb.basePrefix())
		if err != nil {
			return err
		}
		return dropStoreScratch(ctx, store, rb, names)
	}()
	switch {
	case err != nil && st.Active != nil:
		return fmt.Errorf("dropping the restore drill's scratch copy %s: %w", st.Active.Scratch, err)
	case err != nil:
		logf.FromContext(ctx).Info("Could not check for a restore drill's scratch copy; deleting the store anyway", "error", err.Error())
	}
	return nil
}
