package controllers

import (
	"context"
	"errors"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/provision"
)

// A snapshot before anything destructive: the operator snapshots a store, and waits
// until that snapshot succeeded, before it destroys the store's data (for now:
// deleting it with reclaimPolicy Delete). The snapshot is an ordinary MemorySnapshot,
// labelled with what it preceded, owned by nothing (it outlives the store, as every
// snapshot does), written as spec.preChangeSnapshot.template or the snapshot
// schedule's template says.

// changeDelete is the value of LabelPreChange on the snapshot taken before deletion.
const changeDelete = "Delete"

// preChangeSnapshotName is the snapshot taken before change of this store (this
// incarnation of it: the name carries its UID's prefix).
func preChangeSnapshotName(store *memoryv1alpha1.MemoryStore, change string) string {
	suffix := "-pre-" + strings.ToLower(change) + "-" + uidPrefix(store)
	name := store.Name
	if limit := validation.DNS1123SubdomainMaxLength; len(name)+len(suffix) > limit {
		name = strings.TrimRight(name[:limit-len(suffix)], ".-")
	}
	return name + suffix
}

// preChangeSnapshot returns nil once change may go ahead: the store's snapshot before
// it succeeded, or the store does not want one. Otherwise it makes the snapshot
// (first call) and returns a stepError saying what the change waits for; status
// .preChangeSnapshot names the snapshot.
func (r *MemoryStoreReconciler) preChangeSnapshot(ctx context.Context, store *memoryv1alpha1.MemoryStore, change string) error {
	if !store.PreChangeSnapshotEnabled() {
		return nil
	}
	// A store that never got as far as a worker login never served agents nor took a
	// restore: it holds nothing to lose, and no Job could read it.
	if st := store.Status; st.Postgres == nil || st.Vector == nil || st.WorkerSecret == "" {
		return nil
	}
	// Nor does a store whose schema is another's (it lost a TenantConflict): its
	// deletion drops nothing.
	rb, err := r.resolveBackend(ctx, store)
	if err != nil {
		return err
	}
	names, err := provision.NamesFor(store.Spec.Tenant, rb.basePrefix())
	if err != nil {
		return err
	}
	if own, _, err := provision.SchemaOwnership(ctx, rb.postgres, names, ownerOf(store)); err != nil || own != provision.OwnedByUs {
		return err
	}
	name := preChangeSnapshotName(store, change)
	snap := &memoryv1alpha1.MemorySnapshot{}
	err = r.Get(ctx, client.ObjectKey{Namespace: store.Namespace, Name: name}, snap)
	if apierrors.IsNotFound(err) {
		// The cache may lag behind a snapshot made a moment ago.
		err = r.APIReader.Get(ctx, client.ObjectKey{Namespace: store.Namespace, Name: name}, snap)
	}
	switch {
	case apierrors.IsNotFound(err):
		return r.createPreChangeSnapshot(ctx, store, change, name)
	case err != nil:
		return err
	}
	store.Status.PreChangeSnapshot = &memoryv1alpha1.PreChangeSnapshotStatus{Snapshot: name, Change: change, Succeeded: snap.Succeeded()}
	switch {
	case !snap.IsDone():
		return stepErrorf(memoryv1alpha1.ReasonPreChangeSnapshot,
			"waiting for MemorySnapshot %s, taken before %s, to succeed (%s)", name, strings.ToLower(change),
			orDefault(snap.Status.Phase, memoryv1alpha1.PhasePending))
	case !snap.Succeeded():
		return stepErrorf(memoryv1alpha1.ReasonPreChangeSnapshotFailed,
			"MemorySnapshot %s, taken before %s, failed (%s): nothing is %s. Delete the snapshot to take it again, or set spec.preChangeSnapshot.enabled: false to go ahead without one",
			name, strings.ToLower(change), completedReason(snap.Status.Conditions), changedWord(change))
	}
	return nil
}

func (r *MemoryStoreReconciler) createPreChangeSnapshot(ctx context.Context, store *memoryv1alpha1.MemoryStore, change, name string) error {
	tmpl := store.PreChangeTemplate()
	if tmpl == nil {
		return stepErrorf(memoryv1alpha1.ReasonPreChangeSnapshotUnavailable,
			"a snapshot must be taken before %s, and the store says nowhere how: set spec.preChangeSnapshot.template (or spec.snapshotSchedule), or spec.preChangeSnapshot.enabled: false to go ahead without one",
			strings.ToLower(change))
	}
	snap := &memoryv1alpha1.MemorySnapshot{
		ObjectMeta: metav1.ObjectMeta{Namespace: store.Namespace, Name: name, Labels: map[string]string{memoryv1alpha1.LabelPreChange: change}},
		Spec: memoryv1alpha1.MemorySnapshotSpec{
			StoreRef:           corev1.LocalObjectReference{Name: store.Name},
			SnapshotParameters: *tmpl.DeepCopy(),
		},
	}
	setLabelIfValid(snap.Labels, memoryv1alpha1.LabelStore, store.Name)
	if err := r.Create(ctx, snap); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	store.Status.PreChangeSnapshot = &memoryv1alpha1.PreChangeSnapshotStatus{Snapshot: name, Change: change}
	r.Recorder.Eventf(store, nil, corev1.EventTypeNormal, "PreChangeSnapshotCreated", change,
		"Created MemorySnapshot %s: the store's data is %s once it succeeded", name, changedWord(change))
	logf.FromContext(ctx).Info("Created a snapshot before a destructive change", "snapshot", name, "change", change)
	return stepErrorf(memoryv1alpha1.ReasonPreChangeSnapshot, "waiting for MemorySnapshot %s, taken before %s, to succeed",
		name, strings.ToLower(change))
}

func changedWord(change string) string {
	if change == changeDelete {
		return "deleted"
	}
	return "changed"
}

// preChangeStore is the store a pre-change snapshot reads: unlike readyStore's, one
// being deleted and no longer Ready is fine, as long as its data is still there (its
// finalizer held) and provisioned.
func preChangeStore(ctx context.Context, c client.Reader, snap *memoryv1alpha1.MemorySnapshot) (*memoryv1alpha1.MemoryStore, effectiveBackend, bool, error) {
	if snap.Labels[memoryv1alpha1.LabelPreChange] == "" {
		return nil, effectiveBackend{}, false, nil
	}
	store := &memoryv1alpha1.MemoryStore{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: snap.Namespace, Name: snap.Spec.StoreRef.Name}, store); err != nil {
		return nil, effectiveBackend{}, false, client.IgnoreNotFound(err)
	}
	if store.DeletionTimestamp.IsZero() || store.Status.Postgres == nil || store.Status.Vector == nil || store.Status.WorkerSecret == "" {
		return nil, effectiveBackend{}, false, nil
	}
	backend, err := storeBackend(ctx, c, store)
	if err != nil {
		return nil, effectiveBackend{}, false, err
	}
	return store, backend, true, nil
}

// waitForPreChangeSnapshot holds a destructive change back until its snapshot
// succeeded: wait is true (and the store's Ready condition says why, written now)
// while it must wait.
func (r *MemoryStoreReconciler) waitForPreChangeSnapshot(ctx context.Context, store *memoryv1alpha1.MemoryStore, change string) (wait bool, err error) {
	original := store.DeepCopy()
	err = r.preChangeSnapshot(ctx, store, change)
	var se *stepError
	switch {
	case errors.As(err, &se):
		store.SetCondition(memoryv1alpha1.ConditionReady, metav1.ConditionFalse, se.reason, "Deleting: "+se.message)
		if perr := r.patchStatus(ctx, original, store); perr != nil {
			logf.FromContext(ctx).Error(perr, "Failed to record status")
		}
		return true, nil
	case err != nil:
		return true, err
	}
	if p := store.Status.PreChangeSnapshot; p != nil && p.Succeeded && (original.Status.PreChangeSnapshot == nil || !original.Status.PreChangeSnapshot.Succeeded) {
		// Recorded, so that a change retried after a backend error says it once.
		if err := r.patchStatus(ctx, original, store); err != nil {
			return true, err
		}
		r.Recorder.Eventf(store, nil, corev1.EventTypeNormal, "PreChangeSnapshotSucceeded", change,
			"MemorySnapshot %s succeeded: the store's data is %s now", p.Snapshot, changedWord(change))
	}
	return false, nil
}
