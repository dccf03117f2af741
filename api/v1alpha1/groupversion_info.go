// Package v1alpha1 contains the memory.amemory.io/v1alpha1 API: MemoryStore,
// ClusterMemoryBackend, MemorySnapshot and MemoryRestore.
// It depends only on apimachinery and core API types, so anything may import it.
// +kubebuilder:object:generate=true
// +groupName=memory.amemory.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "memory.amemory.io", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion,
		&MemoryStore{}, &MemoryStoreList{},
		&ClusterMemoryBackend{}, &ClusterMemoryBackendList{},
		&MemorySnapshot{}, &MemorySnapshotList{},
		&MemoryRestore{}, &MemoryRestoreList{},
	)
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
