package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RestoreSource is what a restore reads: the package of a MemorySnapshot of this
// namespace, a package anywhere in S3-compatible storage (another cluster's, a GitOps
// migration's), or an agent framework's own data, converted on the way in (importFrom).
// A package's decryption key is always named explicitly, or unencrypted set, as for
// snapshots; an import reads no package and names neither.
// +kubebuilder:validation:XValidation:rule="[has(self.snapshotRef), has(self.location), has(self.importFrom)].filter(x, x).size() == 1",message="set exactly one of source.snapshotRef, source.location or source.importFrom"
// +kubebuilder:validation:XValidation:rule="has(self.importFrom) || has(self.keySecret) != (has(self.unencrypted) && self.unencrypted)",message="set source.keySecret, or source.unencrypted: true to read a plaintext package"
// +kubebuilder:validation:XValidation:rule="!has(self.importFrom) || (!has(self.keySecret) && !(has(self.unencrypted) && self.unencrypted))",message="source.importFrom reads no package: leave out source.keySecret and source.unencrypted"
type RestoreSource struct {
	// SnapshotRef names a MemorySnapshot in this namespace. A restore created before its
	// snapshot, or while the snapshot runs, waits for it; it fails if the snapshot fails.
	// +optional
	SnapshotRef *corev1.LocalObjectReference `json:"snapshotRef,omitempty"`
	// Location is a package in any S3-compatible store, reached with its own credentials;
	// no MemorySnapshot object is needed.
	// +optional
	Location *PackageLocation `json:"location,omitempty"`
	// ImportFrom converts an agent framework's memory (LangGraph checkpoints and
	// store) into memories and restores them like a package's.
	// +optional
	ImportFrom *ImportSource `json:"importFrom,omitempty"`
	// KeySecret holds the package's 32-byte AES-256 key (raw, hex or base64).
	// +optional
	KeySecret *corev1.SecretKeySelector `json:"keySecret,omitempty"`
	// Unencrypted reads a plaintext package (its checksums are still verified).
	// +optional
	Unencrypted bool `json:"unencrypted,omitempty"`
}

// PackageLocation is where a package lives and how to read it.
type PackageLocation struct {
	// Endpoint as host[:port], without scheme.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9.-]+(:[0-9]{1,5})?$`
	Endpoint string `json:"endpoint"`
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`
	Bucket string `json:"bucket"`
	// Prefix of the package: the folder that holds its manifest.json.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*/?$`
	// +kubebuilder:validation:MaxLength=1024
	Prefix string `json:"prefix"`
	// +optional
	Region string `json:"region,omitempty"`
	// Insecure uses plain HTTP instead of HTTPS.
	// +optional
	Insecure bool `json:"insecure,omitempty"`
	// CredentialsSecret in the restore's namespace, with the access key and secret key.
	// The restore also writes its per-scope detail next to the package with them.
	CredentialsSecret ObjectStorageCredentials `json:"credentialsSecret"`
}

// ScopeRename maps one scope of the package to a scope of the target store.
type ScopeRename struct {
	// +kubebuilder:validation:Pattern=`^(user|session|agent):[\p{L}\p{N}\p{M}._@:/-]{1,200}$`
	From string `json:"from"`
	// +kubebuilder:validation:Pattern=`^(user|session|agent):[\p{L}\p{N}\p{M}._@:/-]{1,200}$`
	To string `json:"to"`
}

// PrefixRename rewrites the start of every package scope that begins with From.
type PrefixRename struct {
	// From is a scope prefix: a kind and a colon, then possibly the start of an ID
	// ("user:", "user:legacy-").
	// +kubebuilder:validation:Pattern=`^(user|session|agent):[\p{L}\p{N}\p{M}._@:/-]{0,199}$`
	From string `json:"from"`
	// +kubebuilder:validation:Pattern=`^(user|session|agent):[\p{L}\p{N}\p{M}._@:/-]{0,199}$`
	To string `json:"to"`
}

// MappingFormat is how a large scope map is written.
// +kubebuilder:validation:Enum=CSV;JSONLines
type MappingFormat string

const (
	// MappingCSV is one "from,to" record per line, with an optional "from,to" header;
	// blank lines and lines starting with '#' are ignored.
	MappingCSV MappingFormat = "CSV"
	// MappingJSONLines is one {"from": "...", "to": "..."} object per line.
	MappingJSONLines MappingFormat = "JSONLines"
)

// MappingObject is a map stored as an object next to the package: same endpoint and
// credentials as the source.
type MappingObject struct {
	// Bucket, when not the package's.
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`
	// +optional
	Bucket string `json:"bucket,omitempty"`
	// Key of the object (its full name in the bucket).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Key string `json:"key"`
}

// MappingSource is a scope map too large for the spec. The worker streams it; it never
// passes through the operator or etcd beyond the ConfigMap or Secret that holds it.
// +kubebuilder:validation:XValidation:rule="[has(self.configMapKeyRef), has(self.secretKeyRef), has(self.object)].filter(x, x).size() == 1",message="set exactly one of mapping.from.configMapKeyRef, secretKeyRef or object"
// +kubebuilder:validation:XValidation:rule="!has(self.configMapKeyRef) || (self.configMapKeyRef.name.size() > 0 && self.configMapKeyRef.key.size() > 0)",message="mapping.from.configMapKeyRef needs a name and a key"
// +kubebuilder:validation:XValidation:rule="!has(self.secretKeyRef) || (self.secretKeyRef.name.size() > 0 && self.secretKeyRef.key.size() > 0)",message="mapping.from.secretKeyRef needs a name and a key"
// +kubebuilder:validation:XValidation:rule="has(self.format) || [has(self.configMapKeyRef) ? self.configMapKeyRef.key : '-', has(self.secretKeyRef) ? self.secretKeyRef.key : '-', has(self.object) ? self.object.key : '-'].exists(k, k.endsWith('.csv') || k.endsWith('.jsonl') || k.endsWith('.ndjson'))",message="set mapping.from.format, or name the key with a .csv, .jsonl or .ndjson extension"
type MappingSource struct {
	// ConfigMapKeyRef is a key of a ConfigMap in this namespace, mounted into the Job.
	// +optional
	ConfigMapKeyRef *corev1.ConfigMapKeySelector `json:"configMapKeyRef,omitempty"`
	// SecretKeyRef is a key of a Secret in this namespace, mounted into the Job (for maps
	// that are themselves sensitive: real user IDs).
	// +optional
	SecretKeyRef *corev1.SecretKeySelector `json:"secretKeyRef,omitempty"`
	// Object is an object in the source's S3-compatible store.
	// +optional
	Object *MappingObject `json:"object,omitempty"`
	// Format of the map; by default taken from the key's extension (.csv is CSV,
	// .jsonl and .ndjson are JSONLines).
	// +optional
	Format MappingFormat `json:"format,omitempty"`
}

// UnmappedPolicy says what happens to a package scope that no mapping rule matches,
// when mapping rules are given.
// +kubebuilder:validation:Enum=Keep;Skip;Fail
type UnmappedPolicy string

const (
	// UnmappedKeep restores the scope under its own name.
	UnmappedKeep UnmappedPolicy = "Keep"
	// UnmappedSkip leaves the scope out (counted as skipped, unmapped).
	UnmappedSkip UnmappedPolicy = "Skip"
	// UnmappedFail fails the restore.
	UnmappedFail UnmappedPolicy = "Fail"
)

// RestoreMapping renames scopes on the way in (like Velero's namespaceMapping): an exact
// rule (from scopes or the large map; a scope may be mapped to one target only), else
// the longest matching prefix rule, else the unmapped policy. Two package scopes never
// land on one target scope unless allowMerge is set: the restore checks every rule
// against the package's own scope list before writing anything. Admission refuses
// inline scopes with a repeated target (up to 500 of them: CEL's cost limit; the
// controller checks longer lists before it starts the Job).
// +kubebuilder:validation:XValidation:rule="(has(self.allowMerge) && self.allowMerge) || !has(self.scopes) || self.scopes.size() > 500 || self.scopes.map(s, s.to).distinct().size() == self.scopes.size()",message="two mapping.scopes entries map to the same scope, which would merge two users' memories; map them to different scopes, or set mapping.allowMerge: true to merge them on purpose"
type RestoreMapping struct {
	// Scopes are exact renames ("user:1024" to "user:dbc0a3").
	// +optional
	// +listType=map
	// +listMapKey=from
	// +kubebuilder:validation:MaxItems=1000
	Scopes []ScopeRename `json:"scopes,omitempty"`
	// Prefixes rewrite the start of scopes ("user:legacy-" to "user:").
	// +optional
	// +listType=map
	// +listMapKey=from
	// +kubebuilder:validation:MaxItems=100
	Prefixes []PrefixRename `json:"prefixes,omitempty"`
	// From is a large map (CSV or JSON lines of from/to pairs).
	// +optional
	From *MappingSource `json:"from,omitempty"`
	// Unmapped is what happens to scopes no rule maps: Keep (default) restores them
	// under their own name, Skip leaves them out, Fail fails the restore before anything
	// is written.
	// +kubebuilder:default=Keep
	// +optional
	Unmapped UnmappedPolicy `json:"unmapped,omitempty"`
	// AllowMerge lets the rules send several package scopes to one target scope
	// (merging two accounts of one person): their memories are merged into it as if
	// they had been one scope, conflicts between them resolved by conflictPolicy, and a
	// tombstone of any of them forgets, in it, what it covers. Without it such a
	// mapping is refused before anything is written.
	// +optional
	AllowMerge bool `json:"allowMerge,omitempty"`
	// IntoExisting lets the rules rename package scopes onto scopes that already hold
	// memories of their own in the target store (restoring a user's old account into
	// the one they use now): the package's memories meet the target's by conflictPolicy,
	// and a package tombstone of the renamed scope forgets, in it, what it covers.
	// Without it (or allowMerge) such a restore is refused before anything is written:
	// the target scope belongs to someone, and two people's memories would mix.
	// Memories an earlier run of the same restore put there are not the target's own.
	// +optional
	IntoExisting bool `json:"intoExisting,omitempty"`
}

// ConflictPolicy says what happens when a memory being restored already exists in the
// target (the same memory_id, or the same scope and key).
// +kubebuilder:validation:Enum=KeepNewer;Overwrite;Skip
type ConflictPolicy string

const (
	// ConflictKeepNewer keeps whichever was updated last; the other's value goes to history.
	ConflictKeepNewer ConflictPolicy = "KeepNewer"
	// ConflictOverwrite lets the package win.
	ConflictOverwrite ConflictPolicy = "Overwrite"
	// ConflictSkip lets the target win (counted as skipped, conflict).
	ConflictSkip ConflictPolicy = "Skip"
)

// EmbeddingsPolicy says where the restored memories' vectors come from.
// +kubebuilder:validation:Enum=Reuse;Reembed;Defer
type EmbeddingsPolicy string

const (
	// EmbeddingsReuse writes the package's vectors, or re-embeds when the package has
	// none or they were made by another model or dimension than the target's.
	EmbeddingsReuse EmbeddingsPolicy = "Reuse"
	// EmbeddingsReembed computes every vector with the target's embedder.
	EmbeddingsReembed EmbeddingsPolicy = "Reembed"
	// EmbeddingsDefer writes no vectors; the memories are found by recall (not by
	// similarity search) until something embeds them.
	EmbeddingsDefer EmbeddingsPolicy = "Defer"
)

// MemoryRestoreSpec is immutable: a restore runs once; a retry is a new object.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a MemoryRestore is immutable; create a new one instead"
type MemoryRestoreSpec struct {
	Source RestoreSource `json:"source"`

	// TargetRef names the MemoryStore (in this namespace) to restore into. Its vector
	// engine, dimension and model may differ from the package's source store.
	TargetRef corev1.LocalObjectReference `json:"targetRef"`

	// Mapping renames scopes.
	// +optional
	Mapping *RestoreMapping `json:"mapping,omitempty"`

	// Denylist names package scopes (before mapping) never to restore: exact
	// ("user:1024") or prefix ("user:test-*").
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=1000
	// +kubebuilder:validation:items:Pattern=`^(user|session|agent):([\p{L}\p{N}\p{M}._@:/-]{1,200}|[\p{L}\p{N}\p{M}._@:/-]{0,199}\*)$`
	Denylist []string `json:"denylist,omitempty"`

	// Types to restore. Default: episodic, semantic and procedural (working memory is
	// short-lived and left out unless listed).
	// +optional
	// +listType=set
	Types []MemoryType `json:"types,omitempty"`

	// ConflictPolicy: KeepNewer (default, the older value is kept in history), Overwrite or Skip.
	// +kubebuilder:default=KeepNewer
	// +optional
	ConflictPolicy ConflictPolicy `json:"conflictPolicy,omitempty"`

	// Embeddings: Reuse (default), Reembed or Defer.
	// +kubebuilder:default=Reuse
	// +optional
	Embeddings EmbeddingsPolicy `json:"embeddings,omitempty"`

	// DryRun reads and verifies the package and reports what would be restored, skipped
	// and mapped, writing nothing to the target.
	// +optional
	DryRun bool `json:"dryRun,omitempty"`

	// Rehydrate brings memories that are archived in the package back live: restore an
	// archival's cold package with it to undo the archival. Each such memory that the
	// target ends up holding with the package's value is un-archived (its age restarts)
	// and indexed; one whose value in the target differs is left as it is.
	// +optional
	Rehydrate bool `json:"rehydrate,omitempty"`

	// AllowRepeat restores the package even when the target store already received it
	// from another MemoryRestore. Without it such a restore writes nothing and
	// completes with reason AlreadyRestored: a GitOps tool that deletes and recreates
	// an identical MemoryRestore (self-heal, a re-sync) never re-runs it into a live
	// store, where it could bring back what agents changed or deleted since.
	// +optional
	AllowRepeat bool `json:"allowRepeat,omitempty"`

	// SkipSessions leaves out the live sessions a package carries (a snapshot with
	// includeSessions). Otherwise those still alive are written into the target's
	// short-term tier, mapped like scopes, never one a tombstone covers and never over
	// a session the target already has.
	// +optional
	SkipSessions bool `json:"skipSessions,omitempty"`

	// Job shapes the worker Job.
	// +optional
	Job JobOptions `json:"job,omitempty"`
}

// ObjectLocation points at one object in S3-compatible storage.
type ObjectLocation struct {
	Endpoint string `json:"endpoint,omitempty"`
	Bucket   string `json:"bucket,omitempty"`
	Key      string `json:"key,omitempty"`
}

// RestoreVerification is what the worker verified of the package.
type RestoreVerification struct {
	// ManifestSHA256 is the hex SHA-256 of the manifest as stored.
	ManifestSHA256 string `json:"manifestSHA256,omitempty"`
	// FormatVersion is the package's format version as stored (older ones are upgraded).
	FormatVersion int    `json:"formatVersion,omitempty"`
	PackageID     string `json:"packageID,omitempty"`
	// Shards is how many shards were read with their checksums verified.
	Shards int32 `json:"shards,omitempty"`
}

// RestoreSessions counts a package's live sessions in a restore: read, restored
// into the target's short-term tier, and left out because the target already had
// the session (existing), it had expired (expired), a tombstone covers it
// (forgotten), or the mapping or denylist leaves it out (unmapped).
type RestoreSessions struct {
	Read     int64 `json:"read"`
	Restored int64 `json:"restored"`
	// +optional
	Existing int64 `json:"existing,omitempty"`
	// +optional
	Expired int64 `json:"expired,omitempty"`
	// +optional
	Forgotten int64 `json:"forgotten,omitempty"`
	// +optional
	Unmapped int64 `json:"unmapped,omitempty"`
}

// RestoreSkipped counts the package's memories that were not restored, by reason.
type RestoreSkipped struct {
	// Denylisted: the scope is on spec.denylist.
	// +optional
	Denylisted int64 `json:"denylisted,omitempty"`
	// Tombstoned: a tombstone covers the memory (its scope was forgotten, in the
	// package's store or the target, after it was created).
	// +optional
	Tombstoned int64 `json:"tombstoned,omitempty"`
	// Unmapped: no mapping rule matched and mapping.unmapped is Skip.
	// +optional
	Unmapped int64 `json:"unmapped,omitempty"`
	// Expired: past their expiresAt.
	// +optional
	Expired int64 `json:"expired,omitempty"`
	// Type: a memory type not asked for.
	// +optional
	Type int64 `json:"type,omitempty"`
	// Conflict: the target's memory was kept (conflictPolicy Skip, or KeepNewer and the
	// target's was newer or the same).
	// +optional
	Conflict int64 `json:"conflict,omitempty"`
	// IDInUseByOtherScope: the memory's ID belongs to another scope's memory in the
	// target (another user's). IDs never move between scopes, so it was not written.
	// +optional
	IDInUseByOtherScope int64 `json:"idInUseByOtherScope,omitempty"`
	// TextTooLong: its vector had to be computed by the target's embedder, and its text
	// is over the target's spec.embedder.maxInputBytes with overflow Refuse.
	// +optional
	TextTooLong int64 `json:"textTooLong,omitempty"`
	// Invalid: the memory failed validation (status.firstInvalid says why), for
	// instance content that is not a JSON object or an ID longer than 128 characters.
	// +optional
	Invalid int64 `json:"invalid,omitempty"`
}

// MemoryRestoreStatus is what the run did. Per-scope detail is in the object that
// status.detail points at, never here.
type MemoryRestoreStatus struct {
	// ObservedGeneration is the generation the status describes; -1 until the
	// operator first writes the status.
	// +kubebuilder:default=-1
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Phase is derived from the conditions: Pending, Running, Succeeded, Failed.
	// +optional
	Phase string `json:"phase,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Source describes what is read, for `kubectl get`: "snapshot/<name>",
	// "s3://<bucket>/<prefix>", or for an import its kind and source
	// ("LangGraphPostgres secret/<name>", "LangGraphSQLite s3://<bucket>/<key>").
	// +optional
	Source string `json:"source,omitempty"`
	// Package is where the package was read from, once the Job was created (none for
	// an import).
	// +optional
	Package *SnapshotLocation `json:"package,omitempty"`
	// +optional
	JobName string `json:"jobName,omitempty"`
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// +optional
	Duration string `json:"duration,omitempty"`
	// +optional
	Verification *RestoreVerification `json:"verification,omitempty"`
	// Embeddings is the policy that applied: Reuse falls back to Reembed when the
	// package's vectors do not fit the target.
	// +optional
	Embeddings EmbeddingsPolicy `json:"embeddings,omitempty"`
	// Read is how many memories the package held; read = restored + unchanged + skipped.
	// +optional
	Read int64 `json:"read,omitempty"`
	// Restored is how many memories were written (or, in a dry run, would be). For a
	// restore that failed, what was written before it failed.
	// +optional
	Restored int64 `json:"restored,omitempty"`
	// +optional
	RestoredByType map[string]int64 `json:"restoredByType,omitempty"`
	// Unchanged is how many memories the target already held with the same value.
	// +optional
	Unchanged int64 `json:"unchanged,omitempty"`
	// Scopes is how many target scopes hold the package's memories after the restore.
	// +optional
	Scopes int64 `json:"scopes,omitempty"`
	// MappedScopes is how many package scopes were restored under another name.
	// +optional
	MappedScopes int64 `json:"mappedScopes,omitempty"`
	// Vectors is how many vectors were written (reused or computed).
	// +optional
	Vectors int64 `json:"vectors,omitempty"`
	// Rehydrated is how many archived memories are live again (spec.rehydrate).
	// +optional
	Rehydrated int64 `json:"rehydrated,omitempty"`
	// Tombstones is how many of the package's tombstones were new to the target (or
	// later than its own); Forgotten how many of the target's memories they covered,
	// deleted with their vectors as forgetting them there would have.
	// +optional
	Tombstones int64 `json:"tombstones,omitempty"`
	// +optional
	Forgotten int64 `json:"forgotten,omitempty"`
	// Skipped is the total of skippedBy.
	// +optional
	Skipped int64 `json:"skipped,omitempty"`
	// +optional
	SkippedBy *RestoreSkipped `json:"skippedBy,omitempty"`
	// FirstInvalid describes the first memory skipped as invalid, when there was one.
	// +optional
	FirstInvalid string `json:"firstInvalid,omitempty"`
	// Sessions counts the live sessions the package carried and what became of them.
	// +optional
	Sessions *RestoreSessions `json:"sessions,omitempty"`
	// Detail is the object with per-scope results (zstd-compressed JSON lines), next to
	// the package (an import's: next to its file, or under the target store's prefix).
	// +optional
	Detail *ObjectLocation `json:"detail,omitempty"`
	// Import counts what an import read from its source, by thread and store item.
	// +optional
	Import *ImportStatus `json:"import,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:annotations="helm.sh/resource-policy=keep"
// +kubebuilder:resource:shortName=mrestore,categories=memory
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.status.source`
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.targetRef.name`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Restored",type=integer,JSONPath=`.status.restored`
// +kubebuilder:printcolumn:name="Skipped",type=integer,JSONPath=`.status.skipped`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Mapped",type=integer,JSONPath=`.status.mappedScopes`,priority=1
// +kubebuilder:printcolumn:name="Dry-Run",type=boolean,JSONPath=`.spec.dryRun`,priority=1
// +kubebuilder:printcolumn:name="Imported",type=integer,JSONPath=`.status.import.imported`,priority=1,description="Threads imported"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// MemoryRestore writes a snapshot package, or memory imported from an agent framework,
// into a MemoryStore, mapping scopes, enforcing tombstones and a denylist, and resolving
// conflicts by policy. It runs once, as a Job.
type MemoryRestore struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec MemoryRestoreSpec `json:"spec"`
	// Status reads {observedGeneration: -1} until the operator first writes it (CRD
	// defaults), so an object it has not seen yet never looks done to kstatus (Flux),
	// Argo CD or a human.
	// +kubebuilder:default={}
	Status MemoryRestoreStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// MemoryRestoreList is a list of MemoryRestores.
type MemoryRestoreList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MemoryRestore `json:"items"`
}
