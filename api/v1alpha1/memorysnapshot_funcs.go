package v1alpha1

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels the operator puts on snapshots and their Jobs.
const (
	LabelStore     = "memory.amemory.io/store"
	LabelSnapshot  = "memory.amemory.io/snapshot"
	LabelScheduled = "memory.amemory.io/scheduled"
	// LabelPreChange marks a snapshot the operator took before a destructive change
	// of its store; the value says which (Delete).
	LabelPreChange = "memory.amemory.io/pre-change"
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
	return c != nil && c.Status == metav1.ConditionTrue && IsSuccessReason(c.Reason)
}

// DerivePhase computes the phase from the conditions.
func (s *MemorySnapshot) DerivePhase() string {
	return oneShotPhase(s.Status.Conditions)
}

// oneShotPhase is the phase of a one-shot run (snapshot, restore) from its conditions.
func oneShotPhase(conditions []metav1.Condition) string {
	if c := meta.FindStatusCondition(conditions, ConditionCompleted); c != nil && c.Status == metav1.ConditionTrue {
		if IsSuccessReason(c.Reason) {
			return PhaseSucceeded
		}
		return PhaseFailed
	}
	if meta.IsStatusConditionTrue(conditions, ConditionProgressing) {
		return PhaseRunning
	}
	return PhasePending
}

// EffectiveTypes is the selection's memory types, with the default applied.
func (sel SnapshotSelection) EffectiveTypes() []MemoryType {
	return typesOrDefault(sel.Types)
}

// typesOrDefault is types, or when empty every type but working memory.
func typesOrDefault(types []MemoryType) []MemoryType {
	if len(types) > 0 {
		return types
	}
	return []MemoryType{"episodic", "semantic", "procedural"}
}

// AnnotationScheduledAt records, on a snapshot a schedule created, the slot it was
// created for (RFC 3339, UTC). Retention orders and ages scheduled snapshots by it.
const AnnotationScheduledAt = "memory.amemory.io/scheduled-at"

// DefaultKeepLast is how many finished scheduled snapshots a schedule keeps when
// keepLast is unset.
const DefaultKeepLast = 7

// SetProgress records a snapshot that has not finished: Progressing is True while its
// Job runs and False while it waits for something, and Completed is False with the
// same reason, so `kubectl get` shows why a snapshot is not done.
func (s *MemorySnapshot) SetProgress(progressing metav1.ConditionStatus, reason, message string) {
	s.SetCondition(ConditionProgressing, progressing, reason, message)
	s.SetCondition(ConditionCompleted, metav1.ConditionFalse, reason, message)
}

// SetCompleted records how the snapshot ended: Completed is True with the reason
// (Succeeded, or why it failed) and Progressing is False. A completed snapshot never
// runs again.
func (s *MemorySnapshot) SetCompleted(reason, message string) {
	s.SetCondition(ConditionCompleted, metav1.ConditionTrue, reason, message)
	s.SetCondition(ConditionProgressing, metav1.ConditionFalse, reason, message)
}

// IsScheduled reports whether a snapshot schedule created the snapshot.
func (s *MemorySnapshot) IsScheduled() bool {
	return s.Labels[LabelScheduled] == "true"
}

// ScheduledAt is the slot a schedule created the snapshot for; for other snapshots
// (or a missing or malformed annotation), its creation time.
func (s *MemorySnapshot) ScheduledAt() metav1.Time {
	if v, ok := s.Annotations[AnnotationScheduledAt]; ok {
		if t, err := time.Parse(time.RFC3339, v); err == nil {
			return metav1.NewTime(t)
		}
	}
	return s.CreationTimestamp
}

// KeepLastOrDefault is keepLast with its default applied.
func (s *SnapshotSchedule) KeepLastOrDefault() int {
	if s.KeepLast == nil || *s.KeepLast < 1 {
		return DefaultKeepLast
	}
	return int(*s.KeepLast)
}
