package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/memory/service"
	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/snapshot"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector/milvus"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
)

// The TestGuarantee tests hold the operator to its promises end to end, through the
// real snapshot and restore workers against PostgreSQL and MinIO: a forgotten user
// stays forgotten through any number of migrations in any order, a restore never
// mixes people, and a bad package is refused with nothing written. `go test ./...
// -run Guarantee` runs every one of them (here and in the other packages).

// memoryOf builds a memory of scope created at the given time (updated at it too).
func memoryOf(id, scope, text string, created time.Time) memory.Item {
	c, _ := json.Marshal(map[string]string{"text": text})
	return memory.Item{MemoryID: id, MemoryType: memory.Semantic, Scope: scope, Content: c, Source: "test@1",
		BaseScore: 0.8, CreatedAt: created, UpdatedAt: created}
}

// memoryLayer is the memory service over a schema with PostgreSQL-embedded vectors.
func (f *fixtureEnv) memoryLayer(t *testing.T, schema string) *service.Memory {
	t.Helper()
	if err := pgindex.Ensure(context.Background(), f.pool, schema, spec8); err != nil {
		t.Fatal(err)
	}
	m, err := service.New(pgstore.New(f.pool, schema), pgindex.New(f.pool, schema, spec8), embed.NewHashing(8))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// visible lists what a store still shows of scope: its memories (any state), its
// vectors, and what a search for text finds.
func (f *fixtureEnv) visible(t *testing.T, schema, scope, text string) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	rows, err := f.pool.Query(ctx, `SELECT 'row:'||memory_id FROM `+pgx.Identifier{schema, "memories"}.Sanitize()+` WHERE scope = $1
		UNION ALL SELECT 'vector:'||memory_id FROM `+pgx.Identifier{schema, "vectors"}.Sanitize()+` WHERE scope = $1`, scope)
	if err != nil {
		t.Fatal(err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, found...)
	res, err := f.memoryLayer(t, schema).Search(ctx, service.SearchQuery{Scope: scope, Text: text, K: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		out = append(out, "search:"+r.Item.MemoryID)
	}
	slices.Sort(out)
	return out
}

// forgetAuditCount counts the "forget" audit records of scope.
func (f *fixtureEnv) forgetAuditCount(t *testing.T, schema, scope string) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+pgx.Identifier{schema, "audit_log"}.Sanitize()+
		` WHERE action = 'forget' AND scope = $1`, scope).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestGuaranteeForgottenStaysForgottenInAnyOrder restores an old snapshot (taken
// before five users were forgotten) and a new one (carrying their tombstones) into
// fresh targets in every order, with and without renaming the users: none of their
// memories is left in the target — no row, no vector, no search hit — and each has a
// tombstone under its target name and a "forget" audit record where the target held
// its memories.
func TestGuaranteeForgottenStaysForgottenInAnyOrder(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	src := f.memoryLayer(t, f.schema)
	long := time.Now().Add(-24 * time.Hour)
	const forgotten = 5
	for u := range forgotten + 1 {
		scope := fmt.Sprintf("user:%d", u)
		for i := range 3 {
			if _, err := src.Remember(ctx, memoryOf(fmt.Sprintf("u%d-m%d", u, i), scope, fmt.Sprintf("secret %d of user %d", i, u), long)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := RunSnapshot(ctx, f.config("old/"), f.sec, RunOptions{Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for u := range forgotten {
		if _, err := src.Forget(ctx, fmt.Sprintf("user:%d", u), "user asked", "test"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := RunSnapshot(ctx, f.config("new/"), f.sec, RunOptions{Now: time.Now()}); err != nil {
		t.Fatal(err)
	}

	orders := [][]string{{"old/", "new/"}, {"new/", "old/"}, {"old/", "new/", "old/"}, {"new/", "old/", "new/"}}
	for _, renamed := range []bool{false, true} {
		for _, order := range orders {
			t.Run(fmt.Sprintf("renamed=%v/%s", renamed, strings.Join(order, "then")), func(t *testing.T) {
				target := f.targetSchema(t)
				for _, pkg := range order {
					rc := f.restoreConfig(target, pkg)
					if renamed {
						rc.PrefixMap = []ScopeRule{{From: "user:", To: "user:moved-"}}
					}
					if _, err := RunRestore(ctx, rc, f.restoreSecrets(), RunOptions{Now: time.Now()}); err != nil {
						t.Fatalf("restoring %s: %v", pkg, err)
					}
				}
				name := func(u int) string {
					if renamed {
						return fmt.Sprintf("user:moved-%d", u)
					}
					return fmt.Sprintf("user:%d", u)
				}
				ts := pgstore.New(f.pool, target)
				leaked := 0
				for u := range forgotten {
					if got := f.visible(t, target, name(u), fmt.Sprintf("secret 0 of user %d", u)); len(got) > 0 {
						leaked++
						t.Errorf("forgotten %s is back in the target: %v", name(u), got)
					}
					if ok, err := ts.IsForgotten(ctx, name(u)); err != nil || !ok {
						t.Errorf("%s has no tombstone in the target (%v)", name(u), err)
					}
					// The old package put their memories there first: forgetting them is audited.
					if order[0] == "old/" && f.forgetAuditCount(t, target, name(u)) == 0 {
						t.Errorf("%s was forgotten in the target without an audit record", name(u))
					}
				}
				if leaked > 0 {
					t.Errorf("%d of %d forgotten users are back after restoring %v", leaked, forgotten, order)
				}
				kept := 0
				for _, v := range f.visible(t, target, name(forgotten), "secret 0 of user 5") {
					if strings.HasPrefix(v, "row:") {
						kept++
					}
				}
				if kept != 3 {
					t.Errorf("the user who was never forgotten has %d of 3 memories", kept)
				}
			})
		}
	}
}

// TestGuaranteeReturningUserSurvivesMigrations: a tombstone forgets what its scope
// held up to its time. A user who comes back after being forgotten writes again (new
// consent); those memories are kept by every path: the write path, a snapshot and
// restore into a fresh store, and restores of the old and the new package in either
// order. What the user had before the forget never comes back.
func TestGuaranteeReturningUserSurvivesMigrations(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	src := f.memoryLayer(t, f.schema)
	before := time.Now().Add(-time.Hour)
	if _, err := src.Remember(ctx, memoryOf("old-address", "user:7", "lives in Porto", before)); err != nil {
		t.Fatal(err)
	}
	if _, err := RunSnapshot(ctx, f.config("before/"), f.sec, RunOptions{Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Forget(ctx, "user:7", "user asked", "test"); err != nil {
		t.Fatal(err)
	}
	// The user comes back: a memory written now, after the forget.
	back := memoryOf("new-address", "user:7", "lives in Lyon", time.Time{})
	if _, err := src.Remember(ctx, back); err != nil {
		t.Fatalf("the write path refused a returning user's new memory: %v", err)
	}
	if _, err := RunSnapshot(ctx, f.config("after/"), f.sec, RunOptions{Now: time.Now()}); err != nil {
		t.Fatal(err)
	}

	for _, order := range [][]string{{"after/"}, {"before/", "after/"}, {"after/", "before/"}} {
		t.Run(strings.Join(order, "then"), func(t *testing.T) {
			target := f.targetSchema(t)
			for _, pkg := range order {
				if _, err := RunRestore(ctx, f.restoreConfig(target, pkg), f.restoreSecrets(), RunOptions{Now: time.Now()}); err != nil {
					t.Fatal(err)
				}
			}
			got := scopesOf(t, f, target)
			if !slices.Equal(got, []string{"user:7/new-address"}) {
				t.Fatalf("after restoring %v the target holds %v, want only the returning user's new memory", order, got)
			}
		})
	}
}

// storeState is everything a restore could change in a store: its memories, vectors,
// tombstones and audit records, as text.
func (f *fixtureEnv) storeState(t *testing.T, schema string) []string {
	t.Helper()
	q := func(table string) string { return pgx.Identifier{schema, table}.Sanitize() }
	rows, err := f.pool.Query(context.Background(), `
		SELECT 'memory ' || to_jsonb(m)::text FROM `+q("memories")+` m
		UNION ALL SELECT 'vector ' || memory_id || ' ' || scope || ' ' || embedding::text FROM `+q("vectors")+`
		UNION ALL SELECT 'tombstone ' || scope || ' ' || forgotten_at::text FROM `+q("tombstones")+`
		UNION ALL SELECT 'audit ' || action || ' ' || coalesce(scope, '') || ' ' || detail::text FROM `+q("audit_log"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// packageTombstones returns the scopes a package's tombstones name.
func (f *fixtureEnv) packageTombstones(t *testing.T, prefix string, k *snapshot.Key) []string {
	t.Helper()
	r, _ := f.open(t, prefix, k)
	var out []string
	if err := r.Tombstones(context.Background(), func(tb memory.Tombstone) error {
		out = append(out, tb.Scope)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestGuaranteeSnapshotIsOneCut forgets a user while a snapshot is between reading the
// tombstones and exporting the memories (the export is held back by a lock; the forget
// commits meanwhile): the package must hold either the user's memories or the user's
// tombstone — a package with neither would bring the user back into a store that has
// the memories from an older package.
func TestGuaranteeSnapshotIsOneCut(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	src := f.memoryLayer(t, f.schema)
	for i := range 3 {
		if _, err := src.Remember(ctx, memoryOf(fmt.Sprintf("u9-m%d", i), "user:9", "a secret of user 9", time.Now().Add(-time.Hour))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := src.Remember(ctx, memoryOf("u8-m0", "user:8", "user 8 stays", time.Now().Add(-time.Hour))); err != nil {
		t.Fatal(err)
	}

	lock, err := f.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(ctx) }()
	mems := pgx.Identifier{f.schema, "memories"}.Sanitize()
	if _, err := lock.Exec(ctx, `LOCK TABLE `+mems+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := RunSnapshot(ctx, f.config("cut/"), f.sec, RunOptions{Now: time.Now()})
		done <- err
	}()
	// Wait until the snapshot waits for the memories table.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting bool
		if err := f.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks l WHERE NOT l.granted AND l.relation = $1::regclass)`, mems).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the snapshot never reached the export")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Forget user:9 as pgstore.Forget does, in the transaction holding the lock.
	if _, err := lock.Exec(ctx, `DELETE FROM `+mems+` WHERE scope = 'user:9'`); err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, `INSERT INTO `+pgx.Identifier{f.schema, "tombstones"}.Sanitize()+` (scope, forgotten_at, reason) VALUES ('user:9', now(), 'asked')`); err != nil {
		t.Fatal(err)
	}
	if err := lock.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	_, items := f.open(t, "cut/", key(t))
	var of9 int
	for _, it := range items {
		if it.Scope == "user:9" {
			of9++
		}
	}
	tombstoned := slices.Contains(f.packageTombstones(t, "cut/", key(t)), "user:9")
	if of9 == 0 && !tombstoned {
		t.Fatal("the package holds neither user:9's memories nor its tombstone: it is not one cut of the store")
	}
	if of9 > 0 && tombstoned {
		t.Fatalf("the package holds user:9's %d memories and its tombstone", of9)
	}
}

// TestGuaranteeNoMappingMergesTwoUsers: whatever combination of rules sends two
// package scopes to one target scope, the restore is refused before anything is
// written, naming both.
func TestGuaranteeNoMappingMergesTwoUsers(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	src := f.memoryLayer(t, f.schema)
	old := time.Now().Add(-time.Hour)
	for _, m := range []memory.Item{
		memoryOf("alice-addr", "user:1", "Alice lives in Porto", old),
		memoryOf("bob-addr", "user:2", "Bob lives in Oslo", old),
		memoryOf("carol-addr", "user:3", "Carol lives in Rome", old),
		memoryOf("dan-addr", "user:4", "Dan lives in Kyiv", old),
	} {
		if _, err := src.Remember(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := src.Forget(ctx, "user:4", "asked", "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := RunSnapshot(ctx, f.config("people/"), f.sec, RunOptions{Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	mapFile := func(t *testing.T, text string) string {
		p := filepath.Join(t.TempDir(), "map.csv")
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name   string
		mutate func(t *testing.T, rc *RestoreConfig)
		pair   [2]string // the two package scopes that collide
	}{
		{"two exact rules", func(_ *testing.T, rc *RestoreConfig) {
			rc.ScopeMap = []ScopeRule{{From: "user:1", To: "user:x"}, {From: "user:2", To: "user:x"}}
		}, [2]string{"user:1", "user:2"}},
		{"a prefix rule onto an exact rule", func(_ *testing.T, rc *RestoreConfig) {
			rc.PrefixMap = []ScopeRule{{From: "user:", To: "user:p-"}}
			rc.ScopeMap = []ScopeRule{{From: "user:2", To: "user:p-1"}}
		}, [2]string{"user:1", "user:2"}},
		{"an exact rule onto a kept scope", func(_ *testing.T, rc *RestoreConfig) {
			rc.ScopeMap = []ScopeRule{{From: "user:1", To: "user:3"}}
		}, [2]string{"user:1", "user:3"}},
		{"a map file", func(t *testing.T, rc *RestoreConfig) {
			rc.MapFile, rc.MapFormat = mapFile(t, "from,to\nuser:1,user:a\nuser:2,user:b\nuser:3,user:a\n"), MapFormatCSV
		}, [2]string{"user:1", "user:3"}},
		{"a forgotten scope onto a live one", func(_ *testing.T, rc *RestoreConfig) {
			rc.ScopeMap = []ScopeRule{{From: "user:4", To: "user:1"}}
		}, [2]string{"user:1", "user:4"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			target := f.targetSchema(t)
			rc := f.restoreConfig(target, "people/")
			tc.mutate(t, &rc)
			sum, err := RunRestore(ctx, rc, f.restoreSecrets(), RunOptions{Now: time.Now()})
			if err == nil {
				t.Errorf("the restore merged %s and %s into one scope (restored %d); the target holds %v", tc.pair[0], tc.pair[1], sum.Restored, scopesOf(t, f, target))
			} else if !strings.Contains(err.Error(), tc.pair[0]) || !strings.Contains(err.Error(), tc.pair[1]) {
				t.Errorf("the error does not name %s and %s: %v", tc.pair[0], tc.pair[1], err)
			}
			if got := f.storeState(t, target); len(got) != 0 {
				t.Errorf("a refused restore wrote %d rows (memories, vectors, tombstones, audit records)", len(got))
			}
		})
	}
}

// TestGuaranteeNothingWrittenBeforeThePackageVerifies damages a later shard of an
// unencrypted package in ways its per-object checksums cannot show (the manifest is
// edited and re-hashed, as a buggy producer or someone with write access to the
// bucket could): the restore fails, and the target — which already holds memories,
// including one of a scope the package forgets — is exactly as before.
func TestGuaranteeNothingWrittenBeforeThePackageVerifies(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	src := f.memoryLayer(t, f.schema)
	old := time.Now().Add(-time.Hour)
	var items []memory.Item
	for u := range 200 {
		for i := range 5 {
			items = append(items, memoryOf(fmt.Sprintf("u%03d-m%d", u, i), fmt.Sprintf("user:%03d", u),
				fmt.Sprintf("memory %d of user %d, with some text to fill the shard", i, u), old))
		}
	}
	if _, err := src.RememberBatch(ctx, items); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Forget(ctx, "user:000", "asked", "test"); err != nil {
		t.Fatal(err)
	}
	cfg := f.config("damaged/")
	cfg.Unencrypted, cfg.ShardTargetBytes = true, 8<<10
	if _, err := RunSnapshot(ctx, cfg, f.sec, RunOptions{Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	obj := snapshot.NewMinioObjects(f.s3, f.bucket)
	readManifest := func() map[string]any {
		rc, err := obj.Get(ctx, "damaged/manifest.json")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = rc.Close() }()
		var m map[string]any
		if err := json.NewDecoder(rc).Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	pristine := readManifest()
	shards := pristine["shards"].([]any)
	if len(shards) < 3 {
		t.Fatalf("the package has %d shards; the test needs at least 3", len(shards))
	}

	// The target holds a memory of user:000 (which the package forgets) and one of its own.
	target := f.targetSchema(t)
	dst := f.memoryLayer(t, target)
	for _, m := range []memory.Item{memoryOf("t-000", "user:000", "the target's own memory of user 0", old), memoryOf("t-own", "user:999", "kept", old)} {
		if _, err := dst.Remember(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	before := f.storeState(t, target)

	put := func(m map[string]any) {
		b, err := json.MarshalIndent(m, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := obj.Put(ctx, "damaged/manifest.json", strings.NewReader(string(b))); err != nil {
			t.Fatal(err)
		}
	}
	last := len(shards) - 1
	damages := []struct {
		name   string
		damage func(m map[string]any)
	}{
		// The last shard is said to hold one more item than it does (counts adjusted to match).
		{"item count of the last shard", func(m map[string]any) {
			sh := m["shards"].([]any)[last].(map[string]any)
			sh["items"] = sh["items"].(float64) + 1
			c := m["counts"].(map[string]any)
			c["items"] = c["items"].(float64) + 1
			bt := c["byType"].(map[string]any)
			bt["semantic"] = bt["semantic"].(float64) + 1
			bs := c["byScope"].(map[string]any)
			bs[sh["lastScope"].(string)] = bs[sh["lastScope"].(string)].(float64) + 1
		}},
		// The last shard's range is said to end one scope later than it does.
		{"last scope of the last shard", func(m map[string]any) {
			sh := m["shards"].([]any)[last].(map[string]any)
			sh["lastScope"] = "user:zzz"
		}},
	}
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			m := readManifest()
			d.damage(m)
			put(m)
			defer put(pristine)
			rc := f.restoreConfig(target, "damaged/")
			rc.Unencrypted = true
			sec := f.restoreSecrets()
			sec.SourceKey = ""
			if _, err := RunRestore(ctx, rc, sec, RunOptions{Now: time.Now()}); err == nil {
				t.Fatal("the damaged package was restored")
			}
			after := f.storeState(t, target)
			if !slices.Equal(after, before) {
				added, removed := 0, 0
				for _, s := range after {
					if !slices.Contains(before, s) {
						added++
					}
				}
				for _, s := range before {
					if !slices.Contains(after, s) {
						removed++
					}
				}
				t.Fatalf("the failed restore changed the target: %d rows added, %d removed", added, removed)
			}
		})
	}
}

// provisionedStore is a store provisioned as the operator does (schema, pgindex
// vectors, agent and worker roles), with the two roles' connection URIs.
type provisionedStore struct {
	schema, workerRole, agentURI, workerURI string
	names                                   provision.Names
	adminConn                               provision.PostgresConn
}

func provisionStore(t *testing.T) provisionedStore {
	t.Helper()
	ctx := context.Background()
	pg := testutil.PostgresParts(t)
	admin := provision.PostgresConn{Host: pg.Host, Port: pg.PortNumber, Database: "postgres", SSLMode: "disable", User: pg.User, Password: pg.Password}
	names, err := provision.NamesFor(testutil.UniqueName("roles-"), "")
	if err != nil {
		t.Fatal(err)
	}
	owner := "team-a/" + names.Tenant
	if _, err := provision.EnsurePostgres(ctx, admin, names, owner, provision.Passwords{Agent: "agent-pw", Worker: "worker-pw"}); err != nil {
		t.Fatal(err)
	}
	if _, err := provision.EnsureVectors(ctx, admin, nil, names, milvus.Owner{ID: owner}, spec8); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := provision.DeletePostgres(context.Background(), admin, names, owner); err != nil {
			t.Errorf("removing the store: %v", err)
		}
	})
	agent, worker := admin, admin
	agent.User, agent.Password = names.Role, "agent-pw"
	worker.User, worker.Password = names.WorkerRole, "worker-pw"
	return provisionedStore{schema: names.Schema, workerRole: names.WorkerRole, agentURI: agent.URL(nil), workerURI: worker.URL(nil),
		names: names, adminConn: admin}
}

// agentMemory is the memory service as an agent has it: the agent role's login.
func agentMemory(t *testing.T, s provisionedStore) *service.Memory {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), s.agentURI)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	m, err := service.New(pgstore.New(pool, s.schema), pgindex.New(pool, s.schema, spec8), embed.NewHashing(8))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestGuaranteeEachRoleSuffices runs everything as the roles the operator hands out:
// agents remember, search and forget with the connection Secret's role; the snapshot
// and restore Jobs (applying tombstones, with their audit records and pending vector
// deletions) with the worker role. Neither needs more than it is granted
// (provision.TestGuaranteeRolePrivileges holds them to no more).
func TestGuaranteeEachRoleSuffices(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	src, dst := provisionStore(t), provisionStore(t)
	agentSrc, agentDst := agentMemory(t, src), agentMemory(t, dst)
	old := time.Now().Add(-time.Hour)
	for _, m := range []memory.Item{memoryOf("a1", "user:1", "likes tea", old), memoryOf("b1", "user:2", "likes coffee", old)} {
		if _, err := agentSrc.Remember(ctx, m); err != nil {
			t.Fatalf("the agent role cannot remember: %v", err)
		}
	}
	if _, err := agentDst.Remember(ctx, memoryOf("t-b1", "user:2", "the target's copy of user 2", old)); err != nil {
		t.Fatal(err)
	}
	if _, err := agentSrc.Forget(ctx, "user:2", "asked", "agent"); err != nil {
		t.Fatalf("the agent role cannot forget: %v", err)
	}
	if res, err := agentSrc.Search(ctx, service.SearchQuery{Scope: "user:1", Text: "tea"}); err != nil || len(res) != 1 {
		t.Fatalf("the agent role cannot search: %v, %v", res, err)
	}

	cfg := f.config("roles/")
	cfg.Schema = src.schema
	sec := f.sec
	sec.PostgresURI = src.workerURI
	if _, err := RunSnapshot(ctx, cfg, sec, RunOptions{Now: time.Now()}); err != nil {
		t.Fatalf("the worker role cannot snapshot: %v", err)
	}
	rc := f.restoreConfig(dst.schema, "roles/")
	rsec := f.restoreSecrets()
	rsec.PostgresURI = dst.workerURI
	sum, err := RunRestore(ctx, rc, rsec, RunOptions{Now: time.Now()})
	if err != nil {
		t.Fatalf("the worker role cannot restore: %v", err)
	}
	if sum.Restored != 1 || sum.Tombstones != 1 || sum.Forgotten != 1 {
		t.Fatalf("restore summary %+v: want a1 restored and user:2's tombstone forgetting the target's copy", sum)
	}
	if got := scopesOf(t, f, dst.schema); !slices.Equal(got, []string{"user:1/a1"}) {
		t.Fatalf("target holds %v", got)
	}
	if res, err := agentDst.Search(ctx, service.SearchQuery{Scope: "user:2", Text: "coffee"}); err != nil || len(res) != 0 {
		t.Fatalf("search of the forgotten user in the target: %v, %v", res, err)
	}
}

// progressHook calls fn with each progress line a worker writes.
type progressHook func(line string)

func (h progressHook) Write(p []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimSpace(string(p)), "\n") {
		h(l)
	}
	return len(p), nil
}

// TestGuaranteeFailedRestoreReportsWhatItWrote loses the target midway through a
// restore (the worker role may no longer write memories after the first batches
// committed): the restore fails, its summary says exactly how many memories it wrote,
// and a new restore of the package completes it.
func TestGuaranteeFailedRestoreReportsWhatItWrote(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	const n = 30_000
	f.importGenerated(t, n)
	if _, err := RunSnapshot(ctx, f.config("halfway/"), f.sec, RunOptions{Now: testNow}); err != nil {
		t.Fatal(err)
	}
	dst := provisionStore(t)
	rc := f.restoreConfig(dst.schema, "halfway/")
	rc.Embeddings = "Defer"
	rsec := f.restoreSecrets()
	rsec.PostgresURI = dst.workerURI
	worker := dst.workerRole
	revoked := false
	lose := progressHook(func(line string) {
		var read, restored, skipped int64
		if _, err := fmt.Sscanf(line, "read %d, restored %d, skipped %d", &read, &restored, &skipped); err == nil && restored > 0 && !revoked {
			revoked = true
			if _, err := f.pool.Exec(ctx, `REVOKE INSERT, UPDATE ON `+pgx.Identifier{dst.schema, "memories"}.Sanitize()+` FROM `+pgx.Identifier{worker}.Sanitize()); err != nil {
				t.Error(err)
			}
		}
	})
	sum, err := RunRestore(ctx, rc, rsec, RunOptions{Now: testNow, Progress: lose})
	if err == nil || !revoked {
		t.Fatalf("the restore did not fail midway (revoked %v): %+v", revoked, sum)
	}
	written := int64(len(scopesOf(t, f, dst.schema)))
	if sum.Error == "" || sum.Restored != written || written == 0 || written == n {
		t.Fatalf("failed restore: summary says %d restored (error %q), the target holds %d of %d", sum.Restored, sum.Error, written, n)
	}
	if _, err := f.pool.Exec(ctx, `GRANT INSERT, UPDATE ON `+pgx.Identifier{dst.schema, "memories"}.Sanitize()+` TO `+pgx.Identifier{worker}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	again, err := RunRestore(ctx, rc, rsec, RunOptions{Now: testNow})
	if err != nil || again.Restored+again.Unchanged != n || again.Unchanged != written {
		t.Fatalf("the second restore: %+v, %v", again, err)
	}
}
