package provision

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/milvus-io/milvus-sdk-go/v2/client"
	"github.com/milvus-io/milvus-sdk-go/v2/entity"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/milvus"
)

// MilvusPrivileges are what a store's Milvus role (Names.MilvusRole) may do, all on
// the store's collection alone (object type Collection, object name the collection):
// exactly the calls the gateway and the Jobs make through milvus.Index, found by
// running each against Milvus 2.3.5 with authentication on.
//
//   - Upsert: every write (Index.Upsert; the gateway, restores, re-indexing).
//   - Insert: the new entries of a restore into an empty collection (a fresh load,
//     milvus/fresh.go), which Milvus need not compact afterwards.
//   - Delete: forgetting, purges, archival and scope deletion (Index.Delete, DeleteScope).
//   - Search: recall (Index.Search).
//   - Query: reading vectors back for snapshots and archival (Index.Fetch).
//   - Load: loading a collection a restarted server came back with released, which
//     Search does on "not loaded"; GetLoadState is checked against it too.
//
// Nothing else: no Flush, Release, index or
// partition changes, no Global privilege (creating or dropping collections, users,
// roles), nothing on another collection. What the SDK also calls (HasCollection,
// DescribeCollection, DescribeIndex) every user may do through Milvus's built-in
// role public (Global DescribeCollection and ShowCollections, IndexDetail on every
// collection): metadata, not data.
var MilvusPrivileges = []string{"Delete", "Insert", "Load", "Query", "Search", "Upsert"}

// Milvus limits on passwords: 6 to 256 characters, and bcrypt, which stores them,
// takes at most 72 bytes.
const (
	minMilvusPassword = 6
	maxMilvusPassword = 72
)

// ErrMilvusTenantPending is wrapped by EnsureMilvusTenant's error when everything is
// recorded on the server but its proxies do not apply it yet: Milvus 2.3 passes role
// bindings (and forgotten logins) to its proxies in the background, seconds later
// (longer on a busy server). Calling EnsureMilvusTenant again later is the remedy
// (each call also sends the binding again); it is not a failure of the backend.
var ErrMilvusTenantPending = errors.New("the Milvus server has not applied the store's user and role yet")

// EnsureMilvusTenant makes the store's Milvus user (names.MilvusUser) log in with
// password and hold only its role (names.MilvusRole), which holds only
// MilvusPrivileges on the store's collection; it returns nil once the user can use
// them (else an error wrapping ErrMilvusTenantPending: call again later). It is
// idempotent, and it rotates: a password other than the user's current one replaces
// it, and the old one stops working. previous is the password being replaced, when
// known (the one in the store's Secret until now): Milvus changes a password in place
// only given the old one. Without it the user is deleted and made again with the new
// password and its role, and logins fail in between.
//
// Only for a Milvus server with authentication on: the caller knows one by the backend
// declaring credentials. On a server that lets anyone in (Milvus Lite, which has no
// users at all, or a server with authorization off) it fails, since a user would
// protect nothing. The collection must exist and be owner's (EnsureVectors first):
// the user and role are derived from the tenant, and another store's must not be
// reset.
func EnsureMilvusTenant(ctx context.Context, admin MilvusConn, names Names, owner, password, previous string) error {
	what := "Milvus " + admin.Address
	if n := len(password); n < minMilvusPassword || n > maxMilvusPassword {
		return fail(ReasonBackendError, "%s: the password for user %s is %d bytes; Milvus takes %d to %d",
			what, names.MilvusUser, n, minMilvusPassword, maxMilvusPassword)
	}
	c, err := tenantAdmin(ctx, admin, names, milvus.Owner{ID: owner}, true)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	if err := ensureMilvusRole(ctx, c, names); err != nil {
		return classify(what+": role "+names.MilvusRole, err)
	}
	if err := ensureMilvusUser(ctx, admin, c, names, password, previous); err != nil {
		return classify(what+": user "+names.MilvusUser, err)
	}
	return milvusTenantWorks(ctx, MilvusConn{Address: admin.Address, Username: names.MilvusUser, Password: password}, names)
}

// milvusTenantWorks checks, as the store's user, that its login and every one of
// MilvusPrivileges are in effect, by one call per privilege that the server checks
// the privilege of and then does nothing with (milvusProbes).
func milvusTenantWorks(ctx context.Context, login MilvusConn, names Names) error {
	return milvusCollectionWorks(ctx, login, names.MilvusRole, names.Collection)
}

// milvusCollectionWorks is milvusTenantWorks on one collection of the store's.
func milvusCollectionWorks(ctx context.Context, login MilvusConn, role, collection string) error {
	what := fmt.Sprintf("Milvus %s: user %s", login.Address, login.Username)
	c, err := ConnectMilvus(ctx, login)
	if ReasonOf(err) == ReasonAuthenticationFailed {
		return &Error{Reason: ReasonBackendError, Err: fmt.Errorf("%s: %w (the new login is not accepted yet): %v", what, ErrMilvusTenantPending, err)}
	}
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	coll, err := c.DescribeCollection(ctx, collection)
	if err != nil {
		return classify(what+": describing collection "+collection, err)
	}
	dim := 0
	for _, f := range coll.Schema.Fields {
		if f.Name == milvus.FieldEmbedding {
			dim, _ = strconv.Atoi(f.TypeParams[entity.TypeParamDim])
		}
	}
	for _, p := range MilvusPrivileges {
		err := milvusProbes[p](ctx, c, collection, dim)
		switch status.Code(err) {
		case codes.PermissionDenied, codes.Unauthenticated:
			return &Error{Reason: ReasonBackendError, Err: fmt.Errorf("%s: %w (privilege %s of role %s on collection %s is not applied): %v",
				what, ErrMilvusTenantPending, p, role, collection, err)}
		}
		// Anything else (the probes' own mistakes) means the privilege was granted.
	}
	return nil
}

// milvusProbes are, per privilege, a call that needs it and changes nothing: a
// read of nothing, or a write the server refuses after checking the privilege (a
// malformed filter, an ID one byte too long). TestMilvusProbes holds each to that.
var milvusProbes = map[string]func(ctx context.Context, c client.Client, coll string, dim int) error{
	"Load": func(ctx context.Context, c client.Client, coll string, _ int) error {
		_, err := c.GetLoadState(ctx, coll, nil)
		return err
	},
	"Query": func(ctx context.Context, c client.Client, coll string, _ int) error {
		_, err := c.Query(ctx, coll, nil, milvus.FieldID+` == ""`, []string{milvus.FieldID})
		return err
	},
	"Search": func(ctx context.Context, c client.Client, coll string, dim int) error {
		sp, _ := entity.NewIndexHNSWSearchParam(16)
		v := make([]float32, max(dim, 1))
		v[0] = 1
		_, err := c.Search(ctx, coll, nil, milvus.FieldID+` == ""`, nil, []entity.Vector{entity.FloatVector(v)},
			milvus.FieldEmbedding, entity.COSINE, 1, sp)
		return err
	},
	"Delete": func(ctx context.Context, c client.Client, coll string, _ int) error {
		return c.Delete(ctx, coll, "", milvus.FieldID+` in [`)
	},
	"Upsert": func(ctx context.Context, c client.Client, coll string, dim int) error {
		_, err := c.Upsert(ctx, coll, "", refusedRow(dim)...)
		return err
	},
	"Insert": func(ctx context.Context, c client.Client, coll string, dim int) error {
		_, err := c.Insert(ctx, coll, "", refusedRow(dim)...)
		return err
	},
}

// refusedRow is a row whose ID is longer than the field's max_length, which the
// server (not the SDK) refuses after checking the privilege to write it.
func refusedRow(dim int) []entity.Column {
	return []entity.Column{
		entity.NewColumnVarChar(milvus.FieldID, []string{strings.Repeat("x", vector.MaxIDLen+1)}),
		entity.NewColumnVarChar(milvus.FieldScope, []string{"probe"}),
		entity.NewColumnVarChar(milvus.FieldType, []string{"probe"}),
		entity.NewColumnFloatVector(milvus.FieldEmbedding, dim, [][]float32{make([]float32, dim)}),
	}
}

// DeleteMilvusTenant removes the store's Milvus user and role. Missing ones are fine
// (deletion is retried). While the store's collection exists it must be owner's (see
// milvus.CheckOwner), else nothing is removed (TenantConflict): the names are the
// tenant's, and another store's login must not go. Call it before dropping the
// collection (DeleteVectors), so that check has something to look at.
func DeleteMilvusTenant(ctx context.Context, admin MilvusConn, names Names, owner milvus.Owner) error {
	what := "Milvus " + admin.Address
	c, err := tenantAdmin(ctx, admin, names, owner, false)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	// The user first: from here on nobody logs in as the store.
	if err := c.DeleteCredential(ctx, names.MilvusUser); err != nil {
		return classify(what+": deleting user "+names.MilvusUser, err)
	}
	exists, err := milvusRoleExists(ctx, c, names.MilvusRole)
	if err != nil || !exists {
		return classify(what+": role "+names.MilvusRole, err)
	}
	// Milvus refuses to drop a role that still holds privileges.
	if err := revokeMilvusGrants(ctx, c, names.MilvusRole, nil); err != nil {
		return classify(what+": revoking the privileges of role "+names.MilvusRole, err)
	}
	if err := c.DropRole(ctx, names.MilvusRole); err != nil {
		return classify(what+": dropping role "+names.MilvusRole, err)
	}
	return nil
}

// tenantAdmin connects as admin to a server that has authentication on, after
// checking the store's collection is owner's (and exists, when mustExist).
func tenantAdmin(ctx context.Context, admin MilvusConn, names Names, owner milvus.Owner, mustExist bool) (client.Client, error) {
	what := "Milvus " + admin.Address
	c, err := ConnectMilvus(ctx, admin)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = c.Close()
		}
	}()
	if err := requireAuthentication(ctx, admin); err != nil {
		return nil, err
	}
	exists, err := milvus.CheckOwner(ctx, c, names.Collection, owner)
	if err != nil {
		return nil, classify(what+": collection "+names.Collection, err)
	}
	if !exists && mustExist {
		return nil, fail(ReasonBackendError, "%s: collection %s does not exist; the store's user is made after its collection (EnsureVectors)",
			what, names.Collection)
	}
	ok = true
	return c, nil
}

// requireAuthentication fails unless the server refuses a connection without
// credentials: on one that lets anyone in, per-store users protect nothing.
func requireAuthentication(ctx context.Context, admin MilvusConn) error {
	c, err := ConnectMilvus(ctx, MilvusConn{Address: admin.Address})
	if err != nil {
		if ReasonOf(err) == ReasonAuthenticationFailed {
			return nil
		}
		return err
	}
	defer func() { _ = c.Close() }()
	if _, err := c.ListCollections(ctx); status.Code(err) == codes.Unauthenticated {
		return nil
	}
	return fail(ReasonBackendError, "Milvus %s lets clients in without credentials (Milvus Lite, or a server with authorization off): "+
		"per-store users and roles would protect nothing there. Turn authentication on (common.security.authorizationEnabled), "+
		"or declare no Milvus credentials for this backend", admin.Address)
}

func milvusRoleExists(ctx context.Context, c client.Client, role string) (bool, error) {
	roles, err := c.ListRoles(ctx)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(roles, func(r entity.Role) bool { return r.Name == role }), nil
}

// ensureMilvusRole creates the role unless it exists and gives it exactly
// MilvusPrivileges on the store's collection, revoking anything else it holds (a
// privilege a newer version dropped, or one granted by hand), but for those on the
// store's scratch copy (a restore drill in progress keeps them; DropScratch revokes
// them when the drill ends) and on its other index generations' collections
// (EnsureMilvusGeneration granted them; DropMilvusGeneration revokes them).
func ensureMilvusRole(ctx context.Context, c client.Client, names Names) error {
	exists, err := milvusRoleExists(ctx, c, names.MilvusRole)
	if err != nil {
		return err
	}
	if !exists {
		if err := c.CreateRole(ctx, names.MilvusRole); err != nil && !strings.Contains(err.Error(), "already exist") {
			return err
		}
	}
	if err := revokeMilvusGrants(ctx, c, names.MilvusRole, func(g entity.RoleGrants) bool {
		return g.Object == "Collection" && (g.ObjectName == names.Collection || g.ObjectName == names.Scratch().Collection ||
			slices.Contains(names.Generations, g.ObjectName)) && slices.Contains(MilvusPrivileges, g.PrivilegeName)
	}); err != nil {
		return err
	}
	for _, p := range MilvusPrivileges {
		// Granting a privilege the role holds is a no-op.
		if err := c.Grant(ctx, names.MilvusRole, entity.PriviledegeObjectTypeCollection, names.Collection, p); err != nil {
			return fmt.Errorf("granting %s on collection %s: %w", p, names.Collection, err)
		}
	}
	return nil
}

// revokeMilvusGrants revokes every privilege of role that keep does not accept (nil:
// all of them).
func revokeMilvusGrants(ctx context.Context, c client.Client, role string, keep func(entity.RoleGrants) bool) error {
	grants, err := c.ListGrants(ctx, role, "")
	if err != nil {
		return err
	}
	for _, g := range grants {
		if keep != nil && keep(g) {
			continue
		}
		typ, ok := map[string]entity.PriviledgeObjectType{
			"Collection": entity.PriviledegeObjectTypeCollection,
			"Global":     entity.PriviledegeObjectTypeGlobal,
			"User":       entity.PriviledegeObjectTypeUser,
		}[g.Object]
		if !ok {
			return fmt.Errorf("role %s holds %s on %s %s, an object type this version does not know", role, g.PrivilegeName, g.Object, g.ObjectName)
		}
		if err := c.Revoke(ctx, role, typ, g.ObjectName, g.PrivilegeName, entity.WithOperatePrivilegeDatabase(g.DbName)); err != nil {
			return fmt.Errorf("revoking %s on %s %s: %w", g.PrivilegeName, g.Object, g.ObjectName, err)
		}
	}
	return nil
}

// ensureMilvusUser makes the user log in with password and hold the store's role and
// no other.
func ensureMilvusUser(ctx context.Context, admin MilvusConn, c client.Client, names Names, password, previous string) error {
	users, err := c.ListCredUsers(ctx)
	if err != nil {
		return err
	}
	exists := slices.Contains(users, names.MilvusUser)
	if exists {
		current, err := loginWorks(ctx, MilvusConn{Address: admin.Address, Username: names.MilvusUser, Password: password})
		if err != nil {
			return err
		}
		if !current && previous != "" && previous != password {
			// A rotation: in place, so the role binding stays as it is.
			err := c.UpdateCredential(ctx, names.MilvusUser, previous, password)
			current = err == nil
		}
		if !current {
			// The password was lost (or previous was wrong): Milvus resets one only
			// given the old one.
			if err := c.DeleteCredential(ctx, names.MilvusUser); err != nil {
				return err
			}
			exists = false
		}
	}
	if !exists {
		if err := c.CreateCredential(ctx, names.MilvusUser, password); err != nil {
			return err
		}
	}
	desc, err := c.DescribeUser(ctx, names.MilvusUser)
	if err != nil {
		return err
	}
	for _, r := range desc.Roles {
		if r != names.MilvusRole {
			if err := c.RemoveUserRole(ctx, names.MilvusUser, r); err != nil {
				return fmt.Errorf("removing role %s: %w", r, err)
			}
		}
	}
	// Always, even when bound: besides recording the binding (a no-op then), it has
	// the server send it to its proxies again, which heals one that missed it (a
	// deleted user's "forget its roles" arriving after the new user's binding).
	if err := c.AddUserRole(ctx, names.MilvusUser, names.MilvusRole); err != nil {
		return fmt.Errorf("binding role %s: %w", names.MilvusRole, err)
	}
	return nil
}

// loginWorks reports whether m's user logs in with m's password.
func loginWorks(ctx context.Context, m MilvusConn) (bool, error) {
	c, err := ConnectMilvus(ctx, m)
	if err != nil {
		if ReasonOf(err) == ReasonAuthenticationFailed {
			return false, nil
		}
		return false, err
	}
	_ = c.Close()
	return true, nil
}
