package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// archivalState is the part of a store's status the archival reconciler owns, and what
// it announces once that is written.
type archivalState struct {
	// before is the Archival condition as it was read; condition is the one to write
	// (nil removes it).
	before, condition *metav1.Condition
	status            *memoryv1alpha1.ArchivalStatus
	// finished is a run whose end this reconcile recorded: its Event and its count are
	// emitted only once the status says so, so a failed write cannot count it twice.
	finished *memoryv1alpha1.ArchivalRun
}

func currentArchivalState(store *memoryv1alpha1.MemoryStore) archivalState {
	var s archivalState
	if c := meta.FindStatusCondition(store.Status.Conditions, memoryv1alpha1.ConditionArchival); c != nil {
		before, cond := *c, *c
		s.before, s.condition = &before, &cond
	}
	s.status = store.Status.Archival.DeepCopy()
	return s
}

func (s *archivalState) setCondition(store *memoryv1alpha1.MemoryStore, status metav1.ConditionStatus, reason, message string) {
	s.condition = &metav1.Condition{Type: memoryv1alpha1.ConditionArchival, Status: status, Reason: reason,
		Message: message, ObservedGeneration: store.Generation}
}

// ensureStatus returns status.archival, creating it.
func (s *archivalState) ensureStatus() *memoryv1alpha1.ArchivalStatus {
	if s.status == nil {
		s.status = &memoryv1alpha1.ArchivalStatus{}
	}
	return s.status
}

func (s archivalState) applyTo(store *memoryv1alpha1.MemoryStore) {
	if s.condition == nil {
		meta.RemoveStatusCondition(&store.Status.Conditions, memoryv1alpha1.ConditionArchival)
	} else {
		meta.SetStatusCondition(&store.Status.Conditions, *s.condition)
	}
	store.Status.Archival = s.status.DeepCopy()
}

// patchArchivalStatus writes the archival's part of the store's status: the Archival
// condition and status.archival. The MemoryStore reconciler and the snapshot schedule
// write the rest of the same status, so the patch carries only what changed, under an
// optimistic lock; on a conflict the store is read again and the same fields re-applied.
func (r *ArchivalReconciler) patchArchivalStatus(ctx context.Context, store *memoryv1alpha1.MemoryStore, want archivalState) error {
	return patchStorePart(ctx, r.Client, r.APIReader, store, want.applyTo)
}

// announce emits, once the status is written, the Event of a run that ended
// (ArchivalSucceeded with its counts, ArchivalFailed with its reason), counts it, brings
// the gauges in line with status, and announces transitions of the Archival condition
// that no run Event covers (Scheduled, Suspended, InvalidSchedule, a delay's reason).
func (r *ArchivalReconciler) announce(store *memoryv1alpha1.MemoryStore, want archivalState) {
	if run := want.finished; run != nil {
		if run.Result == memoryv1alpha1.ArchivalRunSucceeded {
			r.Recorder.Eventf(store, nil, corev1.EventTypeNormal, "ArchivalSucceeded", "Archival", "Job %s: %s", run.JobName, run.Message)
		} else {
			r.Recorder.Eventf(store, nil, corev1.EventTypeWarning, "ArchivalFailed", "Archival", "%s", run.Message)
		}
		countArchivalRun(store, run)
	}
	if store.Spec.Archival == nil {
		forgetArchivalMetrics(store.Namespace, store.Name)
	} else {
		setArchivalGauges(store, want.status)
	}

	after, before := want.condition, want.before
	if after == nil || (before != nil && before.Status == after.Status && before.Reason == after.Reason) {
		return
	}
	switch after.Reason {
	case memoryv1alpha1.ReasonRunning, memoryv1alpha1.ReasonSucceeded, memoryv1alpha1.ReasonFailed:
		return // ArchivalStarted, ArchivalSucceeded and ArchivalFailed say it
	}
	eventType := corev1.EventTypeNormal
	if after.Status != metav1.ConditionTrue {
		eventType = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(store, nil, eventType, "Archival"+after.Reason, "Archival", "%s", after.Message)
}
