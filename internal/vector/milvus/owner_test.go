package milvus_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/milvus-io/milvus-sdk-go/v2/client"
	"github.com/milvus-io/milvus-sdk-go/v2/entity"

	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/milvus"
)

// bothServers runs f against Milvus Lite and against the Milvus 2.3 server (as its
// admin): the owner mark must hold on both.
func bothServers(t *testing.T, f func(t *testing.T, c client.Client)) {
	t.Run("MilvusLite", func(t *testing.T) { f(t, connect(t)) })
	t.Run("MilvusServer", func(t *testing.T) {
		s := testutil.MilvusAuth(t)
		c, err := milvus.Connect(context.Background(), milvus.Conn{Address: s.Addr, Username: s.User, Password: s.Password})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		f(t, c)
	})
}

func ownerMark(t *testing.T, c client.Client, name string) (string, bool) {
	t.Helper()
	coll, err := c.DescribeCollection(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := coll.Properties[milvus.OwnerProperty]
	return v, ok
}

// TestOwnerMark: a new collection carries its store's mark, which the server keeps
// and reports; another store's EnsureCollection and DropCollection fail with
// ErrNotOwner and change nothing, whatever their spec (a stranger learns nothing of
// the shape first).
func TestOwnerMark(t *testing.T) {
	bothServers(t, func(t *testing.T, c client.Client) {
		ctx := context.Background()
		spec := vector.Spec{Dimension: 4, Metric: vector.Cosine}
		name := newCollection(t, c, spec)
		if got, ok := ownerMark(t, c, name); !ok || got != testOwner.ID {
			t.Fatalf("owner mark = %q (present %v), want %q", got, ok, testOwner.ID)
		}
		ix := milvus.New(c, name, spec)
		if err := ix.Upsert(ctx, []vector.Entry{{ID: "a", Scope: "user:1", Type: "semantic", Vector: []float32{1, 0, 0, 0}}}); err != nil {
			t.Fatal(err)
		}
		other := milvus.Owner{ID: "other-ns/other-store"}
		for _, s := range []vector.Spec{spec, {Dimension: 8, Metric: vector.L2}} {
			for _, o := range []milvus.Owner{other, {ID: other.ID, AdoptUnmarked: true}} {
				_, err := milvus.EnsureCollection(ctx, c, name, s, o)
				if !errors.Is(err, milvus.ErrNotOwner) || !strings.Contains(err.Error(), testOwner.ID) {
					t.Fatalf("EnsureCollection as %+v with %+v: %v, want ErrNotOwner naming %q", o, s, err, testOwner.ID)
				}
			}
		}
		if err := milvus.DropCollection(ctx, c, name, milvus.Owner{ID: other.ID, AdoptUnmarked: true}); !errors.Is(err, milvus.ErrNotOwner) {
			t.Fatalf("DropCollection by another store: %v, want ErrNotOwner", err)
		}
		if exists, err := milvus.CheckOwner(ctx, c, name, other); !exists || !errors.Is(err, milvus.ErrNotOwner) {
			t.Fatalf("CheckOwner by another store = %v, %v", exists, err)
		}
		if got, _ := ownerMark(t, c, name); got != testOwner.ID {
			t.Fatalf("owner mark changed to %q", got)
		}
		got, err := ix.Fetch(ctx, []string{"a"})
		if err != nil || len(got) != 1 {
			t.Fatalf("the owner's data after a stranger's attempts: %v, %v", got, err)
		}
		if exists, err := milvus.CheckOwner(ctx, c, name, testOwner); !exists || err != nil {
			t.Fatalf("CheckOwner by the owner = %v, %v", exists, err)
		}
		if exists, err := milvus.CheckOwner(ctx, c, name+"_missing", other); exists || err != nil {
			t.Fatalf("CheckOwner of a missing collection = %v, %v", exists, err)
		}
	})
}

// TestUnmarkedCollection: a collection made before owner marks (the layout of earlier
// versions, no properties) is nobody's unless the caller adopts it; adopting checks
// the shape first, then marks it, after which it is the adopter's alone.
func TestUnmarkedCollection(t *testing.T) {
	bothServers(t, func(t *testing.T, c client.Client) {
		ctx := context.Background()
		spec := vector.Spec{Dimension: 4, Metric: vector.IP}
		name := testutil.UniqueName("t_")
		t.Cleanup(func() { _ = c.DropCollection(context.Background(), name) })
		legacy := entity.NewSchema().WithName(name).WithAutoID(false).WithDescription("memory-operator vectors").
			WithField(entity.NewField().WithName(milvus.FieldID).WithDataType(entity.FieldTypeVarChar).WithIsPrimaryKey(true).WithMaxLength(vector.MaxIDLen)).
			WithField(entity.NewField().WithName(milvus.FieldScope).WithDataType(entity.FieldTypeVarChar).WithMaxLength(vector.MaxScopeLen)).
			WithField(entity.NewField().WithName(milvus.FieldType).WithDataType(entity.FieldTypeVarChar).WithMaxLength(vector.MaxTypeLen)).
			WithField(entity.NewField().WithName(milvus.FieldEmbedding).WithDataType(entity.FieldTypeFloatVector).WithDim(4))
		if err := c.CreateCollection(ctx, legacy, 1, client.WithConsistencyLevel(entity.ClStrong)); err != nil {
			t.Fatal(err)
		}

		if _, err := milvus.EnsureCollection(ctx, c, name, spec, testOwner); !errors.Is(err, milvus.ErrNotOwner) {
			t.Fatalf("EnsureCollection on an unmarked collection without adopting: %v, want ErrNotOwner", err)
		}
		if err := milvus.DropCollection(ctx, c, name, testOwner); !errors.Is(err, milvus.ErrNotOwner) {
			t.Fatalf("DropCollection of an unmarked collection without adopting: %v, want ErrNotOwner", err)
		}
		adopter := milvus.Owner{ID: testOwner.ID, AdoptUnmarked: true}
		// The shape is checked before the mark is written: a wrong one leaves it unmarked.
		if _, err := milvus.EnsureCollection(ctx, c, name, vector.Spec{Dimension: 8, Metric: vector.IP}, adopter); !errors.Is(err, vector.ErrDimensionMismatch) {
			t.Fatalf("adopting with another dimension: %v, want ErrDimensionMismatch", err)
		}
		if got, ok := ownerMark(t, c, name); ok {
			t.Fatalf("a refused adoption left the mark %q", got)
		}
		if created, err := milvus.EnsureCollection(ctx, c, name, spec, adopter); err != nil || created {
			t.Fatalf("adopting: created=%v err=%v", created, err)
		}
		if got, ok := ownerMark(t, c, name); !ok || got != testOwner.ID {
			t.Fatalf("after adopting, owner mark = %q (present %v)", got, ok)
		}
		// Now marked: another store may not adopt it, even when it is told it may.
		if _, err := milvus.EnsureCollection(ctx, c, name, spec, milvus.Owner{ID: "x/y", AdoptUnmarked: true}); !errors.Is(err, milvus.ErrNotOwner) {
			t.Fatalf("another store adopting a marked collection: %v, want ErrNotOwner", err)
		}
		ix := milvus.New(c, name, spec)
		if err := ix.Upsert(ctx, []vector.Entry{{ID: "a", Scope: "user:1", Type: "semantic", Vector: []float32{1, 0, 0, 0}}}); err != nil {
			t.Fatal(err)
		}
		if hits, err := ix.Search(ctx, vector.Query{Scope: "user:1", Vector: []float32{1, 0, 0, 0}, K: 1}); err != nil || len(hits) != 1 {
			t.Fatalf("search after adopting: %v, %v", hits, err)
		}
		if err := milvus.DropCollection(ctx, c, name, testOwner); err != nil {
			t.Fatal(err)
		}
		if has, err := c.HasCollection(ctx, name); err != nil || has {
			t.Fatalf("after drop: has=%v err=%v", has, err)
		}
	})
}

// TestConnectWrongPassword: a refused login says so, names the user and never the
// password; no credentials against a server that wants them says that.
func TestConnectWrongPassword(t *testing.T) {
	s := testutil.MilvusAuth(t)
	ctx := context.Background()
	const secret = "not-the-password-4711"
	_, err := milvus.Connect(ctx, milvus.Conn{Address: s.Addr, Username: s.User, Password: secret})
	if err == nil || !strings.Contains(err.Error(), "authentication failed") || !strings.Contains(err.Error(), s.User) || strings.Contains(err.Error(), secret) {
		t.Fatalf("wrong password: %v", err)
	}
	_, err = milvus.Connect(ctx, milvus.Conn{Address: s.Addr})
	if err == nil || !strings.Contains(err.Error(), "authentication failed") || !strings.Contains(err.Error(), "none were given") {
		t.Fatalf("no credentials: %v", err)
	}
}
