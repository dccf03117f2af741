package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// patchStatus writes the status in one place: derives the summary conditions and the
// phase, skips the call when nothing changed, patches with an optimistic lock (a
// conflict is retried by the queue) and emits an Event for every transition of Ready
// or Degraded.
func (r *MemoryStoreReconciler) patchStatus(ctx context.Context, original, store *memoryv1alpha1.MemoryStore) error {
	store.Status.ObservedGeneration = store.Generation
	setSummary(&store.Status.Conditions, store.Generation, storeSummary(store))
	store.Status.Phase = store.DerivePhase()
	changed, err := patchStatusIfChanged(ctx, r.Client, original, store, original.Status, store.Status)
	if !changed || err != nil {
		return err
	}
	r.emitTransitions(original, store)
	r.emitGatewayTransitions(original, store)
	return nil
}

func (r *MemoryStoreReconciler) emitTransitions(original, store *memoryv1alpha1.MemoryStore) {
	before := meta.FindStatusCondition(original.Status.Conditions, memoryv1alpha1.ConditionReady)
	after := meta.FindStatusCondition(store.Status.Conditions, memoryv1alpha1.ConditionReady)
	if after != nil && (before == nil || before.Status != after.Status || before.Reason != after.Reason) {
		switch {
		case after.Status == metav1.ConditionTrue:
			r.Recorder.Eventf(store, nil, corev1.EventTypeNormal, "Ready", "Provision", "%s", after.Message)
		case after.Reason != memoryv1alpha1.ReasonProvisioning:
			r.Recorder.Eventf(store, nil, corev1.EventTypeWarning, after.Reason, "Provision", "%s", after.Message)
		}
	}
	if !meta.IsStatusConditionTrue(original.Status.Conditions, memoryv1alpha1.ConditionDegraded) &&
		meta.IsStatusConditionTrue(store.Status.Conditions, memoryv1alpha1.ConditionDegraded) {
		c := meta.FindStatusCondition(store.Status.Conditions, memoryv1alpha1.ConditionDegraded)
		r.Recorder.Eventf(store, nil, corev1.EventTypeWarning, "Degraded", "Provision", "%s", c.Message)
	}
}
