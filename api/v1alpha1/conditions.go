package v1alpha1

// Condition types. Ready summarises the others.
const (
	ConditionReady            = "Ready"
	ConditionPostgresReady    = "PostgresReady"
	ConditionVectorReady      = "VectorReady"
	ConditionObjectStoreReady = "ObjectStoreReady"
	ConditionEmbedderReady    = "EmbedderReady"
	// ConditionDegraded is True when the store exists but something found in a backend
	// contradicts the spec (e.g. a collection of another dimension) and the operator
	// refuses to touch it.
	ConditionDegraded = "Degraded"
)

// Condition reasons, CamelCase as Kubernetes expects.
const (
	ReasonProvisioned          = "Provisioned"
	ReasonProvisioning         = "Provisioning"
	ReasonNotConfigured        = "NotConfigured"
	ReasonBackendNotFound      = "BackendNotFound"
	ReasonBackendNotAllowed    = "BackendNotAllowed"
	ReasonSecretNotFound       = "SecretNotFound"
	ReasonSecretKeyMissing     = "SecretKeyMissing"
	ReasonSecretConflict       = "SecretConflict"
	ReasonUnreachable          = "Unreachable"
	ReasonAuthenticationFailed = "AuthenticationFailed"
	ReasonPermissionDenied     = "PermissionDenied"
	ReasonDimensionMismatch    = "DimensionMismatch"
	ReasonMetricMismatch       = "MetricMismatch"
	ReasonTenantConflict       = "TenantConflict"
	ReasonBucketNotFound       = "BucketNotFound"
	ReasonEmbedderFailed       = "EmbedderFailed"
	ReasonBackendError         = "BackendError"
	ReasonDeleting             = "Deleting"
	ReasonCleanupFailed        = "CleanupFailed"
	ReasonNoConflict           = "NoConflict"
	ReasonDependencyNotReady   = "DependencyNotReady"
)

// Phases derived from conditions, for `kubectl get`.
const (
	PhasePending  = "Pending"
	PhaseReady    = "Ready"
	PhaseDegraded = "Degraded"
	PhaseFailed   = "Failed"
	PhaseDeleting = "Deleting"
)
