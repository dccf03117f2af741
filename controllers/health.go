package controllers

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// The summary conditions — Ready, Reconciling, Stalled — are what kstatus (Flux), the
// Argo CD health checks in config/health and `kubectl wait` read. Each kind derives
// them in one place, right before its status is written, from the conditions its
// reconciler set; they always carry the current generation, as does
// status.observedGeneration.

// healthState is where an object stands for a GitOps tool.
type healthState int

const (
	// working: the operator is at it, or waits for something that will come (a
	// snapshot to finish, a Secret to be created): Reconciling=True, Ready=False.
	working healthState = iota
	// done: Ready=True, no Reconciling, no Stalled.
	done
	// stalled: a terminal failure, or one only a human can fix: Stalled=True,
	// Ready=False, no Reconciling.
	stalled
	// servingWorking: a store that serves while the operator works toward its spec
	// (an embedding switch): Ready=True, Reconciling=True.
	servingWorking
	// servingStalled: a store that serves but cannot reach its spec without a human
	// (a failed switch): Ready=True, Stalled=True.
	servingStalled
)

// summary is the state with the reason and message all three conditions carry.
type summary struct {
	state           healthState
	reason, message string
}

// needsHuman holds the reasons of failures that neither waiting nor retrying can fix:
// something present but wrong (a key, a Secret's keys, credentials, a privilege, the
// backends' content) that a person must change. Missing things (a Secret, a snapshot,
// a store not yet Ready) are waited for instead: under GitOps they usually come in the
// same apply, and calling them failed would fail a sync that is about to succeed.
var needsHuman = map[string]bool{
	memoryv1alpha1.ReasonDimensionMismatch:    true,
	memoryv1alpha1.ReasonMetricMismatch:       true,
	memoryv1alpha1.ReasonTenantConflict:       true,
	memoryv1alpha1.ReasonSecretConflict:       true,
	memoryv1alpha1.ReasonSecretKeyMissing:     true,
	memoryv1alpha1.ReasonInvalidKey:           true,
	memoryv1alpha1.ReasonNotConfigured:        true,
	memoryv1alpha1.ReasonBackendNotAllowed:    true,
	memoryv1alpha1.ReasonAuthenticationFailed: true,
	memoryv1alpha1.ReasonPermissionDenied:     true,
	memoryv1alpha1.ReasonBucketNotFound:       true,
	memoryv1alpha1.ReasonInvalidSpec:          true,
	memoryv1alpha1.ReasonEncryptionMismatch:   true,
	memoryv1alpha1.ReasonConfigMapKeyMissing:  true,
	memoryv1alpha1.ReasonObjectStorageMissing: true,
	memoryv1alpha1.ReasonExtensionMissing:     true,
	memoryv1alpha1.ReasonEngineUnavailable:    true,
	memoryv1alpha1.ReasonEngineChangeRefused:  true,
}

// failing is the summary of a failure with this reason: stalled when only a human can
// fix it, working (retried, or waited for) otherwise.
func failing(reason, message string) summary {
	if needsHuman[reason] {
		return summary{state: stalled, reason: reason, message: message}
	}
	return summary{state: working, reason: reason, message: message}
}

// setSummary writes Ready, Reconciling and Stalled as s says, for generation gen.
func setSummary(conditions *[]metav1.Condition, gen int64, s summary) {
	set := func(condType string, status metav1.ConditionStatus) {
		meta.SetStatusCondition(conditions, metav1.Condition{
			Type: condType, Status: status, Reason: s.reason, Message: s.message, ObservedGeneration: gen,
		})
	}
	switch s.state {
	case done:
		set(memoryv1alpha1.ConditionReady, metav1.ConditionTrue)
		meta.RemoveStatusCondition(conditions, memoryv1alpha1.ConditionReconciling)
		meta.RemoveStatusCondition(conditions, memoryv1alpha1.ConditionStalled)
	case stalled:
		set(memoryv1alpha1.ConditionReady, metav1.ConditionFalse)
		set(memoryv1alpha1.ConditionStalled, metav1.ConditionTrue)
		meta.RemoveStatusCondition(conditions, memoryv1alpha1.ConditionReconciling)
	case servingWorking:
		if c := meta.FindStatusCondition(*conditions, memoryv1alpha1.ConditionReady); c != nil {
			c.ObservedGeneration = gen
		}
		set(memoryv1alpha1.ConditionReconciling, metav1.ConditionTrue)
		meta.RemoveStatusCondition(conditions, memoryv1alpha1.ConditionStalled)
	case servingStalled:
		if c := meta.FindStatusCondition(*conditions, memoryv1alpha1.ConditionReady); c != nil {
			c.ObservedGeneration = gen
		}
		set(memoryv1alpha1.ConditionStalled, metav1.ConditionTrue)
		meta.RemoveStatusCondition(conditions, memoryv1alpha1.ConditionReconciling)
	default:
		set(memoryv1alpha1.ConditionReady, metav1.ConditionFalse)
		set(memoryv1alpha1.ConditionReconciling, metav1.ConditionTrue)
		meta.RemoveStatusCondition(conditions, memoryv1alpha1.ConditionStalled)
	}
}

// markReconciling records that work on generation gen has begun, before it is done:
// Reconciling=True, Ready left as it is (or False when there is none yet).
func markReconciling(conditions *[]metav1.Condition, gen int64, reason, message string) {
	if meta.FindStatusCondition(*conditions, memoryv1alpha1.ConditionReady) == nil {
		meta.SetStatusCondition(conditions, metav1.Condition{Type: memoryv1alpha1.ConditionReady,
			Status: metav1.ConditionFalse, Reason: reason, Message: message, ObservedGeneration: gen})
	}
	meta.SetStatusCondition(conditions, metav1.Condition{Type: memoryv1alpha1.ConditionReconciling,
		Status: metav1.ConditionTrue, Reason: reason, Message: message, ObservedGeneration: gen})
	meta.RemoveStatusCondition(conditions, memoryv1alpha1.ConditionStalled)
}

// runSummary is the summary of a one-shot run (snapshot, restore) from its Completed
// and Progressing conditions: done when it completed successfully, stalled when it
// failed or waits for something only a human can fix, working otherwise.
func runSummary(conditions []metav1.Condition) summary {
	if c := meta.FindStatusCondition(conditions, memoryv1alpha1.ConditionCompleted); c != nil && c.Status == metav1.ConditionTrue {
		if memoryv1alpha1.IsSuccessReason(c.Reason) {
			return summary{state: done, reason: c.Reason, message: c.Message}
		}
		return summary{state: stalled, reason: c.Reason, message: c.Message}
	}
	if c := meta.FindStatusCondition(conditions, memoryv1alpha1.ConditionProgressing); c != nil {
		return failing(c.Reason, c.Message)
	}
	return summary{state: working, reason: memoryv1alpha1.ReasonPending, message: "Waiting for the operator to start the run"}
}

// storeSummary is a store's summary from its Ready condition, which provisioning
// (and deletion) keep: done when Ready, working while it is being deleted or
// provisioned, stalled on a failure only a human can fix.
func storeSummary(store *memoryv1alpha1.MemoryStore) summary {
	c := meta.FindStatusCondition(store.Status.Conditions, memoryv1alpha1.ConditionReady)
	switch {
	case c == nil:
		return summary{state: working, reason: memoryv1alpha1.ReasonProvisioning, message: "Provisioning backends"}
	case !store.DeletionTimestamp.IsZero():
		return summary{state: working, reason: c.Reason, message: c.Message}
	case c.Status == metav1.ConditionTrue:
		if s, waits := upgradeSummary(store); waits {
			return s
		}
		return switchSummary(store, summary{state: done, reason: c.Reason, message: c.Message})
	}
	return failing(c.Reason, c.Message)
}

// upgradeSummary is a Ready store's summary while an operator upgrade holds the
// migration of its schema back for a snapshot (snapshotBeforeMigration): it serves
// as before, but is not yet what this version runs. Waiting for the snapshot is
// working; a snapshot that failed or cannot be taken is stalled.
func upgradeSummary(store *memoryv1alpha1.MemoryStore) (summary, bool) {
	c := meta.FindStatusCondition(store.Status.Conditions, memoryv1alpha1.ConditionPostgresReady)
	switch {
	case c == nil || c.Status != metav1.ConditionFalse:
	case c.Reason == memoryv1alpha1.ReasonPreChangeSnapshot:
		return summary{state: servingWorking, reason: c.Reason, message: c.Message}, true
	case c.Reason == memoryv1alpha1.ReasonPreChangeSnapshotFailed, c.Reason == memoryv1alpha1.ReasonPreChangeSnapshotUnavailable:
		return summary{state: servingStalled, reason: c.Reason, message: c.Message}, true
	}
	return summary{}, false
}

// switchSummary is a Ready store's summary while its spec asks for another
// embedding model than it serves: it serves (Ready stays True, so its snapshots
// and Jobs go on) but its spec is not yet what runs. A switch under way is working
// (Reconciling=True); one that failed or cannot run is stalled (Stalled=True).
func switchSummary(store *memoryv1alpha1.MemoryStore, ready summary) summary {
	c := meta.FindStatusCondition(store.Status.Conditions, memoryv1alpha1.ConditionSwitching)
	switch {
	case c == nil:
	case c.Status == metav1.ConditionTrue:
		return summary{state: servingWorking, reason: c.Reason, message: c.Message}
	case c.Reason == memoryv1alpha1.ReasonSwitchFailed, c.Reason == memoryv1alpha1.ReasonEmbeddingSwitchUnsupported:
		return summary{state: servingStalled, reason: c.Reason, message: c.Message}
	}
	return ready
}
