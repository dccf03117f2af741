package controllers

import (
	"context"
	"errors"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/worker"
)

// runFailure ends a restore before any Job exists, for a reason waiting cannot fix (its
// snapshot failed): the restore is Completed with the reason.
type runFailure struct {
	reason, message string
}

func (e *runFailure) Error() string { return e.message }

// run starts the restore's Job or follows the one it has. A Job that disappears before it
// finished fails the restore: it is never started a second time.
func (r *MemoryRestoreReconciler) run(ctx context.Context, restore *memoryv1alpha1.MemoryRestore) (ctrl.Result, error) {
	restore.Status.Source = restore.Spec.Source.SourceDescription()
	job, err := findJob(ctx, r.Client, r.APIReader, restore.Namespace, orDefault(restore.Status.JobName, workerJobName(restore)))
	if err != nil {
		return ctrl.Result{}, err
	}
	switch {
	case job == nil && restore.Status.JobName != "":
		r.fail(restore, memoryv1alpha1.ReasonFailed, fmt.Sprintf(
			"Job %s was deleted before it finished; create a new MemoryRestore to try again", restore.Status.JobName))
		return ctrl.Result{}, nil
	case job == nil:
		return r.startJob(ctx, restore)
	case !metav1.IsControlledBy(job, restore):
		r.fail(restore, memoryv1alpha1.ReasonFailed, fmt.Sprintf(
			"Job %s exists and does not belong to this restore; create a new MemoryRestore", job.Name))
		return ctrl.Result{}, nil
	}
	return r.observeJob(ctx, restore, job)
}

// startJob waits for everything the Job needs (a snapshot that succeeded, a Ready
// target, the Secrets, the key and the scope map) and creates it.
func (r *MemoryRestoreReconciler) startJob(ctx context.Context, restore *memoryv1alpha1.MemoryRestore) (ctrl.Result, error) {
	if r.WorkerImage == "" {
		restore.SetProgress(metav1.ConditionFalse, memoryv1alpha1.ReasonNotConfigured,
			"The operator has no worker image: start it with --worker-image or $WORKER_IMAGE")
		return ctrl.Result{}, nil
	}
	imp := restore.Spec.Source.ImportFrom
	if imp != nil {
		if err := validateImport(imp); err != nil {
			return r.waitOrFail(restore, err)
		}
	}
	source, err := r.resolveSource(ctx, restore)
	if err != nil {
		return r.waitOrFail(restore, err)
	}
	target, backend, err := readyStore(ctx, r.Client, restore.Namespace, restore.Spec.TargetRef.Name)
	if err != nil {
		return r.waitOrFail(restore, err)
	}
	if imp != nil {
		// An import reads no package: where it reads its file and writes its detail
		// depends on the target's object storage.
		if source, err = planImport(restore, target, backend.objectStorage); err != nil {
			return r.waitOrFail(restore, err)
		}
	}
	if err := r.checkInputs(ctx, restore, target, source); err != nil {
		return r.waitOrFail(restore, err)
	}

	job := buildRestoreJob(restore, target, restoreJobInputs{Image: r.WorkerImage, Source: source, MilvusAddress: backend.milvusAddress})
	if imp != nil {
		// A backstop for admission: the worker would refuse arguments it cannot parse.
		if _, err := jobRestoreConfig(job); err != nil {
			r.fail(restore, memoryv1alpha1.ReasonInvalidSpec, fmt.Sprintf("The restore worker would refuse this import: %v", err))
			return ctrl.Result{}, nil
		}
	}
	switch err := r.Create(ctx, job); {
	case apierrors.IsInvalid(err):
		// The spec is immutable: a Job refused once is refused forever.
		r.fail(restore, memoryv1alpha1.ReasonFailed, fmt.Sprintf("The API server rejected Job %s: %v", job.Name, err))
		return ctrl.Result{}, nil
	case err != nil && !apierrors.IsAlreadyExists(err):
		return ctrl.Result{}, err
	}
	p := source.Package
	restore.Status.JobName = job.Name
	restore.Status.StartTime = r.now()
	if imp != nil {
		logf.FromContext(ctx).Info("Created import Job", "job", job.Name, "kind", imp.Kind, "target", target.Name)
	} else {
		logf.FromContext(ctx).Info("Created restore Job", "job", job.Name, "bucket", p.Bucket, "prefix", p.Prefix, "target", target.Name)
		restore.Status.Package = &memoryv1alpha1.SnapshotLocation{Endpoint: p.Endpoint, Bucket: p.Bucket, Prefix: p.Prefix}
	}
	restore.SetProgress(metav1.ConditionTrue, memoryv1alpha1.ReasonJobCreated, restoreStartingMessage(restore))
	return ctrl.Result{}, nil
}

func restoreStartingMessage(restore *memoryv1alpha1.MemoryRestore) string {
	verb := "restores"
	if restore.IsImport() {
		verb = "imports"
	}
	msg := fmt.Sprintf("Job %s %s %s into MemoryStore %s", restore.Status.JobName, verb, restore.Status.Source, restore.Spec.TargetRef.Name)
	if restore.Spec.Source.SnapshotRef != nil && restore.Status.Package != nil {
		msg += " (" + packageURL(restore.Status.Package) + ")"
	}
	if restore.Spec.DryRun {
		msg += "; dry run, nothing is written"
	}
	return msg
}

// waitOrFail records why the restore cannot start: a runFailure ends it, a stepError
// makes it wait and look again later (the watches on snapshots, stores, Secrets and
// ConfigMaps usually wake it sooner). Other errors are retried with backoff.
func (r *MemoryRestoreReconciler) waitOrFail(restore *memoryv1alpha1.MemoryRestore, err error) (ctrl.Result, error) {
	var rf *runFailure
	if errors.As(err, &rf) {
		r.fail(restore, rf.reason, rf.message)
		return ctrl.Result{}, nil
	}
	var se *stepError
	if !errors.As(err, &se) {
		return ctrl.Result{}, err
	}
	restore.SetProgress(metav1.ConditionFalse, se.reason, se.message)
	return ctrl.Result{RequeueAfter: waitRecheck}, nil
}

// fail ends the restore now with the reason.
func (r *MemoryRestoreReconciler) fail(restore *memoryv1alpha1.MemoryRestore, reason, message string) {
	restore.Status.CompletionTime = r.now()
	restore.SetCompleted(reason, message)
}

// resolveSource finds the package: the location as the spec gives it, or the package of
// the named snapshot once it succeeded. A snapshot yet to be created or still running is
// waited for (GitOps applies both at once); one that failed fails the restore.
func (r *MemoryRestoreReconciler) resolveSource(ctx context.Context, restore *memoryv1alpha1.MemoryRestore) (restoreSourcePlan, error) {
	src := restore.Spec.Source
	switch {
	case src.ImportFrom != nil:
		return restoreSourcePlan{}, nil // planImport, once the target is known
	case src.SnapshotRef == nil:
		return planLocation(restore), nil
	}
	name := src.SnapshotRef.Name
	snap := &memoryv1alpha1.MemorySnapshot{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: restore.Namespace, Name: name}, snap); err != nil {
		if apierrors.IsNotFound(err) {
			return restoreSourcePlan{}, stepErrorf(memoryv1alpha1.ReasonSnapshotNotFound,
				"MemorySnapshot %s not found in namespace %s; waiting for it", name, restore.Namespace)
		}
		return restoreSourcePlan{}, err
	}
	return packageOfSnapshot(ctx, r.resolver(), snap, src.Unencrypted, packageKeyRef(src))
}

// packageOfSnapshot is the source plan of a restore of snap's package, opened with key
// (nil when unencrypted says the restore expects a plaintext package): a snapshot still
// running is waited for, one that failed or whose encryption is not what the restore
// expects fails it.
func packageOfSnapshot(ctx context.Context, resolver packageResolver, snap *memoryv1alpha1.MemorySnapshot,
	unencrypted bool, key *corev1.SecretKeySelector) (restoreSourcePlan, error) {
	name := snap.Name
	switch {
	case !snap.DeletionTimestamp.IsZero():
		return restoreSourcePlan{}, stepErrorf(memoryv1alpha1.ReasonSnapshotNotFound, "MemorySnapshot %s is being deleted", name)
	case !snap.IsDone():
		return restoreSourcePlan{}, stepErrorf(memoryv1alpha1.ReasonSnapshotNotReady,
			"MemorySnapshot %s is %s; waiting for it to succeed", name, orDefault(snap.Status.Phase, memoryv1alpha1.PhasePending))
	case !snap.Succeeded():
		return restoreSourcePlan{}, &runFailure{reason: memoryv1alpha1.ReasonSnapshotFailed,
			message: fmt.Sprintf("MemorySnapshot %s failed (%s); nothing to restore", name, completedReason(snap.Status.Conditions))}
	}
	if enc := snap.Spec.Encryption; enc.Unencrypted != unencrypted {
		msg := fmt.Sprintf("MemorySnapshot %s is encrypted; set source.keySecret to its key", name)
		if enc.Unencrypted {
			msg = fmt.Sprintf("MemorySnapshot %s is not encrypted; set source.unencrypted: true", name)
		}
		return restoreSourcePlan{}, &runFailure{reason: memoryv1alpha1.ReasonEncryptionMismatch, message: msg}
	}
	loc, err := packageLocation(snap)
	if err != nil {
		return restoreSourcePlan{}, &runFailure{reason: memoryv1alpha1.ReasonFailed,
			message: fmt.Sprintf("MemorySnapshot %s records no usable package: %v", name, err)}
	}
	refs, err := resolver.refs(ctx, snap, nil)
	if err != nil {
		return restoreSourcePlan{}, err
	}
	return restoreSourcePlan{
		Package: worker.Destination{Endpoint: loc.Endpoint, Region: refs.region, Insecure: refs.insecure,
			Bucket: loc.Bucket, Prefix: loc.Prefix},
		// The snapshot's own credentials: the Secret its Job wrote the package with.
		Credentials:    refs.creds,
		Key:            key,
		Snapshot:       name,
		ManifestSHA256: snap.Status.ManifestSHA256,
	}, nil
}

func completedReason(conditions []metav1.Condition) string {
	if c := meta.FindStatusCondition(conditions, memoryv1alpha1.ConditionCompleted); c != nil {
		return c.Reason
	}
	return memoryv1alpha1.ReasonFailed
}

// checkInputs makes sure every Secret and ConfigMap the Job references is there with
// its keys, and that the package key is a usable AES-256 key, before any Job exists: a
// pod stuck on a missing Secret or a worker refusing its key says less, later.
func (r *MemoryRestoreReconciler) checkInputs(ctx context.Context, restore *memoryv1alpha1.MemoryRestore,
	target *memoryv1alpha1.MemoryStore, source restoreSourcePlan) error {
	ns := restore.Namespace
	if _, err := secretValues(ctx, r.APIReader, target.Namespace, target.Status.WorkerSecret, keyURI); err != nil {
		return err
	}
	creds := source.Credentials
	if _, err := secretValues(ctx, r.APIReader, ns, creds.Name, creds.AccessKeyIDKey, creds.SecretAccessKeyKey); err != nil {
		return err
	}
	if source.Key != nil {
		if _, err := readPackageKey(ctx, r.APIReader, ns, source.Key); err != nil {
			return err
		}
	}
	if imp := restore.Spec.Source.ImportFrom; imp != nil && imp.Postgres != nil {
		ref := imp.Postgres.URISecret
		if _, err := secretValues(ctx, r.APIReader, ns, ref.Name, ref.Key); err != nil {
			return err
		}
	}
	if e := servingEmbedder(target); e.Type == memoryv1alpha1.EmbedderOpenAI && e.APIKeySecret != nil {
		if _, err := secretValues(ctx, r.APIReader, target.Namespace, e.APIKeySecret.Name, e.APIKeySecret.Key); err != nil {
			return err
		}
	}
	if m := restore.Spec.Mapping; m != nil && !m.AllowMerge {
		if err := checkInlineTargets(m.Scopes); err != nil {
			return err
		}
	}
	if m := restore.Spec.Mapping; m != nil && m.From != nil {
		return r.checkMapping(ctx, ns, m.From)
	}
	return nil
}

// checkInlineTargets refuses inline renames sending two scopes to one, for lists too
// long for admission to check (CEL's cost limit): the worker would refuse them too,
// but a restore that cannot succeed never gets a Job.
func checkInlineTargets(scopes []memoryv1alpha1.ScopeRename) error {
	from := make(map[string]string, len(scopes))
	for _, s := range scopes {
		if other, ok := from[s.To]; ok {
			return &runFailure{reason: memoryv1alpha1.ReasonFailed, message: fmt.Sprintf(
				"mapping.scopes maps both %s and %s to %s, which would merge two users' memories; map them to different scopes, or set mapping.allowMerge: true to merge them on purpose",
				other, s.From, s.To)}
		}
		from[s.To] = s.From
	}
	return nil
}

// checkMapping makes sure a ConfigMap or Secret scope map has its key. Its content is
// the worker's to read: only presence is checked here.
func (r *MemoryRestoreReconciler) checkMapping(ctx context.Context, namespace string, src *memoryv1alpha1.MappingSource) error {
	if _, ok := mapFormat(src); !ok {
		return &runFailure{reason: memoryv1alpha1.ReasonFailed, message: fmt.Sprintf(
			"mapping.from: set format, or name the key %q with a .csv, .jsonl or .ndjson extension", mappingKey(src))}
	}
	switch {
	case src.SecretKeyRef != nil:
		_, err := secretValues(ctx, r.APIReader, namespace, src.SecretKeyRef.Name, src.SecretKeyRef.Key)
		return err
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		cm := &corev1.ConfigMap{}
		if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: ref.Name}, cm); err != nil {
			if apierrors.IsNotFound(err) {
				return stepErrorf(memoryv1alpha1.ReasonConfigMapNotFound, "ConfigMap %s/%s not found", namespace, ref.Name)
			}
			return err
		}
		_, inData := cm.Data[ref.Key]
		_, inBinary := cm.BinaryData[ref.Key]
		if !inData && !inBinary {
			return stepErrorf(memoryv1alpha1.ReasonConfigMapKeyMissing, "ConfigMap %s/%s has no key %q", namespace, ref.Name, ref.Key)
		}
	}
	return nil
}

// observeJob maps the Job's state onto the restore: running, failed (its reason and the
// worker's last error in the message, DeadlineExceeded included) or complete, in which
// case the worker's summary is recorded.
func (r *MemoryRestoreReconciler) observeJob(ctx context.Context, restore *memoryv1alpha1.MemoryRestore, job *batchv1.Job) (ctrl.Result, error) {
	restore.Status.JobName = job.Name
	if restore.Status.StartTime == nil {
		// The operator stopped between creating the Job and recording it.
		t := job.CreationTimestamp
		restore.Status.StartTime = &t
	}
	if restore.Status.Package == nil && !restore.IsImport() {
		loc, err := jobPackage(job)
		if err != nil {
			return ctrl.Result{}, err
		}
		restore.Status.Package = loc
	}

	finished := jobFinished(job)
	switch {
	case finished == nil && job.Status.Active > 0:
		restore.SetProgress(metav1.ConditionTrue, memoryv1alpha1.ReasonRunning, fmt.Sprintf("Job %s is running", job.Name))
	case finished == nil:
		restore.SetProgress(metav1.ConditionTrue, memoryv1alpha1.ReasonJobCreated, restoreStartingMessage(restore))
	case finished.Type == batchv1.JobFailed:
		werr, partial := restoreFailure(ctx, r.APIReader, job)
		f := describeJobFailure(job, finished, werr, r.now())
		restore.Status.CompletionTime = &f.end
		restore.Status.Duration = runDuration(restore.Status.StartTime, job.Status.StartTime, f.end)
		if partial != nil {
			recordRestoreSummary(restore, *partial, restoreObjects(restore, job))
		}
		reason := memoryv1alpha1.ReasonFailed
		if restore.IsImport() && !f.deadline {
			reason = importFailureReason(werr)
		}
		restore.SetCompleted(reason, f.message+partialMessage(partial))
		if f.deadline {
			restore.SetCondition(memoryv1alpha1.ConditionProgressing, metav1.ConditionFalse, memoryv1alpha1.ReasonDeadlineExceeded, f.message)
		}
	default:
		return ctrl.Result{}, r.recordResult(ctx, restore, job)
	}
	return ctrl.Result{}, nil
}

func (r *MemoryRestoreReconciler) now() *metav1.Time {
	return nowFrom(r.Clock)
}
