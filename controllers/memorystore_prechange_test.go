package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/memory"
)

// readyDeletableStore is a Ready store with reclaimPolicy Delete, some memories, and
// the pre-change snapshot as mutate leaves it (the default: on, no template).
func readyDeletableStore(t *testing.T, f backendFixture, name string, mutate func(*memoryv1alpha1.MemoryStoreSpec)) *memoryv1alpha1.MemoryStore {
	t.Helper()
	store := readySnapshotStore(t, f, name)
	g := NewWithT(t)
	key := client.ObjectKeyFromObject(store)
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := getStore(g, key)
		s.Spec.ReclaimPolicy = memoryv1alpha1.ReclaimDelete
		s.Spec.PreChangeSnapshot = nil
		if mutate != nil {
			mutate(&s.Spec)
		}
		return k8sClient.Update(context.Background(), s)
	})).To(Succeed())
	store = waitReady(t, key)
	putMemories(t, store,
		testItem("m-1", "user:1", memory.Semantic, `{"likes":"tea"}`),
		testItem("m-2", "user:2", memory.Episodic, `{"booked":"Lisbon"}`))
	return store
}

func withPreChangeTemplate(s *memoryv1alpha1.MemoryStoreSpec) {
	s.PreChangeSnapshot = &memoryv1alpha1.PreChangeSnapshotSpec{Template: &memoryv1alpha1.SnapshotParameters{
		Encryption: memoryv1alpha1.SnapshotEncryption{KeySecret: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: snapshotKeySecret}, Key: "key"}},
	}}
}

// setPreChange changes spec.preChangeSnapshot of a store, also one being deleted.
func setPreChange(g Gomega, key client.ObjectKey, p *memoryv1alpha1.PreChangeSnapshotSpec) {
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := getStore(g, key)
		s.Spec.PreChangeSnapshot = p
		return k8sClient.Update(context.Background(), s)
	})).To(Succeed())
}

func waitGone(g Gomega, obj client.Object) {
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(obj), obj))
	}).WithTimeout(60 * time.Second).Should(BeTrue())
}

func TestDeletionWaitsForItsSnapshot(t *testing.T) {
	f := services(t)
	g := NewWithT(t)
	store := readyDeletableStore(t, f, "bye", withPreChangeTemplate)
	key := client.ObjectKeyFromObject(store)
	schema := store.Status.Postgres.Schema
	g.Expect(k8sClient.Delete(context.Background(), store)).To(Succeed())

	// The snapshot is made, and the store waits for it with its data in place.
	got := waitForCondition(t, key, memoryv1alpha1.ConditionReady, metav1.ConditionFalse, memoryv1alpha1.ReasonPreChangeSnapshot)
	name := preChangeSnapshotName(store, changeDelete)
	g.Expect(got.Status.PreChangeSnapshot).To(Equal(&memoryv1alpha1.PreChangeSnapshotStatus{Snapshot: name, Change: "Delete"}))
	snap := getSnapshot(g, client.ObjectKey{Namespace: store.Namespace, Name: name})
	g.Expect(snap.Labels).To(HaveKeyWithValue(memoryv1alpha1.LabelPreChange, "Delete"))
	g.Expect(snap.OwnerReferences).To(BeEmpty(), "the snapshot must outlive its store")
	g.Expect(schemaExists(t, schema)).To(BeTrue())

	// Its Job runs against the store being deleted; once it succeeded the data goes.
	job := waitForJob(t, snap)
	m := runWorker(t, job)
	g.Expect(m.Counts.Items).To(Equal(int64(2)))
	completeJob(t, job)
	waitGone(g, &memoryv1alpha1.MemoryStore{ObjectMeta: objectMeta(store.Namespace, store.Name)})
	g.Expect(schemaExists(t, schema)).To(BeFalse())
	snap = getSnapshot(g, client.ObjectKeyFromObject(snap))
	g.Expect(snap.Succeeded()).To(BeTrue())
	g.Expect(snap.Status.Items).To(Equal(int64(2)))
}

func TestDeletionKeepsTheDataWhenItsSnapshotFails(t *testing.T) {
	f := services(t)
	g := NewWithT(t)
	store := readyDeletableStore(t, f, "bye", withPreChangeTemplate)
	key := client.ObjectKeyFromObject(store)
	schema := store.Status.Postgres.Schema
	g.Expect(k8sClient.Delete(context.Background(), store)).To(Succeed())
	name := preChangeSnapshotName(store, changeDelete)
	waitForCondition(t, key, memoryv1alpha1.ConditionReady, metav1.ConditionFalse, memoryv1alpha1.ReasonPreChangeSnapshot)
	job := waitForJob(t, getSnapshot(g, client.ObjectKey{Namespace: store.Namespace, Name: name}))
	failedPod(t, job, "memory-operator snapshot: the bucket went away")
	failJob(t, job, "BackoffLimitExceeded", "Job has reached the specified backoff limit")

	got := waitForCondition(t, key, memoryv1alpha1.ConditionReady, metav1.ConditionFalse, memoryv1alpha1.ReasonPreChangeSnapshotFailed)
	g.Expect(meta.FindStatusCondition(got.Status.Conditions, memoryv1alpha1.ConditionReady).Message).To(ContainSubstring(name))
	g.Consistently(func() bool { return schemaExists(t, schema) }).WithTimeout(2 * time.Second).Should(BeTrue())

	// The owner decides to go ahead without one.
	setPreChange(g, key, &memoryv1alpha1.PreChangeSnapshotSpec{Enabled: ptr.To(false)})
	waitGone(g, &memoryv1alpha1.MemoryStore{ObjectMeta: objectMeta(store.Namespace, store.Name)})
	g.Expect(schemaExists(t, schema)).To(BeFalse())
}

func TestDeletionWithoutAWayToSnapshotWaits(t *testing.T) {
	f := services(t)
	g := NewWithT(t)
	store := readyDeletableStore(t, f, "bye", nil)
	key := client.ObjectKeyFromObject(store)
	schema := store.Status.Postgres.Schema
	g.Expect(k8sClient.Delete(context.Background(), store)).To(Succeed())
	waitForCondition(t, key, memoryv1alpha1.ConditionReady, metav1.ConditionFalse, memoryv1alpha1.ReasonPreChangeSnapshotUnavailable)
	g.Consistently(func() bool { return schemaExists(t, schema) }).WithTimeout(2 * time.Second).Should(BeTrue())

	// A template given now: the snapshot is taken, then the store goes.
	setPreChange(g, key, &memoryv1alpha1.PreChangeSnapshotSpec{})
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := getStore(g, key)
		withPreChangeTemplate(&s.Spec)
		return k8sClient.Update(context.Background(), s)
	})).To(Succeed())
	snap := &memoryv1alpha1.MemorySnapshot{ObjectMeta: objectMeta(store.Namespace, preChangeSnapshotName(store, changeDelete))}
	g.Eventually(func() error { return k8sClient.Get(context.Background(), client.ObjectKeyFromObject(snap), snap) }).
		WithTimeout(30 * time.Second).Should(Succeed())
	job := waitForJob(t, snap)
	runWorker(t, job)
	completeJob(t, job)
	waitGone(g, &memoryv1alpha1.MemoryStore{ObjectMeta: objectMeta(store.Namespace, store.Name)})
	g.Expect(schemaExists(t, schema)).To(BeFalse())
}
