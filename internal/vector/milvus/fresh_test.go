package milvus_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/milvus-io/milvus-sdk-go/v2/client"
	"github.com/milvus-io/milvus-sdk-go/v2/entity"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/milvus"
	"github.com/amemory/memory-operator/internal/vector/vectortest"
)

// rows counts the collection's rows as the server stores them: count(*) counts every
// row, so a primary key inserted twice counts twice on a real Milvus.
func rows(t *testing.T, c client.Client, name string) int64 {
	t.Helper()
	rs, err := c.Query(context.Background(), name, nil, "", []string{"count(*)"}, client.WithSearchQueryConsistencyLevel(entity.ClStrong))
	if err != nil {
		t.Fatal(err)
	}
	col, ok := rs.GetColumn("count(*)").(*entity.ColumnInt64)
	if !ok || col.Len() != 1 {
		t.Fatalf("count(*) answered %v", rs)
	}
	return col.Data()[0]
}

// TestFreshLoadNeverDuplicates: during a fresh load, entries new to the load are
// inserted and every other one upserted, so no ID is ever stored twice, whatever the
// order: a batch written again (a retried write), a batch mixing new IDs and IDs of
// earlier batches, an entry not New that another writer stored during the load. (One
// batch never holds an ID twice: ValidateEntries refuses it.) On the Milvus server,
// where an insert of a stored key keeps both rows, the test first shows that count(*)
// sees such a duplicate.
func TestFreshLoadNeverDuplicates(t *testing.T) {
	bothServers(t, func(t *testing.T, c client.Client) {
		ctx := context.Background()
		spec := vector.Spec{Dimension: 8, Metric: vector.Cosine}
		rng := rand.New(rand.NewPCG(7, 7))
		entry := func(id string) vector.Entry {
			return vector.Entry{ID: id, Scope: "user:1", Type: "semantic", Vector: vectortest.RandomVector(rng, spec.Dimension), New: true}
		}
		if strings.HasSuffix(t.Name(), "/MilvusServer") {
			// The check can see what it looks for.
			server := c
			name := newCollection(t, server, spec)
			e := entry("dup")
			for range 2 {
				if _, err := server.Insert(ctx, name, "", entity.NewColumnVarChar(milvus.FieldID, []string{e.ID}),
					entity.NewColumnVarChar(milvus.FieldScope, []string{e.Scope}), entity.NewColumnVarChar(milvus.FieldType, []string{e.Type}),
					entity.NewColumnFloatVector(milvus.FieldEmbedding, spec.Dimension, [][]float32{e.Vector})); err != nil {
					t.Fatal(err)
				}
			}
			if n := rows(t, server, name); n != 2 {
				t.Fatalf("count(*) after inserting one key twice = %d, want 2: the check below could not see duplicates", n)
			}
		}

		name := newCollection(t, c, spec)
		ix := milvus.New(c, name, spec)
		fresh, err := ix.BeginFreshLoad(ctx, 100)
		if err != nil || !fresh {
			t.Fatalf("BeginFreshLoad on an empty collection = %v, %v", fresh, err)
		}
		batch := func(from, to int) []vector.Entry {
			var es []vector.Entry
			for i := from; i < to; i++ {
				es = append(es, entry(fmt.Sprintf("m%04d", i)))
			}
			return es
		}
		first := batch(0, 300)
		last := map[string][]float32{}
		write := func(es []vector.Entry) {
			t.Helper()
			if err := ix.Upsert(ctx, es); err != nil {
				t.Fatal(err)
			}
			for _, e := range es {
				last[e.ID] = e.Vector
			}
		}
		write(first)
		write(batch(0, 300))                           // the same batch again, as a retried write
		write(batch(250, 600))                         // half earlier IDs, half new
		write(append(batch(600, 610), entry("m0005"))) // new IDs and one of the first batch
		// A memory that existed before the load, written meanwhile by another writer
		// (the gateway) and then by the load, not New: upserted, not stored twice.
		other := entry("older")
		if err := milvus.New(c, name, spec).Upsert(ctx, []vector.Entry{other}); err != nil {
			t.Fatal(err)
		}
		older := entry("older")
		older.New = false
		write([]vector.Entry{older})
		ix.EndFreshLoad()
		write(batch(590, 620)) // after the load: upserts as always

		if n := rows(t, c, name); n != int64(len(last)) {
			t.Fatalf("%d rows stored for %d IDs: the fresh load stored some ID twice", n, len(last))
		}
		ids := make([]string, 0, len(last))
		for id := range last {
			ids = append(ids, id)
		}
		got, err := ix.Fetch(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		for id, v := range last {
			if fmt.Sprint(got[id]) != fmt.Sprint(vector.Prepare(spec.Metric, v)) {
				t.Fatalf("%s holds %v, want the last vector written %v", id, got[id], v)
			}
		}
		if fresh, err := ix.BeginFreshLoad(ctx, 100); err != nil || fresh {
			t.Fatalf("BeginFreshLoad on a collection holding %d entries = %v, %v", len(last), fresh, err)
		}
	})
}

// TestFreshLoadWithoutInsertPrivilege: a store's user whose role predates the Insert
// privilege (a store not reconciled since the upgrade) still loads everything: the
// fresh load falls back to upserts.
func TestFreshLoadWithoutInsertPrivilege(t *testing.T) {
	admin := serverAdmin(t)
	ctx := context.Background()
	spec := vector.Spec{Dimension: 8, Metric: vector.Cosine}
	name := newCollection(t, admin, spec)
	user, role, password := name+"_u", name+"_r", "fresh-load-test"
	if err := admin.CreateCredential(ctx, user, password); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.DeleteCredential(context.Background(), user) })
	if err := admin.CreateRole(ctx, role); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, p := range []string{"Upsert", "Query", "Load"} {
			_ = admin.Revoke(context.Background(), role, entity.PriviledegeObjectTypeCollection, name, p)
		}
		_ = admin.RemoveUserRole(context.Background(), user, role)
		_ = admin.DropRole(context.Background(), role)
	})
	for _, p := range []string{"Upsert", "Query", "Load"} {
		if err := admin.Grant(ctx, role, entity.PriviledegeObjectTypeCollection, name, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin.AddUserRole(ctx, user, role); err != nil {
		t.Fatal(err)
	}
	s := testutil.MilvusAuth(t)
	c, err := milvus.Connect(ctx, milvus.Conn{Address: s.Addr, Username: user, Password: password})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ix := milvus.New(c, name, spec)
	rng := rand.New(rand.NewPCG(3, 3))
	var es []vector.Entry
	for i := range 50 {
		es = append(es, vector.Entry{ID: fmt.Sprintf("m%d", i), Scope: "user:1", Type: "semantic", Vector: vectortest.RandomVector(rng, spec.Dimension), New: true})
	}
	// Milvus applies a new grant a few seconds late: wait until an upsert the server
	// refuses for its ID alone (longer than the field allows) is refused for that.
	long := strings.Repeat("x", vector.MaxIDLen+1)
	testutil.Eventually(t, "the user's grants applied", func() (bool, error) {
		_, err := c.Upsert(ctx, name, "", entity.NewColumnVarChar(milvus.FieldID, []string{long}),
			entity.NewColumnVarChar(milvus.FieldScope, []string{"p"}), entity.NewColumnVarChar(milvus.FieldType, []string{"p"}),
			entity.NewColumnFloatVector(milvus.FieldEmbedding, spec.Dimension, [][]float32{make([]float32, spec.Dimension)}))
		if err == nil || status.Code(err) == codes.PermissionDenied {
			return false, err
		}
		// Refused for the ID: Upsert applies. Each grant applies on its own, so wait
		// for Query (the emptiness check) too.
		_, err = ix.BeginFreshLoad(ctx, 50)
		ix.EndFreshLoad()
		return err == nil, err
	})
	if fresh, err := ix.BeginFreshLoad(ctx, 50); err != nil || !fresh {
		t.Fatalf("BeginFreshLoad as the user = %v, %v", fresh, err)
	}
	if err := ix.Upsert(ctx, es); err != nil {
		t.Fatalf("Upsert during a fresh load without the Insert privilege: %v", err)
	}
	if n := rows(t, admin, name); n != int64(len(es)) {
		t.Fatalf("%d rows stored for %d entries", n, len(es))
	}
}
