package v1alpha1

import (
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LabelRestore is on the Jobs of a restore (and their pods).
const LabelRestore = "memory.amemory.io/restore"

// SetCondition records a condition for the current generation.
func (r *MemoryRestore) SetCondition(condType string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&r.Status.Conditions, metav1.Condition{
		Type: condType, Status: status, Reason: reason, Message: message, ObservedGeneration: r.Generation,
	})
}

// IsDone reports whether the restore finished, successfully or not. A finished restore
// never runs again.
func (r *MemoryRestore) IsDone() bool {
	return meta.IsStatusConditionTrue(r.Status.Conditions, ConditionCompleted)
}

// Succeeded reports whether the restore finished and its Job did all it was asked.
func (r *MemoryRestore) Succeeded() bool {
	c := meta.FindStatusCondition(r.Status.Conditions, ConditionCompleted)
	return c != nil && c.Status == metav1.ConditionTrue && IsSuccessReason(c.Reason)
}

// DerivePhase computes the phase from the conditions.
func (r *MemoryRestore) DerivePhase() string {
	return oneShotPhase(r.Status.Conditions)
}

// SetProgress records a restore that has not finished: Progressing is True while its Job
// runs and False while it waits for something (its snapshot, its target, a Secret), and
// Completed is False with the same reason, so `kubectl get` shows why.
func (r *MemoryRestore) SetProgress(progressing metav1.ConditionStatus, reason, message string) {
	r.SetCondition(ConditionProgressing, progressing, reason, message)
	r.SetCondition(ConditionCompleted, metav1.ConditionFalse, reason, message)
}

// SetCompleted records how the restore ended: Completed is True with the reason
// (Succeeded, or why it failed) and Progressing is False.
func (r *MemoryRestore) SetCompleted(reason, message string) {
	r.SetCondition(ConditionCompleted, metav1.ConditionTrue, reason, message)
	r.SetCondition(ConditionProgressing, metav1.ConditionFalse, reason, message)
}

// SourceDescription names the source for humans: "snapshot/<name>",
// "s3://<bucket>/<prefix>" for a location, and for an import its kind and where it
// reads: "LangGraphPostgres secret/<name>", "LangGraphSQLite s3://<bucket>/<key>" (or
// "LangGraphSQLite <key>" in the target store's bucket).
func (s RestoreSource) SourceDescription() string {
	switch {
	case s.SnapshotRef != nil:
		return "snapshot/" + s.SnapshotRef.Name
	case s.Location != nil:
		return "s3://" + s.Location.Bucket + "/" + s.Location.PackagePrefix()
	case s.ImportFrom != nil:
		return s.ImportFrom.Description()
	}
	return ""
}

// Description names the import's source for humans.
func (i *ImportSource) Description() string {
	kind := string(i.Kind)
	switch {
	case i.Postgres != nil:
		return kind + " secret/" + i.Postgres.URISecret.Name
	case i.File != nil && i.File.Bucket != "":
		return kind + " s3://" + i.File.Bucket + "/" + i.File.Key
	case i.File != nil:
		return kind + " " + i.File.Key
	}
	return kind
}

// IsImport reports whether the restore imports from a framework instead of reading a
// package.
func (r *MemoryRestore) IsImport() bool {
	return r.Spec.Source.ImportFrom != nil
}

// SkipZombiesOrDefault treats an unset skipZombies as true.
func (i *ImportSource) SkipZombiesOrDefault() bool {
	return i.SkipZombies == nil || *i.SkipZombies
}

// KeepsWorkingMemory reports whether the import keeps recent raw turns.
func (i *ImportSource) KeepsWorkingMemory() bool {
	return i.KeepWorkingMemory != nil && i.KeepWorkingMemory.Enabled
}

// PackagePrefix is the location's prefix ending in '/'.
func (l PackageLocation) PackagePrefix() string {
	return strings.TrimSuffix(l.Prefix, "/") + "/"
}

// EffectiveTypes is the memory types to restore, with the default applied: an import
// that keeps working memory restores it too unless types are listed.
func (s *MemoryRestoreSpec) EffectiveTypes() []MemoryType {
	if imp := s.Source.ImportFrom; len(s.Types) == 0 && imp != nil && imp.KeepsWorkingMemory() {
		return append(typesOrDefault(nil), "working")
	}
	return typesOrDefault(s.Types)
}

// ConflictPolicyOrDefault treats an unset policy as KeepNewer.
func (s *MemoryRestoreSpec) ConflictPolicyOrDefault() ConflictPolicy {
	if s.ConflictPolicy == "" {
		return ConflictKeepNewer
	}
	return s.ConflictPolicy
}

// EmbeddingsOrDefault treats an unset policy as Reuse.
func (s *MemoryRestoreSpec) EmbeddingsOrDefault() EmbeddingsPolicy {
	if s.Embeddings == "" {
		return EmbeddingsReuse
	}
	return s.Embeddings
}

// UnmappedOrDefault treats an unset policy (or no mapping at all) as Keep.
func (s *MemoryRestoreSpec) UnmappedOrDefault() UnmappedPolicy {
	if s.Mapping == nil || s.Mapping.Unmapped == "" {
		return UnmappedKeep
	}
	return s.Mapping.Unmapped
}

// Total is the number of memories skipped, all reasons together.
func (s RestoreSkipped) Total() int64 {
	return s.Denylisted + s.Tombstoned + s.Unmapped + s.Expired + s.Type + s.Conflict + s.IDInUseByOtherScope + s.Invalid + s.TextTooLong
}
