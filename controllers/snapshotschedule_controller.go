package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// SnapshotScheduleReconciler creates a store's MemorySnapshots on its snapshotSchedule
// and applies the schedule's retention. The next slot is computed from the store's
// status (never held in a timer), and a slot's snapshot is named after the slot, so a
// restart or a second reconciler can neither skip nor repeat one.
//
// Scheduled snapshots carry labels, not owner references: a snapshot outlives its
// store unless retention or its TTL removes it.
type SnapshotScheduleReconciler struct {
	client.Client
	// APIReader reads Secrets and re-reads a store after a write conflict.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	// Clock is the schedule's time; tests use a fake one.
	Clock clock.PassiveClock
	// Packages removes the packages of snapshots retention deletes.
	Packages PackageStore
}

// +kubebuilder:rbac:groups=memory.amemory.io,resources=memorystores,verbs=get;list;watch
// +kubebuilder:rbac:groups=memory.amemory.io,resources=memorystores/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=memory.amemory.io,resources=memorysnapshots,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile runs the slot that is due, if any, applies retention, and records the
// schedule's state (its condition and status.snapshots, nothing else of the store's
// status).
func (r *SnapshotScheduleReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	store := &memoryv1alpha1.MemoryStore{}
	if err := r.Get(ctx, req.NamespacedName, store); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !store.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	want := currentScheduleStatus(store)
	result, err := r.reconcileSchedule(ctx, store, &want)
	if perr := r.patchScheduleStatus(ctx, store, want); perr != nil {
		logf.FromContext(ctx).Error(perr, "Failed to record the snapshot schedule's status")
		if err == nil {
			return ctrl.Result{}, perr
		}
	}
	return result, err
}

// SetupWithManager watches stores (spec changes only: the schedule is in the spec, and
// the store's status changes often) and the snapshots their schedules created (found by
// label), whose completion unblocks the next slot and feeds retention.
func (r *SnapshotScheduleReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&memoryv1alpha1.MemoryStore{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&memoryv1alpha1.MemorySnapshot{}, handler.EnqueueRequestsFromMapFunc(storeOfScheduledSnapshot)).
		Named("snapshotschedule").
		Complete(r)
}

// storeOfScheduledSnapshot maps a snapshot a schedule created to its store.
func storeOfScheduledSnapshot(_ context.Context, obj client.Object) []reconcile.Request {
	labels := obj.GetLabels()
	if labels[memoryv1alpha1.LabelScheduled] != "true" || labels[memoryv1alpha1.LabelStore] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: labels[memoryv1alpha1.LabelStore]}}}
}

// reconcileSchedule works out the schedule's state into want, creating the due slot's
// snapshot and deleting what retention removes on the way.
func (r *SnapshotScheduleReconciler) reconcileSchedule(ctx context.Context, store *memoryv1alpha1.MemoryStore, want *scheduleStatus) (ctrl.Result, error) {
	spec := store.Spec.SnapshotSchedule
	if spec == nil {
		want.condition = nil
		if want.snapshots != nil {
			want.snapshots.NextScheduleTime = nil
		}
		return ctrl.Result{}, nil
	}
	if want.snapshots == nil {
		want.snapshots = &memoryv1alpha1.SnapshotScheduleStatus{}
	}
	now := r.Clock.Now()
	sched, err := parseSchedule(string(spec.Schedule))
	if err == nil && sched.Next(now).IsZero() {
		err = errors.New("it matches no time in the next five years")
	}
	if err != nil {
		want.snapshots.NextScheduleTime = nil
		want.setCondition(store, metav1.ConditionFalse, memoryv1alpha1.ReasonInvalidSchedule,
			fmt.Sprintf("Schedule %q is not valid: %v", spec.Schedule, err))
		return ctrl.Result{}, nil
	}
	if spec.Suspend {
		want.snapshots.NextScheduleTime = nil
		want.setCondition(store, metav1.ConditionTrue, memoryv1alpha1.ReasonSuspended,
			"Suspended: no new snapshots are created, existing ones are kept")
		return ctrl.Result{}, nil
	}

	owned, err := r.scheduledSnapshots(ctx, store)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.runDueSlot(ctx, store, sched, owned, now, want.snapshots); err != nil {
		return ctrl.Result{}, err
	}
	next := sched.Next(scheduleCursor(store, want.snapshots))
	want.snapshots.NextScheduleTime = &metav1.Time{Time: next}
	want.setCondition(store, metav1.ConditionTrue, memoryv1alpha1.ReasonScheduled,
		fmt.Sprintf("A snapshot is taken at every slot of %q (UTC)", spec.Schedule))

	wake := next
	expiry, err := r.applyRetention(ctx, store, spec, owned, now)
	if !expiry.IsZero() && expiry.Before(wake) {
		wake = expiry
	}
	return ctrl.Result{RequeueAfter: max(wake.Sub(now), time.Second)}, err
}

// scheduleCursor is the slot the schedule last handled, or the store's creation.
func scheduleCursor(store *memoryv1alpha1.MemoryStore, st *memoryv1alpha1.SnapshotScheduleStatus) time.Time {
	if st != nil && st.LastScheduleTime != nil {
		return st.LastScheduleTime.Time
	}
	return store.CreationTimestamp.Time
}

// scheduledSnapshots lists the snapshots the store's schedule created.
func (r *SnapshotScheduleReconciler) scheduledSnapshots(ctx context.Context, store *memoryv1alpha1.MemoryStore) ([]memoryv1alpha1.MemorySnapshot, error) {
	var list memoryv1alpha1.MemorySnapshotList
	err := r.List(ctx, &list, client.InNamespace(store.Namespace),
		client.MatchingLabels{memoryv1alpha1.LabelStore: store.Name, memoryv1alpha1.LabelScheduled: "true"})
	return list.Items, err
}

// runDueSlot creates the snapshot of the slot that is due: unless it exists already
// (created before a restart) or a scheduled snapshot has not finished yet, in which
// case the slot is skipped. Either way the slot counts as handled.
func (r *SnapshotScheduleReconciler) runDueSlot(ctx context.Context, store *memoryv1alpha1.MemoryStore, sched cron.Schedule,
	owned []memoryv1alpha1.MemorySnapshot, now time.Time, st *memoryv1alpha1.SnapshotScheduleStatus) error {
	slot, due := mostRecentSlot(sched, scheduleCursor(store, st), now)
	if !due {
		return nil
	}
	name := slotSnapshotName(store.Name, slot)
	slotText := slot.UTC().Format(time.RFC3339)
	for i := range owned {
		if owned[i].Name == name {
			st.LastSnapshot = name
			st.LastScheduleTime = &metav1.Time{Time: slot}
			return nil
		}
	}
	if active := firstUnfinished(owned); active != nil {
		r.Recorder.Eventf(store, nil, corev1.EventTypeWarning, "SnapshotSkipped", "Schedule",
			"Skipped the slot of %s: snapshot %s has not finished", slotText, active.Name)
		st.LastScheduleTime = &metav1.Time{Time: slot}
		return nil
	}

	snap := scheduledSnapshot(store, name, slot)
	if err := r.Create(ctx, snap); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		if err := r.Get(ctx, client.ObjectKeyFromObject(snap), snap); err != nil {
			return err
		}
		if snap.Labels[memoryv1alpha1.LabelStore] != store.Name || !snap.IsScheduled() {
			r.Recorder.Eventf(store, nil, corev1.EventTypeWarning, "SnapshotSkipped", "Schedule",
				"Skipped the slot of %s: a MemorySnapshot named %s exists and was not created by this schedule", slotText, name)
			st.LastScheduleTime = &metav1.Time{Time: slot}
			return nil
		}
	} else {
		r.Recorder.Eventf(store, nil, corev1.EventTypeNormal, "SnapshotCreated", "Schedule",
			"Created snapshot %s for the slot of %s", name, slotText)
		logf.FromContext(ctx).Info("Created scheduled snapshot", "snapshot", name, "slot", slotText)
	}
	st.LastSnapshot = name
	st.LastScheduleTime = &metav1.Time{Time: slot}
	return nil
}

func firstUnfinished(snaps []memoryv1alpha1.MemorySnapshot) *memoryv1alpha1.MemorySnapshot {
	for i := range snaps {
		if !snaps[i].IsDone() && snaps[i].DeletionTimestamp.IsZero() {
			return &snaps[i]
		}
	}
	return nil
}

// scheduledSnapshot is the snapshot of one slot: the schedule's template, labelled with
// the store (no owner reference: snapshots outlive their store), annotated with the slot.
func scheduledSnapshot(store *memoryv1alpha1.MemoryStore, name string, slot time.Time) *memoryv1alpha1.MemorySnapshot {
	return &memoryv1alpha1.MemorySnapshot{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: store.Namespace,
			Name:      name,
			Labels: map[string]string{
				memoryv1alpha1.LabelStore:     store.Name,
				memoryv1alpha1.LabelScheduled: "true",
			},
			Annotations: map[string]string{memoryv1alpha1.AnnotationScheduledAt: slot.UTC().Format(time.RFC3339)},
		},
		Spec: memoryv1alpha1.MemorySnapshotSpec{
			StoreRef:           corev1.LocalObjectReference{Name: store.Name},
			SnapshotParameters: *store.Spec.SnapshotSchedule.Template.DeepCopy(),
		},
	}
}

// applyRetention deletes the finished scheduled snapshots that keepLast and maxAge
// remove, each package before its snapshot. It returns when the next one will pass
// maxAge.
func (r *SnapshotScheduleReconciler) applyRetention(ctx context.Context, store *memoryv1alpha1.MemoryStore,
	spec *memoryv1alpha1.SnapshotSchedule, owned []memoryv1alpha1.MemorySnapshot, now time.Time) (time.Time, error) {
	var maxAge *time.Duration
	if spec.MaxAge != nil {
		maxAge = &spec.MaxAge.Duration
	}
	victims, nextExpiry := retentionVictims(owned, spec.KeepLastOrDefault(), maxAge, now)
	resolver := packageResolver{client: r.Client, secrets: r.APIReader}
	packages := r.Packages
	if packages == nil {
		packages = minioPackages{}
	}
	var errs []error
	for _, v := range victims {
		if err := deleteSnapshotAndPackage(ctx, r.Client, resolver, packages, v.snap); err != nil {
			r.Recorder.Eventf(store, nil, corev1.EventTypeWarning, "RetentionFailed", "Retention",
				"Deleting snapshot %s (%s) failed: %v", v.snap.Name, v.reason, err)
			errs = append(errs, fmt.Errorf("snapshot %s: %w", v.snap.Name, err))
			continue
		}
		r.Recorder.Eventf(store, nil, corev1.EventTypeNormal, "SnapshotDeleted", "Retention",
			"Deleted snapshot %s and its package: %s", v.snap.Name, v.reason)
		logf.FromContext(ctx).Info("Retention deleted a snapshot", "snapshot", v.snap.Name, "reason", v.reason)
	}
	return nextExpiry, errors.Join(errs...)
}

// scheduleStatus is the part of a store's status this reconciler owns.
type scheduleStatus struct {
	// condition is the SnapshotSchedule condition; nil removes it.
	condition *metav1.Condition
	snapshots *memoryv1alpha1.SnapshotScheduleStatus
}

func currentScheduleStatus(store *memoryv1alpha1.MemoryStore) scheduleStatus {
	var s scheduleStatus
	if c := meta.FindStatusCondition(store.Status.Conditions, memoryv1alpha1.ConditionSnapshotSchedule); c != nil {
		cc := *c
		s.condition = &cc
	}
	s.snapshots = store.Status.Snapshots.DeepCopy()
	return s
}

func (s *scheduleStatus) setCondition(store *memoryv1alpha1.MemoryStore, status metav1.ConditionStatus, reason, message string) {
	s.condition = &metav1.Condition{Type: memoryv1alpha1.ConditionSnapshotSchedule, Status: status, Reason: reason,
		Message: message, ObservedGeneration: store.Generation}
}

func (s scheduleStatus) applyTo(store *memoryv1alpha1.MemoryStore) {
	if s.condition == nil {
		meta.RemoveStatusCondition(&store.Status.Conditions, memoryv1alpha1.ConditionSnapshotSchedule)
	} else {
		meta.SetStatusCondition(&store.Status.Conditions, *s.condition)
	}
	store.Status.Snapshots = s.snapshots.DeepCopy()
}
