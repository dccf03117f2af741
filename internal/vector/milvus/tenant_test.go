package milvus_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/milvus-io/milvus-sdk-go/v2/client"

	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/milvus"
	"github.com/amemory/memory-operator/internal/vector/vectortest"
)

// TestConformanceAsTenant runs the conformance suite on the Milvus 2.3 server with
// authentication on, as production runs it: provisioning (the admin) makes each
// collection and its store's user and role, and the index works as that user, with
// only the privileges provisioning grants.
func TestConformanceAsTenant(t *testing.T) {
	s := testutil.MilvusAuth(t)
	admin := provision.MilvusConn{Address: s.Addr, Username: s.User, Password: s.Password}
	ctx := context.Background()
	root, err := milvus.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = root.Close() })
	var mu sync.Mutex
	tenants := map[string]client.Client{} // collection → its store's client
	vectortest.Run(t, vectortest.Harness{
		New: func(t *testing.T, spec vector.Spec) vector.Index {
			names, err := provision.NamesFor(testutil.UniqueName("conf-"), "")
			if err != nil {
				t.Fatal(err)
			}
			owner := milvus.Owner{ID: "conformance/" + names.Tenant}
			t.Cleanup(func() {
				if err := provision.DeleteMilvusTenant(context.Background(), admin, names, owner); err != nil {
					t.Errorf("DeleteMilvusTenant: %v", err)
				}
				if err := milvus.DropCollection(context.Background(), root, names.Collection, owner); err != nil {
					t.Errorf("drop %s: %v", names.Collection, err)
				}
			})
			if _, err := milvus.EnsureCollection(ctx, root, names.Collection, spec, owner); err != nil {
				t.Fatal(err)
			}
			login := provision.MilvusConn{Address: s.Addr, Username: names.MilvusUser, Password: "conformance-" + names.Tenant}
			deadline := time.Now().Add(2 * time.Minute)
			for {
				err := provision.EnsureMilvusTenant(ctx, admin, names, owner.ID, login.Password, "")
				if err == nil {
					break
				}
				if !errors.Is(err, provision.ErrMilvusTenantPending) || time.Now().After(deadline) {
					t.Fatal(err)
				}
				time.Sleep(200 * time.Millisecond)
			}
			c, err := milvus.Connect(ctx, login)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			mu.Lock()
			tenants[names.Collection] = c
			mu.Unlock()
			return milvus.New(c, names.Collection, spec)
		},
		Reopen: func(t *testing.T, idx vector.Index, spec vector.Spec) (vector.Index, error) {
			name := idx.(*milvus.Index).Collection()
			// Provisioning again, as the admin; the store's user goes on.
			created, err := milvus.EnsureCollection(ctx, root, name, spec, milvus.Owner{ID: "conformance/" + tenantOf(name)})
			if err != nil {
				return nil, err
			}
			if created {
				t.Fatalf("EnsureCollection re-created existing collection %s", name)
			}
			mu.Lock()
			c := tenants[name]
			mu.Unlock()
			return milvus.New(c, name, spec), nil
		},
	})
}

// tenantOf undoes NamesFor's collection name for the tenants above ("conf-<hex>").
func tenantOf(collection string) string { return "conf-" + collection[len("mem_conf_"):] }
