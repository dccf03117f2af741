package v1alpha1

// Condition types. Ready, Reconciling and Stalled summarise the others the way kstatus
// (Flux), Argo CD's health checks and humans read them: Ready=True when done,
// Reconciling=True only while work is under way, Stalled=True (with Ready=False) on a
// terminal failure or one only a human can fix. The other conditions say what.
const (
	ConditionReady = "Ready"
	// ConditionReconciling is present, True, only while the operator is working on the
	// object (or waiting for something that will come); it is removed when that ends.
	ConditionReconciling = "Reconciling"
	// ConditionStalled is present, True, only when the object cannot make progress
	// without a human: a snapshot or restore that failed, a store whose backends
	// contradict its spec. It is removed when that is no longer so.
	ConditionStalled = "Stalled"

	ConditionPostgresReady    = "PostgresReady"
	ConditionVectorReady      = "VectorReady"
	ConditionObjectStoreReady = "ObjectStoreReady"
	ConditionEmbedderReady    = "EmbedderReady"
	// ConditionShortTermReady is True when the store's short-term tier is ready: its
	// Redis user made, or its sessions in PostgreSQL.
	ConditionShortTermReady = "ShortTermReady"
	// ConditionDegraded is True when the store exists but something found in a backend
	// contradicts the spec (e.g. a collection of another dimension) and the operator
	// refuses to touch it.
	ConditionDegraded = "Degraded"

	// ConditionSnapshotSchedule is True while the store's snapshot schedule is valid.
	ConditionSnapshotSchedule = "SnapshotSchedule"

	// ConditionArchival is True while the store's archival schedule works as declared
	// (scheduled, running, last run succeeded, suspended) and False while it cannot
	// (invalid schedule, the store not Ready, a Secret missing, the last run failed).
	ConditionArchival = "Archival"

	// ConditionVerified is present while spec.restoreDrill is set: True when the last
	// restore drill passed (its message names the snapshot and when), False when it
	// failed or could not run, Unknown before the first drill ended.
	ConditionVerified = "Verified"

	// ConditionGatewayReady is present only while spec.gateway.enabled: True when every
	// declared gateway replica is up to date and ready, False while it rolls out, is
	// scaled to zero, or its configuration (keys, TLS Secret) is wrong. It never
	// changes Ready: the store serves its connection Secret whatever the gateway does.
	ConditionGatewayReady = "GatewayReady"

	// ConditionSwitching is True while the store switches embedding model (a re-embed
	// into a new index generation, then the cutover), False once the last switch
	// ended (reason SwitchCompleted, SwitchFailed, SwitchAbandoned) or none was ever
	// needed (NotSwitching). A switch in progress keeps Ready=True (the store serves
	// the current model) and sets Reconciling=True, so GitOps tools show the store as
	// progressing; a failed one sets Stalled=True.
	ConditionSwitching = "Switching"

	// ConditionProgressing is True while a one-shot run (snapshot, restore) works.
	ConditionProgressing = "Progressing"
	// ConditionCompleted is True once a one-shot run ended; its reason says how.
	ConditionCompleted = "Completed"
	// ConditionExpired is False, reason TTLKept, on a snapshot whose TTL passed but
	// which a GitOps tool manages, so it was kept.
	ConditionExpired = "Expired"
)

// Condition reasons, CamelCase as Kubernetes expects.
const (
	// Embedding switch reasons (the Switching condition).
	ReasonNotSwitching               = "NotSwitching"
	ReasonReembedding                = "Reembedding"
	ReasonCuttingOver                = "CuttingOver"
	ReasonSwitchCompleted            = "SwitchCompleted"
	ReasonSwitchFailed               = "SwitchFailed"
	ReasonSwitchAbandoned            = "SwitchAbandoned"
	ReasonSwitchSuspended            = "SwitchSuspended"
	ReasonEmbeddingSwitchUnsupported = "EmbeddingSwitchUnsupported"

	ReasonProvisioned          = "Provisioned"
	ReasonProvisioning         = "Provisioning"
	ReasonNotConfigured        = "NotConfigured"
	ReasonBackendNotFound      = "BackendNotFound"
	ReasonBackendNotAllowed    = "BackendNotAllowed"
	ReasonSecretNotFound       = "SecretNotFound"
	ReasonSecretKeyMissing     = "SecretKeyMissing"
	ReasonSecretConflict       = "SecretConflict"
	ReasonInvalidKey           = "InvalidKey"
	ReasonUnreachable          = "Unreachable"
	ReasonAuthenticationFailed = "AuthenticationFailed"
	ReasonPermissionDenied     = "PermissionDenied"
	ReasonDimensionMismatch    = "DimensionMismatch"
	ReasonMetricMismatch       = "MetricMismatch"
	ReasonTenantConflict       = "TenantConflict"
	// ReasonExtensionMissing: the store's engine is PGVector and its PostgreSQL server
	// has no vector extension to create (or one too old for HNSW).
	ReasonExtensionMissing = "ExtensionMissing"
	// ReasonEngineUnavailable: the store's engine needs a server its backend does not
	// declare (Milvus without backend.milvus).
	ReasonEngineUnavailable = "EngineUnavailable"
	// ReasonEngineChangeRefused: the store's vectors are in one engine and its spec
	// (or backend) now names another; nothing is moved (snapshot and restore instead).
	ReasonEngineChangeRefused = "EngineChangeRefused"
	ReasonBucketNotFound      = "BucketNotFound"
	ReasonEmbedderFailed      = "EmbedderFailed"
	// ReasonCalibrationFailed: the embedder could not be probed for its roles or
	// calibrated; the gateway is not given an uncalibrated threshold (it waits).
	ReasonCalibrationFailed  = "CalibrationFailed"
	ReasonBackendError       = "BackendError"
	ReasonDeleting           = "Deleting"
	ReasonCleanupFailed      = "CleanupFailed"
	ReasonNoConflict         = "NoConflict"
	ReasonDependencyNotReady = "DependencyNotReady"

	// A destructive change waits for its pre-change snapshot (ConditionReady while the
	// store is deleted): to succeed, after it failed, or for a template to write it with.
	ReasonPreChangeSnapshot            = "PreChangeSnapshot"
	ReasonPreChangeSnapshotFailed      = "PreChangeSnapshotFailed"
	ReasonPreChangeSnapshotUnavailable = "PreChangeSnapshotUnavailable"

	// Restore drills (ConditionVerified).
	ReasonDrillPassed   = "DrillPassed"
	ReasonDrillFailed   = "DrillFailed"
	ReasonNotYetDrilled = "NotYetDrilled"
	ReasonNoSnapshot    = "NoSnapshot"

	ReasonInvalidSchedule      = "InvalidSchedule"
	ReasonScheduled            = "Scheduled"
	ReasonSuspended            = "Suspended"
	ReasonStoreNotFound        = "StoreNotFound"
	ReasonStoreNotReady        = "StoreNotReady"
	ReasonObjectStorageMissing = "ObjectStorageMissing"
	ReasonJobCreated           = "JobCreated"
	ReasonRunning              = "Running"
	ReasonSucceeded            = "Succeeded"
	// ReasonPending: a run the operator has yet to start.
	ReasonPending = "Pending"
	// ReasonAlreadyRestored: the target store had already received the package from
	// another MemoryRestore, so this one wrote nothing (see spec.allowRepeat).
	ReasonAlreadyRestored = "AlreadyRestored"
	// ReasonTTLKept: a snapshot's TTL passed, but a GitOps tool manages the object
	// (spec.ttlDeletesGitOpsManaged is off), so neither it nor its package was deleted.
	ReasonTTLKept          = "TTLKept"
	ReasonFailed           = "Failed"
	ReasonDeadlineExceeded = "DeadlineExceeded"
	ReasonManifestInvalid  = "ManifestInvalid"
	ReasonExpired          = "Expired"

	// A restore waits while its snapshot does not exist or has not finished, and fails
	// when the snapshot failed.
	ReasonSnapshotNotFound = "SnapshotNotFound"
	ReasonSnapshotNotReady = "SnapshotNotReady"
	ReasonSnapshotFailed   = "SnapshotFailed"
	// ReasonConfigMapNotFound and ReasonConfigMapKeyMissing: a restore's scope map.
	ReasonConfigMapNotFound   = "ConfigMapNotFound"
	ReasonConfigMapKeyMissing = "ConfigMapKeyMissing"
	// ReasonEncryptionMismatch: a restore's key (or unencrypted) contradicts its snapshot.
	ReasonEncryptionMismatch = "EncryptionMismatch"
	// ReasonInvalidSpec: a field admission should have refused (a backstop for CEL).
	ReasonInvalidSpec = "InvalidSpec"

	// Reasons an import (a MemoryRestore with source.importFrom) fails.
	// ReasonInvalidThreadIDPattern: importFrom.user.threadIdPattern is not an RE2
	// expression with a group for the user id.
	ReasonInvalidThreadIDPattern = "InvalidThreadIdPattern"
	// ReasonInvalidStoreNamespaces: importFrom.store.namespaces are rules the importer
	// refuses (a capture the scope does not use, two rules making the same scope, ...).
	ReasonInvalidStoreNamespaces = "InvalidStoreNamespaces"
	// ReasonSourceUnreachable: the source database or file could not be reached or read
	// (connection refused, no such object, wrong object-storage credentials).
	ReasonSourceUnreachable = "SourceUnreachable"
	// ReasonNotACheckpointer: the source is not a LangGraph checkpointer (no checkpoint
	// tables in the schema, a file that is not SQLite).
	ReasonNotACheckpointer = "NotACheckpointer"
	// ReasonUnsupportedFormat: a checkpointer version or serialization the importer
	// does not read.
	ReasonUnsupportedFormat = "UnsupportedFormat"

	// Reasons of GatewayReady.
	// ReasonDeployed: every declared replica is up to date and ready.
	ReasonDeployed = "Deployed"
	// ReasonProgressing: the gateway is rolling out (or a replica is not ready).
	ReasonProgressing = "Progressing"
	// ReasonScaledToZero: spec.gateway.replicas is 0; nothing answers at the URL.
	ReasonScaledToZero = "ScaledToZero"
	// ReasonRolloutStuck: the Deployment exceeded its progress deadline.
	ReasonRolloutStuck = "RolloutStuck"
	// ReasonInvalidScopePattern: a key's scope pattern is not one the gateway accepts.
	ReasonInvalidScopePattern = "InvalidScopePattern"
	// ReasonInvalidGatewayConfig: another gateway setting the gateway would refuse.
	ReasonInvalidGatewayConfig = "InvalidGatewayConfig"
	// ReasonTLSSecretMissing: spec.gateway.tls.secretName does not exist (yet).
	ReasonTLSSecretMissing = "TLSSecretMissing"
	// ReasonTLSSecretInvalid: the TLS Secret lacks tls.crt or tls.key.
	ReasonTLSSecretInvalid = "TLSSecretInvalid"
	// ReasonNameConflict: an object the gateway needs (Deployment, Service, keys
	// Secret) exists and is not this store's.
	ReasonNameConflict = "NameConflict"
)

// Phases derived from conditions, for `kubectl get`.
const (
	PhasePending  = "Pending"
	PhaseReady    = "Ready"
	PhaseDegraded = "Degraded"
	PhaseFailed   = "Failed"
	PhaseDeleting = "Deleting"

	PhaseRunning   = "Running"
	PhaseSucceeded = "Succeeded"
)

// IsSuccessReason reports whether a one-shot run (snapshot, restore) that completed
// with this reason did what was asked: it succeeded, or found it already done.
func IsSuccessReason(reason string) bool {
	return reason == ReasonSucceeded || reason == ReasonAlreadyRestored
}
