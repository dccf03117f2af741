package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// patchStatus writes the snapshot's status in one place: derives the summary
// conditions and the phase, skips the call when nothing changed, patches with an
// optimistic lock (a conflict is retried by the queue) and emits an Event for every
// transition.
func (r *MemorySnapshotReconciler) patchStatus(ctx context.Context, original, snap *memoryv1alpha1.MemorySnapshot) error {
	snap.Status.ObservedGeneration = snap.Generation
	setSummary(&snap.Status.Conditions, snap.Generation, runSummary(snap.Status.Conditions))
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
	emitRunTransitions(r.Recorder, snap, "Snapshot", original.Status.Conditions, snap.Status.Conditions)
}

// emitRunTransitions emits the Event of a one-shot run (snapshot, restore) whose
// conditions went from before to after: its end (Normal when it succeeded, Warning
// otherwise), or else a change of its Progressing condition (Normal while it works,
// Warning while it waits).
func emitRunTransitions(recorder events.EventRecorder, obj runtime.Object, action string, before, after []metav1.Condition) {
	if !meta.IsStatusConditionTrue(before, memoryv1alpha1.ConditionCompleted) && meta.IsStatusConditionTrue(after, memoryv1alpha1.ConditionCompleted) {
		c := meta.FindStatusCondition(after, memoryv1alpha1.ConditionCompleted)
		eventType := corev1.EventTypeWarning
		if memoryv1alpha1.IsSuccessReason(c.Reason) {
			eventType = corev1.EventTypeNormal
		}
		recorder.Eventf(obj, nil, eventType, c.Reason, action, "%s", c.Message)
		return
	}
	was := meta.FindStatusCondition(before, memoryv1alpha1.ConditionProgressing)
	now := meta.FindStatusCondition(after, memoryv1alpha1.ConditionProgressing)
	if now == nil || (was != nil && was.Status == now.Status && was.Reason == now.Reason) {
		return
	}
	eventType := corev1.EventTypeWarning
	if now.Status == metav1.ConditionTrue {
		eventType = corev1.EventTypeNormal
	}
	recorder.Eventf(obj, nil, eventType, now.Reason, action, "%s", now.Message)
}
