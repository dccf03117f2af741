package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/snapshot"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/worker"
)

// GitOps applies a snapshot and a restore that names it at the same time, in any order:
// the restore waits for the snapshot to exist and to succeed, then runs from its package.
func TestMemoryRestoreWaitsForItsSnapshotThenRestoresIt(t *testing.T) {
	f := services(t)
	source := readySnapshotStore(t, f, "bot")
	ns := source.Namespace
	putMemories(t, source,
		testItem("m-1", "user:1", memory.Semantic, `{"likes":"tea"}`),
		testItem("m-2", "user:2", memory.Episodic, `{"booked":"Lisbon"}`))
	target := f.inlineStore(ns, "bot-v2", newTenant(), 16, false) // another tenant, another dimension
	create(t, target)

	restore := newRestore(ns, "migrate", "nightly", "bot-v2", nil)
	create(t, restore)
	key := client.ObjectKeyFromObject(restore)
	got := waitRestoreWaiting(t, key, memoryv1alpha1.ReasonSnapshotNotFound, "MemorySnapshot nightly not found in namespace "+ns+"; waiting for it")
	g := NewWithT(t)
	g.Expect(got.Status.Phase).To(Equal(memoryv1alpha1.PhasePending))
	g.Expect(got.Status.Source).To(Equal("snapshot/nightly"))
	g.Expect(restoreCondition(got, memoryv1alpha1.ConditionCompleted).Status).To(Equal(metav1.ConditionFalse))
	g.Expect(restoreJobsIn(g, ns)).To(BeEmpty())

	// The snapshot appears and runs: the restore waits for it to succeed.
	snap := newSnapshot(ns, "nightly", source.Name, nil)
	create(t, snap)
	snapJob := waitForJob(t, snap)
	waitRestoreWaiting(t, key, memoryv1alpha1.ReasonSnapshotNotReady, "MemorySnapshot nightly is Running; waiting for it to succeed")
	g.Expect(restoreJobsIn(g, ns)).To(BeEmpty())

	// The snapshot succeeds: the restore's Job starts at once (the snapshot watch wakes it).
	runWorker(t, snapJob)
	completeJob(t, snapJob)
	done := waitSnapshotCondition(t, client.ObjectKeyFromObject(snap), memoryv1alpha1.ConditionCompleted, metav1.ConditionTrue, memoryv1alpha1.ReasonSucceeded)
	job := waitForJob(t, restore)
	tgt := waitReady(t, client.ObjectKeyFromObject(target))

	g.Expect(job.OwnerReferences).To(Equal([]metav1.OwnerReference{{
		APIVersion: "memory.amemory.io/v1alpha1", Kind: "MemoryRestore", Name: "migrate", UID: restore.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}}))
	g.Expect(job.Labels).To(HaveKeyWithValue(memoryv1alpha1.LabelSnapshot, "nightly"))
	cfg, err := jobRestoreConfig(job)
	g.Expect(err).NotTo(HaveOccurred())
	prefix := done.Status.Location.Prefix
	g.Expect(cfg.Source).To(Equal(worker.Destination{Endpoint: f.s3.Endpoint, Insecure: true, Bucket: "memory-test", Prefix: prefix}))
	g.Expect(cfg.ExpectManifestSHA256).To(Equal(done.Status.ManifestSHA256))
	g.Expect(cfg.Unencrypted).To(BeFalse())
	g.Expect(cfg.Schema).To(Equal(tgt.Status.Postgres.Schema))
	g.Expect(cfg.TargetName).To(Equal("bot-v2"))
	g.Expect(cfg.Dimension).To(Equal(16))
	g.Expect(cfg.EmbeddingModel).To(Equal(tgt.Status.Vector.EmbeddingModel))
	g.Expect(cfg.DetailKey).To(Equal(prefix + "restores/migrate-" + string(restore.UID)[:8] + "/detail.jsonl.zst"))
	g.Expect(envSecretRefs(job)).To(Equal(map[string][2]string{
		worker.EnvPostgresURI:       {"bot-v2-memory-worker", "uri"}, // the target's own (worker) role
		worker.EnvSourceS3AccessKey: {"s3-creds", "accessKeyID"},
		worker.EnvSourceS3SecretKey: {"s3-creds", "secretAccessKey"},
		worker.EnvSourceKey:         {snapshotKeySecret, "key"},
	}))

	running := waitRestoreCondition(t, key, memoryv1alpha1.ConditionProgressing, metav1.ConditionTrue, memoryv1alpha1.ReasonJobCreated)
	g.Expect(running.Status.Phase).To(Equal(memoryv1alpha1.PhaseRunning))
	g.Expect(running.Status.JobName).To(Equal(job.Name))
	g.Expect(running.Status.StartTime).NotTo(BeNil())
	g.Expect(running.Status.Package).To(Equal(done.Status.Location))
	g.Expect(restoreCondition(running, memoryv1alpha1.ConditionProgressing).Message).To(Equal(
		"Job " + job.Name + " restores snapshot/nightly into MemoryStore bot-v2 (s3://memory-test/" + prefix + ")"))
	g.Eventually(func() []string { return eventReasons(ns, restore.Name) }).WithTimeout(waitTimeout).Should(ContainElements(
		memoryv1alpha1.ReasonSnapshotNotFound, memoryv1alpha1.ReasonSnapshotNotReady, memoryv1alpha1.ReasonJobCreated))

	// A restore that reads the encrypted snapshot as plaintext fails before any Job.
	plain := newRestore(ns, "plain", "nightly", "bot-v2", func(r *memoryv1alpha1.MemoryRestore) {
		r.Spec.Source.KeySecret, r.Spec.Source.Unencrypted = nil, true
	})
	create(t, plain)
	failed := waitRestoreCondition(t, client.ObjectKeyFromObject(plain), memoryv1alpha1.ConditionCompleted, metav1.ConditionTrue,
		memoryv1alpha1.ReasonEncryptionMismatch)
	g.Expect(restoreCondition(failed, memoryv1alpha1.ConditionCompleted).Message).To(Equal(
		"MemorySnapshot nightly is encrypted; set source.keySecret to its key"))
	g.Expect(failed.Status.Phase).To(Equal(memoryv1alpha1.PhaseFailed))
	g.Expect(restoreJobsIn(g, ns)).To(HaveLen(1))
}

func TestMemoryRestoreFailsWhenItsSnapshotFails(t *testing.T) {
	f := services(t)
	store := readySnapshotStore(t, f, "bot")
	ns := store.Namespace
	snap := newSnapshot(ns, "nightly", store.Name, nil)
	create(t, snap)
	restore := newRestore(ns, "migrate", "nightly", store.Name, nil)
	create(t, restore)
	key := client.ObjectKeyFromObject(restore)
	waitRestoreWaiting(t, key, memoryv1alpha1.ReasonSnapshotNotReady, "MemorySnapshot nightly is Running; waiting for it to succeed")

	failJob(t, waitForJob(t, snap), batchv1.JobReasonBackoffLimitExceeded, "Job has reached the specified backoff limit")
	got := waitRestoreCondition(t, key, memoryv1alpha1.ConditionCompleted, metav1.ConditionTrue, memoryv1alpha1.ReasonSnapshotFailed)
	g := NewWithT(t)
	g.Expect(restoreCondition(got, memoryv1alpha1.ConditionCompleted).Message).To(Equal("MemorySnapshot nightly failed (Failed); nothing to restore"))
	g.Expect(restoreCondition(got, memoryv1alpha1.ConditionProgressing).Status).To(Equal(metav1.ConditionFalse))
	g.Expect(got.Status.Phase).To(Equal(memoryv1alpha1.PhaseFailed))
	g.Expect(got.Status.CompletionTime).NotTo(BeNil())
	g.Expect(got.Status.JobName).To(BeEmpty())
	g.Expect(restoreJobsIn(g, ns)).To(BeEmpty())
	g.Eventually(func() []string { return eventReasons(ns, restore.Name) }).WithTimeout(waitTimeout).
		Should(ContainElement(memoryv1alpha1.ReasonSnapshotFailed))
}

// A package from another cluster: no MemorySnapshot object, only its location and its
// own credentials. The Job's result summary (its termination message) becomes status,
// and a finished restore never runs again.
func TestMemoryRestoreFromALocationRecordsTheJobSummary(t *testing.T) {
	f := services(t)
	store := readySnapshotStore(t, f, "bot")
	ns := store.Namespace
	putMemories(t, store, testItem("m-1", "user:1", memory.Semantic, `{"likes":"tea"}`))
	// Another cluster exported this package; only its location and credentials are here.
	prefix := "dr/" + store.Spec.Tenant + "/offsite/"
	m, err := worker.RunSnapshot(context.Background(), worker.SnapshotConfig{
		StoreNamespace: "elsewhere", StoreName: "bot", Tenant: "acme", SnapshotName: "offsite",
		Schema: store.Status.Postgres.Schema, Vectors: engine.Vectors{VectorEngine: "Postgres"}, EmbeddingModel: store.Status.Vector.EmbeddingModel, Dimension: 8, Metric: "COSINE",
		Destination: worker.Destination{Endpoint: f.s3.Endpoint, Insecure: true, Bucket: "memory-test", Prefix: prefix},
		Types:       []string{"episodic", "semantic", "procedural"}, CompressionLevel: 1, Unencrypted: true,
	}, worker.Secrets{PostgresURI: connectionSecret(t, store)["uri"], S3AccessKey: f.s3.AccessKey, S3SecretKey: f.s3.SecretKey},
		worker.RunOptions{Version: "test", Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	createSecret(t, ns, "dr-s3", map[string]string{"accessKeyID": f.s3.AccessKey, "secretAccessKey": f.s3.SecretKey})

	restore := newRestore(ns, "from-dr", "", store.Name, fromLocation(f, "memory-test", strings.TrimSuffix(prefix, "/"), "dr-s3"))
	create(t, restore)
	job := waitForJob(t, restore)
	key := client.ObjectKeyFromObject(restore)
	g := NewWithT(t)
	cfg, err := jobRestoreConfig(job)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Source).To(Equal(worker.Destination{Endpoint: f.s3.Endpoint, Insecure: true, Bucket: "memory-test", Prefix: prefix}))
	g.Expect(cfg.Unencrypted).To(BeTrue())
	g.Expect(cfg.ExpectManifestSHA256).To(BeEmpty())
	g.Expect(envSecretRefs(job)).To(Equal(map[string][2]string{
		worker.EnvPostgresURI:       {"bot-memory-worker", "uri"},
		worker.EnvSourceS3AccessKey: {"dr-s3", "accessKeyID"},
		worker.EnvSourceS3SecretKey: {"dr-s3", "secretAccessKey"},
	}))
	g.Expect(job.Labels).NotTo(HaveKey(memoryv1alpha1.LabelSnapshot))
	running := waitRestoreCondition(t, key, memoryv1alpha1.ConditionProgressing, metav1.ConditionTrue, memoryv1alpha1.ReasonJobCreated)
	g.Expect(running.Status.Source).To(Equal("s3://memory-test/" + prefix))
	g.Expect(restoreCondition(running, memoryv1alpha1.ConditionProgressing).Message).To(Equal(
		"Job " + job.Name + " restores s3://memory-test/" + prefix + " into MemoryStore bot"))

	// The pod succeeds with its summary as termination message (the test plays the
	// kubelet), then the Job controller marks the Job Complete.
	sha := objectSHA(t, minioClient(t, f), "memory-test", prefix+snapshot.ManifestName)
	summary := worker.RestoreSummary{
		ManifestSHA256: sha, FormatVersion: 1, PackageID: m.PackageID, Shards: len(m.Shards), Embeddings: "Reembed",
		Restored: 40, RestoredByType: map[string]int64{"semantic": 30, "episodic": 10, "procedural": 0},
		Scopes: 7, MappedScopes: 0, Vectors: 40,
		Skipped:      worker.SkippedCount{Tombstoned: 3, Expired: 1, Conflict: 2, Invalid: 1},
		FirstInvalid: `memory "m-9": content: must be a JSON object, got a string`,
		DetailKey:    cfg.DetailKey,
	}
	msg, err := summary.TerminationMessage()
	g.Expect(err).NotTo(HaveOccurred())
	finishedPod(t, job, 0, string(msg))
	end := completeJob(t, job)

	done := waitRestoreCondition(t, key, memoryv1alpha1.ConditionCompleted, metav1.ConditionTrue, memoryv1alpha1.ReasonSucceeded)
	g.Expect(done.Status.Phase).To(Equal(memoryv1alpha1.PhaseSucceeded))
	g.Expect(restoreCondition(done, memoryv1alpha1.ConditionProgressing).Status).To(Equal(metav1.ConditionFalse))
	g.Expect(done.Status.Verification).To(Equal(&memoryv1alpha1.RestoreVerification{
		ManifestSHA256: sha, FormatVersion: 1, PackageID: m.PackageID, Shards: int32(len(m.Shards))}))
	g.Expect(done.Status.Embeddings).To(Equal(memoryv1alpha1.EmbeddingsReembed))
	g.Expect(done.Status.Restored).To(Equal(int64(40)))
	g.Expect(done.Status.RestoredByType).To(Equal(map[string]int64{"semantic": 30, "episodic": 10}))
	g.Expect(done.Status.Scopes).To(Equal(int64(7)))
	g.Expect(done.Status.MappedScopes).To(BeZero())
	g.Expect(done.Status.Vectors).To(Equal(int64(40)))
	g.Expect(done.Status.Skipped).To(Equal(int64(7)))
	g.Expect(done.Status.SkippedBy).To(Equal(&memoryv1alpha1.RestoreSkipped{Tombstoned: 3, Expired: 1, Conflict: 2, Invalid: 1}))
	g.Expect(done.Status.FirstInvalid).To(Equal(summary.FirstInvalid))
	g.Expect(done.Status.Detail).To(Equal(&memoryv1alpha1.ObjectLocation{Endpoint: f.s3.Endpoint, Bucket: "memory-test", Key: cfg.DetailKey}))
	g.Expect(done.Status.Package).To(Equal(&memoryv1alpha1.SnapshotLocation{Endpoint: f.s3.Endpoint, Bucket: "memory-test", Prefix: prefix}))
	g.Expect(done.Status.Duration).To(Equal("1m30s"))
	g.Expect(done.Status.CompletionTime.Time).To(BeTemporally("==", end.Time))
	g.Expect(restoreCondition(done, memoryv1alpha1.ConditionCompleted).Message).To(Equal(fmt.Sprintf(
		"Restored 40 memories in 7 scopes into MemoryStore bot from s3://memory-test/%s; skipped 7 (tombstoned 3, expired 1, conflict 2, invalid 1); "+
			"40 vectors (Reembed); per-scope detail in s3://memory-test/%s", prefix, cfg.DetailKey)))
	g.Eventually(func() []string { return eventReasons(ns, restore.Name) }).WithTimeout(waitTimeout).
		Should(ContainElements(memoryv1alpha1.ReasonJobCreated, memoryv1alpha1.ReasonSucceeded))

	// Deleting the Job of a finished restore starts nothing, now or after a restart.
	g.Expect(k8sClient.Delete(context.Background(), job, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8sClient.Get(context.Background(), client.ObjectKeyFromObject(job), &batchv1.Job{}))
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(BeTrue())
	restarted := newRestoreReconciler(k8sClient, k8sClient, clocktesting.NewFakePassiveClock(time.Now()))
	res, err := restarted.Reconcile(context.Background(), reconcile.Request{NamespacedName: key})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res).To(Equal(reconcile.Result{}))
	g.Expect(restoreJobsIn(g, ns)).To(BeEmpty())
	g.Expect(getRestore(g, key).Status).To(Equal(done.Status))
}

func TestMemoryRestoreFailedJobRecordsTheWorkerError(t *testing.T) {
	f := services(t)
	store := readySnapshotStore(t, f, "bot")
	ns := store.Namespace
	createSecret(t, ns, "dr-s3", map[string]string{"accessKeyID": f.s3.AccessKey, "secretAccessKey": f.s3.SecretKey})
	restore := newRestore(ns, "doomed", "", store.Name, func(r *memoryv1alpha1.MemoryRestore) {
		fromLocation(f, "memory-test", "dr/none/", "dr-s3")(r)
		r.Spec.Job.ActiveDeadlineSeconds = ptr.To[int64](60)
	})
	create(t, restore)
	job := waitForJob(t, restore)
	failedPod(t, job, "memory-operator restore: dr/none/: package is incomplete (no manifest)")
	failJob(t, job, batchv1.JobReasonDeadlineExceeded, "Job was active longer than specified deadline")

	got := waitRestoreCondition(t, client.ObjectKeyFromObject(restore), memoryv1alpha1.ConditionCompleted, metav1.ConditionTrue, memoryv1alpha1.ReasonFailed)
	g := NewWithT(t)
	g.Expect(restoreCondition(got, memoryv1alpha1.ConditionCompleted).Message).To(Equal("Job " + job.Name +
		" failed (DeadlineExceeded): Job was active longer than specified deadline" +
		"; last error: memory-operator restore: dr/none/: package is incomplete (no manifest)"))
	progressing := restoreCondition(got, memoryv1alpha1.ConditionProgressing)
	g.Expect(progressing.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(progressing.Reason).To(Equal(memoryv1alpha1.ReasonDeadlineExceeded))
	g.Expect(got.Status.Phase).To(Equal(memoryv1alpha1.PhaseFailed))
	g.Expect(got.Status.Duration).To(Equal("1m30s"))
	g.Expect(got.Status.Restored).To(BeZero())
	g.Expect(got.Status.Verification).To(BeNil())
	g.Expect(got.Status.Detail).To(BeNil())
}

// A restore that failed after writing part of the package (its backend lost midway)
// is Failed, and its status says what it wrote, from the summary the worker left with
// its error.
func TestGuaranteeFailedRestoreReportsWhatItWrote(t *testing.T) {
	f := services(t)
	store := readySnapshotStore(t, f, "bot")
	ns := store.Namespace
	createSecret(t, ns, "dr-s3", map[string]string{"accessKeyID": f.s3.AccessKey, "secretAccessKey": f.s3.SecretKey})
	restore := newRestore(ns, "halfway", "", store.Name, fromLocation(f, "memory-test", "dr/z/", "dr-s3"))
	create(t, restore)
	job := waitForJob(t, restore)
	key := client.ObjectKeyFromObject(restore)
	waitRestoreCondition(t, key, memoryv1alpha1.ConditionProgressing, metav1.ConditionTrue, memoryv1alpha1.ReasonJobCreated)

	summary := worker.RestoreSummary{ManifestSHA256: strings.Repeat("ab", 32), FormatVersion: 2, PackageID: "p", Shards: 4,
		Embeddings: "Reuse", Read: 12000, Restored: 9000, Unchanged: 1000, Scopes: 900, Tombstones: 3, Forgotten: 7,
		Error: "restore: shard shards/000003.jsonl.zst.sealed: pgstore: merge: connection reset by peer"}
	msg, err := summary.TerminationMessage()
	g := NewWithT(t)
	g.Expect(err).NotTo(HaveOccurred())
	finishedPod(t, job, 1, string(msg))
	failJob(t, job, batchv1.JobReasonBackoffLimitExceeded, "Job has reached the specified backoff limit")

	got := waitRestoreCondition(t, key, memoryv1alpha1.ConditionCompleted, metav1.ConditionTrue, memoryv1alpha1.ReasonFailed)
	g.Expect(got.Status.Phase).To(Equal(memoryv1alpha1.PhaseFailed))
	g.Expect(got.Status.Read).To(Equal(int64(12000)))
	g.Expect(got.Status.Restored).To(Equal(int64(9000)))
	g.Expect(got.Status.Unchanged).To(Equal(int64(1000)))
	g.Expect(got.Status.Tombstones).To(Equal(int64(3)))
	g.Expect(got.Status.Forgotten).To(Equal(int64(7)))
	m := restoreCondition(got, memoryv1alpha1.ConditionCompleted).Message
	g.Expect(m).To(ContainSubstring("connection reset by peer"))
	g.Expect(m).To(ContainSubstring("; before it failed it wrote 9000 memories of the 12000 it read"))
}

// Inline renames too many for admission to check two by two (CEL's cost limit) are
// checked by the controller: two scopes mapped to one fail the restore, no Job.
func TestMemoryRestoreRefusesLongInlineMappingsThatMerge(t *testing.T) {
	f := services(t)
	store := readySnapshotStore(t, f, "bot")
	ns := store.Namespace
	createSecret(t, ns, "dr-s3", map[string]string{"accessKeyID": f.s3.AccessKey, "secretAccessKey": f.s3.SecretKey})
	restore := newRestore(ns, "long-map", "", store.Name, fromLocation(f, "memory-test", "dr/long/", "dr-s3"))
	restore.Spec.Mapping = &memoryv1alpha1.RestoreMapping{}
	for i := range 600 {
		restore.Spec.Mapping.Scopes = append(restore.Spec.Mapping.Scopes, memoryv1alpha1.ScopeRename{From: fmt.Sprintf("user:%d", i), To: fmt.Sprintf("user:new-%d", i)})
	}
	restore.Spec.Mapping.Scopes[599].To = "user:new-7"
	create(t, restore)
	got := waitRestoreCondition(t, client.ObjectKeyFromObject(restore), memoryv1alpha1.ConditionCompleted, metav1.ConditionTrue, memoryv1alpha1.ReasonFailed)
	g := NewWithT(t)
	g.Expect(restoreCondition(got, memoryv1alpha1.ConditionCompleted).Message).To(ContainSubstring("mapping.scopes maps both user:7 and user:599 to user:new-7"))
	g.Expect(restoreJobsIn(g, ns)).To(BeEmpty())
}

func TestMemoryRestoreFailsWhenItsJobDisappears(t *testing.T) {
	f := services(t)
	store := readySnapshotStore(t, f, "bot")
	ns := store.Namespace
	createSecret(t, ns, "dr-s3", map[string]string{"accessKeyID": f.s3.AccessKey, "secretAccessKey": f.s3.SecretKey})
	restore := newRestore(ns, "orphan", "", store.Name, fromLocation(f, "memory-test", "dr/x/", "dr-s3"))
	create(t, restore)
	job := waitForJob(t, restore)
	key := client.ObjectKeyFromObject(restore)
	waitRestoreCondition(t, key, memoryv1alpha1.ConditionProgressing, metav1.ConditionTrue, memoryv1alpha1.ReasonJobCreated)

	g := NewWithT(t)
	g.Expect(k8sClient.Delete(context.Background(), job, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	got := waitRestoreCondition(t, key, memoryv1alpha1.ConditionCompleted, metav1.ConditionTrue, memoryv1alpha1.ReasonFailed)
	g.Expect(restoreCondition(got, memoryv1alpha1.ConditionCompleted).Message).To(Equal(
		"Job " + job.Name + " was deleted before it finished; create a new MemoryRestore to try again"))
	g.Expect(restoreJobsIn(g, ns)).To(BeEmpty(), "a restore never runs twice")
}

// A restore into a store that does not exist yet, then is not Ready, waits; it starts
// as soon as the store is Ready.
func TestMemoryRestoreWaitsForItsTarget(t *testing.T) {
	f := services(t)
	ns := newNamespace(t)
	createSecret(t, ns, "dr-s3", map[string]string{"accessKeyID": f.s3.AccessKey, "secretAccessKey": f.s3.SecretKey})
	restore := newRestore(ns, "early", "", "later", fromLocation(f, "memory-test", "dr/y/", "dr-s3"))
	create(t, restore)
	key := client.ObjectKeyFromObject(restore)
	waitRestoreWaiting(t, key, memoryv1alpha1.ReasonStoreNotFound, "MemoryStore later not found in namespace "+ns+"; waiting for it")

	// The store appears without its admin Secrets: not Ready.
	create(t, f.inlineStore(ns, "later", newTenant(), 8, false))
	waitRestoreWaiting(t, key, memoryv1alpha1.ReasonStoreNotReady, "MemoryStore later is not Ready; waiting for it")
	g := NewWithT(t)
	g.Expect(restoreJobsIn(g, ns)).To(BeEmpty())

	f.adminSecrets(t, ns)
	job := waitForJob(t, restore)
	g.Expect(job.OwnerReferences[0].UID).To(Equal(restore.UID))
	waitRestoreCondition(t, key, memoryv1alpha1.ConditionProgressing, metav1.ConditionTrue, memoryv1alpha1.ReasonJobCreated)
	g.Eventually(func() []string { return eventReasons(ns, restore.Name) }).WithTimeout(waitTimeout).Should(ContainElements(
		memoryv1alpha1.ReasonStoreNotFound, memoryv1alpha1.ReasonStoreNotReady, memoryv1alpha1.ReasonJobCreated))
}

// A scope map in a ConfigMap is waited for, checked for its key, and mounted; its
// content never passes through the operator.
func TestMemoryRestoreWaitsForItsScopeMap(t *testing.T) {
	f := services(t)
	store := readySnapshotStore(t, f, "bot")
	ns := store.Namespace
	createSecret(t, ns, "dr-s3", map[string]string{"accessKeyID": f.s3.AccessKey, "secretAccessKey": f.s3.SecretKey})
	restore := newRestore(ns, "mapped", "", store.Name, func(r *memoryv1alpha1.MemoryRestore) {
		fromLocation(f, "memory-test", "dr/z/", "dr-s3")(r)
		r.Spec.Mapping = &memoryv1alpha1.RestoreMapping{From: &memoryv1alpha1.MappingSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "id-map"}, Key: "users.csv"}}}
	})
	create(t, restore)
	key := client.ObjectKeyFromObject(restore)
	waitRestoreWaiting(t, key, memoryv1alpha1.ReasonConfigMapNotFound, "ConfigMap "+ns+"/id-map not found")

	cm := &corev1.ConfigMap{ObjectMeta: objectMeta(ns, "id-map"), Data: map[string]string{"other.csv": "user:1,user:a\n"}}
	create(t, cm)
	waitRestoreWaiting(t, key, memoryv1alpha1.ReasonConfigMapKeyMissing, "ConfigMap "+ns+`/id-map has no key "users.csv"`)
	g := NewWithT(t)
	g.Expect(restoreJobsIn(g, ns)).To(BeEmpty())

	cm.Data = map[string]string{"users.csv": "from,to\nuser:1,user:a\n"}
	g.Expect(k8sClient.Update(context.Background(), cm)).To(Succeed())
	job := waitForJob(t, restore)
	cfg, err := jobRestoreConfig(job)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.MapFile).To(Equal("/etc/memory-operator/mapping/users.csv"))
	g.Expect(cfg.MapFormat).To(Equal(worker.MapFormatCSV))
	g.Expect(cfg.Unmapped).To(Equal("Keep"), "the CRD default")
	pod := job.Spec.Template.Spec
	g.Expect(pod.Volumes).To(ContainElement(corev1.Volume{Name: "mapping", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "id-map"}, Items: []corev1.KeyToPath{{Key: "users.csv", Path: "users.csv"}},
		// The API server's default.
		DefaultMode: ptr.To[int32](0o644)}}}))
	g.Expect(pod.Containers[0].VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "mapping", MountPath: "/etc/memory-operator/mapping", ReadOnly: true}))
}

func TestMemoryRestoreAdmission(t *testing.T) {
	ns := newNamespace(t)
	location := func(r *memoryv1alpha1.MemoryRestore) {
		r.Spec.Source.SnapshotRef = nil
		r.Spec.Source.Location = &memoryv1alpha1.PackageLocation{Endpoint: "s3.example:443", Bucket: "dr", Prefix: "p/",
			CredentialsSecret: memoryv1alpha1.ObjectStorageCredentials{Name: "dr-s3"}}
	}
	cmMap := func(key string) *memoryv1alpha1.MappingSource {
		return &memoryv1alpha1.MappingSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "m"}, Key: key}}
	}
	cases := []struct {
		name   string
		mutate func(*memoryv1alpha1.MemoryRestore)
		want   string // "" when the API server accepts it
	}{
		{"snapshot and location", func(r *memoryv1alpha1.MemoryRestore) {
			snapshotRef := r.Spec.Source.SnapshotRef
			location(r)
			r.Spec.Source.SnapshotRef = snapshotRef
		}, "set exactly one of source.snapshotRef, source.location or source.importFrom"},
		{"no source", func(r *memoryv1alpha1.MemoryRestore) { r.Spec.Source.SnapshotRef = nil }, "set exactly one of source.snapshotRef, source.location or source.importFrom"},
		{"key and unencrypted", func(r *memoryv1alpha1.MemoryRestore) { r.Spec.Source.Unencrypted = true },
			"set source.keySecret, or source.unencrypted: true to read a plaintext package"},
		{"no key", func(r *memoryv1alpha1.MemoryRestore) { r.Spec.Source.KeySecret = nil },
			"set source.keySecret, or source.unencrypted: true to read a plaintext package"},
		{"location without credentials", func(r *memoryv1alpha1.MemoryRestore) {
			location(r)
			r.Spec.Source.Location.CredentialsSecret.Name = ""
		}, "spec.source.location.credentialsSecret.name"},
		{"location with a bad bucket", func(r *memoryv1alpha1.MemoryRestore) {
			location(r)
			r.Spec.Source.Location.Bucket = "Bad_Bucket"
		}, "spec.source.location.bucket"},
		{"two map sources", func(r *memoryv1alpha1.MemoryRestore) {
			src := cmMap("users.csv")
			src.Object = &memoryv1alpha1.MappingObject{Key: "users.csv"}
			r.Spec.Mapping = &memoryv1alpha1.RestoreMapping{From: src}
		}, "set exactly one of mapping.from.configMapKeyRef, secretKeyRef or object"},
		{"map of unknown format", func(r *memoryv1alpha1.MemoryRestore) {
			r.Spec.Mapping = &memoryv1alpha1.RestoreMapping{From: cmMap("users.txt")}
		}, "set mapping.from.format, or name the key with a .csv, .jsonl or .ndjson extension"},
		{"map with declared format", func(r *memoryv1alpha1.MemoryRestore) {
			src := cmMap("users")
			src.Format = memoryv1alpha1.MappingCSV
			r.Spec.Mapping = &memoryv1alpha1.RestoreMapping{From: src}
		}, ""},
		{"bad scope", func(r *memoryv1alpha1.MemoryRestore) {
			r.Spec.Mapping = &memoryv1alpha1.RestoreMapping{Scopes: []memoryv1alpha1.ScopeRename{{From: "customer:1", To: "user:1"}}}
		}, "spec.mapping.scopes[0].from"},
		{"scopes in any language", func(r *memoryv1alpha1.MemoryRestore) {
			r.Spec.Mapping = &memoryv1alpha1.RestoreMapping{Scopes: []memoryv1alpha1.ScopeRename{{From: "user:zoë-ユーザー", To: "user:用户123"},
				{From: "session:thread/42:ü", To: "session:t/42"}},
				Prefixes: []memoryv1alpha1.PrefixRename{{From: "user:旧-", To: "user:新-"}}}
			r.Spec.Denylist = []string{"user:тест-*", "user:zoë"}
		}, ""},
		{"scope with a space", func(r *memoryv1alpha1.MemoryRestore) {
			r.Spec.Mapping = &memoryv1alpha1.RestoreMapping{Scopes: []memoryv1alpha1.ScopeRename{{From: "user:a b", To: "user:ab"}}}
		}, "spec.mapping.scopes[0].from"},
		{"scope with a quote", func(r *memoryv1alpha1.MemoryRestore) {
			r.Spec.Denylist = []string{`user:a"b`}
		}, "spec.denylist[0]"},
		{"scope mapped twice", func(r *memoryv1alpha1.MemoryRestore) {
			r.Spec.Mapping = &memoryv1alpha1.RestoreMapping{Scopes: []memoryv1alpha1.ScopeRename{
				{From: "user:1", To: "user:a"}, {From: "user:1", To: "user:b"}}}
		}, `spec.mapping.scopes[1]: Duplicate value: {"from":"user:1"}`},
		{"two scopes to one", func(r *memoryv1alpha1.MemoryRestore) {
			r.Spec.Mapping = &memoryv1alpha1.RestoreMapping{Scopes: []memoryv1alpha1.ScopeRename{
				{From: "user:1", To: "user:a"}, {From: "user:2", To: "user:b"}, {From: "user:3", To: "user:a"}}}
		}, "two mapping.scopes entries map to the same scope, which would merge two users' memories"},
		{"two scopes to one, on purpose", func(r *memoryv1alpha1.MemoryRestore) {
			r.Spec.Mapping = &memoryv1alpha1.RestoreMapping{AllowMerge: true, Scopes: []memoryv1alpha1.ScopeRename{
				{From: "user:1", To: "user:a"}, {From: "user:3", To: "user:a"}}}
		}, ""},
		{"map without a key", func(r *memoryv1alpha1.MemoryRestore) {
			src := cmMap("")
			src.Format = memoryv1alpha1.MappingCSV
			r.Spec.Mapping = &memoryv1alpha1.RestoreMapping{From: src}
		}, "mapping.from.configMapKeyRef needs a name and a key"},
		{"secret map without a key", func(r *memoryv1alpha1.MemoryRestore) {
			r.Spec.Mapping = &memoryv1alpha1.RestoreMapping{From: &memoryv1alpha1.MappingSource{Format: memoryv1alpha1.MappingJSONLines,
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "m"}}}}
		}, "mapping.from.secretKeyRef needs a name and a key"},
		{"a thousand scopes", func(r *memoryv1alpha1.MemoryRestore) {
			m := &memoryv1alpha1.RestoreMapping{}
			for i := range 1000 {
				m.Scopes = append(m.Scopes, memoryv1alpha1.ScopeRename{From: fmt.Sprintf("user:%d", i), To: fmt.Sprintf("user:new-%d", i)})
			}
			r.Spec.Mapping = m
		}, ""},
		{"bad prefix", func(r *memoryv1alpha1.MemoryRestore) {
			r.Spec.Mapping = &memoryv1alpha1.RestoreMapping{Prefixes: []memoryv1alpha1.PrefixRename{{From: "user", To: "user:x-"}}}
		}, "spec.mapping.prefixes[0].from"},
		{"unmapped policy", func(r *memoryv1alpha1.MemoryRestore) {
			r.Spec.Mapping = &memoryv1alpha1.RestoreMapping{Unmapped: "Drop"}
		}, "spec.mapping.unmapped"},
		{"denylist", func(r *memoryv1alpha1.MemoryRestore) { r.Spec.Denylist = []string{"user:a b"} }, "spec.denylist[0]"},
		{"type", func(r *memoryv1alpha1.MemoryRestore) { r.Spec.Types = []memoryv1alpha1.MemoryType{"dream"} }, "spec.types[0]"},
		{"conflict policy", func(r *memoryv1alpha1.MemoryRestore) { r.Spec.ConflictPolicy = "Newest" }, "spec.conflictPolicy"},
		{"embeddings", func(r *memoryv1alpha1.MemoryRestore) { r.Spec.Embeddings = "Copy" }, "spec.embeddings"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRestore(ns, fmt.Sprintf("case-%d", i), "nightly", "bot", tc.mutate)
			err := k8sClient.Create(context.Background(), r)
			if tc.want == "" {
				NewWithT(t).Expect(err).NotTo(HaveOccurred())
				return
			}
			NewWithT(t).Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
			NewWithT(t).Expect(err.Error()).To(ContainSubstring(tc.want))
		})
	}

	// Defaults, then immutability of the whole spec.
	r := newRestore(ns, "frozen", "nightly", "bot", func(r *memoryv1alpha1.MemoryRestore) {
		r.Spec.Mapping = &memoryv1alpha1.RestoreMapping{Scopes: []memoryv1alpha1.ScopeRename{{From: "user:1", To: "user:a"}}}
	})
	create(t, r)
	g := NewWithT(t)
	g.Expect(r.Spec.ConflictPolicy).To(Equal(memoryv1alpha1.ConflictKeepNewer))
	g.Expect(r.Spec.Embeddings).To(Equal(memoryv1alpha1.EmbeddingsReuse))
	g.Expect(r.Spec.Mapping.Unmapped).To(Equal(memoryv1alpha1.UnmappedKeep))
	g.Expect(*r.Spec.Job.ActiveDeadlineSeconds).To(Equal(int64(3600)))
	for name, mutate := range map[string]func(*memoryv1alpha1.MemoryRestore){
		"dryRun":  func(r *memoryv1alpha1.MemoryRestore) { r.Spec.DryRun = true },
		"target":  func(r *memoryv1alpha1.MemoryRestore) { r.Spec.TargetRef.Name = "other" },
		"mapping": func(r *memoryv1alpha1.MemoryRestore) { r.Spec.Mapping.Scopes[0].To = "user:b" },
	} {
		err := updateRestore(r, mutate)
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: want Invalid, got %v", name, err)
		g.Expect(err.Error()).To(ContainSubstring("a MemoryRestore is immutable; create a new one instead"), name)
	}
}

// Every Secret a restore needs is checked before its Job exists, and the Secret watch
// wakes the restore as soon as one appears or changes.
func TestMemoryRestoreChecksItsSecretsBeforeAnyJob(t *testing.T) {
	f := services(t)
	store := readySnapshotStore(t, f, "bot")
	ns := store.Namespace
	restore := newRestore(ns, "keyed", "", store.Name, func(r *memoryv1alpha1.MemoryRestore) {
		fromLocation(f, "memory-test", "dr/k/", "dr-s3")(r)
		r.Spec.Source.Unencrypted = false
		r.Spec.Source.KeySecret = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "dr-key"}, Key: "key"}
	})
	create(t, restore)
	key := client.ObjectKeyFromObject(restore)
	waitRestoreWaiting(t, key, memoryv1alpha1.ReasonSecretNotFound, "Secret "+ns+"/dr-s3 not found")

	createSecret(t, ns, "dr-s3", map[string]string{"accessKeyID": f.s3.AccessKey})
	waitRestoreWaiting(t, key, memoryv1alpha1.ReasonSecretKeyMissing, "Secret "+ns+`/dr-s3 has no key "secretAccessKey"`)
	setSecretData(t, &corev1.Secret{ObjectMeta: objectMeta(ns, "dr-s3")},
		map[string][]byte{"accessKeyID": []byte(f.s3.AccessKey), "secretAccessKey": []byte(f.s3.SecretKey)})
	waitRestoreWaiting(t, key, memoryv1alpha1.ReasonSecretNotFound, "Secret "+ns+"/dr-key not found")

	createKeySecret(t, ns, "dr-key", []byte("too-short-key"))
	waitRestoreWaiting(t, key, memoryv1alpha1.ReasonInvalidKey, "Secret "+ns+`/dr-key key "key" holds no usable encryption key: `+
		"key is 13 bytes; need 32 raw bytes, 64 hex characters or base64 of 32 bytes")
	g := NewWithT(t)
	g.Expect(restoreJobsIn(g, ns)).To(BeEmpty())

	setSecretData(t, &corev1.Secret{ObjectMeta: objectMeta(ns, "dr-key")}, map[string][]byte{"key": randomBytes(t, 32)})
	job := waitForJob(t, restore)
	g.Expect(envSecretRefs(job)).To(HaveKeyWithValue(worker.EnvSourceKey, [2]string{"dr-key", "key"}))
}

// A Job that completed without leaving a summary (its pods are gone) still succeeded:
// the worker did its work. Status says the counts are unknown instead of inventing them.
func TestMemoryRestoreCompletedWithoutSummary(t *testing.T) {
	f := services(t)
	store := readySnapshotStore(t, f, "bot")
	ns := store.Namespace
	createSecret(t, ns, "dr-s3", map[string]string{"accessKeyID": f.s3.AccessKey, "secretAccessKey": f.s3.SecretKey})
	restore := newRestore(ns, "quiet", "", store.Name, fromLocation(f, "memory-test", "dr/q/", "dr-s3"))
	create(t, restore)
	job := waitForJob(t, restore)
	completeJob(t, job)
	got := waitRestoreCondition(t, client.ObjectKeyFromObject(restore), memoryv1alpha1.ConditionCompleted, metav1.ConditionTrue, memoryv1alpha1.ReasonSucceeded)
	g := NewWithT(t)
	g.Expect(restoreCondition(got, memoryv1alpha1.ConditionCompleted).Message).To(Equal(
		"Job " + job.Name + " completed, but none of its pods reported a result summary; the counts are unknown"))
	g.Expect(got.Status.Phase).To(Equal(memoryv1alpha1.PhaseSucceeded))
	g.Expect(got.Status.Verification).To(BeNil())
	g.Expect(got.Status.Restored).To(BeZero())
	g.Expect(got.Status.Duration).To(Equal("1m30s"))
}

// The sample is accepted as it is, and waits for its snapshot.
func TestMemoryRestoreSampleIsValid(t *testing.T) {
	sample := restoreSample(t, "memory_v1alpha1_memoryrestore.yaml")
	ns := newNamespace(t)
	sample.Namespace = ns
	create(t, sample)
	waitRestoreWaiting(t, client.ObjectKeyFromObject(sample), memoryv1alpha1.ReasonSnapshotNotFound,
		"MemorySnapshot acme-before-migration not found in namespace "+ns+"; waiting for it")
}
