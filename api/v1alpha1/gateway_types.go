package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GatewaySpec runs the memory gateway for the store: `memory-operator gateway`, a
// stateless Deployment and a Service named "<store>-gateway" in the store's namespace,
// connecting as the store's own role (the connection Secret's "uri"), never as an
// admin. The operator generates the API keys into the Secret "<store>-gateway-keys"
// and adds gatewayURL and gatewayKey to the connection Secret.
// +kubebuilder:validation:XValidation:rule="!has(self.connectionKey) || !has(self.keys) || self.keys.exists(k, k.name == self.connectionKey)",message="connectionKey must name one of keys"
type GatewaySpec struct {
	// Enabled runs the gateway. false (or no spec.gateway) removes its Deployment,
	// Service and keys Secret, and the gateway entries of the connection Secret.
	// +optional
	Enabled bool `json:"enabled,omitempty"`

	// Replicas of the gateway; it is stateless and scales horizontally.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// Resources of the gateway container.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`

	// Template overrides parts of the gateway's pod template.
	// +optional
	Template *GatewayPodTemplate `json:"template,omitempty"`

	// Service is how the gateway is exposed.
	// +optional
	Service *GatewayServiceSpec `json:"service,omitempty"`

	// TLS serves the API over HTTPS with a certificate from a Secret.
	// +optional
	TLS *GatewayTLS `json:"tls,omitempty"`

	// Keys are the gateway's API keys. The operator generates each key once and keeps
	// it; several are valid at once, so a key is rotated by adding a new one, moving
	// the clients to it and removing the old one.
	// +kubebuilder:default={{name: "default", scopes: {"*"}}}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=name
	// +optional
	Keys []GatewayKey `json:"keys,omitempty"`

	// ConnectionKey names the key whose value goes into the connection Secret
	// (gatewayKey); defaults to the first of keys.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	ConnectionKey string `json:"connectionKey,omitempty"`

	// DedupThreshold overrides the near-duplicate threshold the operator calibrates
	// for the store's model (status.embedder.dedupThreshold): a write at least this
	// similar (0 to 1) to a memory of the same scope and type reinforces that memory
	// instead of adding a near-duplicate. A decimal number written as a string, e.g.
	// "0.97"; "0" turns it off. Unset: the calibrated threshold.
	// +kubebuilder:validation:MaxLength=8
	// +kubebuilder:validation:XValidation:rule="self.matches('^(0([.][0-9]{1,6})?|1([.]0{1,6})?)$')",message="dedupThreshold must be a decimal number from 0 to 1 such as \"0.9\""
	// +optional
	DedupThreshold string `json:"dedupThreshold,omitempty"`

	// MinSimilarity, when set, leaves out of every search result a memory less
	// similar than it to the query (cosine for COSINE stores), whichever channel
	// found it; a request's min_similarity overrides it. A decimal number from -1 to
	// 1 written as a string, e.g. "0.7" (seed 003's value for its model). Pick it for
	// the store's model: multilingual-e5 scores unrelated sentences 0.85 and more.
	// Unset: no minimum.
	// +kubebuilder:validation:MaxLength=9
	// +kubebuilder:validation:XValidation:rule="self.matches('^-?(0([.][0-9]{1,6})?|1([.]0{1,6})?)$')",message="minSimilarity must be a decimal number from -1 to 1 such as \"0.7\""
	// +optional
	MinSimilarity string `json:"minSimilarity,omitempty"`

	// RateLimit applies to each API key.
	// +optional
	RateLimit *GatewayRateLimit `json:"rateLimit,omitempty"`

	// LangGraph configures the LangGraph Store API the gateway serves.
	// +optional
	LangGraph *LangGraphSpec `json:"langgraph,omitempty"`

	// QueryCache keeps search results for a while, in the store's Redis when it has
	// one (spec.shortTerm.store Redis) and in each replica's memory otherwise. An
	// entry is served only while its scope is unchanged: any write, update, delete,
	// archival or forget of the scope, by the gateway or a Job, makes the next search
	// go to the store. Unset: no cache.
	// +optional
	QueryCache *QueryCacheSpec `json:"queryCache,omitempty"`
}

// QueryCacheSpec configures the gateway's query cache.
type QueryCacheSpec struct {
	// TTL is how long a result may be served at most, 1s to 24h.
	// +kubebuilder:default="300s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="ttl must be from 1s to 24h"
	// +optional
	TTL *metav1.Duration `json:"ttl,omitempty"`

	// SemanticThreshold, when set, also serves a query whose embedding is at least
	// this similar (0 to 1, exclusive) to a cached query's of the same scope and
	// parameters. A decimal number written as a string, e.g. "0.97". Unset: exact
	// queries only (their text normalised), the safe default: a similar query is not
	// always the same question.
	// +kubebuilder:validation:MaxLength=8
	// +kubebuilder:validation:XValidation:rule="self.matches('^0[.][0-9]{1,6}$')",message="semanticThreshold must be a decimal number between 0 and 1 such as \"0.97\""
	// +optional
	SemanticThreshold string `json:"semanticThreshold,omitempty"`
}

// GatewayKey is one API key of the gateway.
type GatewayKey struct {
	// Name identifies the key (in logs, metrics and the keys Secret, whose entry of
	// this name holds the key itself). Lowercase letters, digits and '-'.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Scopes the key may read and write: an exact scope ("agent:support"), a prefix
	// ending in '*' ("user:*", "user:acme-*"), or "*" for every scope of the store.
	// +kubebuilder:default={"*"}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	// +optional
	Scopes []GatewayScopePattern `json:"scopes,omitempty"`

	// ReadOnly keys may get, list, search and recall, but not write, update, delete
	// or forget.
	// +optional
	ReadOnly bool `json:"readOnly,omitempty"`
}

// GatewayScopePattern is a scope ("<kind>:<id>"), a scope prefix ending in '*', or
// "*". Admission checks its shape; the operator checks the rest (the scope kinds, the
// characters of the id) and reports the reason InvalidScopePattern.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=210
// +kubebuilder:validation:XValidation:rule="self == '*' || self.matches(r'^[a-z]+:[\\p{L}\\p{N}\\p{M}._@:/-]*[*]?$')",message="a scope pattern is \"*\", a scope such as \"agent:support\", or a prefix ending in '*' such as \"user:*\""
type GatewayScopePattern string

// GatewayPodTemplate is what may be set on the gateway's pods. Everything else (the
// container, its security context, volumes and probes) is the operator's.
type GatewayPodTemplate struct {
	// Metadata adds labels and annotations to the pods. The operator's own labels
	// (app.kubernetes.io/name, app.kubernetes.io/component, app.kubernetes.io/managed-by,
	// memory.amemory.io/store) select the pods and cannot be set here.
	// +optional
	Metadata GatewayPodMetadata `json:"metadata,omitempty"`

	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`
	// +optional
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`
}

// GatewayPodMetadata is the labels and annotations added to the gateway's pods.
type GatewayPodMetadata struct {
	// +kubebuilder:validation:XValidation:rule="self.all(k, !(k in ['app.kubernetes.io/name', 'app.kubernetes.io/component', 'app.kubernetes.io/managed-by', 'memory.amemory.io/store']))",message="the labels app.kubernetes.io/name, app.kubernetes.io/component, app.kubernetes.io/managed-by and memory.amemory.io/store are the operator's"
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// GatewayServiceSpec is how the gateway's Service exposes it.
type GatewayServiceSpec struct {
	// Type of the Service.
	// +kubebuilder:default=ClusterIP
	// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
	// +optional
	Type corev1.ServiceType `json:"type,omitempty"`

	// Annotations of the Service (load-balancer settings, for example).
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// GatewayTLS is the gateway's certificate.
type GatewayTLS struct {
	// SecretName is a kubernetes.io/tls Secret (keys tls.crt and tls.key) in the
	// store's namespace, as cert-manager writes them. The gateway re-reads the files
	// when the Secret changes: a renewed certificate needs no restart.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	SecretName string `json:"secretName"`
}

// GatewayRateLimit is a token bucket per API key: requests beyond it get 429 with
// Retry-After.
type GatewayRateLimit struct {
	// RequestsPerSecond is the sustained rate per key.
	// +kubebuilder:default=50
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	// +optional
	RequestsPerSecond int32 `json:"requestsPerSecond,omitempty"`

	// Burst is how many requests a key may make at once.
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	// +optional
	Burst int32 `json:"burst,omitempty"`
}

// LangGraphSpec configures the LangGraph Store API of the gateway.
type LangGraphSpec struct {
	// Namespaces map LangGraph namespaces to scopes, tried in order; the first that
	// matches wins, and a namespace no rule maps is refused. Two rules that could map
	// to the same scope are refused (each memory has one namespace). Empty:
	// ("memories", "{user}", "*") maps to user:<user>, ("sessions", "{id}", "*") to
	// session:<id>, ("agents", "{id}", "*") to agent:<id>.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	Namespaces []LangGraphNamespaceRule `json:"namespaces,omitempty"`
}

// LangGraphNamespaceRule maps LangGraph namespaces to a scope (the API's mirror of the
// gateway's rule). Namespace is a pattern of labels: a literal label matches itself,
// "{name}" captures one label, and a final "*" matches any number of further labels.
// Scope is a template over the captures, using each exactly once ("user:{user}").
type LangGraphNamespaceRule struct {
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=100
	// +listType=atomic
	Namespace []string `json:"namespace"`

	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=210
	Scope string `json:"scope"`
}

// GatewayStatus is the observed state of the store's gateway.
type GatewayStatus struct {
	// URL is the gateway's address inside the cluster:
	// http(s)://<store>-gateway.<namespace>.svc:8080.
	// +optional
	URL string `json:"url,omitempty"`
	// GRPCAddress is the gateway's gRPC API (memory.v1.MemoryService) inside the
	// cluster: <store>-gateway.<namespace>.svc:8081, with TLS as the URL.
	// +optional
	GRPCAddress string `json:"grpcAddress,omitempty"`
	// Replicas is the number of replicas declared; ReadyReplicas how many serve.
	Replicas      int32 `json:"replicas"`
	ReadyReplicas int32 `json:"readyReplicas"`
	// Keys are the names of the API keys in use (never the keys).
	// +optional
	Keys []string `json:"keys,omitempty"`
	// ConnectionKey is the key whose value is the connection Secret's gatewayKey.
	// +optional
	ConnectionKey string `json:"connectionKey,omitempty"`
	// KeysSecret is the Secret holding the keys and the gateway's keys.json, at the
	// version the gateway was given.
	// +optional
	KeysSecret *SecretVersion `json:"keysSecret,omitempty"`
	// TLSSecret is the certificate's Secret, at the version observed.
	// +optional
	TLSSecret *SecretVersion `json:"tlsSecret,omitempty"`
}

// SecretVersion is a Secret and the resourceVersion observed.
type SecretVersion struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
}
