package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// patchScheduleStatus writes the schedule's part of the store's status: the
// SnapshotSchedule condition and status.snapshots. The MemoryStore reconciler writes the
// rest of the same status, so the patch carries only what changed, under an optimistic
// lock; on a conflict the store is read again and the same fields re-applied. An Event
// announces every transition of the condition.
func (r *SnapshotScheduleReconciler) patchScheduleStatus(ctx context.Context, store *memoryv1alpha1.MemoryStore, want scheduleStatus) error {
	before := currentScheduleStatus(store).condition
	attempt := 0
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if attempt++; attempt > 1 {
			if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(store), store); err != nil {
				return err
			}
		}
		original := store.DeepCopy()
		want.applyTo(store)
		_, err := patchStatusIfChanged(ctx, r.Client, original, store, original.Status, store.Status)
		return err
	})
	if err != nil {
		return err
	}
	after := want.condition
	if after != nil && (before == nil || before.Status != after.Status || before.Reason != after.Reason) {
		eventType := corev1.EventTypeNormal
		if after.Status != metav1.ConditionTrue {
			eventType = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(store, nil, eventType, after.Reason, "Schedule", "%s", after.Message)
	}
	return nil
}
