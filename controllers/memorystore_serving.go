package controllers

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
)

// The serving generation (status.embedding.serving) is what the gateway and every Job
// embed with: spec.embedder may already name another model that a switch is still
// re-embedding for (memorystore_switch.go). A store provisioned before switches
// existed, or not yet provisioned, serves what its spec says.

// cuttingOver reports whether the store is between the two steps of a switch's
// cutover: its status serves the new generation, which may still lag the last writes
// of the old configuration by a few seconds. No Job starts meanwhile (a snapshot
// would export those memories' vectors as they were); it lasts the gateway's
// rollout.
func cuttingOver(store *memoryv1alpha1.MemoryStore) bool {
	e := store.Status.Embedding
	return e != nil && e.Switch != nil && e.Switch.CutoverAt != nil
}

// cutoverWait is the message of a Job that waits for a cutover.
func cutoverWait(store *memoryv1alpha1.MemoryStore) string {
	return fmt.Sprintf("MemoryStore %s is cutting over to another embedding model (status.embedding.switch); waiting for it to end", store.Name)
}

// servingEmbedder is the embedder spec of the store's serving generation.
func servingEmbedder(store *memoryv1alpha1.MemoryStore) memoryv1alpha1.EmbedderSpec {
	if e := store.Status.Embedding; e != nil {
		return e.Serving.Embedder
	}
	return store.Spec.Embedder
}

// servingDimension is the dimension of the serving generation's vectors.
func servingDimension(store *memoryv1alpha1.MemoryStore) int32 {
	if e := store.Status.Embedding; e != nil && e.Serving.Dimension > 0 {
		return e.Serving.Dimension
	}
	return store.Spec.Vector.Dimension
}

// embedderAPIKeyEnv is the environment variable name with the serving embedder's
// token, by reference; none for an embedder without one.
func embedderAPIKeyEnv(store *memoryv1alpha1.MemoryStore, name string) []corev1.EnvVar {
	if e := servingEmbedder(store); e.Type == memoryv1alpha1.EmbedderOpenAI && e.APIKeySecret != nil {
		return []corev1.EnvVar{secretEnv(name, e.APIKeySecret.Name, e.APIKeySecret.Key)}
	}
	return nil
}

// embedderAPIKeyRefs are the embedder tokens the store reads: the serving
// generation's, the spec's (a switch's target) and a retained one's.
func embedderAPIKeyRefs(store *memoryv1alpha1.MemoryStore) []*corev1.SecretKeySelector {
	refs := []*corev1.SecretKeySelector{store.Spec.Embedder.APIKeySecret}
	if e := store.Status.Embedding; e != nil {
		refs = append(refs, e.Serving.Embedder.APIKeySecret)
		if p := e.Previous; p != nil {
			refs = append(refs, p.Embedder.APIKeySecret)
		}
	}
	out := refs[:0]
	for _, r := range refs {
		if r != nil {
			out = append(out, r)
		}
	}
	return out
}
