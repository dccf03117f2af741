package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterMemoryBackendSpec declares shared backends for MemoryStores in many namespaces.
type ClusterMemoryBackendSpec struct {
	BackendSpec `json:",inline"`

	// AllowedNamespaces lists the namespaces whose MemoryStores may use this backend.
	// Empty means every namespace.
	// +optional
	// +listType=set
	AllowedNamespaces []string `json:"allowedNamespaces,omitempty"`
}

// ClusterMemoryBackendStatus is what the operator found when it last checked the
// backends (every few minutes, and whenever the backend or its Secrets change).
type ClusterMemoryBackendStatus struct {
	// ObservedGeneration is the generation the status describes; -1 until the
	// operator first writes the status.
	// +kubebuilder:default=-1
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// LastChecked is when the backends were last checked.
	// +optional
	LastChecked *metav1.Time `json:"lastChecked,omitempty"`
	// Stores is the number of MemoryStores that use this backend.
	// +optional
	Stores int32 `json:"stores,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:annotations="helm.sh/resource-policy=keep"
// +kubebuilder:resource:scope=Cluster,shortName=cmb,categories=memory
// +kubebuilder:printcolumn:name="Postgres",type=string,JSONPath=`.spec.postgres.host`
// +kubebuilder:printcolumn:name="Milvus",type=string,JSONPath=`.spec.milvus.address`
// +kubebuilder:printcolumn:name="Bucket",type=string,JSONPath=`.spec.objectStorage.bucket`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Stores",type=integer,JSONPath=`.status.stores`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// ClusterMemoryBackend is shared infrastructure declared by the platform team, like a
// StorageClass: its Secrets live in the operator's namespace and tenants only name it.
type ClusterMemoryBackend struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ClusterMemoryBackendSpec `json:"spec"`
	// Status reads {observedGeneration: -1} until the operator first writes it (CRD
	// defaults), so an object it has not seen yet never looks done to kstatus (Flux),
	// Argo CD or a human.
	// +kubebuilder:default={}
	Status ClusterMemoryBackendStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ClusterMemoryBackendList is a list of ClusterMemoryBackends.
type ClusterMemoryBackendList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterMemoryBackend `json:"items"`
}

// AllowsNamespace reports whether MemoryStores in ns may use this backend.
func (b *ClusterMemoryBackend) AllowsNamespace(ns string) bool {
	if len(b.Spec.AllowedNamespaces) == 0 {
		return true
	}
	for _, allowed := range b.Spec.AllowedNamespaces {
		if allowed == ns {
			return true
		}
	}
	return false
}
