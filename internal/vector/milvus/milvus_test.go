// Integration tests against a real Milvus Lite gRPC server (testutil.MilvusAddr).
//
// milvus-sdk-go/v2 v2.4.2 calls these tests run against Milvus Lite 3.2.2, all of
// them supported:
//   - client.NewClient (Config{Address}), Close
//   - HasCollection, DescribeCollection (schema fields, type params dim/max_length)
//   - CreateCollection: VarChar primary key without auto-id, VarChar fields with
//     max_length, FloatVector with dim, WithConsistencyLevel(ClStrong)
//   - CreateIndex (HNSW, synchronous), DescribeIndex (index_type and metric_type params)
//   - LoadCollection (synchronous), DropCollection
//   - Upsert (column based: VarChar and FloatVector columns)
//   - Delete with boolean expressions `memory_id in ["a","b"]` and `scope == "..."`
//   - Search with a boolean expression filter (`scope == "..." && memory_type in [...]`),
//     COSINE, L2 and IP, HNSW search param, WithSearchQueryConsistencyLevel(ClStrong)
//
// Also tried while exploring, and supported: GetVersion ("milvus_lite-3.2.2"), Insert,
// Query, DeleteByPks, GetCollectionStatistics, Flush, ReleaseCollection, CreateIndex
// with FLAT, IVF_FLAT and AUTOINDEX.
//
// No call used here is unsupported. Behaviour that differs from a full Milvus (none is
// relied on):
//   - Insert of an existing primary key replaces the row (real Milvus keeps both), so
//     this package always uses Upsert, which both implement as replace.
//   - DescribeIndex on a collection without an index fails with
//     "no index on collection '<name>'" (real Milvus: "index not found");
//     EnsureCollection treats any DescribeIndex failure as "create the index".
//   - Search with a query vector of the wrong dimension returns no hits instead of an
//     error, and a metric other than the index's is used instead of rejected: the
//     Index validates both before calling Milvus.
//   - CreateCollection accepts names real Milvus rejects ("1bad-name"):
//     ValidCollectionName enforces Milvus's rules client-side.
//   - ListCollections returns an empty list even when collections exist (not used).
//   - DropCollection of a missing collection succeeds (DropCollection here checks
//     HasCollection first, since real Milvus versions differ).
//   - L2 scores are squared distances, as in real Milvus.
package milvus_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/milvus-io/milvus-sdk-go/v2/client"
	"github.com/milvus-io/milvus-sdk-go/v2/entity"

	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/milvus"
	"github.com/amemory/memory-operator/internal/vector/vectortest"
)

func connect(t *testing.T) client.Client {
	t.Helper()
	addr := testutil.MilvusAddr(t)
	c, err := milvus.Connect(context.Background(), milvus.Conn{Address: addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// testOwner is the store the tests' collections belong to.
var testOwner = milvus.Owner{ID: "tests/milvus"}

// newCollection creates a fresh collection for spec and drops it when the test ends.
func newCollection(t *testing.T, c client.Client, spec vector.Spec) string {
	t.Helper()
	name := testutil.UniqueName("t_")
	t.Cleanup(func() {
		if err := milvus.DropCollection(context.Background(), c, name, testOwner); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	created, err := milvus.EnsureCollection(context.Background(), c, name, spec, testOwner)
	if err != nil {
		t.Fatalf("ensure collection %s: %v", name, err)
	}
	if !created {
		t.Fatalf("ensure collection %s: created = false for a new collection", name)
	}
	return name
}

func TestConformance(t *testing.T) {
	c := connect(t)
	vectortest.Run(t, vectortest.Harness{
		New: func(t *testing.T, spec vector.Spec) vector.Index {
			return milvus.New(c, newCollection(t, c, spec), spec)
		},
		Reopen: func(t *testing.T, idx vector.Index, spec vector.Spec) (vector.Index, error) {
			name := idx.(*milvus.Index).Collection()
			created, err := milvus.EnsureCollection(context.Background(), c, name, spec, testOwner)
			if err != nil {
				return nil, err
			}
			if created {
				t.Fatalf("EnsureCollection re-created existing collection %s", name)
			}
			return milvus.New(c, name, spec), nil
		},
	})
}

func TestEnsureCollectionSchemaAndIdempotence(t *testing.T) {
	c := connect(t)
	ctx := context.Background()
	spec := vector.Spec{Dimension: 16, Metric: vector.L2}
	name := newCollection(t, c, spec)

	created, err := milvus.EnsureCollection(ctx, c, name, spec, testOwner)
	if err != nil || created {
		t.Fatalf("second EnsureCollection: created=%v err=%v, want false, nil", created, err)
	}

	coll, err := c.DescribeCollection(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	type field struct {
		name   string
		typ    entity.FieldType
		pk     bool
		auto   bool
		params string
	}
	var got []field
	for _, f := range coll.Schema.Fields {
		p := f.TypeParams[entity.TypeParamMaxLength] + f.TypeParams[entity.TypeParamDim]
		got = append(got, field{f.Name, f.DataType, f.PrimaryKey, f.AutoID, p})
	}
	want := []field{
		{"memory_id", entity.FieldTypeVarChar, true, false, "128"},
		{"scope", entity.FieldTypeVarChar, false, false, "256"},
		{"memory_type", entity.FieldTypeVarChar, false, false, "16"},
		{"embedding", entity.FieldTypeFloatVector, false, false, "16"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("schema fields = %+v, want %+v", got, want)
	}
	idxs, err := c.DescribeIndex(ctx, name, "embedding")
	if err != nil || len(idxs) != 1 {
		t.Fatalf("DescribeIndex = %v, %v; want one index", idxs, err)
	}
	if p := idxs[0].Params(); p["index_type"] != "HNSW" || p["metric_type"] != "L2" {
		t.Fatalf("index params = %v, want HNSW with L2", p)
	}
}

func TestEnsureCollectionCreatesMissingIndex(t *testing.T) {
	c := connect(t)
	ctx := context.Background()
	name := testutil.UniqueName("t_")
	t.Cleanup(func() { _ = c.DropCollection(context.Background(), name) })
	// A collection left behind by a crash between CreateCollection and CreateIndex.
	sch := entity.NewSchema().WithName(name).
		WithField(entity.NewField().WithName("memory_id").WithDataType(entity.FieldTypeVarChar).WithIsPrimaryKey(true).WithMaxLength(128)).
		WithField(entity.NewField().WithName("scope").WithDataType(entity.FieldTypeVarChar).WithMaxLength(256)).
		WithField(entity.NewField().WithName("memory_type").WithDataType(entity.FieldTypeVarChar).WithMaxLength(16)).
		WithField(entity.NewField().WithName("embedding").WithDataType(entity.FieldTypeFloatVector).WithDim(4))
	if err := c.CreateCollection(ctx, sch, 1, client.WithCollectionProperty(milvus.OwnerProperty, testOwner.ID)); err != nil {
		t.Fatal(err)
	}
	spec := vector.Spec{Dimension: 4, Metric: vector.Cosine}
	created, err := milvus.EnsureCollection(ctx, c, name, spec, testOwner)
	if err != nil || created {
		t.Fatalf("EnsureCollection = %v, %v; want false, nil", created, err)
	}
	idxs, err := c.DescribeIndex(ctx, name, "embedding")
	if err != nil || len(idxs) != 1 || idxs[0].Params()["metric_type"] != "COSINE" {
		t.Fatalf("DescribeIndex = %v, %v; want one COSINE index", idxs, err)
	}
	ix := milvus.New(c, name, spec)
	if err := ix.Upsert(ctx, []vector.Entry{{ID: "x", Scope: "user:1", Type: "semantic", Vector: []float32{0, 1, 0, 0}}}); err != nil {
		t.Fatal(err)
	}
	hits, err := ix.Search(ctx, vector.Query{Scope: "user:1", Vector: []float32{0, 2, 0, 0}, K: 3})
	if err != nil || len(hits) != 1 || hits[0].ID != "x" {
		t.Fatalf("search = %v, %v", hits, err)
	}
}

func TestEnsureCollectionRejectsForeignSchema(t *testing.T) {
	c := connect(t)
	ctx := context.Background()
	name := testutil.UniqueName("t_")
	t.Cleanup(func() { _ = c.DropCollection(context.Background(), name) })
	sch := entity.NewSchema().WithName(name).
		WithField(entity.NewField().WithName("id").WithDataType(entity.FieldTypeInt64).WithIsPrimaryKey(true)).
		WithField(entity.NewField().WithName("vec").WithDataType(entity.FieldTypeFloatVector).WithDim(4))
	// Marked as ours, so the schema is what is checked.
	if err := c.CreateCollection(ctx, sch, 1, client.WithCollectionProperty(milvus.OwnerProperty, testOwner.ID)); err != nil {
		t.Fatal(err)
	}
	_, err := milvus.EnsureCollection(ctx, c, name, vector.Spec{Dimension: 4, Metric: vector.Cosine}, testOwner)
	if err == nil || errors.Is(err, vector.ErrDimensionMismatch) {
		t.Fatalf("EnsureCollection on a foreign collection: err = %v, want a schema error", err)
	}
	has, err := c.HasCollection(ctx, name)
	if err != nil || !has {
		t.Fatalf("foreign collection was dropped: has=%v err=%v", has, err)
	}
}

func TestDropCollectionIdempotent(t *testing.T) {
	c := connect(t)
	ctx := context.Background()
	name := testutil.UniqueName("t_")
	if _, err := milvus.EnsureCollection(ctx, c, name, vector.Spec{Dimension: 2, Metric: vector.IP}, testOwner); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := milvus.DropCollection(ctx, c, name, testOwner); err != nil {
			t.Fatalf("drop #%d: %v", i+1, err)
		}
	}
	if has, err := c.HasCollection(ctx, name); err != nil || has {
		t.Fatalf("after drop: has=%v err=%v", has, err)
	}
}

func TestEnsureCollectionValidatesInput(t *testing.T) {
	// Fails before any call reaches Milvus, so no server is needed.
	ctx := context.Background()
	if _, err := milvus.EnsureCollection(ctx, nil, "1bad", vector.Spec{Dimension: 4, Metric: vector.L2}, testOwner); err == nil {
		t.Error("bad name accepted")
	}
	if _, err := milvus.EnsureCollection(ctx, nil, "ok", vector.Spec{Dimension: 1, Metric: vector.L2}, testOwner); err == nil {
		t.Error("dimension 1 accepted")
	}
	if _, err := milvus.EnsureCollection(ctx, nil, "ok", vector.Spec{Dimension: 4, Metric: "HAMMING"}, testOwner); err == nil {
		t.Error("metric HAMMING accepted")
	}
	if _, err := milvus.EnsureCollection(ctx, nil, "ok", vector.Spec{Dimension: 4, Metric: vector.L2}, milvus.Owner{}); err == nil {
		t.Error("no owner accepted")
	}
	if err := milvus.DropCollection(ctx, nil, "ok", milvus.Owner{}); err == nil {
		t.Error("drop without an owner accepted")
	}
}

func TestFetchReturnsStoredVectors(t *testing.T) {
	c := connect(t)
	spec := vector.Spec{Dimension: 3, Metric: vector.L2}
	idx := milvus.New(c, newCollection(t, c, spec), spec)
	ctx := context.Background()
	if err := idx.Upsert(ctx, []vector.Entry{
		{ID: "a", Scope: "user:1", Type: "semantic", Vector: []float32{1, 2, 3}},
		{ID: "b", Scope: "user:2", Type: "episodic", Vector: []float32{-1, 0.5, 0}},
	}); err != nil {
		t.Fatal(err)
	}
	got, err := idx.Fetch(ctx, []string{"a", "b", "missing"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !slices.Equal(got["a"], []float32{1, 2, 3}) || !slices.Equal(got["b"], []float32{-1, 0.5, 0}) {
		t.Fatalf("Fetch = %v", got)
	}
	if _, err := idx.Fetch(ctx, []string{`x" || true`}); err == nil {
		t.Fatal("Fetch accepted an ID that would break out of the expression")
	}
}
