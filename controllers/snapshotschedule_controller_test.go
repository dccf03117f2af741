package controllers

import (
	"bytes"
	"context"
	"sort"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/testutil"
)

// The schedule tests drive their own reconcilers with fake clocks (the manager's runs on
// a stopped one), against stores that are never provisioned: a schedule creates
// snapshots whether or not its store is Ready, and those snapshots wait for it.

// scheduledStore creates a store with a snapshot schedule and returns it as stored.
func scheduledStore(t *testing.T, namespace, name, schedule string, mutate func(*memoryv1alpha1.SnapshotSchedule)) *memoryv1alpha1.MemoryStore {
	t.Helper()
	store := validStore(namespace, name)
	store.Spec.SnapshotSchedule = &memoryv1alpha1.SnapshotSchedule{
		Schedule: memoryv1alpha1.CronSchedule(schedule),
		Template: memoryv1alpha1.SnapshotParameters{
			Encryption:        memoryv1alpha1.SnapshotEncryption{Unencrypted: true},
			CompressionLevel:  3,
			IncludeEmbeddings: true,
		},
	}
	if mutate != nil {
		mutate(store.Spec.SnapshotSchedule)
	}
	create(t, store)
	return getStore(NewWithT(t), client.ObjectKeyFromObject(store))
}

// nextDaily is the first 03:00 UTC strictly after t.
func nextDaily(t time.Time) time.Time {
	t = t.UTC()
	slot := time.Date(t.Year(), t.Month(), t.Day(), 3, 0, 0, 0, time.UTC)
	if !slot.After(t) {
		slot = slot.AddDate(0, 0, 1)
	}
	return slot
}

func reconcileSchedule(t *testing.T, r *SnapshotScheduleReconciler, store *memoryv1alpha1.MemoryStore) reconcile.Result {
	t.Helper()
	res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(store)})
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return res
}

// scheduledSnapshotsOf lists the store's scheduled snapshots by name.
func scheduledSnapshotsOf(g Gomega, store *memoryv1alpha1.MemoryStore) []string {
	var list memoryv1alpha1.MemorySnapshotList
	g.Expect(k8sClient.List(context.Background(), &list, client.InNamespace(store.Namespace),
		client.MatchingLabels{memoryv1alpha1.LabelStore: store.Name, memoryv1alpha1.LabelScheduled: "true"})).To(Succeed())
	var names []string
	for _, s := range list.Items {
		names = append(names, s.Name)
	}
	sort.Strings(names)
	return names
}

func scheduleCondition(g Gomega, store *memoryv1alpha1.MemoryStore) metav1.Condition {
	s := getStore(g, client.ObjectKeyFromObject(store))
	c := meta.FindStatusCondition(s.Status.Conditions, memoryv1alpha1.ConditionSnapshotSchedule)
	g.Expect(c).NotTo(BeNil())
	return *c
}

// finishSnapshot writes the status of a snapshot that ended with reason (as the snapshot
// controller would), with its package location when loc is set.
func finishSnapshot(t *testing.T, namespace, name, reason string, loc *memoryv1alpha1.SnapshotLocation) {
	t.Helper()
	snap := &memoryv1alpha1.MemorySnapshot{}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, snap); err != nil {
			return err
		}
		snap.Status = memoryv1alpha1.MemorySnapshotStatus{Location: loc}
		snap.SetCompleted(reason, "finished by the test")
		snap.Status.Phase = snap.DerivePhase()
		return k8sClient.Status().Update(context.Background(), snap)
	})
	if err != nil {
		t.Fatalf("finishing snapshot %s: %v", name, err)
	}
}

func TestSnapshotScheduleCreatesOneSnapshotPerSlot(t *testing.T) {
	ns := newNamespace(t)
	store := scheduledStore(t, ns, "daily", "0 3 * * *", nil)
	slot := nextDaily(store.CreationTimestamp.Time)
	clock := clocktesting.NewFakePassiveClock(slot.Add(-time.Minute))
	r := newScheduleReconciler(k8sClient, k8sClient, clock)
	g := NewWithT(t)

	// Before the slot: nothing, and a wake-up at the slot.
	res := reconcileSchedule(t, r, store)
	g.Expect(res.RequeueAfter).To(Equal(time.Minute))
	g.Expect(scheduledSnapshotsOf(g, store)).To(BeEmpty())
	st := getStore(g, client.ObjectKeyFromObject(store)).Status.Snapshots
	g.Expect(st.LastScheduleTime).To(BeNil())
	g.Expect(st.NextScheduleTime.Time).To(BeTemporally("==", slot))
	c := scheduleCondition(g, store)
	g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonScheduled))
	g.Expect(c.Message).To(Equal(`A snapshot is taken at every slot of "0 3 * * *" (UTC)`))
	g.Expect(c.ObservedGeneration).To(Equal(store.Generation))

	// At the slot: one snapshot, named after it, from the template, labelled (not owned).
	clock.SetTime(slot.Add(42 * time.Second))
	res = reconcileSchedule(t, r, store)
	g.Expect(res.RequeueAfter).To(Equal(24*time.Hour - 42*time.Second))
	name := "daily-" + slot.Format("20060102") + "0300"
	g.Expect(scheduledSnapshotsOf(g, store)).To(Equal([]string{name}))
	snap := getSnapshot(g, client.ObjectKey{Namespace: ns, Name: name})
	g.Expect(snap.Labels).To(Equal(map[string]string{memoryv1alpha1.LabelStore: "daily", memoryv1alpha1.LabelScheduled: "true"}))
	g.Expect(snap.Annotations).To(Equal(map[string]string{memoryv1alpha1.AnnotationScheduledAt: slot.Format(time.RFC3339)}))
	g.Expect(snap.OwnerReferences).To(BeEmpty(), "snapshots outlive their store")
	g.Expect(snap.Spec.StoreRef.Name).To(Equal("daily"))
	g.Expect(snap.Spec.Encryption.Unencrypted).To(BeTrue())
	g.Expect(snap.Spec.CompressionLevel).To(Equal(int32(3)))
	g.Expect(snap.Spec.IncludeEmbeddings).To(BeTrue())
	st = getStore(g, client.ObjectKeyFromObject(store)).Status.Snapshots
	g.Expect(st.LastScheduleTime.Time).To(BeTemporally("==", slot))
	g.Expect(st.LastSnapshot).To(Equal(name))
	g.Expect(st.NextScheduleTime.Time).To(BeTemporally("==", slot.Add(24*time.Hour)))

	// Again, and from a restarted operator with the same clock: nothing new.
	reconcileSchedule(t, r, store)
	restarted := newScheduleReconciler(k8sClient, k8sClient, clock)
	g.Expect(reconcileSchedule(t, restarted, store).RequeueAfter).To(Equal(24*time.Hour - 42*time.Second))
	g.Expect(scheduledSnapshotsOf(g, store)).To(Equal([]string{name}))

	// An operator that created the snapshot and stopped before recording the slot: the
	// slot's snapshot exists, so the restarted one records it and creates nothing.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := getStore(g, client.ObjectKeyFromObject(store))
		s.Status.Snapshots = nil
		return k8sClient.Status().Update(context.Background(), s)
	})).To(Succeed())
	reconcileSchedule(t, newScheduleReconciler(k8sClient, k8sClient, clock), store)
	g.Expect(scheduledSnapshotsOf(g, store)).To(Equal([]string{name}))
	st = getStore(g, client.ObjectKeyFromObject(store)).Status.Snapshots
	g.Expect(st.LastScheduleTime.Time).To(BeTemporally("==", slot))
	g.Expect(st.LastSnapshot).To(Equal(name))

	g.Eventually(func() []string { return eventReasons(ns, store.Name) }).WithTimeout(waitTimeout).
		Should(ContainElements("SnapshotCreated", memoryv1alpha1.ReasonScheduled))
}

func TestSnapshotScheduleSkipsSlotsWhileASnapshotRuns(t *testing.T) {
	ns := newNamespace(t)
	store := scheduledStore(t, ns, "hourly", "0 * * * *", nil)
	created := store.CreationTimestamp.UTC()
	slot1 := created.Truncate(time.Hour).Add(time.Hour)
	clock := clocktesting.NewFakePassiveClock(slot1.Add(5 * time.Second))
	r := newScheduleReconciler(k8sClient, k8sClient, clock)
	g := NewWithT(t)

	reconcileSchedule(t, r, store)
	first := slotSnapshotName("hourly", slot1)
	g.Expect(scheduledSnapshotsOf(g, store)).To(Equal([]string{first}))

	// The next slot comes while the first snapshot has not finished: skipped, not queued.
	slot2 := slot1.Add(time.Hour)
	clock.SetTime(slot2.Add(5 * time.Second))
	reconcileSchedule(t, r, store)
	g.Expect(scheduledSnapshotsOf(g, store)).To(Equal([]string{first}))
	st := getStore(g, client.ObjectKeyFromObject(store)).Status.Snapshots
	g.Expect(st.LastScheduleTime.Time).To(BeTemporally("==", slot2))
	g.Expect(st.LastSnapshot).To(Equal(first))
	g.Eventually(func() []string { return eventReasons(ns, store.Name) }).WithTimeout(waitTimeout).
		Should(ContainElement("SnapshotSkipped"))

	// Once it finished, the following slot gets its snapshot; the skipped one never does.
	finishSnapshot(t, ns, first, memoryv1alpha1.ReasonSucceeded, nil)
	reconcileSchedule(t, r, store)
	g.Expect(scheduledSnapshotsOf(g, store)).To(Equal([]string{first}), "slot 2 stays skipped")
	slot3 := slot2.Add(time.Hour)
	clock.SetTime(slot3)
	reconcileSchedule(t, r, store)
	g.Expect(scheduledSnapshotsOf(g, store)).To(Equal([]string{first, slotSnapshotName("hourly", slot3)}))
}

func TestSnapshotScheduleSuspended(t *testing.T) {
	ns := newNamespace(t)
	store := scheduledStore(t, ns, "paused", "0 3 * * *", func(s *memoryv1alpha1.SnapshotSchedule) { s.Suspend = true })
	slot := nextDaily(store.CreationTimestamp.Time)
	clock := clocktesting.NewFakePassiveClock(slot.Add(2 * time.Hour))
	r := newScheduleReconciler(k8sClient, k8sClient, clock)
	g := NewWithT(t)

	g.Expect(reconcileSchedule(t, r, store)).To(Equal(reconcile.Result{}))
	g.Expect(scheduledSnapshotsOf(g, store)).To(BeEmpty())
	c := scheduleCondition(g, store)
	g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonSuspended))
	g.Expect(getStore(g, client.ObjectKeyFromObject(store)).Status.Snapshots.NextScheduleTime).To(BeNil())

	// Resumed: like a CronJob, the most recent missed slot runs once.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := getStore(g, client.ObjectKeyFromObject(store))
		s.Spec.SnapshotSchedule.Suspend = false
		return k8sClient.Update(context.Background(), s)
	})).To(Succeed())
	reconcileSchedule(t, r, store)
	g.Expect(scheduledSnapshotsOf(g, store)).To(Equal([]string{slotSnapshotName("paused", slot)}))
	g.Expect(scheduleCondition(g, store).Reason).To(Equal(memoryv1alpha1.ReasonScheduled))
}

func TestSnapshotScheduleReportsAnInvalidSchedule(t *testing.T) {
	ns := newNamespace(t)
	store := scheduledStore(t, ns, "typo", "61 3 * * *", nil) // the right shape, so admitted; minute 61 does not exist
	// The MemoryStore reconciler writes the same status; wait for its Ready condition.
	waitForCondition(t, client.ObjectKeyFromObject(store), memoryv1alpha1.ConditionReady, metav1.ConditionFalse, memoryv1alpha1.ReasonSecretNotFound)
	clock := clocktesting.NewFakePassiveClock(store.CreationTimestamp.Add(48 * time.Hour))
	r := newScheduleReconciler(k8sClient, k8sClient, clock)
	g := NewWithT(t)

	g.Expect(reconcileSchedule(t, r, store)).To(Equal(reconcile.Result{}))
	c := scheduleCondition(g, store)
	g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonInvalidSchedule))
	g.Expect(c.Message).To(Equal(`Schedule "61 3 * * *" is not valid: end of range (61) above maximum (59): 61`))
	g.Expect(scheduledSnapshotsOf(g, store)).To(BeEmpty())
	g.Expect(getStore(g, client.ObjectKeyFromObject(store)).Status.Snapshots.NextScheduleTime).To(BeNil())
	g.Eventually(func() []string { return eventReasons(ns, store.Name) }).WithTimeout(waitTimeout).
		Should(ContainElement(memoryv1alpha1.ReasonInvalidSchedule))

	// Fixed: the schedule is valid again (and the store's other conditions untouched).
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := getStore(g, client.ObjectKeyFromObject(store))
		s.Spec.SnapshotSchedule.Schedule = "@daily"
		return k8sClient.Update(context.Background(), s)
	})).To(Succeed())
	reconcileSchedule(t, r, store)
	c = scheduleCondition(g, store)
	g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonScheduled))
	after := getStore(g, client.ObjectKeyFromObject(store))
	g.Expect(meta.FindStatusCondition(after.Status.Conditions, memoryv1alpha1.ConditionReady)).To(
		HaveField("Reason", memoryv1alpha1.ReasonSecretNotFound), "the MemoryStore reconciler's conditions are kept")
}

func TestSnapshotScheduleRetention(t *testing.T) {
	f := services(t)
	ns := newNamespace(t)
	f.adminSecrets(t, ns)
	destPrefix := testutil.UniqueName("retention-")
	store := scheduledStore(t, ns, "kept", "0 3 * * *", func(s *memoryv1alpha1.SnapshotSchedule) {
		s.KeepLast = ptr.To[int32](2)
		s.Template.Destination = &memoryv1alpha1.SnapshotDestination{
			Endpoint: f.s3.Endpoint, Bucket: "memory-test", Prefix: destPrefix, Insecure: ptr.To(true),
			CredentialsSecret: &memoryv1alpha1.ObjectStorageCredentials{Name: "s3-creds"},
		}
	})
	now := store.CreationTimestamp.UTC() // no slot is due at the store's creation
	s3 := minioClient(t, f)
	g := NewWithT(t)

	// Earlier slots' snapshots: five finished ones, each with a package, and one older
	// still running.
	days := []int{-6, -5, -4, -3, -2, -1}
	prefixes := map[string]string{}
	for i, d := range days {
		slot := now.Add(time.Duration(d) * 24 * time.Hour)
		snap := scheduledSnapshot(store, slotSnapshotName(store.Name, slot), slot)
		create(t, snap)
		if i == 0 {
			continue // running
		}
		prefix := destPrefix + "/" + packageFolder(snap)
		prefixes[snap.Name] = prefix
		_, err := s3.PutObject(context.Background(), "memory-test", prefix+"manifest.json", bytes.NewReader([]byte("{}")), 2, minio.PutObjectOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		finishSnapshot(t, ns, snap.Name, memoryv1alpha1.ReasonSucceeded,
			&memoryv1alpha1.SnapshotLocation{Endpoint: f.s3.Endpoint, Bucket: "memory-test", Prefix: prefix})
	}
	name := func(d int) string { return slotSnapshotName(store.Name, now.Add(time.Duration(d)*24*time.Hour)) }

	// keepLast 2: the newest two finished ones stay; the running one is never touched.
	r := newScheduleReconciler(k8sClient, k8sClient, clocktesting.NewFakePassiveClock(now))
	reconcileSchedule(t, r, store)
	g.Expect(scheduledSnapshotsOf(g, store)).To(ConsistOf(name(-6), name(-2), name(-1)))
	for _, d := range []int{-5, -4, -3} {
		g.Expect(objectsUnder(g, s3, "memory-test", prefixes[name(d)])).To(BeEmpty(), "package of %s", name(d))
	}
	for _, d := range []int{-2, -1} {
		g.Expect(objectsUnder(g, s3, "memory-test", prefixes[name(d)])).To(HaveLen(1), "package of %s", name(d))
	}
	g.Eventually(func() []string { return eventReasons(ns, store.Name) }).WithTimeout(waitTimeout).
		Should(ContainElement("SnapshotDeleted"))

	// maxAge 36h: the two-day-old one goes too; the reconciler wakes when the next one
	// passes maxAge, unless the next slot comes first.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := getStore(g, client.ObjectKeyFromObject(store))
		s.Spec.SnapshotSchedule.MaxAge = &metav1.Duration{Duration: 36 * time.Hour}
		return k8sClient.Update(context.Background(), s)
	})).To(Succeed())
	res := reconcileSchedule(t, r, store)
	g.Expect(scheduledSnapshotsOf(g, store)).To(ConsistOf(name(-6), name(-1)))
	g.Expect(objectsUnder(g, s3, "memory-test", prefixes[name(-2)])).To(BeEmpty())
	g.Expect(objectsUnder(g, s3, "memory-test", prefixes[name(-1)])).To(HaveLen(1))
	g.Expect(res.RequeueAfter).To(Equal(min(12*time.Hour, nextDaily(now).Sub(now))))
}
