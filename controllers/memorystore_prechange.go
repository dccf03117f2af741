package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/provision"
)

// A snapshot before anything destructive: the operator snapshots a store, and waits
// until that snapshot succeeded, before it destroys the store's data (for now:
// deleting it with reclaimPolicy Delete). The snapshot is an ordinary MemorySnapshot,
// labelled with what it preceded, owned by nothing (it outlives the store, as every
// snapshot does), written as spec.preChangeSnapshot.template or the snapshot
// schedule's template says.

// Values of LabelPreChange: the snapshot taken before deletion, and the one taken
// before an operator upgrade migrates the store's schema.
const (
	changeDelete  = "Delete"
	changeUpgrade = "Upgrade"
)

// preChangeSnapshotName is the snapshot taken before change of this store (this
// incarnation of it: the name carries its UID's prefix); detail tells one change of
// a kind from the next ("-v13": the upgrade to schema version 13).
func preChangeSnapshotName(store *memoryv1alpha1.MemoryStore, change, detail string) string {
	suffix := "-pre-" + strings.ToLower(change) + detail + "-" + uidPrefix(store)
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
// rb is the store's backend, resolved here when nil.
func (r *MemoryStoreReconciler) preChangeSnapshot(ctx context.Context, store *memoryv1alpha1.MemoryStore, change, name string, rb *resolvedBackend) error {
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
	var err error
	if rb == nil {
		if rb, err = r.resolveBackend(ctx, store); err != nil {
			return err
		}
	}
	names, err := provision.NamesFor(store.Spec.Tenant, rb.basePrefix())
	if err != nil {
		return err
	}
	if own, _, err := provision.SchemaOwnership(ctx, rb.postgres, names, ownerOf(store)); err != nil || own != provision.OwnedByUs {
		return err
	}
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
	// The snapshot an upgrade waits for reads the store at its old schema version,
	// which holds every other Job back (readyStore).
	upgrade := snap.Labels[memoryv1alpha1.LabelPreChange] == changeUpgrade && store.DeletionTimestamp.IsZero() &&
		store.Status.PreChangeSnapshot != nil && store.Status.PreChangeSnapshot.Snapshot == snap.Name
	if (store.DeletionTimestamp.IsZero() && !upgrade) || store.Status.Postgres == nil || store.Status.Vector == nil || store.Status.WorkerSecret == "" {
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
	err = r.preChangeSnapshot(ctx, store, change, preChangeSnapshotName(store, change, ""), nil)
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

// schemaBehind reports whether the store's schema is older than this version's:
// an operator upgrade has yet to migrate it (it waits for its snapshot first), and
// every Job but that snapshot needs the new layout. 0 (a status from before the
// field) is not known to be behind.
func schemaBehind(store *memoryv1alpha1.MemoryStore) bool {
	pg := store.Status.Postgres
	return pg != nil && pg.SchemaVersion > 0 && pg.SchemaVersion < pgstore.LatestVersion
}

// schemaWait is the message of a Job that waits for the store's migration.
func schemaWait(store *memoryv1alpha1.MemoryStore) string {
	return fmt.Sprintf("MemoryStore %s's schema is at version %d; the operator migrates it to version %d once its snapshot before the upgrade succeeded (status.preChangeSnapshot)",
		store.Name, store.Status.Postgres.SchemaVersion, pgstore.LatestVersion)
}

// snapshotBeforeMigration holds an operator upgrade's migration of the store's
// schema back until a snapshot of the store as it was succeeded, unless the store
// says spec.preChangeSnapshot.enabled: false. The snapshot is taken by this
// version's worker, which reads schemas from pgstore.ExportableFrom up. While it
// waits (wait true) the store serves as before, its old gateway untouched, and
// PostgresReady says why; every other Job waits (schemaBehind).
func (r *MemoryStoreReconciler) snapshotBeforeMigration(ctx context.Context, store *memoryv1alpha1.MemoryStore, rb *resolvedBackend,
	names provision.Names) (wait bool, err error) {
	if store.Status.Postgres == nil || !store.PreChangeSnapshotEnabled() {
		return false, nil
	}
	from, err := provision.SchemaVersion(ctx, rb.postgres, names)
	if err != nil || from == 0 || from >= pgstore.LatestVersion {
		return false, err
	}
	// The status says what the database says, so that Jobs wait (schemaBehind).
	store.Status.Postgres.SchemaVersion = from
	what := fmt.Sprintf("Schema %s is at version %d; ", names.Schema, from)
	if from < pgstore.ExportableFrom {
		store.SetCondition(memoryv1alpha1.ConditionPostgresReady, metav1.ConditionFalse, memoryv1alpha1.ReasonPreChangeSnapshotUnavailable,
			what+fmt.Sprintf("this operator's snapshots read versions %d and later. Take a snapshot with the operator version that made it, then set spec.preChangeSnapshot.enabled: false to migrate it to version %d",
				pgstore.ExportableFrom, pgstore.LatestVersion))
		return true, nil
	}
	previous := store.Status.PreChangeSnapshot
	name := preChangeSnapshotName(store, changeUpgrade, fmt.Sprintf("-v%d", pgstore.LatestVersion))
	err = r.preChangeSnapshot(ctx, store, changeUpgrade, name, rb)
	var se *stepError
	if errors.As(err, &se) {
		store.SetCondition(memoryv1alpha1.ConditionPostgresReady, metav1.ConditionFalse, se.reason,
			what+fmt.Sprintf("it is migrated to version %d once a snapshot of it succeeded: %s", pgstore.LatestVersion, se.message))
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if p := store.Status.PreChangeSnapshot; p != nil && p.Succeeded && (previous == nil || previous.Snapshot != p.Snapshot || !previous.Succeeded) {
		r.Recorder.Eventf(store, nil, corev1.EventTypeNormal, "PreChangeSnapshotSucceeded", changeUpgrade,
			"MemorySnapshot %s succeeded: migrating schema %s from version %d to %d", p.Snapshot, names.Schema, from, pgstore.LatestVersion)
	}
	return false, nil
}
