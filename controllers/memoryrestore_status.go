package controllers

import (
	"context"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/worker"
)

// patchStatus writes the restore's status in one place: derives the summary
// conditions and the phase, skips the call when nothing changed, patches with an
// optimistic lock (a conflict is retried by the queue) and emits an Event for every
// transition.
func (r *MemoryRestoreReconciler) patchStatus(ctx context.Context, original, restore *memoryv1alpha1.MemoryRestore) error {
	restore.Status.ObservedGeneration = restore.Generation
	setSummary(&restore.Status.Conditions, restore.Generation, runSummary(restore.Status.Conditions))
	restore.Status.Phase = restore.DerivePhase()
	changed, err := patchStatusIfChanged(ctx, r.Client, original, restore, original.Status, restore.Status)
	if !changed || err != nil {
		return err
	}
	emitRunTransitions(r.Recorder, restore, "Restore", original.Status.Conditions, restore.Status.Conditions)
	return nil
}

// recordResult records a Job that completed: the summary its worker left as the pod's
// termination message. The worker did its work, so the restore succeeded even when no
// summary can be found (its pods were deleted); the message then says the counts are
// unknown. Listing the pods failing is retried.
func (r *MemoryRestoreReconciler) recordResult(ctx context.Context, restore *memoryv1alpha1.MemoryRestore, job *batchv1.Job) error {
	term, err := lastTermination(ctx, r.APIReader, job, restoreContainer, true)
	if err != nil {
		return err
	}
	end := metav1.NewTime(r.now().Time)
	if job.Status.CompletionTime != nil {
		end = *job.Status.CompletionTime
	}
	restore.Status.CompletionTime = &end
	restore.Status.Duration = runDuration(restore.Status.StartTime, job.Status.StartTime, end)
	if term == nil {
		restore.SetCompleted(memoryv1alpha1.ReasonSucceeded, fmt.Sprintf(
			"Job %s completed, but none of its pods reported a result summary; the counts are unknown", job.Name))
		return nil
	}
	sum, err := worker.ParseRestoreSummary(term.Message)
	if err != nil {
		restore.SetCompleted(memoryv1alpha1.ReasonSucceeded, fmt.Sprintf(
			"Job %s completed, but its result summary is unreadable (%v); the counts are unknown", job.Name, err))
		return nil
	}
	recordRestoreSummary(restore, sum, restoreObjects(restore, job))
	if prior := sum.AlreadyRestored; prior != nil {
		restore.SetCompleted(memoryv1alpha1.ReasonAlreadyRestored, fmt.Sprintf(
			"Nothing written: MemoryStore %s already received this package (manifest SHA-256 %s) from MemoryRestore %s (uid %s) at %s; "+
				"set spec.allowRepeat: true in a new MemoryRestore to restore it again",
			restore.Spec.TargetRef.Name, sum.ManifestSHA256, prior.Name, prior.UID, prior.CompletedAt.UTC().Format(time.RFC3339)))
		return nil
	}
	restore.SetCompleted(memoryv1alpha1.ReasonSucceeded, restoreResultMessage(restore))
	return nil
}

// restoreFailure is the failed worker's error, and the summary of what it wrote when
// it failed after writing part of the package (nil when it wrote nothing).
func restoreFailure(ctx context.Context, apiReader client.Reader, job *batchv1.Job) (string, *worker.RestoreSummary) {
	term, err := lastTermination(ctx, apiReader, job, restoreContainer, false)
	if err != nil || term == nil {
		return workerError(ctx, apiReader, job, restoreContainer), nil
	}
	if sum, err := worker.ParseRestoreSummary(term.Message); err == nil && sum.Error != "" {
		return sum.Error, &sum
	}
	return workerError(ctx, apiReader, job, restoreContainer), nil
}

// partialMessage says what a failed restore wrote before it failed.
func partialMessage(sum *worker.RestoreSummary) string {
	if sum == nil {
		return ""
	}
	return fmt.Sprintf("; before it failed it wrote %d memories of the %d it read (%d unchanged), applied %d tombstones forgetting %d memories; "+
		"the restore is idempotent: a new MemoryRestore of the same package completes it.",
		sum.Restored, sum.Read, sum.Unchanged, sum.Tombstones, sum.Forgotten)
}

// restoreObjects is the object storage the restore's Job wrote its detail to: the
// package's, or an import's as its Job names it (nil when the Job says nothing usable).
func restoreObjects(restore *memoryv1alpha1.MemoryRestore, job *batchv1.Job) *memoryv1alpha1.SnapshotLocation {
	if restore.Status.Package != nil || !restore.IsImport() {
		return restore.Status.Package
	}
	cfg, err := jobRestoreConfig(job)
	if err != nil {
		return nil
	}
	return &memoryv1alpha1.SnapshotLocation{Endpoint: cfg.Source.Endpoint, Bucket: cfg.Source.Bucket}
}

// recordRestoreSummary copies the worker's counts, verification and import counts into
// status, and points at the detail object in objects (next to the package, or where an
// import's Job wrote it).
func recordRestoreSummary(restore *memoryv1alpha1.MemoryRestore, sum worker.RestoreSummary, objects *memoryv1alpha1.SnapshotLocation) {
	s := &restore.Status
	s.Verification = &memoryv1alpha1.RestoreVerification{
		ManifestSHA256: sum.ManifestSHA256, FormatVersion: sum.FormatVersion, PackageID: sum.PackageID, Shards: int32(sum.Shards),
	}
	s.Embeddings = memoryv1alpha1.EmbeddingsPolicy(sum.Embeddings)
	s.Read, s.Restored, s.Unchanged, s.Scopes, s.MappedScopes, s.Vectors = sum.Read, sum.Restored, sum.Unchanged, sum.Scopes, sum.MappedScopes, sum.Vectors
	s.Rehydrated, s.Tombstones, s.Forgotten = sum.Rehydrated, sum.Tombstones, sum.Forgotten
	s.Sessions = nil
	if ss := sum.Sessions; ss != nil {
		s.Sessions = &memoryv1alpha1.RestoreSessions{Read: ss.Read, Restored: ss.Restored, Existing: ss.Existing,
			Expired: ss.Expired, Forgotten: ss.Forgotten, Unmapped: ss.Unmapped}
	}
	s.RestoredByType = nil
	for t, n := range sum.RestoredByType {
		if n == 0 {
			continue
		}
		if s.RestoredByType == nil {
			s.RestoredByType = map[string]int64{}
		}
		s.RestoredByType[t] = n
	}
	skipped := memoryv1alpha1.RestoreSkipped{
		Denylisted: sum.Skipped.Denylisted, Tombstoned: sum.Skipped.Tombstoned, Unmapped: sum.Skipped.Unmapped,
		Expired: sum.Skipped.Expired, Type: sum.Skipped.Type, Conflict: sum.Skipped.Conflict, Invalid: sum.Skipped.Invalid,
		IDInUseByOtherScope: sum.Skipped.IDInUseByOtherScope, TextTooLong: sum.Skipped.TextTooLong,
	}
	s.FirstInvalid = sum.FirstInvalid
	s.Skipped, s.SkippedBy = skipped.Total(), nil
	if s.Skipped > 0 {
		s.SkippedBy = &skipped
	}
	if sum.DetailKey != "" && objects != nil {
		s.Detail = &memoryv1alpha1.ObjectLocation{Endpoint: objects.Endpoint, Bucket: objects.Bucket, Key: sum.DetailKey}
	}
	recordImportStatus(restore, sum.Import)
}

// restoreResultMessage tells what a restore did, from its recorded counts.
func restoreResultMessage(restore *memoryv1alpha1.MemoryRestore) string {
	s := restore.Status
	verb := "Restored"
	switch {
	case restore.Spec.DryRun && restore.IsImport():
		verb = "Dry run: would import"
	case restore.Spec.DryRun:
		verb = "Dry run: would restore"
	case restore.IsImport():
		verb = "Imported"
	}
	msg := fmt.Sprintf("%s %d memories in %d scopes into MemoryStore %s from %s", verb, s.Restored, s.Scopes,
		restore.Spec.TargetRef.Name, s.Source)
	if s.Import != nil {
		msg += "; " + importDetail(*s.Import)
	}
	if s.Unchanged > 0 {
		msg += fmt.Sprintf("; %d already there unchanged", s.Unchanged)
	}
	if s.MappedScopes > 0 {
		msg += fmt.Sprintf("; %d scopes mapped", s.MappedScopes)
	}
	if s.Tombstones > 0 || s.Forgotten > 0 {
		msg += fmt.Sprintf("; %d tombstones applied, forgetting %d memories of the target", s.Tombstones, s.Forgotten)
	}
	if s.SkippedBy != nil {
		msg += fmt.Sprintf("; skipped %d (%s)", s.Skipped, skippedDetail(*s.SkippedBy))
	}
	if s.Rehydrated > 0 {
		msg += fmt.Sprintf("; %d archived memories rehydrated", s.Rehydrated)
	}
	msg += fmt.Sprintf("; %d vectors (%s)", s.Vectors, s.Embeddings)
	if s.Detail != nil {
		msg += "; per-scope detail in s3://" + s.Detail.Bucket + "/" + s.Detail.Key
	}
	return msg
}

func skippedDetail(s memoryv1alpha1.RestoreSkipped) string {
	var parts []string
	for _, c := range []struct {
		name string
		n    int64
	}{
		{"denylisted", s.Denylisted}, {"tombstoned", s.Tombstoned}, {"unmapped", s.Unmapped},
		{"expired", s.Expired}, {"type", s.Type}, {"conflict", s.Conflict}, {"invalid", s.Invalid},
	} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", c.name, c.n))
		}
	}
	return strings.Join(parts, ", ")
}
