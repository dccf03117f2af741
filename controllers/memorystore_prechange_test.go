package controllers

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/provision"
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
	name := preChangeSnapshotName(store, changeDelete, "")
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
	name := preChangeSnapshotName(store, changeDelete, "")
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
	snap := &memoryv1alpha1.MemorySnapshot{ObjectMeta: objectMeta(store.Namespace, preChangeSnapshotName(store, changeDelete, ""))}
	g.Eventually(func() error { return k8sClient.Get(context.Background(), client.ObjectKeyFromObject(snap), snap) }).
		WithTimeout(30 * time.Second).Should(Succeed())
	job := waitForJob(t, snap)
	runWorker(t, job)
	completeJob(t, job)
	waitGone(g, &memoryv1alpha1.MemoryStore{ObjectMeta: objectMeta(store.Namespace, store.Name)})
	g.Expect(schemaExists(t, schema)).To(BeFalse())
}

// TestUpgradeMigratesOnlyAfterASnapshot plays an operator upgrade on a store whose
// schema is behind this version's (its schema_migrations cut back to version 5): the
// migration waits for a snapshot labelled for the upgrade, the store serving on
// (Ready kept, Reconciling; Stalled while the snapshot failed or cannot be taken)
// with every other Job held back; once the snapshot succeeded it goes ahead. A
// schema older than this version's snapshots read, and a store that opted out,
// are told apart. The reconciler is called directly: the manager's own reconcile
// of the store stops at its missing admin Secret.
func TestUpgradeMigratesOnlyAfterASnapshot(t *testing.T) {
	f := services(t)
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	tenant := newTenant()
	names, err := provision.NamesFor(tenant, "")
	g.Expect(err).NotTo(HaveOccurred())
	admin := provision.PostgresConn{Host: f.pg.Host, Port: int(f.pgPort()), Database: "postgres", SSLMode: "disable",
		User: f.pg.User, Password: f.pg.Password}
	store := f.inlineStore(ns, "old", tenant, 8, false)
	store.Spec.Backend.Postgres.AdminSecret.Name = "nowhere" // the manager provisions nothing
	withPreChangeTemplate(&store.Spec)
	create(t, store)
	g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(store), store)).To(Succeed())
	if _, err := provision.EnsurePostgres(ctx, admin, names, ownerOf(store), provision.Passwords{Agent: "a-pw-1", Worker: "w-pw-1"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = provision.DeletePostgres(context.Background(), admin, names, ownerOf(store)) })
	setVersion := func(v int) {
		t.Helper()
		pool := pgAdminPool(t)
		if _, err := pool.Exec(ctx, `DELETE FROM `+names.Schema+`.schema_migrations WHERE version > $1`, v); err != nil {
			t.Fatal(err)
		}
	}
	setVersion(5)
	// What the previous version's status said.
	store.Status.Postgres = &memoryv1alpha1.PostgresStatus{Schema: names.Schema, SchemaVersion: 5}
	store.Status.Vector = &memoryv1alpha1.VectorStatus{Engine: "Postgres", Dimension: 8}
	store.Status.WorkerSecret = store.WorkerSecretName()
	store.SetCondition(memoryv1alpha1.ConditionReady, metav1.ConditionTrue, memoryv1alpha1.ReasonProvisioned, "ready")
	r := newReconciler(k8sClient, k8sClient)
	rb := &resolvedBackend{postgres: admin}
	name := preChangeSnapshotName(store, changeUpgrade, fmt.Sprintf("-v%d", pgstore.LatestVersion))
	check := func(wantWait bool, reason string, state healthState) {
		t.Helper()
		wait, err := r.snapshotBeforeMigration(ctx, store, rb, names)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(wait).To(Equal(wantWait))
		c := meta.FindStatusCondition(store.Status.Conditions, memoryv1alpha1.ConditionPostgresReady)
		if reason == "" {
			g.Expect(c).To(BeNil())
		} else {
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(reason), c.Message)
		}
		g.Expect(storeSummary(store).state).To(Equal(state))
	}

	// The snapshot is made; the migration waits, the store serves, Jobs wait.
	check(true, memoryv1alpha1.ReasonPreChangeSnapshot, servingWorking)
	g.Expect(store.Status.PreChangeSnapshot).To(Equal(&memoryv1alpha1.PreChangeSnapshotStatus{Snapshot: name, Change: "Upgrade"}))
	snap := getSnapshot(g, client.ObjectKey{Namespace: ns, Name: name})
	g.Expect(snap.Labels).To(HaveKeyWithValue(memoryv1alpha1.LabelPreChange, "Upgrade"))
	g.Expect(schemaBehind(store)).To(BeTrue())
	_, _, err = readyStore(ctx, &storeReader{store}, ns, store.Name)
	g.Expect(err).To(MatchError(ContainSubstring("migrates it to version")))
	got, _, upgrading, err := preChangeStore(ctx, &storeReader{store}, snap)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(upgrading).To(BeTrue(), "the upgrade's snapshot reads the store at its old version")
	g.Expect(got.Name).To(Equal(store.Name))

	// It fails: Stalled, the data untouched; deleted, it is taken again.
	finishSnapshot(t, ns, name, memoryv1alpha1.ReasonFailed, nil)
	check(true, memoryv1alpha1.ReasonPreChangeSnapshotFailed, servingStalled)
	g.Expect(k8sClient.Delete(ctx, snap)).To(Succeed())
	waitGone(g, snap)
	check(true, memoryv1alpha1.ReasonPreChangeSnapshot, servingWorking)
	getSnapshot(g, client.ObjectKey{Namespace: ns, Name: name})
	finishSnapshot(t, ns, name, memoryv1alpha1.ReasonSucceeded, nil)
	store.Status.Conditions = nil
	store.SetCondition(memoryv1alpha1.ConditionReady, metav1.ConditionTrue, memoryv1alpha1.ReasonProvisioned, "ready")
	check(false, "", done)
	g.Expect(store.Status.PreChangeSnapshot.Succeeded).To(BeTrue())
	g.Eventually(func() []string { return eventReasons(ns, store.Name) }).WithTimeout(waitTimeout).Should(ContainElement("PreChangeSnapshotSucceeded"))

	// Older than this version's snapshots read: nothing can be taken, the store says so.
	setVersion(4)
	check(true, memoryv1alpha1.ReasonPreChangeSnapshotUnavailable, servingStalled)
	// A store that opted out is migrated at once, as is one at the latest version.
	store.Spec.PreChangeSnapshot = &memoryv1alpha1.PreChangeSnapshotSpec{Enabled: ptr.To(false)}
	store.Status.Conditions = nil
	store.SetCondition(memoryv1alpha1.ConditionReady, metav1.ConditionTrue, memoryv1alpha1.ReasonProvisioned, "ready")
	check(false, "", done)
}

// storeReader serves one store to readyStore and preChangeStore, as the snapshot
// controller would read it (its status as this test holds it).
type storeReader struct{ store *memoryv1alpha1.MemoryStore }

func (s *storeReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if st, ok := obj.(*memoryv1alpha1.MemoryStore); ok && key == client.ObjectKeyFromObject(s.store) {
		s.store.DeepCopyInto(st)
		return nil
	}
	return k8sClient.Get(ctx, key, obj, opts...)
}

func (s *storeReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return k8sClient.List(ctx, list, opts...)
}

// TestPreChangeSnapshotWakesItsStore: a pre-change snapshot that finished (either
// way) wakes the store that waits for it; one still running, or any other snapshot,
// does not.
func TestPreChangeSnapshotWakesItsStore(t *testing.T) {
	snap := func(label string, reason string) *memoryv1alpha1.MemorySnapshot {
		s := &memoryv1alpha1.MemorySnapshot{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "s", Labels: map[string]string{}},
			Spec: memoryv1alpha1.MemorySnapshotSpec{StoreRef: corev1.LocalObjectReference{Name: "bot"}}}
		if label != "" {
			s.Labels[memoryv1alpha1.LabelPreChange] = label
		}
		if reason != "" {
			s.SetCompleted(reason, "done")
		}
		return s
	}
	want := []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "team", Name: "bot"}}}
	for _, tc := range []struct {
		snap *memoryv1alpha1.MemorySnapshot
		want []reconcile.Request
	}{
		{snap("Upgrade", memoryv1alpha1.ReasonSucceeded), want},
		{snap("Delete", memoryv1alpha1.ReasonFailed), want},
		{snap("Upgrade", ""), nil},
		{snap("", memoryv1alpha1.ReasonSucceeded), nil},
	} {
		if got := storeOfPreChangeSnapshot(context.Background(), tc.snap); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%v %v: %v, want %v", tc.snap.Labels, tc.snap.Status.Conditions, got, tc.want)
		}
	}
}
