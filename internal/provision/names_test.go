package provision

import (
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

func TestNamesFor(t *testing.T) {
	cases := []struct {
		tenant, base string
		want         Names
		wantErr      bool
	}{
		{tenant: "acme", base: "memory-operator", want: Names{Tenant: "acme", Schema: "mem_acme", Role: "mem_acme_agent", WorkerRole: "mem_acme_worker", Collection: "mem_acme", MilvusUser: "mem_acme", MilvusRole: "mem_acme_role", RedisUser: "mem_acme", Prefix: "memory-operator/acme/"}},
		{tenant: "team-a-prod", base: "", want: Names{Tenant: "team-a-prod", Schema: "mem_team_a_prod", Role: "mem_team_a_prod_agent", WorkerRole: "mem_team_a_prod_worker", Collection: "mem_team_a_prod", MilvusUser: "mem_team_a_prod", MilvusRole: "mem_team_a_prod_role", RedisUser: "mem_team_a_prod", Prefix: "team-a-prod/"}},
		{tenant: "x1", base: "/a/b/", want: Names{Tenant: "x1", Schema: "mem_x1", Role: "mem_x1_agent", WorkerRole: "mem_x1_worker", Collection: "mem_x1", MilvusUser: "mem_x1", MilvusRole: "mem_x1_role", RedisUser: "mem_x1", Prefix: "a/b/x1/"}},
		{tenant: "Acme", wantErr: true},
		{tenant: "1acme", wantErr: true},
		{tenant: "acme-", wantErr: true},
		{tenant: `a";drop`, wantErr: true},
		{tenant: strings.Repeat("a", 41), wantErr: true},
		{tenant: "", wantErr: true},
	}
	for _, tc := range cases {
		got, err := NamesFor(tc.tenant, tc.base)
		if (err != nil) != tc.wantErr {
			t.Errorf("NamesFor(%q): err = %v, want error %v", tc.tenant, err, tc.wantErr)
			continue
		}
		if !tc.wantErr && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("NamesFor(%q, %q) = %+v, want %+v", tc.tenant, tc.base, got, tc.want)
		}
	}
	// The longest tenant still gives identifiers PostgreSQL keeps whole (63 bytes).
	n, err := NamesFor(strings.Repeat("a", 40), "")
	if err != nil || len(n.Role) > 63 || len(n.WorkerRole) > 63 {
		t.Fatalf("longest tenant: %+v, %v", n, err)
	}
}

// TestMilvusNames: every tenant gives a user and role name Milvus accepts (the user at
// most 32 characters, a letter first, then letters, digits and underscores; the role at
// most 255), and distinct tenants distinct names, also when long ones share a prefix
// or a short one looks like a long one's shortened form. TestMilvusTenantNamesOnServer
// has the server accept the edge cases.
func TestMilvusNames(t *testing.T) {
	valid := regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*$`)
	long := strings.Repeat("a", 40)
	tenants := []string{"a", "acme", "team-a-prod", "x1-2-3", long, long[:39] + "b", long[:27], long[:28], long[:29],
		"a" + strings.Repeat("-b", 19) + "c", "a" + strings.Repeat("-b", 19) + "d", "a0-0-0-0-0-0-0-0-0-0-0-0-0-0-0-0-0-0-0z"}
	seenUser, seenRole := map[string]string{}, map[string]string{}
	for _, tenant := range tenants {
		n, err := NamesFor(tenant, "")
		if err != nil {
			t.Fatalf("NamesFor(%q): %v", tenant, err)
		}
		if len(n.MilvusUser) > 32 || !valid.MatchString(n.MilvusUser) {
			t.Errorf("tenant %q: Milvus user %q (%d characters) is not a valid Milvus user name", tenant, n.MilvusUser, len(n.MilvusUser))
		}
		if len(n.MilvusRole) > 255 || !valid.MatchString(n.MilvusRole) {
			t.Errorf("tenant %q: Milvus role %q is not a valid Milvus role name", tenant, n.MilvusRole)
		}
		if other, dup := seenUser[n.MilvusUser]; dup {
			t.Errorf("tenants %q and %q share the Milvus user %q", other, tenant, n.MilvusUser)
		}
		if other, dup := seenRole[n.MilvusRole]; dup {
			t.Errorf("tenants %q and %q share the Milvus role %q", other, tenant, n.MilvusRole)
		}
		seenUser[n.MilvusUser], seenRole[n.MilvusRole] = tenant, tenant
	}
	// Short tenants keep readable names: the user is the collection's name.
	if n, _ := NamesFor("team-a-prod", ""); n.MilvusUser != n.Collection {
		t.Errorf("short tenant: Milvus user %q, want %q", n.MilvusUser, n.Collection)
	}
}

func TestPostgresURLIsUsableByLibpq(t *testing.T) {
	c := PostgresConn{Host: "db.example", Port: 5433, Database: "agents", SSLMode: "require", User: "mem_acme_agent", Password: "p@ss:w/rd?"}
	raw := c.URL(url.Values{"options": {"-c search_path=mem_acme"}})
	if strings.Contains(raw, "+") {
		t.Fatalf("libpq reads '+' literally, spaces must be %%20: %s", raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	q := u.Query()
	if u.Host != "db.example:5433" || u.Path != "/agents" || u.User.Username() != "mem_acme_agent" || pw != c.Password ||
		q.Get("sslmode") != "require" || q.Get("options") != "-c search_path=mem_acme" || q.Get("connect_timeout") != "10" {
		t.Fatalf("URL %s decodes to host %q path %q user %q password ok=%v query %v", raw, u.Host, u.Path, u.User.Username(), pw == c.Password, q)
	}
}
