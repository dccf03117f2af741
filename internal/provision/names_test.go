package provision

import (
	"net/url"
	"strings"
	"testing"
)

func TestNamesFor(t *testing.T) {
	cases := []struct {
		tenant, base string
		want         Names
		wantErr      bool
	}{
		{tenant: "acme", base: "memory-operator", want: Names{Tenant: "acme", Schema: "mem_acme", Role: "mem_acme_agent", WorkerRole: "mem_acme_worker", Collection: "mem_acme", Prefix: "memory-operator/acme/"}},
		{tenant: "team-a-prod", base: "", want: Names{Tenant: "team-a-prod", Schema: "mem_team_a_prod", Role: "mem_team_a_prod_agent", WorkerRole: "mem_team_a_prod_worker", Collection: "mem_team_a_prod", Prefix: "team-a-prod/"}},
		{tenant: "x1", base: "/a/b/", want: Names{Tenant: "x1", Schema: "mem_x1", Role: "mem_x1_agent", WorkerRole: "mem_x1_worker", Collection: "mem_x1", Prefix: "a/b/x1/"}},
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
		if !tc.wantErr && got != tc.want {
			t.Errorf("NamesFor(%q, %q) = %+v, want %+v", tc.tenant, tc.base, got, tc.want)
		}
	}
	// The longest tenant still gives identifiers PostgreSQL keeps whole (63 bytes).
	n, err := NamesFor(strings.Repeat("a", 40), "")
	if err != nil || len(n.Role) > 63 || len(n.WorkerRole) > 63 {
		t.Fatalf("longest tenant: %+v, %v", n, err)
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
