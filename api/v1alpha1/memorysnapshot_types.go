package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MemoryType is one of the four kinds of memory in the neutral format.
// +kubebuilder:validation:Enum=working;episodic;semantic;procedural
type MemoryType string

// SnapshotSelection chooses what a snapshot exports.
type SnapshotSelection struct {
	// Scopes to export: exact ("user:1024") or prefix ("user:*"). Empty exports all.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:Pattern=`^(user|session|agent):([\p{L}\p{N}\p{M}._@:/-]{1,200}|[\p{L}\p{N}\p{M}._@:/-]{0,199}\*)$`
	Scopes []string `json:"scopes,omitempty"`

	// Types to export. Default: episodic, semantic and procedural (working memory is
	// short-lived and left out unless listed).
	// +optional
	// +listType=set
	Types []MemoryType `json:"types,omitempty"`

	// ActiveWithin leaves out scopes with no memory updated within this window before
	// the snapshot (abandoned sessions, say). Empty keeps every scope.
	// +optional
	ActiveWithin *metav1.Duration `json:"activeWithin,omitempty"`
}

// SnapshotDestination overrides where the package goes. Unset fields default to the
// store's object storage; set endpoint, bucket and credentials for an off-site copy.
type SnapshotDestination struct {
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9.-]+(:[0-9]{1,5})?$`
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`
	// +optional
	Bucket string `json:"bucket,omitempty"`
	// Prefix under which the package gets its own folder. Default: the store's
	// prefix followed by "snapshots/".
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*/?$`
	// +optional
	Prefix string `json:"prefix,omitempty"`
	// +optional
	Region string `json:"region,omitempty"`
	// +optional
	Insecure *bool `json:"insecure,omitempty"`
	// CredentialsSecret in the snapshot's namespace. Required when the store uses a
	// ClusterMemoryBackend (whose credentials never leave the operator's namespace).
	// +optional
	CredentialsSecret *ObjectStorageCredentials `json:"credentialsSecret,omitempty"`
}

// SnapshotEncryption says how a package is encrypted: with the key in keySecret, or
// not at all when unencrypted is set explicitly.
// +kubebuilder:validation:XValidation:rule="has(self.keySecret) != (has(self.unencrypted) && self.unencrypted)",message="set encryption.keySecret, or encryption.unencrypted: true to store the package in plaintext"
type SnapshotEncryption struct {
	// KeySecret holds a 32-byte AES-256 key (raw, hex or base64).
	// +optional
	KeySecret *corev1.SecretKeySelector `json:"keySecret,omitempty"`
	// Unencrypted stores the package in plaintext (still checksummed).
	// +optional
	Unencrypted bool `json:"unencrypted,omitempty"`
}

// SnapshotParameters are everything about a snapshot but the store; a schedule
// stamps them onto every MemorySnapshot it creates.
type SnapshotParameters struct {
	// +optional
	Selection SnapshotSelection `json:"selection,omitempty"`
	// +optional
	Destination *SnapshotDestination `json:"destination,omitempty"`
	Encryption  SnapshotEncryption   `json:"encryption"`
	// CompressionLevel is the zstd level, 1 (fast) to 19 (small).
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=19
	// +optional
	CompressionLevel int32 `json:"compressionLevel,omitempty"`
	// IncludeEmbeddings adds the vectors (bound to the store's embedding model, which
	// is recorded). Off by default: a restore can re-embed.
	// +optional
	IncludeEmbeddings bool `json:"includeEmbeddings,omitempty"`
	// IncludeSessions adds the store's live short-term sessions (the conversations in
	// progress, with their turns), read from Redis or PostgreSQL, wherever the store
	// keeps them. Off by default: sessions are transient, and a restore brings back
	// only those still alive by then (their TTL counted from their last activity).
	// +optional
	IncludeSessions bool `json:"includeSessions,omitempty"`
	// TTL deletes the snapshot and its package this long after it completes. A
	// snapshot that a GitOps tool manages (an Argo CD tracking annotation or instance
	// label, a Flux kustomize or helm label) is kept past its TTL, since the tool
	// would create it again and take a new snapshot; ttlDeletesGitOpsManaged opts in.
	// +optional
	TTL *metav1.Duration `json:"ttl,omitempty"`
	// TTLDeletesGitOpsManaged lets the TTL delete a snapshot even when a GitOps tool
	// manages it (exclude it from pruning and self-heal, or it comes back).
	// +optional
	TTLDeletesGitOpsManaged bool `json:"ttlDeletesGitOpsManaged,omitempty"`
	// Job shapes the worker Job.
	// +optional
	Job JobOptions `json:"job,omitempty"`
}

// JobOptions are scheduling knobs for worker Jobs.
type JobOptions struct {
	// ActiveDeadlineSeconds bounds the run; past it the run fails.
	// +kubebuilder:default=3600
	// +kubebuilder:validation:Minimum=1
	// +optional
	ActiveDeadlineSeconds *int64 `json:"activeDeadlineSeconds,omitempty"`
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
}

// MemorySnapshotSpec is immutable: a snapshot runs once; a retry is a new object.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a MemorySnapshot is immutable; create a new one instead"
type MemorySnapshotSpec struct {
	// StoreRef names the MemoryStore (in this namespace) to export.
	StoreRef corev1.LocalObjectReference `json:"storeRef"`

	SnapshotParameters `json:",inline"`
}

// SnapshotLocation is where a package lives.
type SnapshotLocation struct {
	Endpoint string `json:"endpoint,omitempty"`
	Bucket   string `json:"bucket,omitempty"`
	// Prefix of the package; its manifest is Prefix + "manifest.json".
	Prefix string `json:"prefix,omitempty"`
}

// MemorySnapshotStatus is what the run produced.
type MemorySnapshotStatus struct {
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
	// +optional
	JobName string `json:"jobName,omitempty"`
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// +optional
	Location *SnapshotLocation `json:"location,omitempty"`
	// +optional
	FormatVersion int `json:"formatVersion,omitempty"`
	// +optional
	Items int64 `json:"items,omitempty"`
	// +optional
	ItemsByType map[string]int64 `json:"itemsByType,omitempty"`
	// +optional
	Scopes int64 `json:"scopes,omitempty"`
	// Bytes stored, all shards together.
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
	// +optional
	Shards int32 `json:"shards,omitempty"`
	// +optional
	Duration string `json:"duration,omitempty"`
	// ManifestSHA256 identifies the package's manifest.
	// +optional
	ManifestSHA256 string `json:"manifestSHA256,omitempty"`
	// +optional
	EmbeddingModel string `json:"embeddingModel,omitempty"`
	// ExpiresAt is when the TTL deletes the snapshot and its package.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:annotations="helm.sh/resource-policy=keep"
// +kubebuilder:resource:shortName=msnap,categories=memory
// +kubebuilder:printcolumn:name="Store",type=string,JSONPath=`.spec.storeRef.name`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Items",type=integer,JSONPath=`.status.items`
// +kubebuilder:printcolumn:name="Bytes",type=integer,JSONPath=`.status.bytes`
// +kubebuilder:printcolumn:name="Duration",type=string,JSONPath=`.status.duration`
// +kubebuilder:printcolumn:name="Location",type=string,JSONPath=`.status.location.prefix`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// MemorySnapshot exports a store as a verified, compressed, encrypted package in
// S3-compatible storage. It runs once, as a Job.
type MemorySnapshot struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec MemorySnapshotSpec `json:"spec"`
	// Status reads {observedGeneration: -1} until the operator first writes it (CRD
	// defaults), so an object it has not seen yet never looks done to kstatus (Flux),
	// Argo CD or a human.
	// +kubebuilder:default={}
	Status MemorySnapshotStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// MemorySnapshotList is a list of MemorySnapshots.
type MemorySnapshotList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MemorySnapshot `json:"items"`
}
