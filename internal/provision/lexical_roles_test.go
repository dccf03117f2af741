package provision

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
)

// TestGuaranteeRolesRunLexicalSearch: the agent role (the gateway) writes, searches and
// deletes with the lexical index, making the postings a restore left owed; the worker
// role restores into it. Exactly the privileges granted, none to spare, suffice.
func TestGuaranteeRolesRunLexicalSearch(t *testing.T) {
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
	it := func(id, key, text string) memory.Item {
		content, _ := json.Marshal(map[string]string{"text": text})
		return memory.Item{MemoryID: id, MemoryType: memory.Semantic, Scope: "user:lex", Key: key, Content: content,
			Source: "test@1", BaseScore: 0.5, CreatedAt: at, UpdatedAt: at}
	}
	if res, err := worker.Merge(ctx, []memory.Item{it("r1", "", "restored saffron")}, pgstore.MergeOptions{}); err != nil || res.Outcomes[0] != pgstore.MergeInserted {
		t.Fatalf("worker merge: %+v, %v", res, err)
	}
	if _, err := agent.Put(ctx, it("p1", "fav", "oolong")); err != nil {
		t.Fatalf("agent put: %v", err)
	}
	next := it("p2", "fav", "espresso")
	next.UpdatedAt = at.Add(time.Minute)
	if _, err := agent.Put(ctx, next); err != nil {
		t.Fatalf("agent supersede: %v", err)
	}
	find := func(text string) []string {
		t.Helper()
		hits, err := agent.LexicalSearch(ctx, pgstore.LexicalQuery{Scope: "user:lex", Text: text, K: 5})
		if err != nil {
			t.Fatalf("agent search: %v", err)
		}
		var ids []string
		for _, h := range hits {
			ids = append(ids, h.MemoryID)
		}
		return ids
	}
	if got := find("saffron espresso oolong"); !slices.Equal(slices.Sorted(slices.Values(got)), []string{"p1", "r1"}) {
		t.Fatalf("agent found %v", got)
	}
	if _, _, err := agent.DeleteQueued(ctx, "r1", "test"); err != nil {
		t.Fatalf("agent delete: %v", err)
	}
	if _, err := worker.Forget(ctx, "user:lex", "test", "test"); err != nil {
		t.Fatalf("worker forget: %v", err)
	}
	if got := find("saffron espresso"); len(got) != 0 {
		t.Fatalf("after forget, found %v", got)
	}
}
