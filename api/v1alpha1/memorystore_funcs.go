package v1alpha1

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FinalizerName guards a store's external resources until deletion is handled.
const FinalizerName = "memory.amemory.io/finalizer"

// AnnotationRotateCredentials asks for new logins: when its value differs from
// status.credentialsRotation, the operator gives the store's PostgreSQL roles and its
// Milvus user new passwords, writes them to the store's Secrets and restarts the
// gateway; the old passwords stop working. Any new value (a date, a counter) asks again.
const AnnotationRotateCredentials = "memory.amemory.io/rotate-credentials"

// RotationRequested is the rotate-credentials annotation's value when it asks for a
// rotation not done yet, else "".
func (s *MemoryStore) RotationRequested() string {
	if v := s.Annotations[AnnotationRotateCredentials]; v != "" && v != s.Status.CredentialsRotation {
		return v
	}
	return ""
}

// WorkerSecretName is the name of the Secret with the login of the store's Jobs
// (snapshot, restore, archival): the connection Secret's name and "-worker".
func (s *MemoryStore) WorkerSecretName() string { return s.ConnectionSecretNameOrDefault() + "-worker" }

// ConnectionSecretNameOrDefault is the name of the Secret agents mount.
func (s *MemoryStore) ConnectionSecretNameOrDefault() string {
	if s.Spec.ConnectionSecretName != "" {
		return s.Spec.ConnectionSecretName
	}
	return s.Name + "-memory"
}

// ReclaimPolicyOrDefault treats an unset policy as Retain, the safe choice.
func (s *MemoryStore) ReclaimPolicyOrDefault() ReclaimPolicy {
	if s.Spec.ReclaimPolicy == "" {
		return ReclaimRetain
	}
	return s.Spec.ReclaimPolicy
}

// PreChangeSnapshotEnabled says whether destructive changes wait for a snapshot
// (spec.preChangeSnapshot.enabled, default true).
func (s *MemoryStore) PreChangeSnapshotEnabled() bool {
	p := s.Spec.PreChangeSnapshot
	return p == nil || p.Enabled == nil || *p.Enabled
}

// PreChangeTemplate is how a pre-change snapshot is written: spec.preChangeSnapshot
// .template, else the snapshot schedule's template; nil when the store has neither.
func (s *MemoryStore) PreChangeTemplate() *SnapshotParameters {
	if p := s.Spec.PreChangeSnapshot; p != nil && p.Template != nil {
		return p.Template
	}
	if sc := s.Spec.SnapshotSchedule; sc != nil {
		return &sc.Template
	}
	return nil
}

// MetricOrDefault treats an unset metric as COSINE.
func (s *MemoryStore) MetricOrDefault() VectorMetric {
	if s.Spec.Vector.Metric == "" {
		return "COSINE"
	}
	return s.Spec.Vector.Metric
}

// SetCondition records a condition for the current generation.
func (s *MemoryStore) SetCondition(condType string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{
		Type:               condType,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: s.Generation,
	})
}

// IsReady reports whether the Ready condition is True for the current generation.
func (s *MemoryStore) IsReady() bool {
	c := meta.FindStatusCondition(s.Status.Conditions, ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == s.Generation
}

// DerivePhase computes the human-readable phase from the conditions.
func (s *MemoryStore) DerivePhase() string {
	switch {
	case !s.DeletionTimestamp.IsZero():
		return PhaseDeleting
	case meta.IsStatusConditionTrue(s.Status.Conditions, ConditionDegraded):
		return PhaseDegraded
	case meta.IsStatusConditionTrue(s.Status.Conditions, ConditionReady):
		return PhaseReady
	}
	if c := meta.FindStatusCondition(s.Status.Conditions, ConditionReady); c != nil && c.Reason != ReasonProvisioning {
		return PhaseFailed
	}
	return PhasePending
}

// ShortTermStoreFor is where the store keeps its sessions on a backend: its
// spec.shortTerm.store, else Redis when the backend declares one, else Postgres.
func (s *MemoryStore) ShortTermStoreFor(backend BackendSpec) ShortTermStore {
	if st := s.Spec.ShortTerm; st != nil && st.Store != "" {
		return st.Store
	}
	if backend.Redis != nil {
		return ShortTermRedis
	}
	return ShortTermPostgres
}

// SessionTTLOrDefault is spec.shortTerm.sessionTTL, 0 when unset (the gateway's
// default, 30 minutes).
func (s *MemoryStore) SessionTTLOrDefault() time.Duration {
	if st := s.Spec.ShortTerm; st != nil && st.SessionTTL != nil {
		return st.SessionTTL.Duration
	}
	return 0
}

// PromoteOrDefault is spec.shortTerm.promote, OnEnd when unset.
func (s *MemoryStore) PromoteOrDefault() PromotePolicy {
	if st := s.Spec.ShortTerm; st != nil && st.Promote != "" {
		return st.Promote
	}
	return PromoteOnEnd
}
