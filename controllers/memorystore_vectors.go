package controllers

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
	"github.com/amemory/memory-operator/internal/vector/pgvector"
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
	case engine.Postgres:
		out.VectorTable = servingTable(store)
	case engine.Milvus:
		out.MilvusAddress, out.Collection = milvusAddress, v.Collection
		if e := store.Status.Embedding; e != nil && e.Serving.Index != "" {
			out.Collection = e.Serving.Index // a switch's generation serves
		}
	case engine.PGVector:
		out.VectorTable = servingTable(store)
		if ix := store.Spec.Vector.Index; ix != nil {
			out.EfSearch = int(ix.EfSearch)
			if ix.ExactSearchBelow != nil {
				out.ExactBelow = int(*ix.ExactSearchBelow)
			}
		}
	}
	return out
}

// servingNames is names (NamesFor's) as the store's Milvus provisioning, role and
// deletion take them: Collection the serving generation's collection, Generations
// the others it has (a switch's new one, the previous one kept for a rollback).
// Other engines' names are left as they are.
func servingNames(store *memoryv1alpha1.MemoryStore, names provision.Names) provision.Names {
	e, v := store.Status.Embedding, store.Status.Vector
	if e == nil || v == nil || v.Engine != provision.EngineMilvus {
		return names
	}
	if e.Serving.Index != "" {
		names.Collection = e.Serving.Index
	}
	names.Generations = nil
	if sw := e.Switch; sw != nil && sw.To.Index != "" && sw.To.Index != names.Collection {
		names.Generations = append(names.Generations, sw.To.Index)
	}
	if p := e.Previous; p != nil && p.Index != "" && p.Index != names.Collection && !slices.Contains(names.Generations, p.Index) {
		names.Generations = append(names.Generations, p.Index)
	}
	return names
}

// servingTable is the VectorTable of the store's serving generation: "" for the
// engine's own table, a generation's table once a switch made it serve.
func servingTable(store *memoryv1alpha1.MemoryStore) string {
	if e := store.Status.Embedding; e != nil {
		return generationTable(e.Serving.Index)
	}
	return ""
}

// generationTable is the VectorTable of a generation whose index is index: "" for
// an engine's own table (pgindex's vectors, pgvector's embeddings).
func generationTable(index string) string {
	if index == pgindex.Table || index == pgvector.Table {
		return ""
	}
	return index
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

// storeIndex is the index provisioning made for a store, and the store's own Milvus
// login when it has one.
type storeIndex struct {
	provision.VectorResult
	milvusUser, milvusPassword string
}

// ensureVectors provisions the store's index in its engine: the schema's vectors
// table (Postgres), the vector extension and HNSW index (PGVector), or a collection
// marked as the store's and, on a server with authentication, the store's own Milvus
// user and role with privileges on that collection alone (Milvus).
func (r *MemoryStoreReconciler) ensureVectors(ctx context.Context, store *memoryv1alpha1.MemoryStore, rb *resolvedBackend,
	names provision.Names, eng memoryv1alpha1.VectorEngine, spec vector.Spec) (storeIndex, error) {
	var out storeIndex
	var err error
	switch eng {
	case memoryv1alpha1.EnginePGVector:
		table := pgvector.Table
		if t := servingTable(store); t != "" {
			table = t
		}
		out.VectorResult, err = provision.EnsurePGVectorServing(ctx, rb.postgres, names, table, spec, pgvectorParams(store))
		return out, err
	case memoryv1alpha1.EngineMilvus:
		out.VectorResult, err = provision.EnsureVectors(ctx, rb.postgres, rb.milvus, names, vectorOwner(store, names), spec)
	default:
		out.VectorResult, err = provision.EnsureVectors(ctx, rb.postgres, nil, names, vectorOwner(store, names), spec)
		return out, err
	}
	if err != nil || rb.milvus.Username == "" {
		return out, err // a server without authentication has no users
	}
	previous, err := r.secretPassword(ctx, store, store.WorkerSecretName(), keyMilvusPassword)
	if err != nil {
		return out, err
	}
	password := previous
	if store.RotationRequested() != "" {
		if password, err = newPassword(); err != nil {
			return out, err
		}
	}
	if err := provision.EnsureMilvusTenant(ctx, *rb.milvus, names, ownerOf(store), password, previous); err != nil {
		return out, err
	}
	out.milvusUser, out.milvusPassword = names.MilvusUser, password
	return out, nil
}

// pgvectorParams is spec.vector.index as the PGVector engine's parameters (zero
// fields: its defaults).
func pgvectorParams(store *memoryv1alpha1.MemoryStore) pgvector.Params {
	ix := store.Spec.Vector.Index
	if ix == nil {
		return pgvector.Params{}
	}
	p := pgvector.Params{M: int(ix.M), EfConstruction: int(ix.EfConstruction), EfSearch: int(ix.EfSearch)}
	if ix.ExactSearchBelow != nil {
		p.ExactBelow = int(*ix.ExactSearchBelow)
	}
	return p
}
