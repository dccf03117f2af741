package controllers

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/minio/minio-go/v7"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/snapshot"
	"github.com/amemory/memory-operator/internal/worker"
)

// Helpers of the MemorySnapshot and schedule tests. There is no kubelet: the tests play
// its part, running the worker a Job describes (with the Secrets it references) and
// writing the Job's status as the Job controller would.

const snapshotKeySecret = "snap-key"

// readySnapshotStore creates a namespace with a Ready inline store (PostgreSQL, MinIO)
// and a valid encryption key Secret, and returns the store.
func readySnapshotStore(t *testing.T, f backendFixture, name string) *memoryv1alpha1.MemoryStore {
	t.Helper()
	ns := newNamespace(t)
	f.adminSecrets(t, ns)
	store := f.inlineStore(ns, name, newTenant(), 8, false)
	create(t, store)
	createKeySecret(t, ns, snapshotKeySecret, []byte(hex.EncodeToString(randomBytes(t, 32))))
	return waitReady(t, client.ObjectKeyFromObject(store))
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func createKeySecret(t *testing.T, namespace, name string, key []byte) {
	t.Helper()
	create(t, &corev1.Secret{ObjectMeta: objectMeta(namespace, name), Data: map[string][]byte{"key": key}})
}

// newSnapshot is an encrypted snapshot of store, keyed by snapshotKeySecret.
func newSnapshot(namespace, name, store string, mutate func(*memoryv1alpha1.MemorySnapshot)) *memoryv1alpha1.MemorySnapshot {
	s := &memoryv1alpha1.MemorySnapshot{
		ObjectMeta: objectMeta(namespace, name),
		Spec: memoryv1alpha1.MemorySnapshotSpec{
			StoreRef: corev1.LocalObjectReference{Name: store},
			SnapshotParameters: memoryv1alpha1.SnapshotParameters{
				Encryption: memoryv1alpha1.SnapshotEncryption{KeySecret: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: snapshotKeySecret}, Key: "key"}},
			},
		},
	}
	if mutate != nil {
		mutate(s)
	}
	return s
}

func getSnapshot(g Gomega, key client.ObjectKey) *memoryv1alpha1.MemorySnapshot {
	s := &memoryv1alpha1.MemorySnapshot{}
	g.Expect(k8sClient.Get(context.Background(), key, s)).To(Succeed())
	return s
}

// waitSnapshotCondition waits until the snapshot's condition has the status and reason
// and returns the snapshot as it was then.
func waitSnapshotCondition(t *testing.T, key client.ObjectKey, condType string, status metav1.ConditionStatus, reason string) *memoryv1alpha1.MemorySnapshot {
	t.Helper()
	var snap *memoryv1alpha1.MemorySnapshot
	NewWithT(t).Eventually(func(g Gomega) {
		snap = getSnapshot(g, key)
		c := meta.FindStatusCondition(snap.Status.Conditions, condType)
		g.Expect(c).NotTo(BeNil(), "condition %s not set; conditions: %+v", condType, snap.Status.Conditions)
		g.Expect(c.ObservedGeneration).To(Equal(snap.Generation))
		g.Expect(c.Status).To(Equal(status), "condition %s: %s", condType, c.Message)
		g.Expect(c.Reason).To(Equal(reason), "condition %s: %s", condType, c.Message)
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed())
	return snap
}

func snapshotCondition(s *memoryv1alpha1.MemorySnapshot, condType string) metav1.Condition {
	if c := meta.FindStatusCondition(s.Status.Conditions, condType); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// waitForJob waits for the worker Job of a snapshot or restore (the object must carry
// its UID, which the Job's name includes).
func waitForJob(t *testing.T, owner client.Object) *batchv1.Job {
	t.Helper()
	job := &batchv1.Job{}
	key := client.ObjectKey{Namespace: owner.GetNamespace(), Name: workerJobName(owner)}
	NewWithT(t).Eventually(func() error {
		return k8sClient.Get(context.Background(), key, job)
	}).WithTimeout(waitTimeout).WithPolling(pollEvery).Should(Succeed(), "no Job %s", key.Name)
	return job
}

// jobsIn lists the Jobs of a namespace.
func jobsIn(g Gomega, namespace string) []batchv1.Job {
	var list batchv1.JobList
	g.Expect(k8sClient.List(context.Background(), &list, client.InNamespace(namespace))).To(Succeed())
	return list.Items
}

// putMemories writes items into the store as an agent would, with its connection Secret.
func putMemories(t *testing.T, store *memoryv1alpha1.MemoryStore, items ...memory.Item) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, connectionSecret(t, store)["uri"])
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := pgstore.New(pool, store.Status.Postgres.Schema)
	for _, it := range items {
		if _, err := s.Put(ctx, it); err != nil {
			t.Fatalf("putting %s: %v", it.MemoryID, err)
		}
	}
}

func testItem(id, scope string, typ memory.Type, content string) memory.Item {
	at := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	return memory.Item{MemoryID: id, MemoryType: typ, Scope: scope, Content: json.RawMessage(content),
		Source: "test@1", BaseScore: 0.5, CreatedAt: at, UpdatedAt: at}
}

// runWorker does what the Job's pod would: the worker subcommand with the Job's
// arguments and the values of the Secrets its environment references.
func runWorker(t *testing.T, job *batchv1.Job) *snapshot.Manifest {
	t.Helper()
	cfg, err := jobSnapshotConfig(job)
	if err != nil {
		t.Fatal(err)
	}
	var sec worker.Secrets
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		ref := e.ValueFrom.SecretKeyRef
		s := &corev1.Secret{}
		if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: job.Namespace, Name: ref.Name}, s); err != nil {
			t.Fatalf("the pod could not start: %v", err)
		}
		v := string(s.Data[ref.Key])
		switch e.Name {
		case worker.EnvPostgresURI:
			sec.PostgresURI = v
		case worker.EnvS3AccessKey:
			sec.S3AccessKey = v
		case worker.EnvS3SecretKey:
			sec.S3SecretKey = v
		case worker.EnvEncryptionKey:
			sec.EncryptionKey = v
		}
	}
	m, err := worker.RunSnapshot(context.Background(), cfg, sec, worker.RunOptions{Version: "test", Now: time.Now()})
	if err != nil {
		t.Fatalf("snapshot worker: %v", err)
	}
	return m
}

// jobTimes are the start and completion the tests give Jobs: 90 seconds apart.
func jobTimes() (start, end metav1.Time) {
	end = metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	return metav1.NewTime(end.Add(-90 * time.Second)), end
}

// completeJob writes the status the Job controller writes when the pod succeeded.
func completeJob(t *testing.T, job *batchv1.Job) metav1.Time {
	t.Helper()
	start, end := jobTimes()
	updateJobStatus(t, job, func(s *batchv1.JobStatus) {
		s.StartTime, s.CompletionTime, s.Succeeded = &start, &end, 1
		s.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonCompletionsReached,
				LastProbeTime: end, LastTransitionTime: end},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonCompletionsReached,
				LastProbeTime: end, LastTransitionTime: end},
		}
	})
	return end
}

// failJob writes the status the Job controller writes when the Job failed for reason.
func failJob(t *testing.T, job *batchv1.Job, reason, message string) {
	t.Helper()
	start, end := jobTimes()
	updateJobStatus(t, job, func(s *batchv1.JobStatus) {
		s.StartTime = &start
		s.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: reason, Message: message,
				LastProbeTime: end, LastTransitionTime: end},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: reason, Message: message,
				LastProbeTime: end, LastTransitionTime: end},
		}
	})
}

// failedPod creates a pod of the Job whose worker container ended with message in its
// termination log, as the kubelet reports it.
func failedPod(t *testing.T, job *batchv1.Job, message string) {
	t.Helper()
	finishedPod(t, job, 1, message)
}

// finishedPod creates a pod of the Job whose worker container exited with exitCode and
// left message in its termination log, as the kubelet reports it.
func finishedPod(t *testing.T, job *batchv1.Job, exitCode int32, message string) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: job.Namespace, Name: job.Name + "-x1y2z",
			Labels: map[string]string{batchv1.ControllerUidLabel: string(job.UID), batchv1.JobNameLabel: job.Name}},
		Spec: *job.Spec.Template.Spec.DeepCopy(),
	}
	create(t, pod)
	finished := metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	phase, reason := corev1.PodFailed, "Error"
	if exitCode == 0 {
		phase, reason = corev1.PodSucceeded, "Completed"
	}
	pod.Status.Phase = phase
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: pod.Spec.Containers[0].Name, Image: pod.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: exitCode, Reason: reason, Message: message, StartedAt: finished, FinishedAt: finished}},
	}}
	if err := k8sClient.Status().Update(context.Background(), pod); err != nil {
		t.Fatalf("updating the status of pod %s: %v", pod.Name, err)
	}
}

func updateJobStatus(t *testing.T, job *batchv1.Job, mutate func(*batchv1.JobStatus)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(job), job); err != nil {
			return err
		}
		mutate(&job.Status)
		return k8sClient.Status().Update(context.Background(), job)
	})
	if err != nil {
		t.Fatalf("updating the status of Job %s: %v", job.Name, err)
	}
}

// minioClient is a client for the test MinIO with its root credentials.
func minioClient(t *testing.T, f backendFixture) *minio.Client {
	t.Helper()
	c, err := provision.NewS3Client(provision.S3Conn{Endpoint: f.s3.Endpoint, AccessKey: f.s3.AccessKey, SecretKey: f.s3.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// objectsUnder lists the object names under prefix.
func objectsUnder(g Gomega, c *minio.Client, bucket, prefix string) []string {
	var names []string
	for o := range c.ListObjects(context.Background(), bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		g.Expect(o.Err).NotTo(HaveOccurred())
		names = append(names, o.Key)
	}
	return names
}

func objectSHA(t *testing.T, c *minio.Client, bucket, name string) string {
	t.Helper()
	obj, err := c.GetObject(context.Background(), bucket, name, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = obj.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, obj); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}
