package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels the operator puts on snapshots and their Jobs.
const (
	LabelStore     = "memory.amemory.io/store"
	LabelSnapshot  = "memory.amemory.io/snapshot"
	LabelScheduled = "memory.amemory.io/scheduled"
)

// SetCondition records a condition for the current generation.
func (s *MemorySnapshot) SetCondition(condType string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{
		Type: condType, Status: status, Reason: reason, Message: message, ObservedGeneration: s.Generation,
	})
}

// IsDone reports whether the snapshot finished, successfully or not. A finished
// snapshot never runs again.
func (s *MemorySnapshot) IsDone() bool {
	return meta.IsStatusConditionTrue(s.Status.Conditions, ConditionCompleted)
}

// Succeeded reports whether the snapshot finished and its package is complete.
func (s *MemorySnapshot) Succeeded() bool {
	c := meta.FindStatusCondition(s.Status.Conditions, ConditionCompleted)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == ReasonSucceeded
}

// DerivePhase computes the phase from the conditions.
func (s *MemorySnapshot) DerivePhase() string {
	if c := meta.FindStatusCondition(s.Status.Conditions, ConditionCompleted); c != nil && c.Status == metav1.ConditionTrue {
		if c.Reason == ReasonSucceeded {
			return PhaseSucceeded
		}
		return PhaseFailed
	}
	if meta.IsStatusConditionTrue(s.Status.Conditions, ConditionProgressing) {
		return PhaseRunning
	}
	return PhasePending
}

// EffectiveTypes is the selection's memory types, with the default applied.
func (sel SnapshotSelection) EffectiveTypes() []MemoryType {
	if len(sel.Types) > 0 {
		return sel.Types
	}
	return []MemoryType{"episodic", "semantic", "procedural"}
}
