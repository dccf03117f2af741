package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/vector/engine"
)

// Keys of the store's Secrets holding its own Milvus user, when its engine is Milvus on
// a server with authentication.
const (
	keyMilvusUsername = "milvusUsername"
	keyMilvusPassword = "milvusPassword"
)

// desiredEngine is the engine the store asks for: spec.vector.engine, else its
// backend's vectorEngine, else Milvus when the backend declares a Milvus server, else
// Postgres. A store already provisioned keeps the engine its vectors are in
// (status.vector.engine): a different answer here (a backend that gained a Milvus
// server, a new default) is refused with EngineChangeRefused, never followed, since
// following it would leave every vector behind.
func desiredEngine(store *memoryv1alpha1.MemoryStore, backend memoryv1alpha1.BackendSpec) (memoryv1alpha1.VectorEngine, error) {
	want := store.Spec.Vector.Engine
	switch {
	case want != "":
	case backend.VectorEngine != "":
		want = backend.VectorEngine
	case backend.Milvus != nil:
		want = memoryv1alpha1.EngineMilvus
	default:
		want = memoryv1alpha1.EnginePostgres
	}
	if want == memoryv1alpha1.EngineMilvus && backend.Milvus == nil {
		return "", provision.Failf(provision.ReasonEngineUnavailable,
			"vector engine Milvus: the store's backend declares no Milvus server (backend.milvus)")
	}
	if v := store.Status.Vector; v != nil && v.Engine != "" && v.Engine != string(want) {
		return "", provision.Failf(provision.ReasonEngineChangeRefused,
			"the store's vectors are in the %s engine and the spec now resolves to %s; a store moves to another engine by snapshot and restore into a new store (docs/engines.md)",
			v.Engine, want)
	}
	return want, nil
}

// storeVectors is where the Jobs and the gateway find the store's vectors, from its
// status (the index provisioning made) and spec.vector.index (search tuning).
// milvusAddress is the backend's Milvus server, when the store's engine is Milvus.
func storeVectors(store *memoryv1alpha1.MemoryStore, milvusAddress string) engine.Vectors {
	v := store.Status.Vector
	if v == nil {
		return engine.Vectors{}
	}
	out := engine.Vectors{VectorEngine: v.Engine}
	switch v.Engine {
	case engine.Milvus:
		out.MilvusAddress, out.Collection = milvusAddress, v.Collection
	case engine.PGVector:
		if ix := store.Spec.Vector.Index; ix != nil {
			out.EfSearch = int(ix.EfSearch)
			if ix.ExactSearchBelow != nil {
				out.ExactBelow = int(*ix.ExactSearchBelow)
			}
		}
	}
	return out
}

// milvusLoginEnv is the environment with the store's Milvus login, read by reference
// from secret (the connection Secret for the gateway, the worker Secret for Jobs);
// empty when the store has no Milvus user of its own (no Milvus, or a server without
// authentication).
func milvusLoginEnv(store *memoryv1alpha1.MemoryStore, secret string) []corev1.EnvVar {
	if v := store.Status.Vector; v == nil || v.MilvusUser == "" {
		return nil
	}
	return []corev1.EnvVar{
		secretEnv(engine.EnvMilvusUsername, secret, keyMilvusUsername),
		secretEnv(engine.EnvMilvusPassword, secret, keyMilvusPassword),
	}
}

// milvusUserNote names the store's Milvus user in a sentence listing its logins.
func milvusUserNote(user string) string {
	if user == "" {
		return ""
	}
	return " and Milvus user " + user
}

// milvusPassword is the store's Milvus user's password: a new one when a rotation is
// requested, else the one in its worker Secret (new on the first provisioning).
func (r *MemoryStoreReconciler) milvusPassword(ctx context.Context, store *memoryv1alpha1.MemoryStore) (string, error) {
	if store.RotationRequested() != "" {
		return newPassword()
	}
	return r.secretPassword(ctx, store, store.WorkerSecretName(), keyMilvusPassword)
}
