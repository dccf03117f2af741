package provision

import (
	"context"
	"fmt"

	"github.com/milvus-io/milvus-sdk-go/v2/client"

	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/milvus"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
)

// Vector engines, as recorded in status and in the connection Secret.
const (
	EngineMilvus   = "Milvus"
	EnginePostgres = "Postgres"
	EnginePGVector = "PGVector"
)

// MilvusConn is how to reach a Milvus server, as a given user when the server has
// authentication on.
type MilvusConn = milvus.Conn

// VectorResult reports the index a store uses.
type VectorResult struct {
	Engine string
	// Collection is the Milvus collection, or the PostgreSQL table holding vectors.
	Collection string
	// Created is true when this call made the collection.
	Created bool
	// Extension is the vector extension in use, as "vector <version> in schema
	// <schema>" (PGVector engine).
	Extension string
	// SearchIndexDeferredSince is when a restore's bulk load took the HNSW index away
	// ("" when it is in place; PGVector engine).
	SearchIndexDeferredSince string
}

// ConnectMilvus opens a Milvus client, bounded by connectTimeout.
func ConnectMilvus(ctx context.Context, m MilvusConn) (client.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	c, err := milvus.Connect(ctx, m)
	if err != nil {
		return nil, classify("Milvus "+m.Address, err)
	}
	return c, nil
}

// EnsureVectors makes sure the store's vector index exists with the declared shape:
// a Milvus collection when m is set, marked as owner.ID's, else the
// PostgreSQL-embedded table in the store's schema. An existing index of another
// dimension is reported (DimensionMismatch), a collection that is not the store's
// (TenantConflict), and either is left untouched. owner.AdoptUnmarked lets an
// unmarked collection (made before collections were marked) become the store's, and
// only while pg's schema for the store carries the store's own mark (SchemaOwnership):
// the caller vouches that the collection was the store's (for the operator: its
// status already records it), the schema that the tenant is.
func EnsureVectors(ctx context.Context, pg PostgresConn, m *MilvusConn, names Names, owner milvus.Owner, spec vector.Spec) (VectorResult, error) {
	if err := spec.Validate(); err != nil {
		return VectorResult{}, fail(ReasonBackendError, "vector spec: %v", err)
	}
	if m != nil {
		owner, err := vouched(ctx, pg, names, owner)
		if err != nil {
			return VectorResult{}, err
		}
		c, err := ConnectMilvus(ctx, *m)
		if err != nil {
			return VectorResult{}, err
		}
		defer c.Close()
		created, err := milvus.EnsureCollection(ctx, c, names.Collection, spec, owner)
		if err != nil {
			return VectorResult{}, classify(fmt.Sprintf("Milvus %s: collection %s", m.Address, names.Collection), err)
		}
		return VectorResult{Engine: EngineMilvus, Collection: names.Collection, Created: created}, nil
	}
	pool, err := OpenPool(ctx, pg)
	if err != nil {
		return VectorResult{}, err
	}
	defer pool.Close()
	if err := pgindex.Ensure(ctx, pool, names.Schema, spec); err != nil {
		return VectorResult{}, classify(fmt.Sprintf("PostgreSQL %s: vectors in schema %s", pg.Endpoint(), names.Schema), err)
	}
	return VectorResult{Engine: EnginePostgres, Collection: names.Schema + ".vectors"}, nil
}

// DeleteVectors drops the store's Milvus collection (and its other index
// generations', names.Generations) if it is owner's: marked as
// owner.ID's, or unmarked while owner.AdoptUnmarked and pg's schema for the store
// carries the store's mark (as in EnsureVectors). One that is not gives
// TenantConflict and stays. PostgreSQL-embedded vectors go with the schema
// (DeletePostgres), so call this first.
func DeleteVectors(ctx context.Context, pg PostgresConn, m *MilvusConn, names Names, owner milvus.Owner) error {
	if m == nil {
		return nil
	}
	owner, err := vouched(ctx, pg, names, owner)
	if err != nil {
		return err
	}
	c, err := ConnectMilvus(ctx, *m)
	if err != nil {
		return err
	}
	defer c.Close()
	for _, coll := range append([]string{names.Collection}, names.Generations...) {
		if err := milvus.DropCollection(ctx, c, coll, owner); err != nil {
			return classify(fmt.Sprintf("Milvus %s: dropping collection %s", m.Address, coll), err)
		}
	}
	return nil
}

// vouched keeps owner.AdoptUnmarked only while the store's schema carries its mark.
func vouched(ctx context.Context, pg PostgresConn, names Names, owner milvus.Owner) (milvus.Owner, error) {
	if !owner.AdoptUnmarked {
		return owner, nil
	}
	own, _, err := SchemaOwnership(ctx, pg, names, owner.ID)
	if err != nil {
		return owner, err
	}
	owner.AdoptUnmarked = own == OwnedByUs
	return owner, nil
}
