package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// patchStatus writes the snapshot's status in one place: derives the phase, skips the
// call when nothing changed, patches with an optimistic lock (a conflict is retried by
// the queue) and emits an Event for every transition.
func (r *MemorySnapshotReconciler) patchStatus(ctx context.Context, original, snap *memoryv1alpha1.MemorySnapshot) error {
	snap.Status.Phase = snap.DerivePhase()
	changed, err := patchStatusIfChanged(ctx, r.Client, original, snap, original.Status, snap.Status)
	if !changed || err != nil {
		return err
	}
	r.emitTransitions(original, snap)
	return nil
}

// emitTransitions announces the end of a run, or else a change of what the run is
// doing (JobCreated, Running, or what it waits for).
func (r *MemorySnapshotReconciler) emitTransitions(original, snap *memoryv1alpha1.MemorySnapshot) {
	if !original.IsDone() && snap.IsDone() {
		c := meta.FindStatusCondition(snap.Status.Conditions, memoryv1alpha1.ConditionCompleted)
		eventType := corev1.EventTypeWarning
		if c.Reason == memoryv1alpha1.ReasonSucceeded {
			eventType = corev1.EventTypeNormal
		}
		r.Recorder.Eventf(snap, nil, eventType, c.Reason, "Snapshot", "%s", c.Message)
		return
	}
	before := meta.FindStatusCondition(original.Status.Conditions, memoryv1alpha1.ConditionProgressing)
	after := meta.FindStatusCondition(snap.Status.Conditions, memoryv1alpha1.ConditionProgressing)
	if after == nil || (before != nil && before.Status == after.Status && before.Reason == after.Reason) {
		return
	}
	eventType := corev1.EventTypeWarning
	if after.Status == metav1.ConditionTrue {
		eventType = corev1.EventTypeNormal
	}
	r.Recorder.Eventf(snap, nil, eventType, after.Reason, "Snapshot", "%s", after.Message)
}
