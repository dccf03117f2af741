package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ArchivalSpec makes the operator archive a store's low-score memories on a cron
// schedule: one Job (`memory-operator archive`) per slot, never two at a time, none
// while the store is not Ready. A memory whose effective score
// (base_score * 0.5^(age / halfLife of its type)) is below threshold is removed from the
// vector index and marked archived in PostgreSQL, so recall no longer returns it; it is
// not deleted. The same run purges expired memories.
type ArchivalSpec struct {
	Schedule CronSchedule `json:"schedule"`

	// Suspend stops starting new runs; a run already started finishes.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// Threshold: memories whose effective score is below it are archived. A
	// non-negative decimal number, e.g. "0.05".
	// +kubebuilder:validation:MaxLength=20
	// +kubebuilder:validation:XValidation:rule="self.matches('^(0|[1-9][0-9]{0,8})([.][0-9]{1,9})?$')",message="threshold must be a non-negative decimal number such as \"0.05\""
	Threshold string `json:"threshold"`

	// HalfLives overrides the half-life of memory types (working, episodic, semantic,
	// procedural), as durations ("720h"). Types not listed keep the defaults: working
	// 6h, episodic 720h (30 days), semantic 4320h (180 days), procedural 8760h (365 days).
	// +optional
	// +kubebuilder:validation:MaxProperties=4
	// +kubebuilder:validation:XValidation:rule="self.all(t, t in ['working', 'episodic', 'semantic', 'procedural'])",message="halfLives keys are memory types: working, episodic, semantic, procedural"
	HalfLives map[string]HalfLife `json:"halfLives,omitempty"`

	// DryRun only counts: nothing is archived, purged or deleted, and the counts in
	// status.archival.lastRun are what a run would have done.
	// +optional
	DryRun bool `json:"dryRun,omitempty"`

	// ColdStorage also copies what a run archives to the store's object storage, as a
	// snapshot package (format v1) under <store prefix>archive/<job name>/.
	// +optional
	ColdStorage *ArchivalColdStorage `json:"coldStorage,omitempty"`

	// JobsHistoryLimit keeps the newest N finished archive Jobs (and their pods, whose
	// logs and termination messages tell what happened); older ones are deleted.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	JobsHistoryLimit *int32 `json:"jobsHistoryLimit,omitempty"`

	// Job shapes the archive Jobs.
	// +optional
	Job JobOptions `json:"job,omitempty"`
}

// HalfLife is a positive duration in Go's notation ("720h", "1h30m"): a string type of
// its own so that admission can bound and check each value of the map (map values of
// metav1.Duration can carry neither rule).
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')",message="each half-life is a positive duration such as \"720h\""
type HalfLife string

// ArchivalColdStorage says whether archived memories are also kept in object storage,
// encrypted as a snapshot's package is, and whether they are then deleted from
// PostgreSQL.
// +kubebuilder:validation:XValidation:rule="!has(self.deleteAfter) || (has(self.enabled) && self.enabled)",message="coldStorage.deleteAfter needs coldStorage.enabled: archived memories are deleted only once copied to cold storage"
// +kubebuilder:validation:XValidation:rule="!(has(self.enabled) && self.enabled) || has(self.encryption)",message="coldStorage.enabled needs encryption.keySecret, or encryption.unencrypted: true"
type ArchivalColdStorage struct {
	// Enabled writes a cold package per run with the memories the run archived.
	// +optional
	Enabled bool `json:"enabled,omitempty"`

	// DeleteAfter deletes archived memories from PostgreSQL this long after they were
	// archived, once their cold copy exists. Unset keeps them (archived) for good.
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')",message="deleteAfter is a positive duration such as \"2160h\""
	// +optional
	DeleteAfter *metav1.Duration `json:"deleteAfter,omitempty"`

	// Encryption of the cold packages, as for a MemorySnapshot: a key Secret in the
	// store's namespace, or unencrypted: true.
	// +optional
	Encryption *SnapshotEncryption `json:"encryption,omitempty"`

	// CredentialsSecret, in the store's namespace, holds S3 keys for the store's bucket.
	// Required when the store uses a ClusterMemoryBackend (whose credentials never leave
	// the operator's namespace); an inline store's own credentials are used otherwise.
	// +optional
	CredentialsSecret *ObjectStorageCredentials `json:"credentialsSecret,omitempty"`
}

// ArchivalStatus is the archival schedule's bookkeeping and its last run. The next run
// is computed from lastScheduleTime, so an operator restart neither skips nor repeats a
// slot.
type ArchivalStatus struct {
	// LastScheduleTime is the latest slot handled (run, or skipped because a run was
	// still active).
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// NextScheduleTime is the next slot; in the past while a due run is delayed.
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`
	// ActiveJob is the archive Job running now.
	// +optional
	ActiveJob string `json:"activeJob,omitempty"`
	// LastSuccessTime is when the latest successful run completed.
	// +optional
	LastSuccessTime *metav1.Time `json:"lastSuccessTime,omitempty"`
	// LastRun is the latest run that finished.
	// +optional
	LastRun *ArchivalRun `json:"lastRun,omitempty"`
}

// ArchivalRunResult is how a run ended.
// +kubebuilder:validation:Enum=Succeeded;Failed
type ArchivalRunResult string

// The results of a run.
const (
	ArchivalRunSucceeded ArchivalRunResult = "Succeeded"
	ArchivalRunFailed    ArchivalRunResult = "Failed"
)

// ArchivalRun is one finished archive Job and what its worker reported. In a dry run
// the counts are what would have happened.
type ArchivalRun struct {
	JobName string `json:"jobName"`
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// Result is Succeeded or Failed.
	Result ArchivalRunResult `json:"result"`
	// Message says what the run did, or why it failed.
	// +optional
	Message string `json:"message,omitempty"`
	// +optional
	DryRun bool `json:"dryRun,omitempty"`
	// Scanned live memories (neither archived nor tombstoned).
	// +optional
	Scanned int64 `json:"scanned,omitempty"`
	// Archived memories, in total and by type.
	// +optional
	Archived int64 `json:"archived,omitempty"`
	// +optional
	ArchivedByType map[string]int64 `json:"archivedByType,omitempty"`
	// ExpiredPurged memories were deleted because their expires_at had passed.
	// +optional
	ExpiredPurged int64 `json:"expiredPurged,omitempty"`
	// Deleted archived memories were removed from PostgreSQL after coldStorage.deleteAfter.
	// +optional
	Deleted int64 `json:"deleted,omitempty"`
	// VectorsDeleted from the index; Recovered of them were left by an interrupted
	// earlier run.
	// +optional
	VectorsDeleted int64 `json:"vectorsDeleted,omitempty"`
	// +optional
	Recovered int64 `json:"recovered,omitempty"`
	// ColdPackage is where the run's cold package was written (a MemoryRestore can read
	// it as source.location), with ColdItems memories in it.
	// +optional
	ColdPackage *SnapshotLocation `json:"coldPackage,omitempty"`
	// +optional
	ColdItems int64 `json:"coldItems,omitempty"`
}
