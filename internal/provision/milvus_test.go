package provision

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/milvus-io/milvus-sdk-go/v2/client"
	"github.com/milvus-io/milvus-sdk-go/v2/entity"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/milvus"
)

// milvusAdmin is the platform team's login on the Milvus server with authentication.
func milvusAdmin(t *testing.T) MilvusConn {
	t.Helper()
	s := testutil.MilvusAuth(t)
	return MilvusConn{Address: s.Addr, Username: s.User, Password: s.Password}
}

func connectMilvusAs(t *testing.T, m MilvusConn) client.Client {
	t.Helper()
	c, err := ConnectMilvus(context.Background(), m)
	if err != nil {
		t.Fatalf("connecting to Milvus as %s: %v", m.Username, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var tenantSpec = vector.Spec{Dimension: 4, Metric: vector.Cosine}

// milvusTenant provisions a store's collection (as owner) and its Milvus user on the
// server, removed when the test ends; it returns the store's login.
func milvusTenant(t *testing.T, admin MilvusConn, tenant, owner, password string) (Names, MilvusConn) {
	t.Helper()
	ctx := context.Background()
	names, err := NamesFor(tenant, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := DeleteMilvusTenant(context.Background(), admin, names, milvus.Owner{ID: owner}); err != nil {
			t.Errorf("DeleteMilvusTenant: %v", err)
		}
		if err := DeleteVectors(context.Background(), PostgresConn{}, &admin, names, milvus.Owner{ID: owner}); err != nil {
			t.Errorf("DeleteVectors: %v", err)
		}
	})
	if _, err := EnsureVectors(ctx, PostgresConn{}, &admin, names, milvus.Owner{ID: owner}, tenantSpec); err != nil {
		t.Fatal(err)
	}
	ensureTenant(t, admin, names, owner, password, "")
	return names, MilvusConn{Address: admin.Address, Username: names.MilvusUser, Password: password}
}

// ensureTenant calls EnsureMilvusTenant until the server applies what it recorded,
// as the controller's requeues do (ErrMilvusTenantPending).
func ensureTenant(t *testing.T, admin MilvusConn, names Names, owner, password, previous string) {
	t.Helper()
	testutil.Eventually(t, "EnsureMilvusTenant", func() (bool, error) {
		err := EnsureMilvusTenant(context.Background(), admin, names, owner, password, previous)
		if errors.Is(err, ErrMilvusTenantPending) {
			return false, err
		}
		return true, err
	})
}

// loginRefused waits until the server refuses m's login (it forgets old logins in the
// background), failing on any other outcome than a refusal or a success.
func loginRefused(t *testing.T, m MilvusConn) {
	t.Helper()
	testutil.Eventually(t, "login of "+m.Username+" refused", func() (bool, error) {
		c, err := ConnectMilvus(context.Background(), m)
		if err == nil {
			_ = c.Close()
			return false, errors.New("still accepted")
		}
		if ReasonOf(err) != ReasonAuthenticationFailed || !strings.Contains(err.Error(), "authentication failed") || strings.Contains(err.Error(), m.Password) {
			return true, fmt.Errorf("refused login: %v (reason %s), want AuthenticationFailed without the password", err, ReasonOf(err))
		}
		return true, nil
	})
}

func denied(err error) bool { return status.Code(err) == codes.PermissionDenied }

// grantsOf lists a role's privileges as "Object:name:Privilege".
func grantsOf(t *testing.T, c client.Client, role string) []string {
	t.Helper()
	gs, err := c.ListGrants(context.Background(), role, "")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range gs {
		out = append(out, g.Object+":"+g.ObjectName+":"+g.PrivilegeName)
	}
	slices.Sort(out)
	return out
}

// TestGuaranteeMilvusTenantLeastPrivilege: a store's Milvus login does everything the
// gateway and the Jobs do on its own collection, and nothing on another store's
// (search, query, write, delete, drop), nor anything beyond data: no collections,
// users, roles or grants. The role holds exactly the privileges the operator documents
// (written out here again, not read from MilvusPrivileges), and re-provisioning
// takes back what was added by hand.
func TestGuaranteeMilvusTenantLeastPrivilege(t *testing.T) {
	admin := milvusAdmin(t)
	ctx := context.Background()
	namesA, loginA := milvusTenant(t, admin, testutil.UniqueName("rbac-a-"), "team-a/bot", "password-of-a")
	namesB, loginB := milvusTenant(t, admin, testutil.UniqueName("rbac-b-"), "team-b/bot", "password-of-b")
	root := connectMilvusAs(t, admin)
	a := connectMilvusAs(t, loginA)

	want := []string{}
	for _, p := range []string{"Delete", "Insert", "Load", "Query", "Search", "Upsert"} {
		want = append(want, "Collection:"+namesA.Collection+":"+p)
	}
	if got := grantsOf(t, root, namesA.MilvusRole); !slices.Equal(got, want) {
		t.Fatalf("role %s holds %v, want %v", namesA.MilvusRole, got, want)
	}
	if u, err := root.DescribeUser(ctx, namesA.MilvusUser); err != nil || !slices.Equal(u.Roles, []string{namesA.MilvusRole}) {
		t.Fatalf("user %s has roles %v (%v), want only %s", namesA.MilvusUser, u.Roles, err, namesA.MilvusRole)
	}

	// Its own collection: what milvus.Index does for the gateway and every Job.
	own := milvus.New(a, namesA.Collection, tenantSpec)
	if err := own.Upsert(ctx, []vector.Entry{
		{ID: "a1", Scope: "user:1", Type: "semantic", Vector: []float32{1, 0, 0, 0}},
		{ID: "a2", Scope: "user:2", Type: "semantic", Vector: []float32{0, 1, 0, 0}},
	}); err != nil {
		t.Fatalf("upsert into its own collection: %v", err)
	}
	// A server restarted comes back with collections released: search loads it.
	if err := root.ReleaseCollection(ctx, namesA.Collection); err != nil {
		t.Fatal(err)
	}
	if hits, err := own.Search(ctx, vector.Query{Scope: "user:1", Vector: []float32{1, 0, 0, 0}, K: 5}); err != nil || len(hits) != 1 || hits[0].ID != "a1" {
		t.Fatalf("search in its own released collection: %v, %v", hits, err)
	}
	if got, err := own.Fetch(ctx, []string{"a1", "a2"}); err != nil || len(got) != 2 {
		t.Fatalf("fetch from its own collection: %v, %v", got, err)
	}
	if err := own.Delete(ctx, []string{"a1"}); err != nil {
		t.Fatalf("delete from its own collection: %v", err)
	}
	if err := own.DeleteScope(ctx, "user:2"); err != nil {
		t.Fatalf("delete a scope of its own collection: %v", err)
	}

	// B's collection, with data in it, through the same calls.
	bIx := milvus.New(connectMilvusAs(t, loginB), namesB.Collection, tenantSpec)
	if err := bIx.Upsert(ctx, []vector.Entry{{ID: "b1", Scope: "user:1", Type: "semantic", Vector: []float32{1, 0, 0, 0}}}); err != nil {
		t.Fatal(err)
	}
	other := milvus.New(a, namesB.Collection, tenantSpec)
	if _, err := other.Search(ctx, vector.Query{Scope: "user:1", Vector: []float32{1, 0, 0, 0}, K: 5}); !denied(err) {
		t.Errorf("search in another store's collection: %v, want PermissionDenied", err)
	}
	if _, err := other.Fetch(ctx, []string{"b1"}); !denied(err) {
		t.Errorf("query another store's collection: %v, want PermissionDenied", err)
	}
	if err := other.Upsert(ctx, []vector.Entry{{ID: "evil", Scope: "user:1", Type: "semantic", Vector: []float32{1, 0, 0, 0}}}); !denied(err) {
		t.Errorf("upsert into another store's collection: %v, want PermissionDenied", err)
	}
	if _, err := a.Insert(ctx, namesB.Collection, "", entity.NewColumnVarChar(milvus.FieldID, []string{"evil"}),
		entity.NewColumnVarChar(milvus.FieldScope, []string{"user:1"}), entity.NewColumnVarChar(milvus.FieldType, []string{"semantic"}),
		entity.NewColumnFloatVector(milvus.FieldEmbedding, 4, [][]float32{{1, 0, 0, 0}})); !denied(err) {
		t.Errorf("insert into another store's collection: %v, want PermissionDenied", err)
	}
	if err := other.Delete(ctx, []string{"b1"}); !denied(err) {
		t.Errorf("delete from another store's collection: %v, want PermissionDenied", err)
	}
	if err := other.DeleteScope(ctx, "user:1"); !denied(err) {
		t.Errorf("delete a scope of another store's collection: %v, want PermissionDenied", err)
	}
	if err := a.ReleaseCollection(ctx, namesB.Collection); !denied(err) {
		t.Errorf("release another store's collection: %v, want PermissionDenied", err)
	}
	for _, coll := range []string{namesB.Collection, namesA.Collection} {
		if err := a.DropCollection(ctx, coll); !denied(err) {
			t.Errorf("drop collection %s: %v, want PermissionDenied", coll, err)
		}
	}
	if got, err := bIx.Fetch(ctx, []string{"b1", "evil"}); err != nil || len(got) != 1 {
		t.Errorf("B's collection after A's attempts: %v, %v", got, err)
	}

	// Nothing beyond data.
	sch := entity.NewSchema().WithName(testutil.UniqueName("evil_")).
		WithField(entity.NewField().WithName("id").WithDataType(entity.FieldTypeInt64).WithIsPrimaryKey(true)).
		WithField(entity.NewField().WithName("v").WithDataType(entity.FieldTypeFloatVector).WithDim(2))
	if err := a.CreateCollection(ctx, sch, 1); !denied(err) {
		t.Errorf("create a collection: %v, want PermissionDenied", err)
	}
	if err := a.CreateCredential(ctx, "evil_user", "password-evil"); !denied(err) {
		t.Errorf("create a user: %v, want PermissionDenied", err)
	}
	if err := a.CreateRole(ctx, "evil_role"); !denied(err) {
		t.Errorf("create a role: %v, want PermissionDenied", err)
	}
	if err := a.Grant(ctx, namesA.MilvusRole, entity.PriviledegeObjectTypeCollection, namesB.Collection, "Search"); !denied(err) {
		t.Errorf("grant its own role another collection: %v, want PermissionDenied", err)
	}
	if err := a.AddUserRole(ctx, namesA.MilvusUser, "admin"); !denied(err) {
		t.Errorf("make itself admin: %v, want PermissionDenied", err)
	}

	// Added by hand, taken back by the next provisioning.
	if err := root.Grant(ctx, namesA.MilvusRole, entity.PriviledegeObjectTypeCollection, namesB.Collection, "Search"); err != nil {
		t.Fatal(err)
	}
	if err := root.Grant(ctx, namesA.MilvusRole, entity.PriviledegeObjectTypeGlobal, "*", "CreateCollection"); err != nil {
		t.Fatal(err)
	}
	if err := root.AddUserRole(ctx, namesA.MilvusUser, "admin"); err != nil {
		t.Fatal(err)
	}
	// The server applies grants and revocations in the background, and a revocation
	// that overtakes the grant it takes back leaves the grant in force (Milvus 2.3.5
	// kept a Search grant revoked this way for over 13 minutes). Re-provisioning is
	// tested on additions in force.
	search := func() error {
		_, err := other.Search(ctx, vector.Query{Scope: "user:1", Vector: []float32{1, 0, 0, 0}, K: 5})
		return err
	}
	// A name the server refuses after the privilege check: nothing is made either way.
	badSchema := entity.NewSchema().WithName("1" + sch.CollectionName).WithField(sch.Fields[0]).WithField(sch.Fields[1])
	errCreated := errors.New("created a collection")
	checks := []struct {
		name string
		call func() error
	}{
		{"search in another store's collection", search},
		{"creating a collection", func() error {
			if err := a.CreateCollection(ctx, badSchema, 1); err != nil {
				return err
			}
			return errCreated
		}},
		// Only the admin role may drop any collection; this one does not exist.
		{"dropping any collection", func() error { return a.DropCollection(ctx, "missing_"+namesB.Collection) }},
	}
	eventually := func(state string, want func(error) bool) {
		t.Helper()
		for _, c := range checks {
			testutil.Eventually(t, c.name+" "+state, func() (bool, error) {
				err := c.call()
				if errors.Is(err, errCreated) {
					return true, err
				}
				return want(err), nil
			})
		}
	}
	eventually("allowed by the hand-added privileges", func(err error) bool { return !denied(err) })
	ensureTenant(t, admin, namesA, "team-a/bot", "password-of-a", "")
	if got := grantsOf(t, root, namesA.MilvusRole); !slices.Equal(got, want) {
		t.Fatalf("after re-provisioning, role %s holds %v, want %v", namesA.MilvusRole, got, want)
	}
	if u, err := root.DescribeUser(ctx, namesA.MilvusUser); err != nil || !slices.Equal(u.Roles, []string{namesA.MilvusRole}) {
		t.Fatalf("after re-provisioning, user %s has roles %v (%v)", namesA.MilvusUser, u.Roles, err)
	}
	eventually("denied again", denied)
}

// TestMilvusTenantRotation: provisioning with another password changes it, in place
// when the old one is given, by making the user again when it is not (lost): the old
// one stops working, the new one works with all the store's privileges; provisioning
// again with the same password changes nothing.
func TestMilvusTenantRotation(t *testing.T) {
	admin := milvusAdmin(t)
	ctx := context.Background()
	names, login := milvusTenant(t, admin, testutil.UniqueName("rot-"), "team/rot", "first-password")
	steps := []struct{ password, previous string }{
		{"second-password", "first-password"},
		{"second-password", "first-password"}, // again: nothing to do
		{"third-password", ""},                // the old password lost
		{"fourth-password", "wrong-previous"}, // a wrong one given: as if lost
	}
	old := []string{login.Password}
	for i, st := range steps {
		ensureTenant(t, admin, names, "team/rot", st.password, st.previous)
		c := connectMilvusAs(t, MilvusConn{Address: admin.Address, Username: names.MilvusUser, Password: st.password})
		ix := milvus.New(c, names.Collection, tenantSpec)
		if err := ix.Upsert(ctx, []vector.Entry{{ID: "r", Scope: "user:1", Type: "semantic", Vector: []float32{1, 0, 0, 0}}}); err != nil {
			t.Fatalf("step %d: writing with the new password: %v", i, err)
		}
		if hits, err := ix.Search(ctx, vector.Query{Scope: "user:1", Vector: []float32{1, 0, 0, 0}, K: 1}); err != nil || len(hits) != 1 {
			t.Fatalf("step %d: searching with the new password: %v, %v", i, hits, err)
		}
		for _, pw := range old {
			if pw != st.password {
				loginRefused(t, MilvusConn{Address: admin.Address, Username: names.MilvusUser, Password: pw})
			}
		}
		old = append(old, st.password)
	}
}

// TestMilvusTenantDelete: after deletion the store's user cannot log in and its role is
// gone; deleting again is fine. While the collection is another store's, nothing is
// deleted (TenantConflict): the user and role are that store's.
func TestMilvusTenantDelete(t *testing.T) {
	admin := milvusAdmin(t)
	ctx := context.Background()
	root := connectMilvusAs(t, admin)
	names, login := milvusTenant(t, admin, testutil.UniqueName("del-"), "team/del", "password-del")

	err := DeleteMilvusTenant(ctx, admin, names, milvus.Owner{ID: "team/stranger", AdoptUnmarked: true})
	if ReasonOf(err) != ReasonTenantConflict {
		t.Fatalf("DeleteMilvusTenant by another store: %v (reason %s), want TenantConflict", err, ReasonOf(err))
	}
	connectMilvusAs(t, login) // still there

	for i := range 2 {
		if err := DeleteMilvusTenant(ctx, admin, names, milvus.Owner{ID: "team/del"}); err != nil {
			t.Fatalf("DeleteMilvusTenant #%d: %v", i+1, err)
		}
	}
	loginRefused(t, login)
	roles, err := root.ListRoles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(roles, func(r entity.Role) bool { return r.Name == names.MilvusRole }) {
		t.Fatalf("role %s still exists", names.MilvusRole)
	}
	users, err := root.ListCredUsers(ctx)
	if err != nil || slices.Contains(users, names.MilvusUser) {
		t.Fatalf("users %v (%v) still list %s", users, err, names.MilvusUser)
	}
	// The collection goes afterwards (DeleteVectors), and deleting the tenant with no
	// collection left is fine too.
	if err := DeleteVectors(ctx, PostgresConn{}, &admin, names, milvus.Owner{ID: "team/del"}); err != nil {
		t.Fatal(err)
	}
	if err := DeleteMilvusTenant(ctx, admin, names, milvus.Owner{ID: "team/del"}); err != nil {
		t.Fatalf("DeleteMilvusTenant without a collection: %v", err)
	}
}

// TestMilvusTenantRefusesForeignOrMissingCollection: the user and role are made only
// for a store whose collection exists with its mark; nothing is made otherwise, and
// another store's login is never reset.
func TestMilvusTenantRefusesForeignOrMissingCollection(t *testing.T) {
	admin := milvusAdmin(t)
	ctx := context.Background()
	root := connectMilvusAs(t, admin)
	names, login := milvusTenant(t, admin, testutil.UniqueName("foreign-"), "team/holder", "password-holder")

	err := EnsureMilvusTenant(ctx, admin, names, "team/intruder", "password-intruder", login.Password)
	if ReasonOf(err) != ReasonTenantConflict || !strings.Contains(err.Error(), names.Collection) {
		t.Fatalf("EnsureMilvusTenant for another store's collection: %v (reason %s), want TenantConflict", err, ReasonOf(err))
	}
	connectMilvusAs(t, login) // the holder's password still works
	if _, err := ConnectMilvus(ctx, MilvusConn{Address: admin.Address, Username: names.MilvusUser, Password: "password-intruder"}); err == nil {
		t.Fatal("the intruder's password works")
	}

	missing, err := NamesFor(testutil.UniqueName("missing-"), "")
	if err != nil {
		t.Fatal(err)
	}
	err = EnsureMilvusTenant(ctx, admin, missing, "team/x", "password-x", "")
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("EnsureMilvusTenant without a collection: %v", err)
	}
	if users, err := root.ListCredUsers(ctx); err != nil || slices.Contains(users, missing.MilvusUser) {
		t.Fatalf("a user was made without a collection: %v (%v)", users, err)
	}
}

// TestMilvusTenantNamesOnServer: the longest tenants, and those at the edge of the
// user name's shortening, are accepted by the server and log in.
func TestMilvusTenantNamesOnServer(t *testing.T) {
	admin := milvusAdmin(t)
	suffix := testutil.UniqueName("") // 10 hex digits
	for _, tenant := range []string{
		"a" + strings.Repeat("-", 2) + strings.Repeat("b", 27) + suffix, // 40 characters
		"z" + strings.Repeat("9", 16) + suffix,                          // 27: the longest user kept whole
		"q" + strings.Repeat("-0", 8) + "x" + suffix,                    // 28: the shortest shortened
	} {
		t.Run(tenant, func(t *testing.T) {
			names, login := milvusTenant(t, admin, tenant, "team/"+tenant, "password-long")
			if len(names.MilvusUser) > 32 {
				t.Fatalf("user %q", names.MilvusUser)
			}
			c := connectMilvusAs(t, login)
			if err := milvus.New(c, names.Collection, tenantSpec).Upsert(context.Background(),
				[]vector.Entry{{ID: "x", Scope: "s:1", Type: "semantic", Vector: []float32{1, 0, 0, 0}}}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestMilvusTenantErrors: a wrong admin password is AuthenticationFailed and never
// shows the password; a password Milvus cannot store is refused before anything is
// made, without showing it; a server that lets anyone in (Milvus Lite) is refused
// with a reason, since per-store users would protect nothing there.
func TestMilvusTenantErrors(t *testing.T) {
	admin := milvusAdmin(t)
	ctx := context.Background()
	names, err := NamesFor(testutil.UniqueName("err-"), "")
	if err != nil {
		t.Fatal(err)
	}
	bad := admin
	bad.Password = "wrong-admin-secret"
	for _, err := range []error{
		EnsureMilvusTenant(ctx, bad, names, "team/x", "password-ok", ""),
		DeleteMilvusTenant(ctx, bad, names, milvus.Owner{ID: "team/x"}),
		CheckMilvus(ctx, bad),
	} {
		if ReasonOf(err) != ReasonAuthenticationFailed || !strings.Contains(err.Error(), "authentication failed") || strings.Contains(err.Error(), bad.Password) {
			t.Errorf("wrong admin password: %v (reason %s), want AuthenticationFailed without the password", err, ReasonOf(err))
		}
	}
	for _, pw := range []string{"short", strings.Repeat("p", 73)} {
		err := EnsureMilvusTenant(ctx, admin, names, "team/x", pw, "")
		if err == nil || strings.Contains(err.Error(), pw) {
			t.Errorf("password of %d bytes: %v", len(pw), err)
		}
	}
	lite := MilvusConn{Address: testutil.MilvusAddr(t), Username: "root", Password: "Milvus"}
	for _, err := range []error{
		EnsureMilvusTenant(ctx, lite, names, "team/x", "password-ok", ""),
		DeleteMilvusTenant(ctx, lite, names, milvus.Owner{ID: "team/x"}),
	} {
		if err == nil || !strings.Contains(err.Error(), "without credentials") {
			t.Errorf("on Milvus Lite: %v, want a refusal saying it lets clients in without credentials", err)
		}
	}
}

// TestMilvusProbes: each privilege's probe is refused without the privilege, passes
// the privilege check with it, and changes nothing in the collection; every privilege
// granted has one.
func TestMilvusProbes(t *testing.T) {
	admin := milvusAdmin(t)
	ctx := context.Background()
	names, login := milvusTenant(t, admin, testutil.UniqueName("probe-"), "team/probe", "password-probe")
	for _, p := range MilvusPrivileges {
		if milvusProbes[p] == nil {
			t.Fatalf("privilege %s has no probe", p)
		}
	}
	root := connectMilvusAs(t, admin)
	bare := testutil.UniqueName("bare_")
	if err := root.CreateCredential(ctx, bare, "password-bare"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = root.DeleteCredential(context.Background(), bare) })
	nobody := connectMilvusAs(t, MilvusConn{Address: admin.Address, Username: bare, Password: "password-bare"})
	tenant := connectMilvusAs(t, login)
	for _, p := range MilvusPrivileges {
		if err := milvusProbes[p](ctx, nobody, names.Collection, tenantSpec.Dimension); !denied(err) {
			t.Errorf("probe %s as a user without privileges: %v, want PermissionDenied", p, err)
		}
		if err := milvusProbes[p](ctx, tenant, names.Collection, tenantSpec.Dimension); denied(err) {
			t.Errorf("probe %s as the store's user: %v", p, err)
		}
	}
	rs, err := root.Query(ctx, names.Collection, nil, milvus.FieldID+` != ""`, []string{milvus.FieldID},
		client.WithSearchQueryConsistencyLevel(entity.ClStrong))
	if err != nil {
		t.Fatal(err)
	}
	if n := rs.GetColumn(milvus.FieldID).Len(); n != 0 {
		t.Fatalf("the probes wrote %d rows", n)
	}
}

// TestMilvusGenerationCollections: an embedding switch's collection on an
// authenticated Milvus is marked as the store's, its user may use it once Milvus
// applied the grant, and it keeps those privileges through re-provisioning while
// Names.Generations lists it; another store's user may not touch it, a collection
// of that name marked as another's is refused, and after the cutover (Collection the
// new one) the store's first collection drops like any other generation. Deleting
// the store drops every generation.
func TestMilvusGenerationCollections(t *testing.T) {
	admin := milvusAdmin(t)
	ctx := context.Background()
	root := connectMilvusAs(t, admin)
	const owner = "team/gen"
	names, login := milvusTenant(t, admin, testutil.UniqueName("gen-"), owner, "password-gen")
	_, loginB := milvusTenant(t, admin, testutil.UniqueName("gen-b-"), "team/other", "password-other")
	base := names.Collection
	g2 := MilvusGenerationCollection(base, 2)
	if g2 != base+"_g2" {
		t.Fatalf("generation 2's collection is %q", g2)
	}
	spec8 := vector.Spec{Dimension: 8, Metric: vector.Cosine}
	t.Cleanup(func() { _ = DropMilvusGeneration(context.Background(), admin, names, g2, owner) })
	if err := EnsureMilvusGeneration(ctx, admin, names, g2, owner, spec8); err != nil {
		t.Fatal(err)
	}
	works := func(names Names, coll string) {
		t.Helper()
		testutil.Eventually(t, "the store's privileges on "+coll, func() (bool, error) {
			err := MilvusGenerationWorks(ctx, login, names, coll)
			if errors.Is(err, ErrMilvusTenantPending) {
				return false, err
			}
			return true, err
		})
	}
	works(names, g2)
	ix := milvus.New(connectMilvusAs(t, login), g2, spec8)
	v := []float32{1, 0, 0, 0, 0, 0, 0, 1}
	if err := ix.Upsert(ctx, []vector.Entry{{ID: "m1", Scope: "user:1", Type: "semantic", Vector: v}}); err != nil {
		t.Fatalf("the store's user writes generation 2: %v", err)
	}
	if hits, err := ix.Search(ctx, vector.Query{Scope: "user:1", Vector: v, K: 1}); err != nil || len(hits) != 1 {
		t.Fatalf("the store's user searches generation 2: %v, %v", hits, err)
	}
	if _, err := milvus.New(connectMilvusAs(t, loginB), g2, spec8).Fetch(ctx, []string{"m1"}); !denied(err) {
		t.Fatalf("another store's user reads generation 2: %v, want PermissionDenied", err)
	}

	// Re-provisioning during the switch keeps the generation's privileges.
	during := names
	during.Generations = []string{g2}
	ensureTenant(t, admin, during, owner, "password-gen", "password-gen")
	if got := grantsOf(t, root, names.MilvusRole); len(got) != 2*len(MilvusPrivileges) || !slices.Contains(got, "Collection:"+g2+":Search") {
		t.Fatalf("during the switch the role holds %v", got)
	}

	// Another store's collection of that name is not taken over.
	other, err := NamesFor(testutil.UniqueName("gen-c-"), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := EnsureMilvusGeneration(ctx, admin, other, g2, "team/intruder", spec8); ReasonOf(err) != ReasonTenantConflict {
		t.Fatalf("generation 2 of another owner: %v (%s), want TenantConflict", err, ReasonOf(err))
	}
	if err := EnsureMilvusGeneration(ctx, admin, names, g2, owner, vector.Spec{Dimension: 16, Metric: vector.Cosine}); ReasonOf(err) != ReasonDimensionMismatch {
		t.Fatalf("generation 2 for another dimension: %v (%s), want DimensionMismatch", err, ReasonOf(err))
	}

	// After the cutover generation 2 serves; the first collection is a generation
	// kept for a rollback, then dropped with its privileges.
	after := names
	after.Collection, after.Generations = g2, []string{base}
	ensureTenant(t, admin, after, owner, "password-gen", "password-gen")
	if err := DropMilvusGeneration(ctx, admin, after, g2, owner); ReasonOf(err) == "" {
		t.Fatal("the serving collection was dropped as a generation")
	}
	if err := DropMilvusGeneration(ctx, admin, after, base, owner); err != nil {
		t.Fatal(err)
	}
	if has, err := root.HasCollection(ctx, base); err != nil || has {
		t.Fatalf("the first collection after it was dropped: exists %v (%v)", has, err)
	}
	if got := grantsOf(t, root, names.MilvusRole); slices.ContainsFunc(got, func(g string) bool { return strings.Contains(g, ":"+base+":") }) {
		t.Fatalf("the role still holds privileges on the dropped collection: %v", got)
	}
	after.Generations = nil
	ensureTenant(t, admin, after, owner, "password-gen", "password-gen")
	works(after, g2)

	// Deleting the store drops every collection it has.
	g3 := MilvusGenerationCollection(base, 3)
	if err := EnsureMilvusGeneration(ctx, admin, after, g3, owner, spec8); err != nil {
		t.Fatal(err)
	}
	after.Generations = []string{g3}
	if err := DeleteMilvusTenant(ctx, admin, after, milvus.Owner{ID: owner}); err != nil {
		t.Fatal(err)
	}
	if err := DeleteVectors(ctx, PostgresConn{}, &admin, after, milvus.Owner{ID: owner}); err != nil {
		t.Fatal(err)
	}
	for _, coll := range []string{g2, g3} {
		if has, err := root.HasCollection(ctx, coll); err != nil || has {
			t.Errorf("collection %s after the store's deletion: exists %v (%v)", coll, has, err)
		}
	}
}
