package controllers

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/worker"
)

// A MemoryRestore driven end to end: a real package made by the snapshot worker, the
// restore worker run in-process with the Job's own arguments and Secrets, its summary
// handed back as the pod's termination message, and the memories found in the target.
func TestMemoryRestoreEndToEndThroughTheWorker(t *testing.T) {
	f := services(t)
	ctx := context.Background()
	source := readySnapshotStore(t, f, "bot")
	ns := source.Namespace
	putMemories(t, source,
		testItem("m-1", "user:1024", memory.Semantic, `{"likes":"tea"}`),
		testItem("m-2", "user:1024", memory.Episodic, `{"booked":"Lisbon"}`),
		testItem("m-3", "user:2048", memory.Semantic, `{"likes":"coffee"}`),
		testItem("m-4", "user:3", memory.Semantic, `{"likes":"nothing"}`))
	forgotten := storeOf(t, source).forget(t, "user:3", "gdpr request")

	snap := newSnapshot(ns, "nightly", source.Name, nil)
	create(t, snap)
	snapJob := waitForJob(t, snap)
	runWorker(t, snapJob)
	completeJob(t, snapJob)
	done := waitSnapshotCondition(t, client.ObjectKeyFromObject(snap), memoryv1alpha1.ConditionCompleted, metav1.ConditionTrue, memoryv1alpha1.ReasonSucceeded)

	target := f.inlineStore(ns, "bot-v2", newTenant(), 8, false)
	create(t, target)
	tgt := waitReady(t, client.ObjectKeyFromObject(target))

	restore := newRestore(ns, "migrate", "nightly", "bot-v2", func(r *memoryv1alpha1.MemoryRestore) {
		r.Spec.Mapping = &memoryv1alpha1.RestoreMapping{Scopes: []memoryv1alpha1.ScopeRename{{From: "user:1024", To: "user:dbc0a3"}}}
	})
	create(t, restore)
	key := client.ObjectKeyFromObject(restore)
	job := waitForJob(t, restore)
	waitRestoreCondition(t, key, memoryv1alpha1.ConditionProgressing, metav1.ConditionTrue, memoryv1alpha1.ReasonJobCreated)

	// The test plays the pod: the worker with the Job's arguments and Secrets.
	g := NewWithT(t)
	cfg, err := worker.ParseRestoreArgs(restoreJobArgs(t, job), io.Discard)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.ScopeMap).To(Equal([]worker.ScopeRule{{From: "user:1024", To: "user:dbc0a3"}}))
	g.Expect(cfg.MapFile).To(BeEmpty())
	g.Expect(cfg.Schema).To(Equal(tgt.Status.Postgres.Schema))
	g.Expect(cfg.ExpectManifestSHA256).To(Equal(done.Status.ManifestSHA256))
	sum, err := worker.RunRestore(ctx, cfg, worker.RestoreSecretsFrom(jobSecretEnv(t, job, worker.EnvPostgresURI, worker.EnvSourceS3AccessKey,
		worker.EnvSourceS3SecretKey, worker.EnvSourceKey, worker.EnvEmbedderAPIKey)), worker.RunOptions{Version: "test", Now: time.Now()})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sum.Restored).To(Equal(int64(3)))
	g.Expect(sum.Scopes).To(Equal(int64(2)))
	g.Expect(sum.MappedScopes).To(Equal(int64(1)))
	g.Expect(sum.ManifestSHA256).To(Equal(done.Status.ManifestSHA256))
	msg, err := sum.TerminationMessage()
	g.Expect(err).NotTo(HaveOccurred())
	finishedPod(t, job, 0, string(msg))
	end := completeJob(t, job)

	got := waitRestoreCondition(t, key, memoryv1alpha1.ConditionCompleted, metav1.ConditionTrue, memoryv1alpha1.ReasonSucceeded)
	g.Expect(got.Status.Phase).To(Equal(memoryv1alpha1.PhaseSucceeded))
	g.Expect(got.Status.Restored).To(Equal(sum.Restored))
	g.Expect(got.Status.Scopes).To(Equal(sum.Scopes))
	g.Expect(got.Status.MappedScopes).To(Equal(sum.MappedScopes))
	g.Expect(got.Status.Vectors).To(Equal(sum.Vectors))
	skipped := memoryv1alpha1.RestoreSkipped{
		Denylisted: sum.Skipped.Denylisted, Tombstoned: sum.Skipped.Tombstoned, Unmapped: sum.Skipped.Unmapped,
		Expired: sum.Skipped.Expired, Type: sum.Skipped.Type, Conflict: sum.Skipped.Conflict, Invalid: sum.Skipped.Invalid,
		IDInUseByOtherScope: sum.Skipped.IDInUseByOtherScope, TextTooLong: sum.Skipped.TextTooLong,
	}
	g.Expect(got.Status.Skipped).To(Equal(skipped.Total()))
	if skipped.Total() == 0 {
		g.Expect(got.Status.SkippedBy).To(BeNil())
	} else {
		g.Expect(got.Status.SkippedBy).To(Equal(&skipped))
	}
	g.Expect(got.Status.Verification).To(Equal(&memoryv1alpha1.RestoreVerification{
		ManifestSHA256: sum.ManifestSHA256, FormatVersion: sum.FormatVersion, PackageID: sum.PackageID, Shards: int32(sum.Shards)}))
	g.Expect(got.Status.Detail).To(Equal(&memoryv1alpha1.ObjectLocation{Endpoint: f.s3.Endpoint, Bucket: "memory-test", Key: cfg.DetailKey}))
	g.Expect(got.Status.CompletionTime.Time).To(BeTemporally("==", end.Time))

	// The target holds the memories under their new and kept scopes, and the tombstone.
	dst := storeOf(t, tgt)
	g.Expect(dst.scopesByID(t)).To(Equal(map[string]string{
		"m-1": "user:dbc0a3", "m-2": "user:dbc0a3", "m-3": "user:2048",
	}))
	tombstones, err := dst.Tombstones(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tombstones).To(HaveLen(1))
	g.Expect(tombstones[0].Scope).To(Equal("user:3"))
	g.Expect(tombstones[0].Reason).To(Equal(forgotten.Reason))
	g.Expect(tombstones[0].ForgottenAt).To(BeTemporally("==", forgotten.ForgottenAt))
}

// testStore is a pgstore.Store on a store's own connection.
type testStore struct{ *pgstore.Store }

// storeOf connects to the store with its connection Secret, closed when the test ends.
func storeOf(t *testing.T, store *memoryv1alpha1.MemoryStore) testStore {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), connectionSecret(t, store)["uri"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return testStore{pgstore.New(pool, store.Status.Postgres.Schema)}
}

// forget forgets scope as an agent would and returns its tombstone.
func (s testStore) forget(t *testing.T, scope, reason string) memory.Tombstone {
	t.Helper()
	res, err := s.Forget(context.Background(), scope, reason, "test")
	if err != nil {
		t.Fatal(err)
	}
	return memory.Tombstone{Scope: scope, ForgottenAt: res.ForgottenAt, Reason: reason}
}

// scopesByID maps every memory of the store to its scope.
func (s testStore) scopesByID(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	if err := s.Export(context.Background(), pgstore.ExportFilter{IncludeArchived: true}, func(it memory.Item) error {
		out[it.MemoryID] = it.Scope
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// restoreJobArgs are the restore container's arguments after the subcommand.
func restoreJobArgs(t *testing.T, job *batchv1.Job) []string {
	t.Helper()
	for _, c := range job.Spec.Template.Spec.Containers {
		if c.Name == restoreContainer && len(c.Args) > 0 && c.Args[0] == restoreContainer {
			return c.Args[1:]
		}
	}
	t.Fatalf("Job %s has no %s container", job.Name, restoreContainer)
	return nil
}

// jobSecretEnv reads the values of the Secrets a worker Job's environment references,
// as the kubelet would to start its pod, and returns them as a getenv. Every variable
// must come from a Secret and be one of names.
func jobSecretEnv(t *testing.T, job *batchv1.Job, names ...string) func(string) string {
	t.Helper()
	env := map[string]string{}
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			t.Fatalf("env %s is not from a Secret", e.Name)
		}
		if !slices.Contains(names, e.Name) {
			t.Fatalf("unexpected env %s", e.Name)
		}
		ref := e.ValueFrom.SecretKeyRef
		s := &corev1.Secret{}
		if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: job.Namespace, Name: ref.Name}, s); err != nil {
			t.Fatalf("the pod could not start: %v", err)
		}
		v, ok := s.Data[ref.Key]
		if !ok {
			t.Fatalf("Secret %s has no key %q", ref.Name, ref.Key)
		}
		env[e.Name] = string(v)
	}
	return func(name string) string { return env[name] }
}
