// Package v1alpha1 contains the memory.amemory.io/v1alpha1 API: MemoryStore and
// ClusterMemoryBackend (and, in later slices, MemorySnapshot and MemoryRestore).
// +kubebuilder:object:generate=true
// +groupName=memory.amemory.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "memory.amemory.io", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
