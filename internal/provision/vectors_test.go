package provision

import (
	"context"
	"testing"

	"github.com/milvus-io/milvus-sdk-go/v2/client"
	"github.com/milvus-io/milvus-sdk-go/v2/entity"

	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/milvus"
)

// legacyCollection makes the store's collection as versions before owner marks did:
// the same layout, no properties.
func legacyCollection(t *testing.T, c client.Client, name string) {
	t.Helper()
	sch := entity.NewSchema().WithName(name).WithAutoID(false).
		WithField(entity.NewField().WithName(milvus.FieldID).WithDataType(entity.FieldTypeVarChar).WithIsPrimaryKey(true).WithMaxLength(vector.MaxIDLen)).
		WithField(entity.NewField().WithName(milvus.FieldScope).WithDataType(entity.FieldTypeVarChar).WithMaxLength(vector.MaxScopeLen)).
		WithField(entity.NewField().WithName(milvus.FieldType).WithDataType(entity.FieldTypeVarChar).WithMaxLength(vector.MaxTypeLen)).
		WithField(entity.NewField().WithName(milvus.FieldEmbedding).WithDataType(entity.FieldTypeFloatVector).WithDim(4))
	if err := c.CreateCollection(context.Background(), sch, 1, client.WithConsistencyLevel(entity.ClStrong)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DropCollection(context.Background(), name) })
}

// TestEnsureVectorsAdoptsOnlyWithItsSchema: an unmarked collection (an upgrade) becomes
// the store's only when the caller vouches for it (AdoptUnmarked) and the store's
// schema carries the store's mark; a store whose schema is missing or another's gets
// TenantConflict, and the collection stays unmarked. Deletion follows the same rule.
func TestEnsureVectorsAdoptsOnlyWithItsSchema(t *testing.T) {
	admin, names, _ := provisioned(t) // schema marked "team-a/bot"
	m := &MilvusConn{Address: testutil.MilvusAddr(t)}
	c, err := ConnectMilvus(context.Background(), *m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	spec := vector.Spec{Dimension: 4, Metric: vector.Cosine}
	legacyCollection(t, c, names.Collection)
	mark := func() string {
		coll, err := c.DescribeCollection(ctx, names.Collection)
		if err != nil {
			t.Fatal(err)
		}
		return coll.Properties[milvus.OwnerProperty]
	}

	for _, o := range []milvus.Owner{
		{ID: "team-a/bot"},                      // not vouched for
		{ID: "team-b/bot", AdoptUnmarked: true}, // the schema is another's
	} {
		if _, err := EnsureVectors(ctx, admin, m, names, o, spec); ReasonOf(err) != ReasonTenantConflict {
			t.Fatalf("EnsureVectors as %+v: %v (reason %s), want TenantConflict", o, err, ReasonOf(err))
		}
		if err := DeleteVectors(ctx, admin, m, names, o); ReasonOf(err) != ReasonTenantConflict {
			t.Fatalf("DeleteVectors as %+v: %v (reason %s), want TenantConflict", o, err, ReasonOf(err))
		}
	}
	// A store with the same tenant and no schema on its PostgreSQL (another server
	// sharing this Milvus; here another schema name stands for it).
	elsewhere := names
	elsewhere.Schema = "mem_absent_" + names.Tenant[len("grants-"):]
	if _, err := EnsureVectors(ctx, admin, m, elsewhere, milvus.Owner{ID: "team-a/bot", AdoptUnmarked: true}, spec); ReasonOf(err) != ReasonTenantConflict {
		t.Fatalf("EnsureVectors without a schema of its own: %v, want TenantConflict", err)
	}
	if err := DeleteVectors(ctx, admin, m, elsewhere, milvus.Owner{ID: "team-a/bot", AdoptUnmarked: true}); ReasonOf(err) != ReasonTenantConflict {
		t.Fatalf("DeleteVectors without a schema of its own: %v, want TenantConflict", err)
	}
	if got := mark(); got != "" {
		t.Fatalf("refused adoptions left the mark %q", got)
	}

	res, err := EnsureVectors(ctx, admin, m, names, milvus.Owner{ID: "team-a/bot", AdoptUnmarked: true}, spec)
	if err != nil || res.Created {
		t.Fatalf("adopting: %+v, %v", res, err)
	}
	if got := mark(); got != "team-a/bot" {
		t.Fatalf("after adopting, mark %q", got)
	}
	// Adopted: from now on it is the store's without vouching.
	if _, err := EnsureVectors(ctx, admin, m, names, milvus.Owner{ID: "team-a/bot"}, spec); err != nil {
		t.Fatal(err)
	}
	if err := DeleteVectors(ctx, admin, m, names, milvus.Owner{ID: "team-b/bot", AdoptUnmarked: true}); ReasonOf(err) != ReasonTenantConflict {
		t.Fatalf("DeleteVectors by another store: %v, want TenantConflict", err)
	}
	if err := DeleteVectors(ctx, admin, m, names, milvus.Owner{ID: "team-a/bot"}); err != nil {
		t.Fatal(err)
	}
	if has, err := c.HasCollection(ctx, names.Collection); err != nil || has {
		t.Fatalf("after DeleteVectors: has=%v err=%v", has, err)
	}
}
