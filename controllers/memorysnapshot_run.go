package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/snapshot"
)

// run starts the snapshot's Job or follows the one it has. A Job that disappears before
// it finished fails the snapshot: it is never started a second time.
func (r *MemorySnapshotReconciler) run(ctx context.Context, snap *memoryv1alpha1.MemorySnapshot) (ctrl.Result, error) {
	job, err := findJob(ctx, r.Client, r.APIReader, snap.Namespace, orDefault(snap.Status.JobName, workerJobName(snap)))
	if err != nil {
		return ctrl.Result{}, err
	}
	switch {
	case job == nil && snap.Status.JobName != "":
		snap.Status.CompletionTime = r.now()
		snap.SetCompleted(memoryv1alpha1.ReasonFailed, fmt.Sprintf(
			"Job %s was deleted before it finished; create a new MemorySnapshot to try again", snap.Status.JobName))
		return ctrl.Result{}, nil
	case job == nil:
		return r.startJob(ctx, snap)
	case !metav1.IsControlledBy(job, snap):
		snap.Status.CompletionTime = r.now()
		snap.SetCompleted(memoryv1alpha1.ReasonFailed, fmt.Sprintf(
			"Job %s exists and does not belong to this snapshot; create a new MemorySnapshot", job.Name))
		return ctrl.Result{}, nil
	}
	return r.observeJob(ctx, snap, job)
}

// findJob returns a snapshot's or restore's Job, or nil when there is none. The cache
// may not have seen a Job created a moment ago, so a miss is confirmed with the API
// server (apiReader).
func findJob(ctx context.Context, cached, apiReader client.Reader, namespace, name string) (*batchv1.Job, error) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	job := &batchv1.Job{}
	err := cached.Get(ctx, key, job)
	if apierrors.IsNotFound(err) {
		err = apiReader.Get(ctx, key, job)
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return job, nil
}

// startJob checks everything the Job needs (store ready, destination, Secrets and the
// encryption key) and creates it. What can be fixed (a store or Secret yet to come)
// makes the snapshot wait; what cannot (no object storage to write to) fails it.
func (r *MemorySnapshotReconciler) startJob(ctx context.Context, snap *memoryv1alpha1.MemorySnapshot) (ctrl.Result, error) {
	if r.WorkerImage == "" {
		snap.SetProgress(metav1.ConditionFalse, memoryv1alpha1.ReasonNotConfigured,
			"The operator has no worker image: start it with --worker-image or $WORKER_IMAGE")
		return ctrl.Result{}, nil
	}
	// A snapshot taken before a store's deletion reads a store no longer Ready.
	store, backend, deleting, err := preChangeStore(ctx, r.Client, snap)
	if err == nil && !deleting {
		store, backend, err = readyStore(ctx, r.Client, snap.Namespace, snap.Spec.StoreRef.Name)
	}
	if err != nil {
		return r.waitOn(snap, err)
	}
	plan, err := planDestination(snap, store, backend.objectStorage)
	if err != nil {
		var se *stepError
		if errors.As(err, &se) && se.reason == memoryv1alpha1.ReasonObjectStorageMissing {
			snap.Status.CompletionTime = r.now()
			snap.SetCompleted(se.reason, se.message)
			return ctrl.Result{}, nil
		}
		return r.waitOn(snap, err)
	}
	if err := r.checkSecrets(ctx, snap, store, plan); err != nil {
		return r.waitOn(snap, err)
	}

	job := buildSnapshotJob(snap, store, snapshotJobInputs{Image: r.WorkerImage, Plan: plan, MilvusAddress: backend.milvusAddress})
	switch err := r.Create(ctx, job); {
	case apierrors.IsInvalid(err):
		// The spec is immutable: a Job refused once is refused forever.
		snap.Status.CompletionTime = r.now()
		snap.SetCompleted(memoryv1alpha1.ReasonFailed, fmt.Sprintf("The API server rejected Job %s: %v", job.Name, err))
		return ctrl.Result{}, nil
	case err != nil && !apierrors.IsAlreadyExists(err):
		return ctrl.Result{}, err
	}
	logf.FromContext(ctx).Info("Created snapshot Job", "job", job.Name, "prefix", plan.Destination.Prefix)
	d := plan.Destination
	snap.Status.JobName = job.Name
	snap.Status.StartTime = r.now()
	snap.Status.Location = &memoryv1alpha1.SnapshotLocation{Endpoint: d.Endpoint, Bucket: d.Bucket, Prefix: d.Prefix}
	snap.SetProgress(metav1.ConditionTrue, memoryv1alpha1.ReasonJobCreated, startingMessage(snap))
	return ctrl.Result{}, nil
}

func startingMessage(snap *memoryv1alpha1.MemorySnapshot) string {
	loc := snap.Status.Location
	return fmt.Sprintf("Job %s exports MemoryStore %s to s3://%s/%s", snap.Status.JobName, snap.Spec.StoreRef.Name, loc.Bucket, loc.Prefix)
}

// waitOn records why the snapshot cannot start yet and looks again later (the watches
// on stores and Secrets usually wake it sooner). Errors without a reason are retried
// with backoff.
func (r *MemorySnapshotReconciler) waitOn(snap *memoryv1alpha1.MemorySnapshot, err error) (ctrl.Result, error) {
	var se *stepError
	if !errors.As(err, &se) {
		return ctrl.Result{}, err
	}
	snap.SetProgress(metav1.ConditionFalse, se.reason, se.message)
	return ctrl.Result{RequeueAfter: waitRecheck}, nil
}

// readyStore returns a snapshot's (or restore's target) store once it is Ready, and its
// backends; a store that is missing or not Ready is a stepError to wait on.
func readyStore(ctx context.Context, c client.Reader, namespace, name string) (*memoryv1alpha1.MemoryStore, effectiveBackend, error) {
	store := &memoryv1alpha1.MemoryStore{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, store); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, effectiveBackend{}, stepErrorf(memoryv1alpha1.ReasonStoreNotFound,
				"MemoryStore %s not found in namespace %s; waiting for it", name, namespace)
		}
		return nil, effectiveBackend{}, err
	}
	if !store.DeletionTimestamp.IsZero() {
		return nil, effectiveBackend{}, stepErrorf(memoryv1alpha1.ReasonStoreNotReady, "MemoryStore %s is being deleted", name)
	}
	if !store.IsReady() || store.Status.Postgres == nil || store.Status.Vector == nil || store.Status.WorkerSecret == "" {
		return nil, effectiveBackend{}, stepErrorf(memoryv1alpha1.ReasonStoreNotReady, "MemoryStore %s is not Ready; waiting for it", name)
	}
	if cuttingOver(store) {
		return nil, effectiveBackend{}, stepErrorf(memoryv1alpha1.ReasonStoreNotReady, "%s", cutoverWait(store))
	}
	if schemaBehind(store) {
		return nil, effectiveBackend{}, stepErrorf(memoryv1alpha1.ReasonStoreNotReady, "%s", schemaWait(store))
	}
	backend, err := storeBackend(ctx, c, store)
	if err != nil {
		return nil, effectiveBackend{}, err
	}
	return store, backend, nil
}

// checkSecrets makes sure every Secret the Job references is there with its keys, and
// that the encryption key is a usable AES-256 key, before any Job exists: a pod stuck on
// a missing Secret or a worker refusing its key says less, later.
func (r *MemorySnapshotReconciler) checkSecrets(ctx context.Context, snap *memoryv1alpha1.MemorySnapshot, store *memoryv1alpha1.MemoryStore, plan destinationPlan) error {
	if _, err := secretValues(ctx, r.APIReader, store.Namespace, store.Status.WorkerSecret, keyURI); err != nil {
		return err
	}
	creds := plan.Credentials
	if _, err := secretValues(ctx, r.APIReader, snap.Namespace, creds.Name, creds.AccessKeyIDKey, creds.SecretAccessKeyKey); err != nil {
		return err
	}
	enc := snap.Spec.Encryption
	if enc.Unencrypted || enc.KeySecret == nil {
		return nil
	}
	_, err := readPackageKey(ctx, r.APIReader, snap.Namespace, enc.KeySecret)
	return err
}

// observeJob maps the Job's state onto the snapshot: running, failed (its reason in the
// message, DeadlineExceeded included) or complete, in which case the package's manifest
// is read and recorded.
func (r *MemorySnapshotReconciler) observeJob(ctx context.Context, snap *memoryv1alpha1.MemorySnapshot, job *batchv1.Job) (ctrl.Result, error) {
	snap.Status.JobName = job.Name
	if snap.Status.StartTime == nil {
		// The operator stopped between creating the Job and recording it.
		t := job.CreationTimestamp
		snap.Status.StartTime = &t
	}
	if snap.Status.Location == nil {
		loc, err := jobLocation(job)
		if err != nil {
			return ctrl.Result{}, err
		}
		snap.Status.Location = loc
	}

	finished := jobFinished(job)
	switch {
	case finished == nil && job.Status.Active > 0:
		snap.SetProgress(metav1.ConditionTrue, memoryv1alpha1.ReasonRunning, fmt.Sprintf("Job %s is running", job.Name))
		return ctrl.Result{}, nil
	case finished == nil:
		snap.SetProgress(metav1.ConditionTrue, memoryv1alpha1.ReasonJobCreated, startingMessage(snap))
		return ctrl.Result{}, nil
	case finished.Type == batchv1.JobFailed:
		r.recordFailure(snap, job, finished, workerError(ctx, r.APIReader, job, snapshotContainer))
		return ctrl.Result{}, nil
	}
	return r.recordPackage(ctx, snap, job)
}

// jobFinished returns the Job's Complete or Failed condition once it is True.
func jobFinished(job *batchv1.Job) *batchv1.JobCondition {
	for i := range job.Status.Conditions {
		c := &job.Status.Conditions[i]
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

// maxWorkerError bounds how much of a worker's last words go into a condition.
const maxWorkerError = 1024

// workerError is the last error a pod of a worker Job reported in its container (its
// termination message, which the worker writes), or "" when there is none to be found.
func workerError(ctx context.Context, apiReader client.Reader, job *batchv1.Job, container string) string {
	last, err := lastTermination(ctx, apiReader, job, container, false)
	if err != nil {
		logf.FromContext(ctx).Error(err, "Listing the pods of a failed Job", "job", job.Name)
		return ""
	}
	if last == nil {
		return ""
	}
	msg := strings.TrimSpace(last.Message)
	if len(msg) > maxWorkerError {
		msg = msg[:maxWorkerError] + "..."
	}
	return msg
}

// lastTermination is the latest termination with a message of the container in the
// Job's pods: a successful one (exit code 0) or a failed one. Pods are listed straight
// from the API server, only when a Job finished: the operator does not cache Pods.
func lastTermination(ctx context.Context, apiReader client.Reader, job *batchv1.Job, container string, succeeded bool) (*corev1.ContainerStateTerminated, error) {
	var pods corev1.PodList
	if err := apiReader.List(ctx, &pods, client.InNamespace(job.Namespace),
		client.MatchingLabels{batchv1.ControllerUidLabel: string(job.UID)}); err != nil {
		return nil, err
	}
	var last *corev1.ContainerStateTerminated
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name != container {
				continue
			}
			for _, t := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
				if t != nil && (t.ExitCode == 0) == succeeded && t.Message != "" && (last == nil || last.FinishedAt.Before(&t.FinishedAt)) {
					last = t
				}
			}
		}
	}
	return last, nil
}

// recordFailure fails the snapshot with the Job's reason and the worker's last error.
// Nothing is read from the package: a failed run never looks complete.
func (r *MemorySnapshotReconciler) recordFailure(snap *memoryv1alpha1.MemorySnapshot, job *batchv1.Job, failed *batchv1.JobCondition, workerErr string) {
	f := describeJobFailure(job, failed, workerErr, r.now())
	snap.Status.CompletionTime = &f.end
	snap.Status.Duration = runDuration(snap.Status.StartTime, job.Status.StartTime, f.end)
	snap.SetCompleted(memoryv1alpha1.ReasonFailed, f.message)
	if f.deadline {
		snap.SetCondition(memoryv1alpha1.ConditionProgressing, metav1.ConditionFalse, memoryv1alpha1.ReasonDeadlineExceeded, f.message)
	}
}

// jobFailure is how a failed worker Job is reported.
type jobFailure struct {
	end      metav1.Time
	message  string
	deadline bool // it ran out of time
}

// describeJobFailure says why the Job failed: its reason and message and the worker's
// last error. The run ended when the Job failed, or now when the Job does not say.
func describeJobFailure(job *batchv1.Job, failed *batchv1.JobCondition, workerErr string, now *metav1.Time) jobFailure {
	reason := orDefault(failed.Reason, "Failed")
	end := failed.LastTransitionTime
	if end.IsZero() {
		end = *now
	}
	msg := fmt.Sprintf("Job %s failed (%s)", job.Name, reason)
	if failed.Message != "" {
		msg += ": " + failed.Message
	}
	if workerErr != "" {
		msg += "; last error: " + workerErr
	}
	return jobFailure{end: end, message: msg, deadline: reason == batchv1.JobReasonDeadlineExceeded}
}

// recordPackage reads the manifest of a Job that completed and records what the package
// holds. No manifest, or one that does not describe this store, fails the snapshot; not
// being able to reach object storage is retried.
func (r *MemorySnapshotReconciler) recordPackage(ctx context.Context, snap *memoryv1alpha1.MemorySnapshot, job *batchv1.Job) (ctrl.Result, error) {
	end := metav1.NewTime(r.now().Time)
	if job.Status.CompletionTime != nil {
		end = *job.Status.CompletionTime
	}
	access, err := r.resolver().access(ctx, snap, job, true)
	if err == nil {
		var sum PackageSummary
		sum, err = r.packages().Summary(ctx, access)
		if err == nil {
			err = checkSummary(snap, sum)
		}
		if err == nil {
			snap.Status.CompletionTime = &end
			snap.Status.Duration = runDuration(snap.Status.StartTime, job.Status.StartTime, end)
			recordSummary(snap, sum)
			snap.SetCompleted(memoryv1alpha1.ReasonSucceeded, fmt.Sprintf("Exported %d items in %d scopes (%d bytes in %d shards) to s3://%s/%s",
				sum.Items, sum.Scopes, sum.Bytes, sum.Shards, access.Bucket, access.Prefix))
			return ctrl.Result{}, nil
		}
	}
	if isPackageUnusable(err) {
		snap.Status.CompletionTime = &end
		snap.SetCompleted(memoryv1alpha1.ReasonManifestInvalid, fmt.Sprintf("Job %s completed, but its package is not usable: %v", job.Name, err))
		return ctrl.Result{}, nil
	}
	snap.SetProgress(metav1.ConditionTrue, memoryv1alpha1.ReasonRunning,
		fmt.Sprintf("Job %s completed; reading its manifest failed (retrying): %v", job.Name, err))
	return ctrl.Result{}, err
}

// checkSummary refuses a manifest that describes another store: the prefix holds
// someone else's package.
func checkSummary(snap *memoryv1alpha1.MemorySnapshot, sum PackageSummary) error {
	if sum.StoreNamespace != snap.Namespace || sum.StoreName != snap.Spec.StoreRef.Name {
		return fmt.Errorf("%w: the manifest describes MemoryStore %s/%s, not %s/%s", snapshot.ErrCorrupt,
			sum.StoreNamespace, sum.StoreName, snap.Namespace, snap.Spec.StoreRef.Name)
	}
	return nil
}

func recordSummary(snap *memoryv1alpha1.MemorySnapshot, sum PackageSummary) {
	s := &snap.Status
	s.FormatVersion = sum.FormatVersion
	s.Items = sum.Items
	s.ItemsByType = sum.ItemsByType
	s.Scopes = sum.Scopes
	s.Bytes = sum.Bytes
	s.Shards = sum.Shards
	s.EmbeddingModel = sum.EmbeddingModel
	s.ManifestSHA256 = sum.ManifestSHA256
}

// runDuration is how long the run took: from the Job's start (the snapshot's when the
// Job has none) to end, to the second.
func runDuration(snapStart, jobStart *metav1.Time, end metav1.Time) string {
	start := snapStart
	if jobStart != nil {
		start = jobStart
	}
	if start == nil || end.Before(start) {
		return ""
	}
	return end.Sub(start.Time).Round(time.Second).String()
}

func (r *MemorySnapshotReconciler) now() *metav1.Time {
	return nowFrom(r.Clock)
}

// nowFrom is the clock's time (the real one when nil) to the second: status keeps
// seconds, and so does everything computed from it.
func nowFrom(clk clock.PassiveClock) *metav1.Time {
	var now time.Time
	if clk == nil {
		now = time.Now()
	} else {
		now = clk.Now()
	}
	t := metav1.NewTime(now).Rfc3339Copy()
	return &t
}

func (r *MemorySnapshotReconciler) packages() PackageStore {
	if r.Packages == nil {
		return minioPackages{}
	}
	return r.Packages
}
