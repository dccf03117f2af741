package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/worker"
)

// The suite's manager runs no drill reconciler: like archival's, the tests drive
// their own with a fake clock.
func newDrillReconciler(clk *clocktesting.FakePassiveClock) *RestoreDrillReconciler {
	return &RestoreDrillReconciler{
		Client: k8sClient, APIReader: k8sClient, Scheme: k8sClient.Scheme(),
		Recorder: testMgr.GetEventRecorder("memory-operator"), Clock: clk,
		WorkerImage: testWorkerImage, OperatorNamespace: operatorNamespace,
	}
}

func reconcileDrill(t *testing.T, r *RestoreDrillReconciler, store client.Object) reconcile.Result {
	t.Helper()
	res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(store)})
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	return res
}

func drillOf(g Gomega, store client.Object) (*memoryv1alpha1.RestoreDrillStatus, metav1.Condition) {
	s := getStore(g, client.ObjectKeyFromObject(store))
	var c metav1.Condition
	if found := meta.FindStatusCondition(s.Status.Conditions, memoryv1alpha1.ConditionVerified); found != nil {
		c = *found
	}
	return s.Status.RestoreDrill, c
}

// playDrillPod runs the drill worker with the Job's arguments and Secrets, as its pod
// would, and leaves its summary as the pod's termination message.
func playDrillPod(t *testing.T, job *batchv1.Job) worker.DrillSummary {
	t.Helper()
	cfg, err := jobDrillConfig(job)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := worker.RunDrill(context.Background(), cfg, worker.RestoreSecretsFrom(jobSecretEnv(t, job, worker.EnvPostgresURI,
		worker.EnvSourceS3AccessKey, worker.EnvSourceS3SecretKey, worker.EnvSourceKey)), worker.RunOptions{Version: "test", Now: time.Now()})
	msg, merr := sum.TerminationMessage()
	if merr != nil {
		t.Fatal(merr)
	}
	if err != nil {
		finishedPod(t, job, 1, string(msg))
		failJob(t, job, "BackoffLimitExceeded", "Job has reached the specified backoff limit")
	} else {
		finishedPod(t, job, 0, string(msg))
		completeJob(t, job)
	}
	return sum
}

func TestRestoreDrillEndToEndThroughTheWorker(t *testing.T) {
	f := services(t)
	g := NewWithT(t)
	store := readySnapshotStore(t, f, "bot")
	ns := store.Namespace
	var items []memory.Item
	for i, text := range []string{"tea", "coffee", "Lisbon", "Berlin", "trains", "boats", "jazz", "rain", "cats", "maps", "soup", "chess"} {
		items = append(items, testItem("m-"+text, []string{"user:1", "user:2"}[i%2], memory.Semantic, `{"likes":"`+text+`"}`))
	}
	items = append(items, testItem("gone-1", "user:3", memory.Semantic, `{"likes":"nothing"}`))
	putMemories(t, store, items...)
	storeOf(t, store).forget(t, "user:3", "gdpr request")

	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := getStore(g, client.ObjectKeyFromObject(store))
		s.Spec.RestoreDrill = &memoryv1alpha1.RestoreDrillSpec{Schedule: "0 3 * * *"}
		return k8sClient.Update(context.Background(), s)
	})).To(Succeed())
	store = waitReady(t, client.ObjectKeyFromObject(store))
	scratch := "drill_" + strings.TrimPrefix(store.Status.Postgres.Schema, "mem_")

	t0 := time.Now()
	clk := clocktesting.NewFakePassiveClock(t0)
	r := newDrillReconciler(clk)
	reconcileDrill(t, r, store)
	st, c := drillOf(g, store)
	g.Expect(c.Status).To(Equal(metav1.ConditionUnknown))
	g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonNotYetDrilled))
	g.Expect(st.Since.Time).To(BeTemporally("~", t0, time.Second))
	// Until a drill passes, the alert's clock runs from when drills were scheduled.
	v, ok := metricValue(g, "memory_operator_restore_drill_last_success_timestamp_seconds", storeLabels(store))
	g.Expect(ok).To(BeTrue())
	g.Expect(v).To(Equal(float64(st.Since.Unix())))
	v, _ = metricValue(g, "memory_operator_restore_drill_interval_seconds", storeLabels(store))
	g.Expect(v).To(Equal(86400.0))

	// The first slot finds no snapshot: nothing to drill, and it says so.
	slot := nextDaily(t0)
	clk.SetTime(slot.Add(time.Minute))
	reconcileDrill(t, r, store)
	_, c = drillOf(g, store)
	g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonNoSnapshot))
	g.Expect(schemaExists(t, scratch)).To(BeFalse())

	snap := newSnapshot(ns, "nightly", store.Name, nil)
	create(t, snap)
	snapJob := waitForJob(t, snap)
	runWorker(t, snapJob)
	completeJob(t, snapJob)
	waitSnapshotCondition(t, client.ObjectKeyFromObject(snap), memoryv1alpha1.ConditionCompleted, metav1.ConditionTrue, memoryv1alpha1.ReasonSucceeded)

	// The next slot: a scratch copy beside the store, and a Job restoring into it.
	slot = slot.AddDate(0, 0, 1)
	clk.SetTime(slot.Add(time.Minute))
	reconcileDrill(t, r, store)
	st, _ = drillOf(g, store)
	g.Expect(st.Active).NotTo(BeNil())
	g.Expect(st.Active.Snapshot).To(Equal("nightly"))
	g.Expect(st.Active.Scratch).To(Equal(scratch))
	g.Expect(schemaExists(t, scratch)).To(BeTrue())
	job := getJob(g, ns, st.Active.Job)
	g.Expect(*job.Spec.BackoffLimit).To(Equal(int32(0)))
	cfg, err := jobDrillConfig(job)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Schema).To(Equal(scratch))
	g.Expect(cfg.SkipSessions).To(BeTrue())

	sum := playDrillPod(t, job)
	g.Expect(sum.Passed).To(BeTrue(), "%+v", sum)
	g.Expect(sum.Memories).To(Equal(int64(12)))
	reconcileDrill(t, r, store)
	st, c = drillOf(g, store)
	g.Expect(st.Active).To(BeNil())
	g.Expect(st.LastRun.Passed).To(BeTrue(), st.LastRun.Message)
	g.Expect(st.LastVerified).To(Equal(st.LastRun))
	g.Expect(st.LastRun.Memories).To(Equal(int64(12)))
	g.Expect(st.LastRun.Tombstones).To(Equal(int64(1)))
	g.Expect(st.LastRun.Recall).To(Equal("1.000"))
	g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonDrillPassed))
	g.Expect(c.Message).To(ContainSubstring("MemorySnapshot nightly"))
	g.Expect(schemaExists(t, scratch)).To(BeFalse(), "the scratch copy outlived its drill")
	v, _ = metricValue(g, "memory_operator_restore_drill_last_success_timestamp_seconds", storeLabels(store))
	g.Expect(v).To(Equal(float64(st.LastRun.Finished.Unix())))
	v, _ = metricValue(g, "memory_operator_restore_drills_total", storeLabels(store, "result", "passed"))
	g.Expect(v).To(Equal(1.0))

	// A drill whose Job is deleted mid-run fails, and its copy goes all the same; the
	// last verified snapshot stays what it was.
	verified := st.LastVerified.DeepCopy()
	slot = slot.AddDate(0, 0, 1)
	clk.SetTime(slot.Add(time.Minute))
	reconcileDrill(t, r, store)
	st, _ = drillOf(g, store)
	g.Expect(schemaExists(t, scratch)).To(BeTrue())
	g.Expect(k8sClient.Delete(context.Background(), getJob(g, ns, st.Active.Job))).To(Succeed())
	g.Eventually(func() bool { return jobGone(ns, st.Active.Job) }).Should(BeTrue())
	reconcileDrill(t, r, store)
	st, c = drillOf(g, store)
	g.Expect(st.Active).To(BeNil())
	g.Expect(st.LastRun.Passed).To(BeFalse())
	g.Expect(st.LastRun.Message).To(ContainSubstring("deleted before it finished"))
	g.Expect(st.LastVerified).To(Equal(verified))
	g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonDrillFailed))
	g.Expect(schemaExists(t, scratch)).To(BeFalse())

	// A drill that finds the package wrong fails with what it found: here the copy is
	// not empty when the drill starts (someone wrote into it).
	slot = slot.AddDate(0, 0, 1)
	clk.SetTime(slot.Add(time.Minute))
	reconcileDrill(t, r, store)
	st, _ = drillOf(g, store)
	job = getJob(g, ns, st.Active.Job)
	cfg, err = jobDrillConfig(job)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = pgAdmin(t).Exec(context.Background(), `INSERT INTO `+scratch+`.tombstones (scope, forgotten_at, reason) VALUES ('user:9', now(), 'x')`)
	g.Expect(err).NotTo(HaveOccurred())
	sum = playDrillPod(t, job)
	g.Expect(sum.Passed).To(BeFalse())
	reconcileDrill(t, r, store)
	st, c = drillOf(g, store)
	g.Expect(st.LastRun.Passed).To(BeFalse())
	g.Expect(st.LastRun.Message).To(ContainSubstring("is not empty"))
	g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonDrillFailed))
	g.Expect(schemaExists(t, scratch)).To(BeFalse())
	v, _ = metricValue(g, "memory_operator_restore_drills_total", storeLabels(store, "result", "failed"))
	g.Expect(v).To(Equal(2.0))

	// The store's snapshots gone: the slot says so, and keeps saying so until a drill
	// ends (the last drill's result does not come back over it).
	g.Expect(k8sClient.Delete(context.Background(), getSnapshot(g, client.ObjectKeyFromObject(snap)))).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(snap), &memoryv1alpha1.MemorySnapshot{}))
	}).Should(BeTrue())
	slot = slot.AddDate(0, 0, 1)
	clk.SetTime(slot.Add(time.Minute))
	reconcileDrill(t, r, store)
	reconcileDrill(t, r, store)
	_, c = drillOf(g, store)
	g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonNoSnapshot))
	snap = newSnapshot(ns, "nightly-2", store.Name, nil)
	create(t, snap)
	snapJob = waitForJob(t, snap)
	runWorker(t, snapJob)
	completeJob(t, snapJob)
	waitSnapshotCondition(t, client.ObjectKeyFromObject(snap), memoryv1alpha1.ConditionCompleted, metav1.ConditionTrue, memoryv1alpha1.ReasonSucceeded)

	// A store deleted while its drill runs takes the scratch copy with it.
	slot = slot.AddDate(0, 0, 1)
	clk.SetTime(slot.Add(time.Minute))
	reconcileDrill(t, r, store)
	g.Expect(schemaExists(t, scratch)).To(BeTrue())
	deleteAndWaitGone(t, getStore(g, client.ObjectKeyFromObject(store)))
	g.Expect(schemaExists(t, scratch)).To(BeFalse())
}

func jobGone(namespace, name string) bool {
	j := &batchv1.Job{}
	err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, j)
	return err != nil || !j.DeletionTimestamp.IsZero()
}
