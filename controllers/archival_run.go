package controllers

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/worker"
)

// reconcileArchival works out the archival's state into want: it follows the run in
// progress (a run that started is always followed to its end and recorded, even once
// archival is suspended or removed), starts the slot that is due, prunes finished Jobs
// beyond the history limit and sets the Archival condition.
func (r *ArchivalReconciler) reconcileArchival(ctx context.Context, store *memoryv1alpha1.MemoryStore, want *archivalState) (ctrl.Result, error) {
	spec := store.Spec.Archival
	jobs, err := r.archiveJobs(ctx, store)
	if err != nil {
		return ctrl.Result{}, err
	}
	active, err := r.followRun(ctx, store, jobs, want)
	if err != nil {
		return ctrl.Result{}, err
	}
	if spec == nil {
		want.condition = nil
		if want.status != nil {
			want.status.NextScheduleTime = nil
		}
		return ctrl.Result{}, r.pruneJobs(ctx, jobs, memoryv1alpha1.DefaultJobsHistoryLimit, want)
	}
	result, err := r.schedule(ctx, store, spec, active, want)
	if err != nil {
		return result, err
	}
	return result, r.pruneJobs(ctx, jobs, spec.JobsHistoryLimitOrDefault(), want)
}

// schedule starts the slot that is due, unless a run is still active (the slot is then
// skipped) or something the run needs is missing (the run is then delayed, the slot
// stays due), and sets the Archival condition.
func (r *ArchivalReconciler) schedule(ctx context.Context, store *memoryv1alpha1.MemoryStore, spec *memoryv1alpha1.ArchivalSpec,
	active *batchv1.Job, want *archivalState) (ctrl.Result, error) {
	st := want.ensureStatus()
	now := r.Clock.Now()
	sched, err := parseSchedule(string(spec.Schedule))
	if err == nil && sched.Next(now).IsZero() {
		err = errors.New("it matches no time in the next five years")
	}
	if err != nil {
		st.NextScheduleTime = nil
		want.setCondition(store, metav1.ConditionFalse, memoryv1alpha1.ReasonInvalidSchedule,
			fmt.Sprintf("Schedule %q is not valid: %v", spec.Schedule, err))
		return ctrl.Result{}, nil
	}
	if spec.Suspend {
		st.NextScheduleTime = nil
		msg := "Suspended: no new archive runs are started"
		if active != nil {
			msg += fmt.Sprintf("; Job %s, started before, is still running", active.Name)
		}
		want.setCondition(store, metav1.ConditionTrue, memoryv1alpha1.ReasonSuspended, msg)
		return ctrl.Result{}, nil
	}

	if slot, due := mostRecentSlot(sched, archivalCursor(store, st), now); due {
		var delay error
		switch {
		case active != nil:
			r.Recorder.Eventf(store, nil, corev1.EventTypeWarning, "ArchivalSkipped", "Archival",
				"Skipped the slot of %s: Job %s has not finished", slot.UTC().Format(time.RFC3339), active.Name)
			st.LastScheduleTime = &metav1.Time{Time: slot}
		default:
			active, delay = r.startRun(ctx, store, slot, now, want)
		}
		var se *stepError
		switch {
		case errors.As(delay, &se):
			// Not run and not skipped: the slot stays due, and runs once what it waits for
			// is there (the store turning Ready wakes this reconciler at once).
			st.NextScheduleTime = &metav1.Time{Time: slot}
			want.setCondition(store, metav1.ConditionFalse, se.reason,
				fmt.Sprintf("The run due at %s is delayed: %s", slot.UTC().Format(time.RFC3339), se.message))
			return ctrl.Result{RequeueAfter: waitRecheck}, nil
		case delay != nil:
			return ctrl.Result{}, delay
		}
		if active != nil && jobFinished(active) != nil {
			// The slot's Job was found finished and unrecorded: record it now.
			var err error
			if active, err = r.followRun(ctx, store, []batchv1.Job{*active}, want); err != nil {
				return ctrl.Result{}, err
			}
		}
	}

	next := sched.Next(archivalCursor(store, st))
	st.NextScheduleTime = &metav1.Time{Time: next}
	setArchivalCondition(store, want, active, string(spec.Schedule), next)
	return ctrl.Result{RequeueAfter: max(next.Sub(now), time.Second)}, nil
}

// archivalCursor is the slot archival last handled, or the store's creation.
func archivalCursor(store *memoryv1alpha1.MemoryStore, st *memoryv1alpha1.ArchivalStatus) time.Time {
	if st != nil && st.LastScheduleTime != nil {
		return st.LastScheduleTime.Time
	}
	return store.CreationTimestamp.Time
}

// setArchivalCondition says what archival does when nothing stops it: a run in
// progress, else how the last run ended, else that it is scheduled.
func setArchivalCondition(store *memoryv1alpha1.MemoryStore, want *archivalState, active *batchv1.Job, schedule string, next time.Time) {
	nextText := next.UTC().Format(time.RFC3339)
	run := want.status.LastRun
	switch {
	case active != nil:
		want.setCondition(store, metav1.ConditionTrue, memoryv1alpha1.ReasonRunning,
			fmt.Sprintf("Job %s is running; next run at %s", active.Name, nextText))
	case run != nil && run.Result == memoryv1alpha1.ArchivalRunFailed:
		want.setCondition(store, metav1.ConditionFalse, memoryv1alpha1.ReasonFailed,
			fmt.Sprintf("The last run failed: %s; next run at %s", run.Message, nextText))
	case run != nil:
		want.setCondition(store, metav1.ConditionTrue, memoryv1alpha1.ReasonSucceeded,
			fmt.Sprintf("Job %s: %s; next run at %s", run.JobName, run.Message, nextText))
	default:
		want.setCondition(store, metav1.ConditionTrue, memoryv1alpha1.ReasonScheduled,
			fmt.Sprintf("Archival runs at every slot of %q (UTC); next run at %s", schedule, nextText))
	}
}

// archiveJobs lists the archive Jobs the store controls.
func (r *ArchivalReconciler) archiveJobs(ctx context.Context, store *memoryv1alpha1.MemoryStore) ([]batchv1.Job, error) {
	return storeJobs(ctx, r.Client, store, archiveContainer)
}

// storeJobs are the store's worker Jobs of a component (archive, drill), by name.
// They are listed by component rather than by store label: a store name longer than
// a label value has no label, and ownership is what counts.
func storeJobs(ctx context.Context, c client.Reader, store *memoryv1alpha1.MemoryStore, component string) ([]batchv1.Job, error) {
	var list batchv1.JobList
	if err := c.List(ctx, &list, client.InNamespace(store.Namespace),
		client.MatchingLabels{"app.kubernetes.io/component": component, labelManagedBy: managedBy}); err != nil {
		return nil, err
	}
	var jobs []batchv1.Job
	for _, j := range list.Items {
		if metav1.IsControlledBy(&j, store) {
			jobs = append(jobs, j)
		}
	}
	sort.Slice(jobs, func(i, k int) bool { return jobs[i].Name < jobs[k].Name })
	return jobs, nil
}

// followRun follows the store's run in progress: the Job status.archival.activeJob
// names or, when none is recorded, an unfinished archive Job of the store (the operator
// stopped between creating it and recording it). A Job that finished is recorded as
// the last run; one that vanished before finishing is recorded as failed. It returns
// the Job still running, if any.
func (r *ArchivalReconciler) followRun(ctx context.Context, store *memoryv1alpha1.MemoryStore, jobs []batchv1.Job, want *archivalState) (*batchv1.Job, error) {
	var name string
	if want.status != nil {
		name = want.status.ActiveJob
	}
	var job *batchv1.Job
	for i := range jobs {
		if (name != "" && jobs[i].Name == name) || (name == "" && jobFinished(&jobs[i]) == nil) {
			job = &jobs[i]
			break
		}
	}
	if job == nil && name == "" {
		return nil, nil
	}
	if job == nil {
		// The cache may not have seen it yet.
		j, err := findJob(ctx, r.Client, r.APIReader, store.Namespace, name)
		if err != nil {
			return nil, err
		}
		if j != nil && !metav1.IsControlledBy(j, store) {
			j = nil
		}
		job = j
	}
	st := want.ensureStatus()
	if job == nil {
		now := nowFrom(r.Clock)
		r.recordRun(ctx, want, &memoryv1alpha1.ArchivalRun{
			JobName: name, CompletionTime: now, Result: memoryv1alpha1.ArchivalRunFailed,
			Message: fmt.Sprintf("Job %s was deleted before it finished; the next slot runs again and completes what it left", name),
		})
		return nil, nil
	}
	finished := jobFinished(job)
	if finished == nil {
		st.ActiveJob = job.Name
		return job, nil
	}
	st.ActiveJob = ""
	if st.LastRun != nil && st.LastRun.JobName == job.Name {
		return nil, nil // recorded already
	}
	run, err := r.runResult(ctx, job, finished)
	if err != nil {
		return nil, err
	}
	r.recordRun(ctx, want, run)
	return nil, nil
}

// recordRun makes run the last run, and has it announced once status is written.
func (r *ArchivalReconciler) recordRun(ctx context.Context, want *archivalState, run *memoryv1alpha1.ArchivalRun) {
	st := want.ensureStatus()
	st.ActiveJob = ""
	st.LastRun = run
	if run.Result == memoryv1alpha1.ArchivalRunSucceeded {
		st.LastSuccessTime = run.CompletionTime.DeepCopy()
	}
	want.finished = run
	logf.FromContext(ctx).Info("Archive run ended", "job", run.JobName, "result", run.Result, "archived", run.Archived)
}

// runResult is what a finished archive Job did: for a failed Job its reason and the
// worker's last error; for a Job that completed the summary its worker left as the
// pod's termination message. Such a Job did its work even when no summary can be found
// (its pods were deleted): the run succeeded with unknown counts. Listing the pods
// failing is retried.
func (r *ArchivalReconciler) runResult(ctx context.Context, job *batchv1.Job, finished *batchv1.JobCondition) (*memoryv1alpha1.ArchivalRun, error) {
	start := job.Status.StartTime
	if start == nil {
		start = job.CreationTimestamp.DeepCopy()
	}
	cfg, cfgErr := jobArchiveConfig(job)
	run := &memoryv1alpha1.ArchivalRun{JobName: job.Name, StartTime: start, DryRun: cfgErr == nil && cfg.DryRun}

	if finished.Type == batchv1.JobFailed {
		f := describeJobFailure(job, finished, workerError(ctx, r.APIReader, job, archiveContainer), nowFrom(r.Clock))
		run.CompletionTime, run.Result, run.Message = &f.end, memoryv1alpha1.ArchivalRunFailed, f.message
		return run, nil
	}

	term, err := lastTermination(ctx, r.APIReader, job, archiveContainer, true)
	if err != nil {
		return nil, err
	}
	end := nowFrom(r.Clock)
	if job.Status.CompletionTime != nil {
		end = job.Status.CompletionTime.DeepCopy()
	}
	run.CompletionTime, run.Result = end, memoryv1alpha1.ArchivalRunSucceeded
	if term == nil {
		run.Message = "Completed, but none of its pods reported a result summary; the counts are unknown"
		return run, nil
	}
	sum, err := worker.ParseArchiveSummary(term.Message)
	if err != nil {
		run.Message = fmt.Sprintf("Completed, but its result summary is unreadable (%v); the counts are unknown", err)
		return run, nil
	}
	recordArchiveSummary(run, sum, cfg, cfgErr)
	return run, nil
}

// recordArchiveSummary copies the worker's counts into the run, and the cold package's
// location (its endpoint and bucket are the Job's).
func recordArchiveSummary(run *memoryv1alpha1.ArchivalRun, sum worker.ArchiveSummary, cfg worker.ArchiveConfig, cfgErr error) {
	run.DryRun = sum.DryRun
	run.Scanned, run.Archived = sum.Scanned, sum.Archived
	run.ExpiredPurged, run.Deleted = sum.ExpiredPurged, sum.Deleted
	run.VectorsDeleted, run.Recovered = sum.VectorsDeleted, sum.Recovered
	run.ArchivedByType = nil
	for t, n := range sum.ArchivedByType {
		if n == 0 {
			continue
		}
		if run.ArchivedByType == nil {
			run.ArchivedByType = map[string]int64{}
		}
		run.ArchivedByType[t] = n
	}
	run.ColdPackage, run.ColdItems = nil, sum.ColdItems
	if sum.ColdPackage != "" {
		loc := &memoryv1alpha1.SnapshotLocation{Prefix: sum.ColdPackage}
		if cfgErr == nil && cfg.Cold != nil {
			loc.Endpoint, loc.Bucket = cfg.Cold.Endpoint, cfg.Cold.Bucket
		}
		run.ColdPackage = loc
	}
	run.Message = archiveResultMessage(run)
}

// archiveResultMessage tells what a run did, from its recorded counts.
func archiveResultMessage(run *memoryv1alpha1.ArchivalRun) string {
	verb, purged, deleted := "Archived", "purged", "deleted"
	if run.DryRun {
		verb, purged, deleted = "Dry run: would archive", "would purge", "would delete"
	}
	msg := fmt.Sprintf("%s %d of %d memories", verb, run.Archived, run.Scanned)
	var byType []string
	for _, t := range memory.AllTypes() {
		if n := run.ArchivedByType[string(t)]; n > 0 {
			byType = append(byType, fmt.Sprintf("%s %d", t, n))
		}
	}
	if len(byType) > 0 {
		msg += " (" + strings.Join(byType, ", ") + ")"
	}
	msg += fmt.Sprintf("; %s %d expired", purged, run.ExpiredPurged)
	if run.Deleted > 0 {
		msg += fmt.Sprintf("; %s %d archived past deleteAfter", deleted, run.Deleted)
	}
	msg += fmt.Sprintf("; %d vectors deleted", run.VectorsDeleted)
	if run.Recovered > 0 {
		msg += fmt.Sprintf(" (%d left by an interrupted run)", run.Recovered)
	}
	if p := run.ColdPackage; p != nil {
		msg += fmt.Sprintf("; cold package s3://%s/%s (%d memories)", p.Bucket, p.Prefix, run.ColdItems)
	}
	return msg
}

// startRun creates the Job of the slot once everything it needs is there: the worker
// image, a Ready store, valid parameters, its Secrets (and for cold storage, object
// storage and a usable key). What is missing is a stepError: the run waits. A Job of
// the slot that exists already (created before a restart) is adopted, never doubled;
// one the store does not control makes the slot skipped. It returns the slot's Job.
func (r *ArchivalReconciler) startRun(ctx context.Context, store *memoryv1alpha1.MemoryStore, slot, now time.Time, want *archivalState) (*batchv1.Job, error) {
	st := want.ensureStatus()
	slotText := slot.UTC().Format(time.RFC3339)
	name := archiveJobName(store, slot)
	if existing, err := findJob(ctx, r.Client, r.APIReader, store.Namespace, name); err != nil {
		return nil, err
	} else if existing != nil {
		return r.adoptSlotJob(store, existing, slot, st), nil
	}

	in, err := r.resolveRun(ctx, store, name, slot, now)
	if err != nil {
		return nil, err
	}
	job := buildArchiveJob(store, in)
	switch err := r.Create(ctx, job); {
	case apierrors.IsAlreadyExists(err):
		existing, err := findJob(ctx, r.Client, r.APIReader, store.Namespace, name)
		if err != nil || existing == nil {
			return nil, fmt.Errorf("job %s exists but cannot be read: %w", name, err)
		}
		return r.adoptSlotJob(store, existing, slot, st), nil
	case apierrors.IsInvalid(err):
		// Retrying the same Job is refused the same way: the slot fails, the next one
		// tries again with whatever the spec says then.
		st.LastScheduleTime = &metav1.Time{Time: slot}
		r.recordRun(ctx, want, &memoryv1alpha1.ArchivalRun{JobName: name, CompletionTime: nowFrom(r.Clock),
			Result: memoryv1alpha1.ArchivalRunFailed, DryRun: store.Spec.Archival.DryRun,
			Message: fmt.Sprintf("The API server rejected Job %s: %v", name, err)})
		return nil, nil
	case err != nil:
		return nil, err
	}
	st.ActiveJob = name
	st.LastScheduleTime = &metav1.Time{Time: slot}
	what := "archives"
	if store.Spec.Archival.DryRun {
		what = "counts (dry run)"
	}
	r.Recorder.Eventf(store, nil, corev1.EventTypeNormal, "ArchivalStarted", "Archival",
		"Job %s %s memories scoring below %s, for the slot of %s", name, what, store.Spec.Archival.Threshold, slotText)
	logf.FromContext(ctx).Info("Created archive Job", "job", name, "slot", slotText)
	return job, nil
}

// adoptSlotJob takes over the Job of the slot found existing: the store's own is the
// slot's run; another's means the slot is skipped.
func (r *ArchivalReconciler) adoptSlotJob(store *memoryv1alpha1.MemoryStore, job *batchv1.Job, slot time.Time, st *memoryv1alpha1.ArchivalStatus) *batchv1.Job {
	st.LastScheduleTime = &metav1.Time{Time: slot}
	if !metav1.IsControlledBy(job, store) {
		r.Recorder.Eventf(store, nil, corev1.EventTypeWarning, "ArchivalSkipped", "Archival",
			"Skipped the slot of %s: a Job named %s exists and does not belong to this store", slot.UTC().Format(time.RFC3339), job.Name)
		return nil
	}
	if jobFinished(job) == nil {
		st.ActiveJob = job.Name
	} else if st.LastRun == nil || st.LastRun.JobName != job.Name {
		// Finished and not recorded: followRun records it on the next pass.
		st.ActiveJob = job.Name
	}
	return job
}

// resolveRun checks and gathers what the slot's Job needs.
func (r *ArchivalReconciler) resolveRun(ctx context.Context, store *memoryv1alpha1.MemoryStore, name string, slot, now time.Time) (archiveJobInputs, error) {
	if r.WorkerImage == "" {
		return archiveJobInputs{}, stepErrorf(memoryv1alpha1.ReasonNotConfigured,
			"the operator has no worker image: start it with --worker-image or $WORKER_IMAGE")
	}
	if !store.IsReady() || store.Status.Postgres == nil || store.Status.Vector == nil || store.Status.WorkerSecret == "" {
		why := "it has not been provisioned yet"
		if c := meta.FindStatusCondition(store.Status.Conditions, memoryv1alpha1.ConditionReady); c != nil && c.Status != metav1.ConditionTrue {
			why = fmt.Sprintf("Ready is %s (%s: %s)", c.Status, c.Reason, c.Message)
		}
		return archiveJobInputs{}, stepErrorf(memoryv1alpha1.ReasonStoreNotReady, "MemoryStore %s is not Ready: %s", store.Name, why)
	}
	if cuttingOver(store) {
		return archiveJobInputs{}, stepErrorf(memoryv1alpha1.ReasonStoreNotReady, "%s", cutoverWait(store))
	}
	if schemaBehind(store) {
		return archiveJobInputs{}, stepErrorf(memoryv1alpha1.ReasonStoreNotReady, "%s", schemaWait(store))
	}
	threshold, halfLives, err := archivalParameters(store.Spec.Archival)
	if err != nil {
		return archiveJobInputs{}, err
	}
	backend, err := storeBackend(ctx, r.Client, store)
	if err != nil {
		return archiveJobInputs{}, err
	}
	in := archiveJobInputs{Image: r.WorkerImage, Name: name, Slot: slot, Now: metav1.NewTime(now).Rfc3339Copy().Time,
		Threshold: threshold, HalfLives: halfLives, MilvusAddress: backend.milvusAddress}
	if _, err := secretValues(ctx, r.APIReader, store.Namespace, store.Status.WorkerSecret, keyURI); err != nil {
		return archiveJobInputs{}, err
	}
	if store.Spec.Archival.ColdStorageEnabled() {
		if in.Cold, err = planCold(store, backend.objectStorage, name); err != nil {
			return archiveJobInputs{}, err
		}
		creds := in.Cold.Credentials
		if _, err := secretValues(ctx, r.APIReader, store.Namespace, creds.Name, creds.AccessKeyIDKey, creds.SecretAccessKeyKey); err != nil {
			return archiveJobInputs{}, err
		}
		if in.Cold.Key != nil {
			if _, err := readPackageKey(ctx, r.APIReader, store.Namespace, in.Cold.Key); err != nil {
				return archiveJobInputs{}, err
			}
		}
	}
	return in, nil
}

// pruneJobs deletes the store's finished archive Jobs beyond the newest keep (by slot),
// with their pods. The Job of the last run counts towards keep and is never deleted, nor
// is the Job in progress (or one adopted and not yet recorded).
func (r *ArchivalReconciler) pruneJobs(ctx context.Context, jobs []batchv1.Job, keep int, want *archivalState) error {
	var lastRun, active string
	if st := want.status; st != nil {
		active = st.ActiveJob
		if st.LastRun != nil {
			lastRun = st.LastRun.JobName
		}
	}
	var finished []*batchv1.Job
	for i := range jobs {
		j := &jobs[i]
		switch {
		case jobFinished(j) == nil || !j.DeletionTimestamp.IsZero() || j.Name == active:
		case j.Name == lastRun:
			keep--
		default:
			finished = append(finished, j)
		}
	}
	sort.SliceStable(finished, func(i, k int) bool { return jobSlot(finished[i]).After(jobSlot(finished[k])) })
	var errs []error
	for i, j := range finished {
		if i < keep {
			continue
		}
		err := r.Delete(ctx, j, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &j.UID})
		if client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting archive Job %s: %w", j.Name, err))
			continue
		}
		logf.FromContext(ctx).Info("Deleted an old archive Job", "job", j.Name)
	}
	return errors.Join(errs...)
}
