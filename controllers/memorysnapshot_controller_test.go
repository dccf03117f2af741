package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/snapshot"
	"github.com/amemory/memory-operator/internal/worker"
)

func TestMemorySnapshotExportsStoreThroughAJob(t *testing.T) {
	f := services(t)
	store := readySnapshotStore(t, f, "support-bot")
	ns, tenant := store.Namespace, store.Spec.Tenant
	putMemories(t, store,
		testItem("m-1", "user:1", memory.Semantic, `{"likes":"tea"}`),
		testItem("m-2", "user:1", memory.Episodic, `{"booked":"Lisbon"}`),
		testItem("m-3", "user:2", memory.Procedural, `{"steps":["a","b"]}`),
		testItem("m-4", "session:9", memory.Working, `{"draft":"hi"}`), // working memory is left out by default
	)

	snap := newSnapshot(ns, "nightly", store.Name, nil)
	create(t, snap)
	key := client.ObjectKeyFromObject(snap)
	job := waitForJob(t, snap)
	g := NewWithT(t)

	// The Job: owned by the snapshot, the operator's image, the worker's arguments.
	g.Expect(job.OwnerReferences).To(Equal([]metav1.OwnerReference{{
		APIVersion: "memory.amemory.io/v1alpha1", Kind: "MemorySnapshot", Name: "nightly", UID: snap.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}}))
	g.Expect(job.Spec.Template.Spec.Containers[0].Image).To(Equal(testWorkerImage))
	cfg, err := jobSnapshotConfig(job)
	g.Expect(err).NotTo(HaveOccurred())
	prefix := "memory-operator/" + tenant + "/snapshots/nightly-" + string(snap.UID)[:8] + "/"
	g.Expect(cfg.Destination).To(Equal(worker.Destination{Endpoint: f.s3.Endpoint, Insecure: true, Bucket: "memory-test", Prefix: prefix}))
	g.Expect(cfg.Schema).To(Equal("mem_" + tenant))
	g.Expect(cfg.Types).To(Equal([]string{"episodic", "semantic", "procedural"}))
	g.Expect(*job.Spec.ActiveDeadlineSeconds).To(Equal(int64(3600)), "the CRD default")

	running := waitSnapshotCondition(t, key, memoryv1alpha1.ConditionProgressing, metav1.ConditionTrue, memoryv1alpha1.ReasonJobCreated)
	g.Expect(running.Status.Phase).To(Equal(memoryv1alpha1.PhaseRunning))
	g.Expect(running.Status.JobName).To(Equal(job.Name))
	g.Expect(running.Status.StartTime).NotTo(BeNil())
	g.Expect(running.Status.Location).To(Equal(&memoryv1alpha1.SnapshotLocation{Endpoint: f.s3.Endpoint, Bucket: "memory-test", Prefix: prefix}))
	g.Expect(snapshotCondition(running, memoryv1alpha1.ConditionCompleted).Status).To(Equal(metav1.ConditionFalse))

	// The pod runs (the test plays the kubelet), then the Job controller marks it Complete.
	m := runWorker(t, job)
	end := completeJob(t, job)

	done := waitSnapshotCondition(t, key, memoryv1alpha1.ConditionCompleted, metav1.ConditionTrue, memoryv1alpha1.ReasonSucceeded)
	g.Expect(done.Status.Phase).To(Equal(memoryv1alpha1.PhaseSucceeded))
	g.Expect(snapshotCondition(done, memoryv1alpha1.ConditionProgressing).Status).To(Equal(metav1.ConditionFalse))
	g.Expect(done.Status.FormatVersion).To(Equal(snapshot.FormatVersion))
	g.Expect(done.Status.Items).To(Equal(int64(3)))
	g.Expect(done.Status.ItemsByType).To(Equal(map[string]int64{"episodic": 1, "semantic": 1, "procedural": 1}))
	g.Expect(done.Status.Scopes).To(Equal(int64(2)))
	g.Expect(done.Status.Bytes).To(Equal(m.StoredBytes()))
	g.Expect(done.Status.Bytes).To(BeNumerically(">", 0))
	g.Expect(done.Status.Shards).To(Equal(int32(len(m.Shards))))
	g.Expect(done.Status.Duration).To(Equal("1m30s"))
	g.Expect(done.Status.CompletionTime.Time).To(BeTemporally("==", end.Time))
	g.Expect(done.Status.ManifestSHA256).To(Equal(objectSHA(t, minioClient(t, f), "memory-test", prefix+snapshot.ManifestName)))
	g.Expect(done.Status.ExpiresAt).To(BeNil(), "no TTL")
	g.Expect(snapshotCondition(done, memoryv1alpha1.ConditionCompleted).Message).To(Equal(
		fmt.Sprintf("Exported 3 items in 2 scopes (%d bytes in %d shards) to s3://memory-test/%s", m.StoredBytes(), len(m.Shards), prefix)))

	g.Eventually(func() []string { return eventReasons(ns, snap.Name) }).WithTimeout(waitTimeout).
		Should(ContainElements(memoryv1alpha1.ReasonJobCreated, memoryv1alpha1.ReasonSucceeded))
	g.Expect(jobsIn(g, ns)).To(HaveLen(1))
}

func TestMemorySnapshotFailedJobRecordsNoCounts(t *testing.T) {
	f := services(t)
	store := readySnapshotStore(t, f, "bot")
	putMemories(t, store, testItem("m-1", "user:1", memory.Semantic, `{"a":1}`))
	snap := newSnapshot(store.Namespace, "deadline", store.Name, func(s *memoryv1alpha1.MemorySnapshot) {
		s.Spec.Job.ActiveDeadlineSeconds = ptr.To[int64](60)
	})
	create(t, snap)
	job := waitForJob(t, snap)
	NewWithT(t).Expect(*job.Spec.ActiveDeadlineSeconds).To(Equal(int64(60)))

	// Even with a complete package at the prefix, a failed Job never counts as a result.
	runWorker(t, job)
	failedPod(t, job, "memory-operator snapshot: exporting mem_x: context canceled")
	failJob(t, job, batchv1.JobReasonDeadlineExceeded, "Job was active longer than specified deadline")

	key := client.ObjectKeyFromObject(snap)
	got := waitSnapshotCondition(t, key, memoryv1alpha1.ConditionCompleted, metav1.ConditionTrue, memoryv1alpha1.ReasonFailed)
	g := NewWithT(t)
	want := "Job " + job.Name + " failed (DeadlineExceeded): Job was active longer than specified deadline" +
		"; last error: memory-operator snapshot: exporting mem_x: context canceled"
	g.Expect(snapshotCondition(got, memoryv1alpha1.ConditionCompleted).Message).To(Equal(want))
	progressing := snapshotCondition(got, memoryv1alpha1.ConditionProgressing)
	g.Expect(progressing.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(progressing.Reason).To(Equal(memoryv1alpha1.ReasonDeadlineExceeded))
	g.Expect(got.Status.Phase).To(Equal(memoryv1alpha1.PhaseFailed))
	g.Expect(got.Status.Items).To(BeZero())
	g.Expect(got.Status.ItemsByType).To(BeNil())
	g.Expect(got.Status.Scopes).To(BeZero())
	g.Expect(got.Status.Bytes).To(BeZero())
	g.Expect(got.Status.Shards).To(BeZero())
	g.Expect(got.Status.ManifestSHA256).To(BeEmpty())
	g.Expect(got.Status.FormatVersion).To(BeZero())
	g.Expect(got.Status.Duration).To(Equal("1m30s"))
	g.Eventually(func() []string { return eventReasons(store.Namespace, snap.Name) }).WithTimeout(waitTimeout).
		Should(ContainElement(memoryv1alpha1.ReasonFailed))
}

func TestMemorySnapshotWaitsForItsStore(t *testing.T) {
	f := services(t)
	ns := newNamespace(t)
	f.adminSecrets(t, ns)
	createKeySecret(t, ns, snapshotKeySecret, randomBytes(t, 32)) // 32 raw bytes: a key as it is
	snap := newSnapshot(ns, "early", "later", nil)
	create(t, snap)
	key := client.ObjectKeyFromObject(snap)

	got := waitSnapshotCondition(t, key, memoryv1alpha1.ConditionProgressing, metav1.ConditionFalse, memoryv1alpha1.ReasonStoreNotFound)
	g := NewWithT(t)
	g.Expect(snapshotCondition(got, memoryv1alpha1.ConditionProgressing).Message).To(Equal(
		"MemoryStore later not found in namespace " + ns + "; waiting for it"))
	g.Expect(got.Status.Phase).To(Equal(memoryv1alpha1.PhasePending))
	g.Expect(snapshotCondition(got, memoryv1alpha1.ConditionCompleted).Reason).To(Equal(memoryv1alpha1.ReasonStoreNotFound))
	g.Expect(jobsIn(g, ns)).To(BeEmpty())

	// The store appears: the snapshot waits for it to be Ready, then starts at once (the
	// store watch wakes it; no 30-second recheck needed).
	create(t, f.inlineStore(ns, "later", newTenant(), 8, false))
	job := waitForJob(t, snap)
	g.Expect(job.OwnerReferences[0].UID).To(Equal(snap.UID))
	waitSnapshotCondition(t, key, memoryv1alpha1.ConditionProgressing, metav1.ConditionTrue, memoryv1alpha1.ReasonJobCreated)
	g.Eventually(func() []string { return eventReasons(ns, snap.Name) }).WithTimeout(waitTimeout).
		Should(ContainElements(memoryv1alpha1.ReasonStoreNotFound, memoryv1alpha1.ReasonJobCreated))
}

func TestMemorySnapshotChecksItsKeyBeforeAnyJob(t *testing.T) {
	f := services(t)
	ns := newNamespace(t)
	f.adminSecrets(t, ns)
	store := f.inlineStore(ns, "bot", newTenant(), 8, false)
	create(t, store)
	waitReady(t, client.ObjectKeyFromObject(store))
	snap := newSnapshot(ns, "keyed", "bot", nil)
	create(t, snap)
	key := client.ObjectKeyFromObject(snap)
	g := NewWithT(t)

	got := waitSnapshotCondition(t, key, memoryv1alpha1.ConditionProgressing, metav1.ConditionFalse, memoryv1alpha1.ReasonSecretNotFound)
	g.Expect(snapshotCondition(got, memoryv1alpha1.ConditionProgressing).Message).To(Equal("Secret " + ns + "/snap-key not found"))
	g.Expect(jobsIn(g, ns)).To(BeEmpty())

	// The Secret appears with the key under another name.
	secret := &corev1.Secret{ObjectMeta: objectMeta(ns, snapshotKeySecret), Data: map[string][]byte{"other": []byte("x")}}
	create(t, secret)
	got = waitSnapshotCondition(t, key, memoryv1alpha1.ConditionProgressing, metav1.ConditionFalse, memoryv1alpha1.ReasonSecretKeyMissing)
	g.Expect(snapshotCondition(got, memoryv1alpha1.ConditionProgressing).Message).To(Equal("Secret " + ns + `/snap-key has no key "key"`))

	// A key of the wrong size is refused, naming its length and never its value.
	setSecretData(t, secret, map[string][]byte{"key": []byte("too-short-key")})
	NewWithT(t).Eventually(func(g Gomega) {
		c := snapshotCondition(getSnapshot(g, key), memoryv1alpha1.ConditionProgressing)
		g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonInvalidKey))
		g.Expect(c.Message).To(Equal("Secret " + ns + `/snap-key key "key" holds no usable encryption key: ` +
			"key is 13 bytes; need 32 raw bytes, 64 hex characters or base64 of 32 bytes"))
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	g.Expect(jobsIn(g, ns)).To(BeEmpty())

	// A valid key (base64 of 32 bytes): the Job is created.
	setSecretData(t, secret, map[string][]byte{"key": []byte("MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=")})
	waitForJob(t, snap)
	waitSnapshotCondition(t, key, memoryv1alpha1.ConditionProgressing, metav1.ConditionTrue, memoryv1alpha1.ReasonJobCreated)
}

func TestMemorySnapshotIsImmutable(t *testing.T) {
	ns := newNamespace(t)
	snap := newSnapshot(ns, "frozen", "absent", nil)
	create(t, snap)
	g := NewWithT(t)
	err := updateSnapshot(snap, func(s *memoryv1alpha1.MemorySnapshot) { s.Spec.CompressionLevel = 9 })
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("a MemorySnapshot is immutable; create a new one instead"))
	err = updateSnapshot(snap, func(s *memoryv1alpha1.MemorySnapshot) { s.Spec.StoreRef.Name = "other" })
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)

	// Encryption must be chosen explicitly.
	bad := newSnapshot(ns, "plain", "absent", func(s *memoryv1alpha1.MemorySnapshot) { s.Spec.Encryption.KeySecret = nil })
	err = k8sClient.Create(context.Background(), bad)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("set encryption.keySecret, or encryption.unencrypted: true"))
}

func TestMemorySnapshotWithoutManifestFailsAndNeverRunsAgain(t *testing.T) {
	f := services(t)
	store := readySnapshotStore(t, f, "bot")
	snap := newSnapshot(store.Namespace, "once", store.Name, nil)
	create(t, snap)
	job := waitForJob(t, snap)

	// The Job says Complete but wrote nothing: the package is not usable.
	completeJob(t, job)
	key := client.ObjectKeyFromObject(snap)
	got := waitSnapshotCondition(t, key, memoryv1alpha1.ConditionCompleted, metav1.ConditionTrue, memoryv1alpha1.ReasonManifestInvalid)
	g := NewWithT(t)
	g.Expect(got.Status.Phase).To(Equal(memoryv1alpha1.PhaseFailed))
	g.Expect(snapshotCondition(got, memoryv1alpha1.ConditionCompleted).Message).To(And(
		HavePrefix("Job "+job.Name+" completed, but its package is not usable: "),
		ContainSubstring(snapshot.ErrIncomplete.Error())))
	g.Expect(got.Status.Items).To(BeZero())

	// Deleting the Job of a finished snapshot starts nothing, now or after a restart.
	g.Expect(k8sClient.Delete(context.Background(), job, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(job), &batchv1.Job{}))
	}).
		WithTimeout(waitTimeout).WithPolling(pollEvery).Should(BeTrue())
	restarted := newSnapshotReconciler(k8sClient, k8sClient, clocktesting.NewFakePassiveClock(time.Now()))
	res, err := restarted.Reconcile(context.Background(), reconcile.Request{NamespacedName: key})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res).To(Equal(reconcile.Result{}))
	g.Expect(jobsIn(g, store.Namespace)).To(BeEmpty())
	after := getSnapshot(g, key)
	g.Expect(after.Status).To(Equal(got.Status))
}

func TestMemorySnapshotFailsWhenItsJobDisappears(t *testing.T) {
	f := services(t)
	store := readySnapshotStore(t, f, "bot")
	snap := newSnapshot(store.Namespace, "orphan", store.Name, nil)
	create(t, snap)
	job := waitForJob(t, snap)
	key := client.ObjectKeyFromObject(snap)
	waitSnapshotCondition(t, key, memoryv1alpha1.ConditionProgressing, metav1.ConditionTrue, memoryv1alpha1.ReasonJobCreated)

	g := NewWithT(t)
	g.Expect(k8sClient.Delete(context.Background(), job, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	got := waitSnapshotCondition(t, key, memoryv1alpha1.ConditionCompleted, metav1.ConditionTrue, memoryv1alpha1.ReasonFailed)
	g.Expect(snapshotCondition(got, memoryv1alpha1.ConditionCompleted).Message).To(Equal(
		"Job " + job.Name + " was deleted before it finished; create a new MemorySnapshot to try again"))
	g.Expect(jobsIn(g, store.Namespace)).To(BeEmpty(), "a snapshot never runs twice")
}

func TestMemorySnapshotExpiresAfterItsTTL(t *testing.T) {
	f := services(t)
	store := readySnapshotStore(t, f, "bot")
	putMemories(t, store, testItem("m-1", "user:1", memory.Semantic, `{"a":1}`))
	snap := newSnapshot(store.Namespace, "shortlived", store.Name, func(s *memoryv1alpha1.MemorySnapshot) {
		s.Spec.TTL = &metav1.Duration{Duration: time.Hour}
	})
	create(t, snap)
	job := waitForJob(t, snap)
	runWorker(t, job)
	end := completeJob(t, job)
	key := client.ObjectKeyFromObject(snap)
	done := waitSnapshotCondition(t, key, memoryv1alpha1.ConditionCompleted, metav1.ConditionTrue, memoryv1alpha1.ReasonSucceeded)
	g := NewWithT(t)
	g.Eventually(func() *metav1.Time { return getSnapshot(g, key).Status.ExpiresAt }).
		WithTimeout(waitTimeout).WithPolling(pollEvery).ShouldNot(BeNil())
	expiresAt := getSnapshot(g, key).Status.ExpiresAt.Time
	g.Expect(expiresAt).To(BeTemporally("==", end.Add(time.Hour)))

	s3 := minioClient(t, f)
	prefix := done.Status.Location.Prefix
	g.Expect(objectsUnder(g, s3, "memory-test", prefix)).To(ContainElement(prefix + snapshot.ManifestName))

	// A second before: nothing happens, and the reconciler asks to be woken at expiry.
	clock := clocktesting.NewFakePassiveClock(expiresAt.Add(-time.Second))
	r := newSnapshotReconciler(k8sClient, k8sClient, clock)
	res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: key})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.RequeueAfter).To(Equal(time.Second))
	g.Expect(objectsUnder(g, s3, "memory-test", prefix)).NotTo(BeEmpty())

	// At expiry: the package goes, then the snapshot.
	clock.SetTime(expiresAt)
	res, err = r.Reconcile(context.Background(), reconcile.Request{NamespacedName: key})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res).To(Equal(reconcile.Result{}))
	g.Expect(objectsUnder(g, s3, "memory-test", prefix)).To(BeEmpty())
	g.Expect(apierrors.IsNotFound(k8sClient.Get(context.Background(), key, &memoryv1alpha1.MemorySnapshot{}))).To(BeTrue())
	g.Eventually(func() []string { return eventReasons(store.Namespace, snap.Name) }).WithTimeout(waitTimeout).
		Should(ContainElement(memoryv1alpha1.ReasonExpired))
	// The store's own prefix is untouched.
	g.Expect(objectsUnder(g, s3, "memory-test", store.Status.ObjectStorage.Prefix+".memory-store.json")).To(HaveLen(1))
}

func setSecretData(t *testing.T, secret *corev1.Secret, data map[string][]byte) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(secret), secret); err != nil {
			return err
		}
		secret.Data = data
		return k8sClient.Update(context.Background(), secret)
	})
	if err != nil {
		t.Fatalf("updating Secret %s: %v", secret.Name, err)
	}
}

// updateSnapshot applies mutate to the current snapshot and returns what the API
// server says (conflicts with the controller's status writes are retried).
func updateSnapshot(snap *memoryv1alpha1.MemorySnapshot, mutate func(*memoryv1alpha1.MemorySnapshot)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(snap), snap); err != nil {
			return err
		}
		mutate(snap)
		return k8sClient.Update(context.Background(), snap)
	})
}

func TestMemorySnapshotJobRejectedByTheAPIServerFails(t *testing.T) {
	f := services(t)
	store := readySnapshotStore(t, f, "bot")
	snap := newSnapshot(store.Namespace, "rejected", store.Name, func(s *memoryv1alpha1.MemorySnapshot) {
		s.Spec.Job.Tolerations = []corev1.Toleration{{Key: "pool", Operator: corev1.TolerationOpExists, Value: "batch"}}
	})
	create(t, snap)
	got := waitSnapshotCondition(t, client.ObjectKeyFromObject(snap), memoryv1alpha1.ConditionCompleted, metav1.ConditionTrue, memoryv1alpha1.ReasonFailed)
	g := NewWithT(t)
	g.Expect(snapshotCondition(got, memoryv1alpha1.ConditionCompleted).Message).To(And(
		HavePrefix("The API server rejected Job rejected-"+string(snap.UID)[:8]+": "),
		ContainSubstring("spec.template.spec.tolerations[0].operator")))
	g.Expect(jobsIn(g, store.Namespace)).To(BeEmpty())
}
