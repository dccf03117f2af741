package provision

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
)

// TestGuaranteeRolesRaiseScopeVersions: the agent role's writes (the gateway) and the
// worker role's (restore, forget) raise the scope's version through the triggers, and
// both read it, with the privileges granted and none on the version tables.
func TestGuaranteeRolesRaiseScopeVersions(t *testing.T) {
	admin, names, pw := provisioned(t)
	ctx := context.Background()
	storeAs := func(role, password string) *pgstore.Store {
		c := admin
		c.User, c.Password = role, password
		pool, err := pgxpool.New(ctx, c.URL(nil))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return pgstore.New(pool, names.Schema)
	}
	agent, worker := storeAs(names.Role, pw.Agent), storeAs(names.WorkerRole, pw.Worker)
	at := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	content, _ := json.Marshal(map[string]string{"text": "oolong"})
	it := memory.Item{MemoryID: "v1", MemoryType: memory.Semantic, Scope: "user:ver", Content: content,
		Source: "test@1", BaseScore: 0.5, CreatedAt: at, UpdatedAt: at}
	version := func(s *pgstore.Store) int64 {
		t.Helper()
		v, err := s.ScopeVersion(ctx, "user:ver")
		if err != nil {
			t.Fatalf("version: %v", err)
		}
		return v
	}
	if v := version(agent); v != 0 {
		t.Fatalf("before any write: %d", v)
	}
	if _, err := agent.PutQueued(ctx, it); err != nil {
		t.Fatalf("agent put: %v", err)
	}
	if v := version(agent); v != 1 {
		t.Fatalf("after the agent's write: %d", v)
	}
	if _, err := worker.Forget(ctx, "user:ver", "test", "test"); err != nil {
		t.Fatalf("worker forget: %v", err)
	}
	if v := version(worker); v != 2 {
		t.Fatalf("after the worker's forget: %d", v)
	}
	if _, err := agent.ScopeVersionsEpoch(ctx); err != nil {
		t.Fatalf("agent reads the epoch: %v", err)
	}
}
