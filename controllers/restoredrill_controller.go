package controllers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/worker"
)

// RestoreDrillReconciler runs a store's restore drills on its spec.restoreDrill
// schedule. For each slot it makes the store's scratch copy (provision.EnsureScratch),
// starts a Job running `memory-operator drill` on the newest MemorySnapshot of the
// store that succeeded, and once the Job ended, however it ended, drops the scratch
// copy and records the result: status.restoreDrill, the Verified condition, Events and
// metrics. One drill at a time per store; a slot that comes while one runs is skipped.
type RestoreDrillReconciler struct {
	client.Client
	// APIReader reads Secrets and Pods (never cached) and Jobs the cache has not seen.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	// Clock is the schedule's time; tests use a fake one.
	Clock clock.PassiveClock
	// WorkerImage is the image drill Jobs run: the operator's own.
	WorkerImage string
	// OperatorNamespace holds the Secrets of ClusterMemoryBackends.
	OperatorNamespace string
}

const (
	drillContainer = "drill"
	drillJobInfix  = "-drill-"
	// drillJobsKept is how many finished drill Jobs (and their pods' logs) are kept.
	drillJobsKept = 3
	// scratchGrantRecheck is how soon a drill waiting for Milvus to apply the scratch
	// collection's grants looks again.
	scratchGrantRecheck = 2 * time.Second
)

// +kubebuilder:rbac:groups=memory.amemory.io,resources=memorystores,verbs=get;list;watch
// +kubebuilder:rbac:groups=memory.amemory.io,resources=memorystores/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=memory.amemory.io,resources=memorysnapshots,verbs=get;list;watch
// +kubebuilder:rbac:groups=memory.amemory.io,resources=clustermemorybackends,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups="",resources=pods,verbs=list
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile follows the drill in progress, starts the slot that is due and records the
// drills' state (the Verified condition and status.restoreDrill, nothing else).
func (r *RestoreDrillReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	// A store's deletion drops a scratch copy a drill left (reconcileDelete).
	return storePart[drillState]{what: "restore drill", forget: forgetDrillMetrics, current: currentDrillState,
		reconcile: r.reconcileDrill, patch: r.patchDrillStatus, announce: r.announce}.run(ctx, r.Client, req)
}

// SetupWithManager watches stores (spec changes, Ready changes), the drill Jobs they
// own, and snapshots (a store whose drill waits for its first snapshot starts once one
// succeeds).
func (r *RestoreDrillReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&memoryv1alpha1.MemoryStore{}, builder.WithPredicates(archivalStoreChanged())).
		Owns(&batchv1.Job{}).
		Watches(&memoryv1alpha1.MemorySnapshot{}, handler.EnqueueRequestsFromMapFunc(storeOfSnapshot)).
		WithOptions(controller.Options{
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](minRetryDelay, maxRetryDelay),
		}).
		Named("restoredrill").
		Complete(r)
}

// storeOfSnapshot maps a snapshot to its store.
func storeOfSnapshot(_ context.Context, obj client.Object) []reconcile.Request {
	snap, ok := obj.(*memoryv1alpha1.MemorySnapshot)
	if !ok || snap.Spec.StoreRef.Name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: snap.Namespace, Name: snap.Spec.StoreRef.Name}}}
}

// drillState is the part of the store's status this reconciler owns, and what it
// announces once that is written.
type drillState struct {
	before, condition *metav1.Condition
	status            *memoryv1alpha1.RestoreDrillStatus
	// finished is a drill whose end this reconcile recorded.
	finished *memoryv1alpha1.DrillRun
	// started is a drill Job this reconcile created.
	started *memoryv1alpha1.ActiveDrill
}

func currentDrillState(store *memoryv1alpha1.MemoryStore) drillState {
	var s drillState
	if c := meta.FindStatusCondition(store.Status.Conditions, memoryv1alpha1.ConditionVerified); c != nil {
		before, cond := *c, *c
		s.before, s.condition = &before, &cond
	}
	s.status = store.Status.RestoreDrill.DeepCopy()
	return s
}

func (s *drillState) ensureStatus() *memoryv1alpha1.RestoreDrillStatus {
	if s.status == nil {
		s.status = &memoryv1alpha1.RestoreDrillStatus{}
	}
	return s.status
}

func (s *drillState) setCondition(store *memoryv1alpha1.MemoryStore, status metav1.ConditionStatus, reason, message string) {
	s.condition = &metav1.Condition{Type: memoryv1alpha1.ConditionVerified, Status: status, Reason: reason,
		Message: message, ObservedGeneration: store.Generation}
}

// patchDrillStatus writes the Verified condition and status.restoreDrill, only what
// changed, under an optimistic lock (other reconcilers write the rest of the status).
func (r *RestoreDrillReconciler) patchDrillStatus(ctx context.Context, store *memoryv1alpha1.MemoryStore, want drillState) error {
	return patchStorePart(ctx, r.Client, r.APIReader, store, func(s *memoryv1alpha1.MemoryStore) {
		if want.condition == nil {
			meta.RemoveStatusCondition(&s.Status.Conditions, memoryv1alpha1.ConditionVerified)
		} else {
			meta.SetStatusCondition(&s.Status.Conditions, *want.condition)
		}
		s.Status.RestoreDrill = want.status.DeepCopy()
	})
}

// reconcileDrill follows the drill in progress to its end (also once drills are
// suspended or removed), then starts the slot that is due and sets the condition.
func (r *RestoreDrillReconciler) reconcileDrill(ctx context.Context, store *memoryv1alpha1.MemoryStore, want *drillState) (ctrl.Result, error) {
	if want.status != nil && want.status.Active != nil {
		result, running, err := r.follow(ctx, store, want)
		if err != nil || running {
			return result, err
		}
	}
	spec := store.Spec.RestoreDrill
	if spec == nil {
		want.condition, want.status = nil, nil
		return ctrl.Result{}, r.pruneJobs(ctx, store, 0)
	}
	st := want.ensureStatus()
	now := r.Clock.Now()
	if st.Since == nil {
		st.Since = &metav1.Time{Time: now}
	}
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
	cursor := st.Since.Time
	if st.LastScheduleTime != nil {
		cursor = st.LastScheduleTime.Time
	}
	if slot, due := mostRecentSlot(sched, cursor, now); due && !spec.Suspend {
		result, err := r.start(ctx, store, slot, want)
		if err != nil || !result.IsZero() {
			return result, err
		}
		cursor = st.LastScheduleTime.Time
	}
	setVerifiedCondition(store, want)
	if spec.Suspend {
		st.NextScheduleTime = nil
		return ctrl.Result{}, nil
	}
	next := sched.Next(cursor)
	st.NextScheduleTime = &metav1.Time{Time: next}
	return ctrl.Result{RequeueAfter: max(next.Sub(now), time.Second)}, nil
}

// start begins the drill of slot: the newest snapshot of the store that succeeded,
// restored into a fresh scratch copy by a Job. What it waits for (the store turning
// Ready, Milvus applying grants) keeps the slot due; a store with no snapshot to drill
// consumes the slot and says so.
func (r *RestoreDrillReconciler) start(ctx context.Context, store *memoryv1alpha1.MemoryStore, slot time.Time, want *drillState) (ctrl.Result, error) {
	st := want.ensureStatus()
	if r.WorkerImage == "" {
		want.setCondition(store, metav1.ConditionFalse, memoryv1alpha1.ReasonNotConfigured,
			"The operator has no worker image: start it with --worker-image or $WORKER_IMAGE")
		return ctrl.Result{}, nil
	}
	snap, err := r.latestSnapshot(ctx, store)
	if err != nil {
		return ctrl.Result{}, err
	}
	if snap == nil {
		st.LastScheduleTime = &metav1.Time{Time: slot}
		want.setCondition(store, metav1.ConditionFalse, memoryv1alpha1.ReasonNoSnapshot,
			fmt.Sprintf("No MemorySnapshot of this store has succeeded: nothing to drill at %s", slot.UTC().Format(time.RFC3339)))
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	if _, _, err := readyStore(ctx, r.Client, store.Namespace, store.Name); err != nil {
		return r.delay(store, slot, err)
	}
	rb, names, err := r.backend(ctx, store)
	if err != nil {
		return r.delay(store, slot, err)
	}
	v := store.Status.Vector
	spec := vector.Spec{Dimension: int(v.Dimension), Metric: vector.Metric(v.Metric)}
	var m *provision.MilvusConn
	if v.Engine == provision.EngineMilvus {
		m = rb.milvus
	}
	active := &memoryv1alpha1.ActiveDrill{Snapshot: snap.Name, Scratch: names.Scratch().Schema, Started: metav1.Time{Time: r.Clock.Now()}}
	// Set before the copy is made, so that every way out of here drops it; should the
	// operator stop before the status is written, the next drill (EnsureScratch starts
	// over) or the store's deletion drops what it left.
	st.Active, st.LastScheduleTime = active, &metav1.Time{Time: slot}
	if _, err := provision.EnsureScratch(ctx, rb.postgres, m, names, ownerOf(store), spec, v.Engine, pgvectorParams(store)); err != nil {
		return r.abandon(ctx, store, want, fmt.Sprintf("The scratch copy could not be made: %v", err))
	}
	r.Recorder.Eventf(store, nil, corev1.EventTypeNormal, "DrillStarted", "RestoreDrill",
		"Restoring MemorySnapshot %s into scratch copy %s", snap.Name, active.Scratch)
	return r.launch(ctx, store, slot, want)
}

// launch creates the drill's Job once the scratch copy is usable by the store's
// logins (on an authenticated Milvus, once the server applied the copy's grants).
func (r *RestoreDrillReconciler) launch(ctx context.Context, store *memoryv1alpha1.MemoryStore, slot time.Time, want *drillState) (ctrl.Result, error) {
	active := want.status.Active
	snap := &memoryv1alpha1.MemorySnapshot{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: store.Namespace, Name: active.Snapshot}, snap); err != nil {
		if apierrors.IsNotFound(err) {
			return r.abandon(ctx, store, want, fmt.Sprintf("MemorySnapshot %s was deleted before its drill started", active.Snapshot))
		}
		return ctrl.Result{}, err
	}
	rb, names, err := r.backend(ctx, store)
	if err != nil {
		return ctrl.Result{}, err
	}
	if v := store.Status.Vector; v.Engine == provision.EngineMilvus && v.MilvusUser != "" && rb.milvus != nil {
		pw, err := secretStrings(ctx, r.APIReader, store.Namespace, store.Status.WorkerSecret, keyMilvusPassword)
		if err != nil {
			return ctrl.Result{}, err
		}
		if err := provision.ScratchMilvusReady(ctx, *rb.milvus, names, ownerOf(store), pw[0]); errors.Is(err, provision.ErrMilvusTenantPending) {
			return ctrl.Result{RequeueAfter: scratchGrantRecheck}, nil
		} else if err != nil {
			return r.abandon(ctx, store, want, fmt.Sprintf("The scratch copy is not usable by the store's Milvus user: %v", err))
		}
	}
	source, err := packageOfSnapshot(ctx, packageResolver{client: r.Client, secrets: r.APIReader}, snap,
		snap.Spec.Encryption.Unencrypted, snap.Spec.Encryption.KeySecret)
	if err != nil {
		return r.abandon(ctx, store, want, fmt.Sprintf("MemorySnapshot %s cannot be read: %v", snap.Name, err))
	}
	backend, err := storeBackend(ctx, r.Client, store)
	if err != nil {
		return ctrl.Result{}, err
	}
	job := buildDrillJob(store, names.Scratch(), drillJobInputs{Image: r.WorkerImage, Source: source,
		MilvusAddress: backend.milvusAddress, Name: slotJobName(store, drillJobInfix, slot)})
	if err := r.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		if apierrors.IsInvalid(err) {
			return r.abandon(ctx, store, want, fmt.Sprintf("The API server rejected Job %s: %v", job.Name, err))
		}
		return ctrl.Result{}, err
	}
	active.Job = job.Name
	want.started = active
	logf.FromContext(ctx).Info("Created restore drill Job", "job", job.Name, "snapshot", snap.Name, "scratch", active.Scratch)
	return ctrl.Result{}, nil
}

// delay keeps the slot due while something the drill needs is missing.
func (r *RestoreDrillReconciler) delay(store *memoryv1alpha1.MemoryStore, slot time.Time, err error) (ctrl.Result, error) {
	var se *stepError
	if !errors.As(err, &se) {
		return ctrl.Result{}, err
	}
	r.Recorder.Eventf(store, nil, corev1.EventTypeWarning, "DrillDelayed", "RestoreDrill",
		"The drill due at %s waits: %s", slot.UTC().Format(time.RFC3339), se.message)
	return ctrl.Result{RequeueAfter: waitRecheck}, nil
}

// abandon ends a drill that could not start as failed, dropping its scratch copy.
func (r *RestoreDrillReconciler) abandon(ctx context.Context, store *memoryv1alpha1.MemoryStore, want *drillState, message string) (ctrl.Result, error) {
	active := want.status.Active
	if err := r.dropScratch(ctx, store); err != nil {
		return ctrl.Result{}, err
	}
	now := metav1.Time{Time: r.Clock.Now()}
	r.record(want, &memoryv1alpha1.DrillRun{Job: active.Job, Snapshot: active.Snapshot, Started: active.Started, Finished: now, Message: message})
	setVerifiedCondition(store, want)
	return ctrl.Result{RequeueAfter: time.Second}, nil
}

// follow follows the drill in progress. A Job that ended is recorded once its scratch
// copy is dropped (a backend that refuses keeps the drill active, and the drop is
// retried); one that vanished is recorded as failed. running says it goes on.
func (r *RestoreDrillReconciler) follow(ctx context.Context, store *memoryv1alpha1.MemoryStore, want *drillState) (ctrl.Result, bool, error) {
	active := want.status.Active
	if active.Job == "" {
		// The scratch copy was made; the Job waits for it to be usable.
		slot := want.status.LastScheduleTime.Time
		result, err := r.launch(ctx, store, slot, want)
		return result, want.status.Active != nil, err
	}
	job, err := findJob(ctx, r.Client, r.APIReader, store.Namespace, active.Job)
	if err != nil {
		return ctrl.Result{}, true, err
	}
	if job != nil && (!metav1.IsControlledBy(job, store) || !job.DeletionTimestamp.IsZero() && jobFinished(job) == nil) {
		job = nil // not the drill's, or deleted before it finished
	}
	var run *memoryv1alpha1.DrillRun
	switch {
	case job == nil:
		run = &memoryv1alpha1.DrillRun{Job: active.Job, Snapshot: active.Snapshot, Started: active.Started,
			Finished: metav1.Time{Time: r.Clock.Now()}, Message: fmt.Sprintf("Job %s was deleted before it finished", active.Job)}
	case jobFinished(job) == nil:
		return ctrl.Result{}, true, nil
	default:
		if run, err = r.drillResult(ctx, job, active); err != nil {
			return ctrl.Result{}, true, err
		}
	}
	if err := r.dropScratch(ctx, store); err != nil {
		return ctrl.Result{}, true, fmt.Errorf("dropping scratch copy %s: %w", active.Scratch, err)
	}
	r.record(want, run)
	return ctrl.Result{}, false, r.pruneJobs(ctx, store, drillJobsKept)
}

// record makes run the last drill (and the last verified one when it passed).
func (r *RestoreDrillReconciler) record(want *drillState, run *memoryv1alpha1.DrillRun) {
	st := want.ensureStatus()
	st.Active = nil
	st.LastRun = run
	if run.Passed {
		st.LastVerified = run.DeepCopy()
	}
	want.finished = run
}

// drillResult is what a finished drill Job found, from the summary its worker left as
// the termination message (whether it passed or not); a Job without one failed to run.
func (r *RestoreDrillReconciler) drillResult(ctx context.Context, job *batchv1.Job, active *memoryv1alpha1.ActiveDrill) (*memoryv1alpha1.DrillRun, error) {
	finished := jobFinished(job)
	run := &memoryv1alpha1.DrillRun{Job: job.Name, Snapshot: active.Snapshot, Started: active.Started, Finished: finished.LastTransitionTime}
	if run.Finished.IsZero() {
		run.Finished = metav1.Time{Time: r.Clock.Now()}
	}
	succeeded := finished.Type == batchv1.JobComplete
	term, err := lastTermination(ctx, r.APIReader, job, drillContainer, succeeded)
	if err != nil {
		return nil, err
	}
	var sum worker.DrillSummary
	if term == nil || worker.ParseDrillSummary(term.Message, &sum) != nil {
		if succeeded {
			run.Message = "The Job completed, but none of its pods reported the drill's result"
		} else {
			run.Message = describeJobFailure(job, finished, workerError(ctx, r.APIReader, job, drillContainer), nowFrom(r.Clock)).message
		}
		return run, nil
	}
	recordDrillSummary(run, sum)
	run.Passed = succeeded && sum.Passed
	return run, nil
}

// recordDrillSummary copies the worker's findings into the run.
func recordDrillSummary(run *memoryv1alpha1.DrillRun, sum worker.DrillSummary) {
	if !sum.CreatedAt.IsZero() {
		run.SnapshotTime = &metav1.Time{Time: sum.CreatedAt}
	}
	run.Memories, run.Tombstones = sum.Memories, sum.ScratchTombstones
	if sum.Recall.Queries > 0 {
		run.Recall, run.Searches = strconv.FormatFloat(sum.Recall.Mean, 'f', 3, 64), int32(sum.Recall.Queries)
	}
	if sum.Passed {
		kind := "an approximate engine, at least " + strconv.FormatFloat(sum.Recall.Threshold, 'f', 2, 64)
		if sum.Recall.Exact {
			kind = "the exact top 10 every time"
		}
		run.Message = fmt.Sprintf("%d memories and %d tombstones came back as the manifest says, from %d verified shards; "+
			"no forgotten memory came back; recall@10 %s over %d searches in %d scopes (%s); took %s",
			sum.Memories, sum.ScratchTombstones, sum.Shards, run.Recall, sum.Recall.Queries, sum.Recall.Scopes, kind, sum.Duration)
		return
	}
	msg := "Failed"
	for i, f := range sum.Failures {
		sep := "; "
		if i == 0 {
			sep = ": "
		}
		msg += sep + f
	}
	run.Message = msg
}

func parseRecall(s string) (float64, error) { return strconv.ParseFloat(s, 64) }

// setVerifiedCondition says what the last drill found, once one ended: set when a
// drill ends, it stays until the next one ends or a slot finds no snapshot to drill
// (NoSnapshot); before any drill ended it is Unknown.
func setVerifiedCondition(store *memoryv1alpha1.MemoryStore, want *drillState) {
	st := want.ensureStatus()
	run := st.LastRun
	if c := want.condition; want.finished == nil && c != nil {
		switch c.Reason {
		case memoryv1alpha1.ReasonDrillPassed, memoryv1alpha1.ReasonDrillFailed, memoryv1alpha1.ReasonNoSnapshot:
			c.ObservedGeneration = store.Generation
			return
		}
	}
	switch {
	case run == nil:
		want.setCondition(store, metav1.ConditionUnknown, memoryv1alpha1.ReasonNotYetDrilled, "No restore drill has ended yet")
	case run.Passed:
		at := "its cut time unknown"
		if run.SnapshotTime != nil {
			at = "cut " + run.SnapshotTime.UTC().Format(time.RFC3339)
		}
		want.setCondition(store, metav1.ConditionTrue, memoryv1alpha1.ReasonDrillPassed,
			fmt.Sprintf("MemorySnapshot %s (%s) was restored into a scratch copy and checked at %s: %s",
				run.Snapshot, at, run.Finished.UTC().Format(time.RFC3339), run.Message))
	default:
		want.setCondition(store, metav1.ConditionFalse, memoryv1alpha1.ReasonDrillFailed,
			fmt.Sprintf("The drill of MemorySnapshot %s at %s failed: %s", run.Snapshot, run.Finished.UTC().Format(time.RFC3339), run.Message))
	}
}

// latestSnapshot is the newest snapshot of the store that succeeded (nil: none).
func (r *RestoreDrillReconciler) latestSnapshot(ctx context.Context, store *memoryv1alpha1.MemoryStore) (*memoryv1alpha1.MemorySnapshot, error) {
	var list memoryv1alpha1.MemorySnapshotList
	if err := r.List(ctx, &list, client.InNamespace(store.Namespace)); err != nil {
		return nil, err
	}
	var best *memoryv1alpha1.MemorySnapshot
	for i := range list.Items {
		s := &list.Items[i]
		if s.Spec.StoreRef.Name != store.Name || !s.DeletionTimestamp.IsZero() || !s.Succeeded() || s.Status.CompletionTime == nil {
			continue
		}
		if best == nil || best.Status.CompletionTime.Before(s.Status.CompletionTime) ||
			(best.Status.CompletionTime.Equal(s.Status.CompletionTime) && best.Name < s.Name) {
			best = s
		}
	}
	return best, nil
}

// backend is the store's backends with their admin logins, and the store's names.
func (r *RestoreDrillReconciler) backend(ctx context.Context, store *memoryv1alpha1.MemoryStore) (*resolvedBackend, provision.Names, error) {
	rb, err := resolveStoreBackend(ctx, r.Client, r.APIReader, r.OperatorNamespace, store)
	if err != nil {
		return nil, provision.Names{}, err
	}
	names, err := provision.NamesFor(store.Spec.Tenant, rb.basePrefix())
	return rb, names, err
}

// dropScratch drops the store's scratch copy (idempotent).
func (r *RestoreDrillReconciler) dropScratch(ctx context.Context, store *memoryv1alpha1.MemoryStore) error {
	rb, names, err := r.backend(ctx, store)
	if err != nil {
		return err
	}
	return dropStoreScratch(ctx, store, rb, names)
}

// dropStoreScratch drops a store's scratch copy: its schema, and its collection on
// the store's Milvus.
func dropStoreScratch(ctx context.Context, store *memoryv1alpha1.MemoryStore, rb *resolvedBackend, names provision.Names) error {
	var m *provision.MilvusConn
	if v := store.Status.Vector; v != nil && v.Engine == provision.EngineMilvus {
		m = rb.milvus
	}
	return provision.DropScratch(ctx, rb.postgres, m, names, ownerOf(store))
}

// pruneJobs deletes finished drill Jobs beyond the newest keep.
func (r *RestoreDrillReconciler) pruneJobs(ctx context.Context, store *memoryv1alpha1.MemoryStore, keep int) error {
	jobs, err := storeJobs(ctx, r.Client, store, drillContainer)
	if err != nil {
		return err
	}
	var finished []batchv1.Job
	for _, j := range jobs {
		if jobFinished(&j) != nil && j.DeletionTimestamp.IsZero() {
			finished = append(finished, j)
		}
	}
	for i := 0; i < len(finished)-keep; i++ {
		if err := r.Delete(ctx, &finished[i], client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return nil
}

// announce emits, once the status is written, the Events of a drill that started or
// ended and brings the metrics in line with the status.
func (r *RestoreDrillReconciler) announce(store *memoryv1alpha1.MemoryStore, want drillState) {
	if a := want.started; a != nil {
		r.Recorder.Eventf(store, nil, corev1.EventTypeNormal, "DrillJobCreated", "RestoreDrill",
			"Job %s restores MemorySnapshot %s into scratch copy %s", a.Job, a.Snapshot, a.Scratch)
	}
	if run := want.finished; run != nil {
		if run.Passed {
			r.Recorder.Eventf(store, nil, corev1.EventTypeNormal, "DrillPassed", "RestoreDrill", "MemorySnapshot %s: %s", run.Snapshot, run.Message)
		} else {
			r.Recorder.Eventf(store, nil, corev1.EventTypeWarning, "DrillFailed", "RestoreDrill", "MemorySnapshot %s: %s", run.Snapshot, run.Message)
		}
		countDrill(store, run)
	}
	if store.Spec.RestoreDrill == nil {
		forgetDrillMetrics(store.Namespace, store.Name)
		return
	}
	setDrillGauges(store, want.status)
	if c := want.condition; c != nil && c.Reason == memoryv1alpha1.ReasonNoSnapshot &&
		(want.before == nil || want.before.Reason != c.Reason) {
		r.Recorder.Eventf(store, nil, corev1.EventTypeWarning, "DrillNoSnapshot", "RestoreDrill", "%s", c.Message)
	}
}

// drillJobInputs is what a drill Job needs besides its store.
type drillJobInputs struct {
	Image, Name   string
	Source        restoreSourcePlan
	MilvusAddress string
}

// buildDrillJob is the Job running `memory-operator drill` for the store: the restore
// a MemoryRestore of the snapshot into the store would run, aimed at the scratch copy
// (its schema, and its collection on Milvus), with the store's worker login and the
// snapshot's Secrets by reference; no retry (a second try would find the copy in use).
func buildDrillJob(store *memoryv1alpha1.MemoryStore, scratch provision.Names, in drillJobInputs) *batchv1.Job {
	pseudo := &memoryv1alpha1.MemoryRestore{
		ObjectMeta: metav1.ObjectMeta{Namespace: store.Namespace, Name: in.Name},
		Spec: memoryv1alpha1.MemoryRestoreSpec{
			Source:       memoryv1alpha1.RestoreSource{SnapshotRef: &corev1.LocalObjectReference{Name: in.Source.Snapshot}, Unencrypted: in.Source.Key == nil},
			TargetRef:    corev1.LocalObjectReference{Name: store.Name},
			SkipSessions: true,
		},
	}
	rc := restoreConfig(pseudo, store, restoreJobInputs{Image: in.Image, Source: in.Source, MilvusAddress: in.MilvusAddress})
	rc.Schema, rc.VectorTable = scratch.Schema, "" // the copy has its own vectors table
	if rc.External() {
		rc.Collection = scratch.Collection
	}
	cfg := worker.DrillConfig{RestoreConfig: rc}
	if d := store.Spec.RestoreDrill; d != nil {
		if d.RecallScopes != nil {
			cfg.RecallScopes = int(*d.RecallScopes)
		}
		cfg.MinRecall, _ = strconv.ParseFloat(d.MinRecall, 64)
	}
	creds := in.Source.Credentials
	env := []corev1.EnvVar{
		secretEnv(worker.EnvPostgresURI, store.Status.WorkerSecret, keyURI),
		secretEnv(worker.EnvSourceS3AccessKey, creds.Name, creds.AccessKeyIDKey),
		secretEnv(worker.EnvSourceS3SecretKey, creds.Name, creds.SecretAccessKeyKey),
	}
	env = append(env, milvusLoginEnv(store, store.Status.WorkerSecret)...)
	if k := in.Source.Key; k != nil {
		env = append(env, secretEnv(worker.EnvSourceKey, k.Name, k.Key))
	}
	env = append(env, embedderAPIKeyEnv(store, worker.EnvEmbedderAPIKey)...)
	labels := map[string]string{}
	setLabelIfValid(labels, memoryv1alpha1.LabelStore, store.Name)
	setLabelIfValid(labels, memoryv1alpha1.LabelSnapshot, in.Source.Snapshot)
	var opts memoryv1alpha1.JobOptions
	if d := store.Spec.RestoreDrill; d != nil && d.Job != nil {
		opts = *d.Job
	}
	job := buildWorkerJob(workerJobSpec{
		Owner: store, Kind: "MemoryStore", Name: in.Name, Command: drillContainer, Image: in.Image,
		Args: cfg.Args(), Env: env, Labels: labels, Options: opts,
	})
	job.Spec.BackoffLimit = ptr.To[int32](0)
	return job
}

// jobDrillConfig parses the worker configuration back out of a drill Job.
func jobDrillConfig(job *batchv1.Job) (worker.DrillConfig, error) {
	args, err := jobWorkerArgs(job, drillContainer)
	if err != nil {
		return worker.DrillConfig{}, err
	}
	return worker.ParseDrillArgs(args, io.Discard)
}
