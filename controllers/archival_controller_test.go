package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/worker"
)

// The archival tests run against Ready stores on the real PostgreSQL and MinIO, with
// reconcilers of their own on fake clocks. No kubelet runs the Jobs: the tests play its
// part (finishedPod, completeJob, failJob).

func TestArchivalRunsOneJobPerSlot(t *testing.T) {
	f := services(t)
	store := readyArchivalStore(t, f, "bot", func(a *memoryv1alpha1.ArchivalSpec) {
		a.Threshold = "0.1"
		a.HalfLives = map[string]memoryv1alpha1.HalfLife{"episodic": "48h"}
	})
	ns := store.Namespace
	slot := nextDaily(store.CreationTimestamp.Time)
	clk := clocktesting.NewFakePassiveClock(slot.Add(-time.Minute))
	r := newArchivalReconciler(clk)
	g := NewWithT(t)

	// Before the slot: nothing, the next run in status, a wake-up at the slot.
	g.Expect(reconcileArchival(t, r, store).RequeueAfter).To(Equal(time.Minute))
	g.Expect(archiveJobNames(g, store)).To(BeEmpty())
	st, c := archivalOf(g, store)
	g.Expect(st.LastScheduleTime).To(BeNil())
	g.Expect(st.NextScheduleTime.Time).To(BeTemporally("==", slot))
	g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonScheduled))
	g.Expect(c.Message).To(Equal(fmt.Sprintf(`Archival runs at every slot of "0 3 * * *" (UTC); next run at %s`, slot.Format(time.RFC3339))))
	g.Expect(c.ObservedGeneration).To(Equal(store.Generation))

	// At the slot: one Job, named after the slot, owned by the store, its clock fixed.
	now := slot.Add(42 * time.Second)
	clk.SetTime(now)
	g.Expect(reconcileArchival(t, r, store).RequeueAfter).To(Equal(24*time.Hour - 42*time.Second))
	name := "bot-archive-" + slot.Format("20060102") + "0300"
	g.Expect(archiveJobNames(g, store)).To(Equal([]string{name}))
	job := getJob(g, ns, name)
	g.Expect(metav1.IsControlledBy(job, store)).To(BeTrue())
	cfg, err := jobArchiveConfig(job)
	g.Expect(err).NotTo(HaveOccurred())
	halfLives := memory.DefaultHalfLives()
	halfLives[memory.Episodic] = 48 * time.Hour
	g.Expect(cfg).To(Equal(worker.ArchiveConfig{
		StoreNamespace: ns, StoreName: "bot", Tenant: store.Spec.Tenant, RunName: name, Schema: store.Status.Postgres.Schema,
		Vectors: engine.Vectors{VectorEngine: "Postgres"}, EmbeddingModel: store.Status.Vector.EmbeddingModel, Dimension: 8, Metric: "COSINE",
		Now: now, Threshold: 0.1, HalfLives: halfLives,
	}))
	g.Expect(envSecretRefs(job)).To(Equal(map[string][2]string{worker.EnvPostgresURI: {store.Status.WorkerSecret, "uri"}}))
	st, c = archivalOf(g, store)
	g.Expect(st.ActiveJob).To(Equal(name))
	g.Expect(st.LastScheduleTime.Time).To(BeTemporally("==", slot))
	g.Expect(st.NextScheduleTime.Time).To(BeTemporally("==", slot.Add(24*time.Hour)))
	g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonRunning))
	g.Expect(c.Message).To(HavePrefix("Job " + name + " is running"))

	// Again, and from a restarted operator with the same clock: nothing new.
	reconcileArchival(t, r, store)
	reconcileArchival(t, newArchivalReconciler(clk), store)
	g.Expect(archiveJobNames(g, store)).To(Equal([]string{name}))

	// An operator that created the Job and stopped before recording it: the slot's Job
	// exists, so the restarted one adopts it and creates nothing.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := getStore(g, client.ObjectKeyFromObject(store))
		s.Status.Archival = nil
		return k8sClient.Status().Update(context.Background(), s)
	})).To(Succeed())
	reconcileArchival(t, newArchivalReconciler(clk), store)
	g.Expect(archiveJobNames(g, store)).To(Equal([]string{name}))
	st, _ = archivalOf(g, store)
	g.Expect(st.ActiveJob).To(Equal(name))
	g.Expect(st.LastScheduleTime.Time).To(BeTemporally("==", slot))

	// The next slot comes while the Job still runs: skipped, not queued.
	slot2 := slot.Add(24 * time.Hour)
	clk.SetTime(slot2.Add(time.Minute))
	reconcileArchival(t, r, store)
	g.Expect(archiveJobNames(g, store)).To(Equal([]string{name}))
	st, c = archivalOf(g, store)
	g.Expect(st.LastScheduleTime.Time).To(BeTemporally("==", slot2))
	g.Expect(st.ActiveJob).To(Equal(name))
	g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonRunning))

	g.Eventually(func() []string { return eventReasons(ns, store.Name) }).WithTimeout(waitTimeout).
		Should(ContainElements("ArchivalScheduled", "ArchivalStarted", "ArchivalSkipped"))
}

func TestArchivalRecordsASucceededRun(t *testing.T) {
	f := services(t)
	key := &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: snapshotKeySecret}, Key: "key"}
	store := readyArchivalStore(t, f, "bot", func(a *memoryv1alpha1.ArchivalSpec) {
		withCold(key)(a)
		a.ColdStorage.DeleteAfter = &metav1.Duration{Duration: 2160 * time.Hour}
	})
	ns := store.Namespace
	slot := nextDaily(store.CreationTimestamp.Time)
	clk := clocktesting.NewFakePassiveClock(slot.Add(time.Minute))
	r := newArchivalReconciler(clk)
	g := NewWithT(t)

	reconcileArchival(t, r, store)
	name := archiveJobName(store, slot)
	job := getJob(g, ns, name)

	// The cold package goes to the store's own prefix, in the run's folder; the keys
	// reach the pod by reference only.
	cfg, err := jobArchiveConfig(job)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Cold).To(Equal(&worker.Destination{Endpoint: f.s3.Endpoint, Insecure: true, Bucket: "memory-test",
		Prefix: store.Status.ObjectStorage.Prefix + "archive/" + name + "/"}))
	g.Expect(cfg.Unencrypted).To(BeFalse())
	g.Expect(cfg.DeleteAfter).To(Equal(2160 * time.Hour))
	g.Expect(envSecretRefs(job)).To(Equal(map[string][2]string{
		worker.EnvPostgresURI:   {store.Status.WorkerSecret, "uri"},
		worker.EnvS3AccessKey:   {"s3-creds", "accessKeyID"},
		worker.EnvS3SecretKey:   {"s3-creds", "secretAccessKey"},
		worker.EnvEncryptionKey: {snapshotKeySecret, "key"},
	}))

	// The pod reports its summary and the Job completes.
	sum := worker.ArchiveSummary{Now: cfg.Now, Scanned: 1000, Archived: 37,
		ArchivedByType: map[string]int64{"episodic": 30, "working": 7}, ExpiredPurged: 5, Deleted: 2,
		VectorsDeleted: 42, Recovered: 3, ColdPackage: cfg.Cold.Prefix, ColdItems: 37}
	msg, err := sum.TerminationMessage()
	g.Expect(err).NotTo(HaveOccurred())
	finishedPod(t, job, 0, string(msg))
	end := completeJob(t, job)
	reconcileArchival(t, r, store)

	st, c := archivalOf(g, store)
	g.Expect(st.ActiveJob).To(BeEmpty())
	run := st.LastRun
	g.Expect(run).NotTo(BeNil())
	g.Expect(run.JobName).To(Equal(name))
	g.Expect(run.Result).To(Equal(memoryv1alpha1.ArchivalRunSucceeded))
	g.Expect(run.StartTime.Time).To(BeTemporally("==", end.Add(-90*time.Second)))
	g.Expect(run.CompletionTime.Time).To(BeTemporally("==", end.Time))
	g.Expect(run.DryRun).To(BeFalse())
	g.Expect([]int64{run.Scanned, run.Archived, run.ExpiredPurged, run.Deleted, run.VectorsDeleted, run.Recovered, run.ColdItems}).
		To(Equal([]int64{1000, 37, 5, 2, 42, 3, 37}))
	g.Expect(run.ArchivedByType).To(Equal(map[string]int64{"episodic": 30, "working": 7}))
	g.Expect(run.ColdPackage).To(Equal(&memoryv1alpha1.SnapshotLocation{Endpoint: f.s3.Endpoint, Bucket: "memory-test", Prefix: cfg.Cold.Prefix}))
	g.Expect(run.Message).To(HavePrefix("Archived 37 of 1000 memories (working 7, episodic 30); purged 5 expired;"))
	g.Expect(st.LastSuccessTime.Time).To(BeTemporally("==", end.Time))
	g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonSucceeded))
	g.Expect(c.Message).To(HavePrefix("Job " + name + ": Archived 37 of 1000 memories"))
	g.Eventually(func() []string { return eventReasons(ns, store.Name) }).WithTimeout(waitTimeout).
		Should(ContainElements("ArchivalStarted", "ArchivalSucceeded"))

	// The metrics of the store, read from the registry the manager serves.
	for typ, want := range map[string]float64{"episodic": 30, "working": 7, "semantic": 0, "procedural": 0} {
		v, ok := metricValue(g, "memory_operator_archival_archived_memories", storeLabels(store, "type", typ))
		g.Expect(ok).To(BeTrue(), typ)
		g.Expect(v).To(Equal(want), typ)
	}
	for name, want := range map[string]float64{
		"memory_operator_archival_scanned_memories":               1000,
		"memory_operator_archival_expired_purged_memories":        5,
		"memory_operator_archival_deleted_memories":               2,
		"memory_operator_archival_vectors_deleted":                42,
		"memory_operator_archival_last_run_dry_run":               0,
		"memory_operator_archival_last_success_timestamp_seconds": float64(end.Unix()),
	} {
		v, ok := metricValue(g, name, storeLabels(store))
		g.Expect(ok).To(BeTrue(), name)
		g.Expect(v).To(Equal(want), name)
	}
	runs := func() float64 {
		v, _ := metricValue(g, "memory_operator_archival_runs_total", storeLabels(store, "result", "succeeded"))
		return v
	}
	g.Expect(runs()).To(Equal(1.0))

	// Reconciling again records and counts nothing twice.
	reconcileArchival(t, r, store)
	reconcileArchival(t, newArchivalReconciler(clk), store)
	g.Expect(runs()).To(Equal(1.0))
	st2, _ := archivalOf(g, store)
	g.Expect(st2).To(Equal(st))

	// The store goes: so do its series.
	deleteAndWaitGone(t, store)
	reconcileArchival(t, r, store)
	for _, name := range []string{"memory_operator_archival_runs_total", "memory_operator_archival_archived_memories",
		"memory_operator_archival_last_success_timestamp_seconds"} {
		_, ok := metricValue(g, name, storeLabels(store))
		g.Expect(ok).To(BeFalse(), name)
	}
}

func TestArchivalRecordsAFailedRun(t *testing.T) {
	f := services(t)
	store := readyArchivalStore(t, f, "bot", nil)
	ns := store.Namespace
	slot := nextDaily(store.CreationTimestamp.Time)
	clk := clocktesting.NewFakePassiveClock(slot.Add(time.Minute))
	r := newArchivalReconciler(clk)
	g := NewWithT(t)

	reconcileArchival(t, r, store)
	name := archiveJobName(store, slot)
	job := getJob(g, ns, name)
	failedPod(t, job, "archiving mem_x: deleting vectors: milvus 127.0.0.1:1: connection refused")
	failJob(t, job, batchv1.JobReasonBackoffLimitExceeded, "Job has reached the specified backoff limit")
	reconcileArchival(t, r, store)

	st, c := archivalOf(g, store)
	g.Expect(st.ActiveJob).To(BeEmpty())
	g.Expect(st.LastSuccessTime).To(BeNil())
	g.Expect(st.LastRun.Result).To(Equal(memoryv1alpha1.ArchivalRunFailed))
	want := fmt.Sprintf("Job %s failed (BackoffLimitExceeded): Job has reached the specified backoff limit; "+
		"last error: archiving mem_x: deleting vectors: milvus 127.0.0.1:1: connection refused", name)
	g.Expect(st.LastRun.Message).To(Equal(want))
	g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonFailed))
	g.Expect(c.Message).To(HavePrefix("The last run failed: " + want))
	g.Eventually(func() []string { return eventReasons(ns, store.Name) }).WithTimeout(waitTimeout).
		Should(ContainElement("ArchivalFailed"))
	v, _ := metricValue(g, "memory_operator_archival_runs_total", storeLabels(store, "result", "failed"))
	g.Expect(v).To(Equal(1.0))
	_, ok := metricValue(g, "memory_operator_archival_archived_memories", storeLabels(store))
	g.Expect(ok).To(BeFalse(), "no successful run yet")

	// The next slot runs again (and completes what the failed run left).
	slot2 := slot.Add(24 * time.Hour)
	clk.SetTime(slot2.Add(time.Minute))
	reconcileArchival(t, r, store)
	name2 := archiveJobName(store, slot2)
	g.Expect(archiveJobNames(g, store)).To(Equal([]string{name, name2}))
	_, c = archivalOf(g, store)
	g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonRunning))

	// Its Job is deleted before it finished: a failed run, never started again.
	g.Expect(k8sClient.Delete(context.Background(), getJob(g, ns, name2),
		client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	reconcileArchival(t, r, store)
	st, c = archivalOf(g, store)
	g.Expect(st.ActiveJob).To(BeEmpty())
	g.Expect(st.LastRun.JobName).To(Equal(name2))
	g.Expect(st.LastRun.Result).To(Equal(memoryv1alpha1.ArchivalRunFailed))
	g.Expect(st.LastRun.Message).To(Equal("Job " + name2 + " was deleted before it finished; the next slot runs again and completes what it left"))
	g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonFailed))
	g.Expect(archiveJobNames(g, store)).To(Equal([]string{name}))
	v, _ = metricValue(g, "memory_operator_archival_runs_total", storeLabels(store, "result", "failed"))
	g.Expect(v).To(Equal(2.0))
}

func TestArchivalWaitsForTheStoreToBeReady(t *testing.T) {
	f := services(t)
	ns := newNamespace(t)
	store := f.inlineStore(ns, "late", newTenant(), 8, false)
	store.Spec.Archival = validArchival()
	create(t, store) // its admin Secrets are missing: it cannot become Ready
	key := client.ObjectKeyFromObject(store)
	store = waitForCondition(t, key, memoryv1alpha1.ConditionReady, metav1.ConditionFalse, memoryv1alpha1.ReasonSecretNotFound)
	slot := nextDaily(store.CreationTimestamp.Time)
	clk := clocktesting.NewFakePassiveClock(slot.Add(10 * time.Minute))
	r := newArchivalReconciler(clk)
	g := NewWithT(t)

	g.Expect(reconcileArchival(t, r, store)).To(Equal(reconcile.Result{RequeueAfter: waitRecheck}))
	g.Expect(archiveJobNames(g, store)).To(BeEmpty())
	st, c := archivalOf(g, store)
	g.Expect(st.LastScheduleTime).To(BeNil(), "a delayed slot is not handled")
	g.Expect(st.NextScheduleTime.Time).To(BeTemporally("==", slot), "overdue")
	g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonStoreNotReady))
	g.Expect(c.Message).To(Equal(fmt.Sprintf("The run due at %s is delayed: MemoryStore late is not Ready: Ready is False "+
		"(SecretNotFound: Secret %s/pg-admin not found)", slot.Format(time.RFC3339), ns)))
	g.Eventually(func() []string { return eventReasons(ns, store.Name) }).WithTimeout(waitTimeout).
		Should(ContainElement("ArchivalStoreNotReady"))
	// The store's own Ready condition is the MemoryStore reconciler's, untouched.
	waitForCondition(t, key, memoryv1alpha1.ConditionReady, metav1.ConditionFalse, memoryv1alpha1.ReasonSecretNotFound)

	// The Secrets arrive, the store becomes Ready, and the delayed run starts.
	f.adminSecrets(t, ns)
	store = waitReady(t, key)
	clk.SetTime(slot.Add(time.Hour))
	reconcileArchival(t, r, store)
	g.Expect(archiveJobNames(g, store)).To(Equal([]string{archiveJobName(store, slot)}))
	st, c = archivalOf(g, store)
	g.Expect(st.LastScheduleTime.Time).To(BeTemporally("==", slot))
	g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonRunning))
	cfg, err := jobArchiveConfig(getJob(g, ns, archiveJobName(store, slot)))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Now).To(BeTemporally("==", slot.Add(time.Hour)), "ages are measured when the run starts")
}

func TestArchivalWaitsForItsSecrets(t *testing.T) {
	f := services(t)
	coldKey := &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cold-key"}, Key: "key"}
	store := readyArchivalStore(t, f, "bot", withCold(coldKey))
	ns := store.Namespace
	slot := nextDaily(store.CreationTimestamp.Time)
	r := newArchivalReconciler(clocktesting.NewFakePassiveClock(slot.Add(time.Minute)))
	g := NewWithT(t)

	reconcileArchival(t, r, store)
	g.Expect(archiveJobNames(g, store)).To(BeEmpty())
	_, c := archivalOf(g, store)
	g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonSecretNotFound))
	g.Expect(c.Message).To(HaveSuffix("is delayed: Secret " + ns + "/cold-key not found"))

	// A key that is not a usable AES-256 key is refused before any Job exists.
	createKeySecret(t, ns, "cold-key", []byte("too short"))
	reconcileArchival(t, r, store)
	g.Expect(archiveJobNames(g, store)).To(BeEmpty())
	_, c = archivalOf(g, store)
	g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonInvalidKey))
	g.Expect(c.Message).NotTo(ContainSubstring("too short"), "never a secret value")

	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := &corev1.Secret{}
		if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "cold-key"}, s); err != nil {
			return err
		}
		s.Data["key"] = randomBytes(t, 32)
		return k8sClient.Update(context.Background(), s)
	})).To(Succeed())
	reconcileArchival(t, r, store)
	g.Expect(archiveJobNames(g, store)).To(Equal([]string{archiveJobName(store, slot)}))
}

func TestArchivalSuspendAndResume(t *testing.T) {
	f := services(t)
	store := readyArchivalStore(t, f, "paused", func(a *memoryv1alpha1.ArchivalSpec) { a.Suspend = true })
	slot := nextDaily(store.CreationTimestamp.Time)
	clk := clocktesting.NewFakePassiveClock(slot.Add(48*time.Hour + time.Hour))
	r := newArchivalReconciler(clk)
	g := NewWithT(t)

	g.Expect(reconcileArchival(t, r, store)).To(Equal(reconcile.Result{}))
	g.Expect(archiveJobNames(g, store)).To(BeEmpty())
	st, c := archivalOf(g, store)
	g.Expect(st.NextScheduleTime).To(BeNil())
	g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonSuspended))

	// Resumed: like a CronJob, only the most recent missed slot runs, once.
	store = setArchival(t, store, func(a *memoryv1alpha1.ArchivalSpec) { a.Suspend = false })
	reconcileArchival(t, r, store)
	reconcileArchival(t, r, store)
	latest := slot.Add(48 * time.Hour)
	g.Expect(archiveJobNames(g, store)).To(Equal([]string{archiveJobName(store, latest)}))
	st, c = archivalOf(g, store)
	g.Expect(st.LastScheduleTime.Time).To(BeTemporally("==", latest))
	g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonRunning))

	// Suspended while it runs: the run is still followed to its end and recorded.
	job := getJob(g, store.Namespace, archiveJobName(store, latest))
	store = setArchival(t, store, func(a *memoryv1alpha1.ArchivalSpec) { a.Suspend = true })
	reconcileArchival(t, r, store)
	_, c = archivalOf(g, store)
	g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonSuspended))
	g.Expect(c.Message).To(ContainSubstring("Job " + job.Name + ", started before, is still running"))
	failJob(t, job, batchv1.JobReasonDeadlineExceeded, "Job was active longer than specified deadline")
	reconcileArchival(t, r, store)
	st, _ = archivalOf(g, store)
	g.Expect(st.ActiveJob).To(BeEmpty())
	g.Expect(st.LastRun.Result).To(Equal(memoryv1alpha1.ArchivalRunFailed))
	g.Expect(st.LastRun.Message).To(HavePrefix("Job " + job.Name + " failed (DeadlineExceeded)"))
}

func TestArchivalReportsAnInvalidSchedule(t *testing.T) {
	ns := newNamespace(t)
	g := NewWithT(t)
	// Both pass admission's shape check; the parser refuses them.
	for i, tc := range []struct{ schedule, why string }{
		{"61 * * * *", "end of range (61) above maximum (59): 61"},
		{"@every 30s", "@every 30s is more often than once a minute"},
	} {
		store := validStore(ns, fmt.Sprintf("typo-%d", i))
		store.Spec.Archival = validArchival()
		store.Spec.Archival.Schedule = memoryv1alpha1.CronSchedule(tc.schedule)
		create(t, store)
		store = getStore(g, client.ObjectKeyFromObject(store))
		r := newArchivalReconciler(clocktesting.NewFakePassiveClock(store.CreationTimestamp.Add(48 * time.Hour)))

		g.Expect(reconcileArchival(t, r, store)).To(Equal(reconcile.Result{}))
		st, c := archivalOf(g, store)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonInvalidSchedule))
		g.Expect(c.Message).To(Equal(fmt.Sprintf("Schedule %q is not valid: %s", tc.schedule, tc.why)))
		g.Expect(st.NextScheduleTime).To(BeNil())
		g.Expect(archiveJobNames(g, store)).To(BeEmpty())
		g.Eventually(func() []string { return eventReasons(ns, store.Name) }).WithTimeout(waitTimeout).
			Should(ContainElement("ArchivalInvalidSchedule"))

		// Fixed: scheduled again (no slot is due before the store's first).
		store = setArchival(t, store, func(a *memoryv1alpha1.ArchivalSpec) { a.Schedule = "@daily" })
		r.Clock = clocktesting.NewFakePassiveClock(store.CreationTimestamp.Time)
		reconcileArchival(t, r, store)
		_, c = archivalOf(g, store)
		g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonScheduled))
	}
}

func TestArchivalKeepsTheLastJobs(t *testing.T) {
	f := services(t)
	store := readyArchivalStore(t, f, "kept", func(a *memoryv1alpha1.ArchivalSpec) {
		a.Schedule = "@hourly"
		a.JobsHistoryLimit = ptr.To[int32](2)
	})
	first := store.CreationTimestamp.UTC().Truncate(time.Hour).Add(time.Hour)
	clk := clocktesting.NewFakePassiveClock(first)
	r := newArchivalReconciler(clk)
	g := NewWithT(t)
	slots := make([]time.Time, 5)
	names := make([]string, 5)
	for i := range slots {
		slots[i] = first.Add(time.Duration(i) * time.Hour)
		names[i] = archiveJobName(store, slots[i])
	}

	// Each slot: the previous run completes, and the slot's Job starts.
	for i := range slots {
		clk.SetTime(slots[i].Add(time.Second))
		reconcileArchival(t, r, store)
		g.Expect(archiveJobNames(g, store)).To(ContainElement(names[i]))
		job := getJob(g, store.Namespace, names[i])
		msg, err := worker.ArchiveSummary{Now: slots[i], Scanned: int64(i)}.TerminationMessage()
		g.Expect(err).NotTo(HaveOccurred())
		finishedPod(t, job, 0, string(msg))
		completeJob(t, job)
	}
	reconcileArchival(t, r, store)

	// The newest two finished Jobs stay (the last run's among them); older ones are gone.
	g.Expect(archiveJobNames(g, store)).To(Equal([]string{names[3], names[4]}))
	st, _ := archivalOf(g, store)
	g.Expect(st.LastRun.JobName).To(Equal(names[4]))
	g.Expect(st.LastRun.Scanned).To(Equal(int64(4)))
}

func TestArchivalDryRun(t *testing.T) {
	f := services(t)
	store := readyArchivalStore(t, f, "dry", func(a *memoryv1alpha1.ArchivalSpec) { a.DryRun = true })
	slot := nextDaily(store.CreationTimestamp.Time)
	r := newArchivalReconciler(clocktesting.NewFakePassiveClock(slot.Add(time.Minute)))
	g := NewWithT(t)

	reconcileArchival(t, r, store)
	job := getJob(g, store.Namespace, archiveJobName(store, slot))
	cfg, err := jobArchiveConfig(job)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.DryRun).To(BeTrue())
	msg, err := worker.ArchiveSummary{Now: cfg.Now, DryRun: true, Scanned: 10, Archived: 4,
		ArchivedByType: map[string]int64{"semantic": 4}}.TerminationMessage()
	g.Expect(err).NotTo(HaveOccurred())
	finishedPod(t, job, 0, string(msg))
	completeJob(t, job)
	reconcileArchival(t, r, store)

	st, c := archivalOf(g, store)
	g.Expect(st.LastRun.DryRun).To(BeTrue())
	g.Expect(st.LastRun.Archived).To(Equal(int64(4)))
	g.Expect(c.Message).To(ContainSubstring("Dry run: would archive 4 of 10 memories (semantic 4)"))
	v, _ := metricValue(g, "memory_operator_archival_last_run_dry_run", storeLabels(store))
	g.Expect(v).To(Equal(1.0))
}

// The reconciler as a manager runs it: its watches start the due slot's Job on their own
// and record the run once the Job's status says it ended.
func TestArchivalInAManager(t *testing.T) {
	f := services(t)
	store := readyArchivalStore(t, f, "managed", nil)
	ns := store.Namespace
	slot := nextDaily(store.CreationTimestamp.Time)
	g := NewWithT(t)

	mgr, err := ctrl.NewManager(testMgr.GetConfig(), ctrl.Options{
		Scheme:                 k8sClient.Scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: cache.Options{
			DefaultNamespaces: map[string]cache.Config{ns: {}}, // only this test's stores
			ByObject:          map[client.Object]cache.ByObject{&batchv1.Job{}: {Label: ManagedJobSelector()}},
		},
		Client:     client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	g.Expect(err).NotTo(HaveOccurred())
	r := &ArchivalReconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Scheme: mgr.GetScheme(),
		Recorder: mgr.GetEventRecorder("memory-operator"), Clock: clocktesting.NewFakePassiveClock(slot.Add(time.Minute)),
		WorkerImage: testWorkerImage}
	g.Expect(r.SetupWithManager(mgr)).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	name := archiveJobName(store, slot)
	job := &batchv1.Job{}
	g.Eventually(func() error {
		return k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, job)
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())

	msg, err := worker.ArchiveSummary{Now: slot, Scanned: 3, Archived: 1, ArchivedByType: map[string]int64{"episodic": 1}}.TerminationMessage()
	g.Expect(err).NotTo(HaveOccurred())
	finishedPod(t, job, 0, string(msg))
	completeJob(t, job)
	g.Eventually(func(g Gomega) {
		st, c := archivalOf(g, store)
		g.Expect(st.LastRun).NotTo(BeNil())
		g.Expect(st.LastRun.Archived).To(Equal(int64(1)))
		g.Expect(c.Reason).To(Equal(memoryv1alpha1.ReasonSucceeded))
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	g.Expect(archiveJobNames(g, store)).To(Equal([]string{name}))
}
