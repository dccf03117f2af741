package controllers

import (
	"context"
	"maps"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// The rules a GitOps tool relies on for one-shot objects (docs/gitops.md): what it
// applies again changes nothing, a finished run never runs again, an object it
// recreates does not re-run into live data, the TTL does not delete what it manages,
// and nothing we create carries its marks.

// argoMarks and fluxMarks are what Argo CD and Flux put on the objects they apply.
var (
	argoMarks = map[string]string{"argocd.argoproj.io/tracking-id": "memory:memory.amemory.io/MemoryStore:team-a/support-bot"}
	fluxMarks = map[string]string{"kustomize.toolkit.fluxcd.io/name": "memory", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}
)

// applied server-side-applies manifest as a GitOps tool does (field manager
// "gitops-tool", forced ownership), returning the object as stored or the error.
func applied(manifest map[string]any) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{Object: manifest}
	err := k8sClient.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(u),
		client.FieldOwner("gitops-tool"), client.ForceOwnership)
	return u, err
}

func TestGitOpsReapplyingIsANoOpAndEditsAreRefused(t *testing.T) {
	f := services(t)
	s := newRestoreScene(t, f)
	g := NewWithT(t)
	manifests := map[string]func(dryRun bool) map[string]any{
		"MemorySnapshot": func(dryRun bool) map[string]any {
			return map[string]any{"apiVersion": memoryv1alpha1.GroupVersion.String(), "kind": "MemorySnapshot",
				"metadata": map[string]any{"namespace": s.ns, "name": "gitops-snapshot", "labels": fluxMarks},
				"spec": map[string]any{"storeRef": map[string]any{"name": s.store.Name},
					"encryption":        map[string]any{"keySecret": map[string]any{"name": snapshotKeySecret, "key": "key"}},
					"includeEmbeddings": dryRun}} // dryRun stands in for any edit
		},
		"MemoryRestore": func(dryRun bool) map[string]any {
			return map[string]any{"apiVersion": memoryv1alpha1.GroupVersion.String(), "kind": "MemoryRestore",
				"metadata": map[string]any{"namespace": s.ns, "name": "gitops-restore", "annotations": argoMarks},
				"spec": map[string]any{"source": map[string]any{"snapshotRef": map[string]any{"name": "never-taken"},
					"keySecret": map[string]any{"name": snapshotKeySecret, "key": "key"}},
					"targetRef": map[string]any{"name": s.target.Name}, "dryRun": dryRun}}
		},
	}
	for kind, manifest := range manifests {
		t.Run(kind, func(t *testing.T) {
			first, err := applied(manifest(false))
			g.Expect(err).NotTo(HaveOccurred())
			key := client.ObjectKeyFromObject(first)
			// Let the controller settle (a snapshot waits for nothing, a restore for its
			// snapshot), then apply the same manifest again.
			stable := func() string {
				u := &unstructured.Unstructured{Object: served(t, kind, key)}
				return u.GetResourceVersion()
			}
			var rv string
			g.Eventually(func(g Gomega) {
				rv = stable()
				g.Consistently(stable).WithTimeout(time.Second).WithPolling(100 * time.Millisecond).Should(Equal(rv))
			}).WithTimeout(waitTimeout).Should(Succeed())
			again, err := applied(manifest(false))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(again.GetResourceVersion()).To(Equal(rv), "re-applying the same manifest wrote the object")
			g.Expect(again.GetGeneration()).To(Equal(int64(1)))

			_, err = applied(manifest(true))
			g.Expect(err).To(MatchError(ContainSubstring("is immutable; create a new one instead")))
			g.Expect(stable()).To(Equal(rv))
		})
	}
}

func TestGitOpsFinishedRunsNeverRunAgain(t *testing.T) {
	f := services(t)
	s := newRestoreScene(t, f)
	g := NewWithT(t)
	ok := s.restore(t, "migrate", nil)
	okJob := waitForJob(t, ok)
	playRestore(t, okJob)
	awaitSummary(t, "MemoryRestore", client.ObjectKeyFromObject(ok), done, memoryv1alpha1.ReasonSucceeded)
	bad := s.restore(t, "migrate-bad", func(r *memoryv1alpha1.MemoryRestore) { r.Spec.AllowRepeat = true })
	badJob := waitForJob(t, bad)
	failedJob(t, badJob, "restore: the test made it fail")
	awaitSummary(t, "MemoryRestore", client.ObjectKeyFromObject(bad), stalled, memoryv1alpha1.ReasonFailed)

	// Their Jobs are cleaned up (a TTL controller, a person): neither restore starts
	// another, and both keep their verdict.
	for _, job := range []*batchv1.Job{okJob, badJob} {
		g.Expect(k8sClient.Delete(context.Background(), job, client.PropagationPolicy(metav1.DeletePropagationBackground))).To(Succeed())
	}
	// A status write the controller would undo if it ran them again.
	g.Consistently(func(g Gomega) {
		g.Expect(restoreJobsIn(g, s.ns)).To(BeEmpty())
		g.Expect(getRestore(g, client.ObjectKeyFromObject(ok)).Succeeded()).To(BeTrue())
		r := getRestore(g, client.ObjectKeyFromObject(bad))
		g.Expect(r.IsDone() && !r.Succeeded()).To(BeTrue())
	}).WithTimeout(3 * time.Second).WithPolling(pollEvery).Should(Succeed())
}

// TestGitOpsRecreatedRestoreDoesNotRerun: self-heal (or a sync after someone deleted
// the object) creates an identical MemoryRestore again. It must not restore the package
// a second time into the store that received it and moved on; the store names the
// restore it received; allowRepeat does it again on purpose.
func TestGitOpsRecreatedRestoreDoesNotRerun(t *testing.T) {
	f := services(t)
	s := newRestoreScene(t, f)
	g := NewWithT(t)
	first := s.restore(t, "migrate", nil)
	playRestore(t, waitForJob(t, first))
	awaitSummary(t, "MemoryRestore", client.ObjectKeyFromObject(first), done, memoryv1alpha1.ReasonSucceeded)
	g.Eventually(func(g Gomega) {
		last := getStore(g, client.ObjectKeyFromObject(s.target)).Status.LastRestore
		g.Expect(last).NotTo(BeNil())
		g.Expect(last.Name).To(Equal("migrate"))
		g.Expect(last.UID).To(Equal(first.UID))
		g.Expect(last.Source).To(ContainSubstring("/snapshots/before-migration-"))
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())

	// An agent moves on: one memory is forgotten... and the same restore comes back.
	storeOf(t, s.target).forget(t, "user:2048", "asked")
	deleteAndWaitGone(t, first)
	again := s.restore(t, "migrate", nil)
	playRestore(t, waitForJob(t, again))
	got := awaitSummary(t, "MemoryRestore", client.ObjectKeyFromObject(again), done, memoryv1alpha1.ReasonAlreadyRestored)
	phase, _, _ := unstructured.NestedString(got, "status", "phase")
	g.Expect(phase).To(Equal(memoryv1alpha1.PhaseSucceeded))
	r := getRestore(g, client.ObjectKeyFromObject(again))
	g.Expect(restoreCondition(r, memoryv1alpha1.ConditionCompleted).Message).To(ContainSubstring(string(first.UID)))
	g.Expect(r.Status.Restored).To(BeZero())
	last := getStore(g, client.ObjectKeyFromObject(s.target)).Status.LastRestore
	g.Expect(last.UID).To(Equal(first.UID), "a restore that wrote nothing is not the last one received")

	// On purpose: allowRepeat restores it again, and the store records that one.
	repeat := s.restore(t, "migrate-repeat", func(r *memoryv1alpha1.MemoryRestore) { r.Spec.AllowRepeat = true })
	playRestore(t, waitForJob(t, repeat))
	awaitSummary(t, "MemoryRestore", client.ObjectKeyFromObject(repeat), done, memoryv1alpha1.ReasonSucceeded)
	g.Eventually(func() *memoryv1alpha1.ReceivedRestore {
		return getStore(g, client.ObjectKeyFromObject(s.target)).Status.LastRestore
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(HaveField("UID", repeat.UID))
}

func TestGitOpsTTLKeepsManagedSnapshots(t *testing.T) {
	f := services(t)
	s := newSnapshotScene(t, f)
	g := NewWithT(t)
	ttl := func(labels map[string]string, optIn bool) func(*memoryv1alpha1.MemorySnapshot) {
		return func(m *memoryv1alpha1.MemorySnapshot) {
			m.Labels = labels
			m.Spec.TTL = &metav1.Duration{Duration: time.Second}
			m.Spec.TTLDeletesGitOpsManaged = optIn
		}
	}
	// Taken and finished, not waited for: a TTL of a second may end them first.
	taken := func(name string, mutate func(*memoryv1alpha1.MemorySnapshot)) *memoryv1alpha1.MemorySnapshot {
		snap := newSnapshot(s.ns, name, s.store.Name, mutate)
		create(t, snap)
		job := waitForJob(t, snap)
		runWorker(t, job)
		completeJob(t, job)
		return snap
	}
	kept := taken("flux-managed", ttl(fluxMarks, false))
	optedIn := taken("flux-managed-opted-in", ttl(fluxMarks, true))
	unmanaged := taken("unmanaged", ttl(nil, false))

	got := waitSnapshotCondition(t, client.ObjectKeyFromObject(kept), memoryv1alpha1.ConditionExpired, metav1.ConditionFalse, memoryv1alpha1.ReasonTTLKept)
	g.Expect(snapshotCondition(got, memoryv1alpha1.ConditionExpired).Message).To(ContainSubstring("Flux (label kustomize.toolkit.fluxcd.io/name) manages this snapshot"))
	g.Expect(got.Succeeded()).To(BeTrue())
	g.Expect(objectsUnder(g, minioClient(t, f), got.Status.Location.Bucket, got.Status.Location.Prefix)).To(ContainElement(got.Status.Location.Prefix + "manifest.json"))
	for _, gone := range []*memoryv1alpha1.MemorySnapshot{optedIn, unmanaged} {
		g.Eventually(func() bool {
			err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(gone), &memoryv1alpha1.MemorySnapshot{})
			return err != nil && client.IgnoreNotFound(err) == nil
		}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(BeTrue(), "%s outlived its TTL", gone.Name)
	}
	g.Consistently(func() error {
		return k8sClient.Get(context.Background(), client.ObjectKeyFromObject(kept), &memoryv1alpha1.MemorySnapshot{})
	}).WithTimeout(2 * time.Second).Should(Succeed())
	g.Expect(eventReasons(s.ns, kept.Name)).To(ContainElement(memoryv1alpha1.ReasonTTLKept))
}

// TestGitOpsGeneratedObjectsCarryOnlyOurMarks: the snapshots a schedule creates and
// every Job carry the operator's labels (and Jobs an owner reference to what they run
// for), never the labels or annotations a GitOps tool put on the store: with them the
// tool would count them as its own and prune them (velero#2975).
func TestGitOpsGeneratedObjectsCarryOnlyOurMarks(t *testing.T) {
	f := services(t)
	store := readySnapshotStore(t, f, "support-bot")
	g := NewWithT(t)
	marks := maps.Clone(fluxMarks)
	marks["app.kubernetes.io/instance"] = "memory"
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := getStore(g, client.ObjectKeyFromObject(store))
		s.Labels, s.Annotations = marks, argoMarks
		s.Spec.SnapshotSchedule = &memoryv1alpha1.SnapshotSchedule{Schedule: "0 3 * * *", Template: memoryv1alpha1.SnapshotParameters{
			Encryption: memoryv1alpha1.SnapshotEncryption{KeySecret: newSnapshot("", "", "", nil).Spec.Encryption.KeySecret}}}
		return k8sClient.Update(context.Background(), s)
	})).To(Succeed())
	setArchival(t, store, func(a *memoryv1alpha1.ArchivalSpec) { *a = *validArchival() })
	store = waitReady(t, client.ObjectKeyFromObject(store))

	slot := nextDaily(time.Now())
	clk := clocktesting.NewFakePassiveClock(slot.Add(-time.Minute))
	schedules, archival := newScheduleReconciler(k8sClient, k8sClient, clk), newArchivalReconciler(clk)
	reconcileSchedule(t, schedules, store)
	reconcileArchival(t, archival, store)
	clk.SetTime(slot.Add(time.Second))
	reconcileSchedule(t, schedules, store)
	reconcileArchival(t, archival, store)

	names := scheduledSnapshotsOf(g, store)
	g.Expect(names).To(HaveLen(1))
	snap := getSnapshot(g, client.ObjectKey{Namespace: store.Namespace, Name: names[0]})
	g.Expect(snap.Labels).To(Equal(map[string]string{memoryv1alpha1.LabelStore: store.Name, memoryv1alpha1.LabelScheduled: "true"}))
	g.Expect(snap.Annotations).To(Equal(map[string]string{memoryv1alpha1.AnnotationScheduledAt: slot.Format(time.RFC3339)}))
	g.Expect(gitOpsManager(snap)).To(BeEmpty(), "its TTL and retention must apply")

	snapJob := waitForJob(t, snap)
	archiveJobs := archiveJobNames(g, store)
	_, archivalCondition := archivalOf(g, store)
	g.Expect(archiveJobs).To(HaveLen(1), "archival: %+v", archivalCondition)
	for _, job := range []*batchv1.Job{snapJob, getJob(g, store.Namespace, archiveJobs[0])} {
		for _, labels := range []map[string]string{job.Labels, job.Spec.Template.Labels} {
			for k := range labels {
				g.Expect(marks).NotTo(HaveKey(k), "Job %s", job.Name)
			}
		}
		g.Expect(job.Annotations).NotTo(HaveKey("argocd.argoproj.io/tracking-id"))
		g.Expect(job.Spec.Template.Annotations).To(BeEmpty())
		g.Expect(job.OwnerReferences).To(HaveLen(1))
		g.Expect(*job.OwnerReferences[0].Controller).To(BeTrue())
		g.Expect(job.Labels).To(HaveKeyWithValue(labelManagedBy, managedBy))
	}
	g.Expect(metav1.IsControlledBy(snapJob, snap)).To(BeTrue())
	g.Expect(metav1.IsControlledBy(getJob(g, store.Namespace, archiveJobs[0]), store)).To(BeTrue())
}
