package provision

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/milvus-io/milvus-sdk-go/v2/client"
	"github.com/milvus-io/milvus-sdk-go/v2/entity"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/vector/milvus"
	"github.com/amemory/memory-operator/internal/vector/pgvector"
)

// TestScratchNames: a scratch copy's schema and collection are "drill_" and the
// tenant's identifier, never any tenant's own names (also of tenants named like a
// scratch copy), distinct per tenant, within PostgreSQL's and Milvus's limits for the
// longest tenant; everything else is the store's.
func TestScratchNames(t *testing.T) {
	long := strings.Repeat("z", 40)
	tenants := []string{"a", "acme", "acme-drill", "drill", "drill-acme", "drill-drill", "drill-mem-acme", "mem", "mem-acme",
		"team-a-prod", long, long[:39] + "y"}
	var stores, scratches []Names
	for _, tenant := range tenants {
		n, err := NamesFor(tenant, "base")
		if err != nil {
			t.Fatal(err)
		}
		s := n.Scratch()
		ident := strings.ReplaceAll(tenant, "-", "_")
		if s.Schema != "drill_"+ident || s.Collection != "drill_"+ident {
			t.Errorf("tenant %q: scratch schema %q, collection %q, want drill_%s", tenant, s.Schema, s.Collection, ident)
		}
		want := n
		want.Schema, want.Collection = s.Schema, s.Collection
		if !reflect.DeepEqual(s, want) {
			t.Errorf("tenant %q: Scratch() = %+v, want the store's names but for schema and collection (%+v)", tenant, s, want)
		}
		if err := pgstore.ValidateSchema(s.Schema); err != nil {
			t.Errorf("tenant %q: %v", tenant, err)
		}
		if len(s.Schema) > 63 {
			t.Errorf("tenant %q: scratch schema %q is %d bytes", tenant, s.Schema, len(s.Schema))
		}
		if err := milvus.ValidCollectionName(s.Collection); err != nil {
			t.Errorf("tenant %q: %v", tenant, err)
		}
		stores, scratches = append(stores, n), append(scratches, s)
	}
	if n := len(scratches[len(scratches)-1].Schema); n != 46 {
		t.Errorf("the longest tenant's scratch schema is %d bytes, want 46", n)
	}
	for i, s := range scratches {
		for j, n := range stores {
			for _, own := range []string{n.Schema, n.Collection, n.Role, n.WorkerRole, n.MilvusUser, n.MilvusRole, n.RedisUser} {
				if s.Schema == own || s.Collection == own {
					t.Errorf("tenant %q's scratch copy %q is a name of tenant %q's", tenants[i], s.Schema, tenants[j])
				}
			}
			if i != j && (s.Schema == scratches[j].Schema || s.Collection == scratches[j].Collection) {
				t.Errorf("tenants %q and %q share the scratch copy %q", tenants[i], tenants[j], s.Schema)
			}
		}
	}
}

// scratchSpec is the vector spec of the scratch tests' stores.
var scratchSpec = vector.Spec{Dimension: 4, Metric: vector.Cosine}

const scratchOwner = "team-a/bot" // provisionedOn's

// scratchItem is a memory of scope user:drill.
func scratchItem(id, text string) memory.Item {
	at := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	content, _ := json.Marshal(map[string]string{"text": text})
	return memory.Item{MemoryID: id, MemoryType: memory.Semantic, Scope: "user:drill", Content: content,
		Source: "test@1", BaseScore: 0.5, CreatedAt: at, UpdatedAt: at}
}

// isDenied reports a PostgreSQL permission error.
func isDenied(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}

// schemaMark is the schema's comment ("" when it has none), and whether it exists.
func schemaMark(t *testing.T, admin PostgresConn, schema string) (string, bool) {
	t.Helper()
	conn := connectAs(t, admin, admin.User, admin.Password)
	var comment *string
	err := conn.QueryRow(context.Background(), `SELECT obj_description(oid, 'pg_namespace') FROM pg_namespace WHERE nspname = $1`, schema).Scan(&comment)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	if comment == nil {
		return "", true
	}
	return *comment, true
}

// countRows counts a table's rows as the admin.
func countRows(t *testing.T, admin PostgresConn, schema, table string) int {
	t.Helper()
	conn := connectAs(t, admin, admin.User, admin.Password)
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM `+pgx.Identifier{schema, table}.Sanitize()).Scan(&n); err != nil {
		t.Fatalf("counting %s.%s: %v", schema, table, err)
	}
	return n
}

// seedStore writes a memory (and, through ix when set, its vector) into the store's
// own schema as the worker, to show the scratch copy's life leaves it alone.
func seedStore(t *testing.T, worker *pgxpool.Pool, names Names, ix vector.Index) {
	t.Helper()
	ctx := context.Background()
	if _, err := pgstore.New(worker, names.Schema).Merge(ctx, []memory.Item{scratchItem("own-1", "the store's own")}, pgstore.MergeOptions{}); err != nil {
		t.Fatalf("writing the store: %v", err)
	}
	if ix != nil {
		if err := ix.Upsert(ctx, []vector.Entry{{ID: "own-1", Scope: "user:drill", Type: "semantic", Vector: []float32{0, 0, 0, 1}}}); err != nil {
			t.Fatalf("writing the store's vector: %v", err)
		}
	}
}

// checkStoreUntouched: the store's schema keeps its mark and its memory (and vector).
func checkStoreUntouched(t *testing.T, admin PostgresConn, worker *pgxpool.Pool, names Names, ix vector.Index) {
	t.Helper()
	if mark, ok := schemaMark(t, admin, names.Schema); !ok || mark != ownerComment(scratchOwner) {
		t.Fatalf("the store's schema: mark %q (exists %v)", mark, ok)
	}
	var n int
	if err := worker.QueryRow(context.Background(), `SELECT count(*) FROM `+pgx.Identifier{names.Schema, "memories"}.Sanitize()).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the worker finds %d memories in its store (%v), want its 1", n, err)
	}
	var config []string
	if err := connectAs(t, admin, admin.User, admin.Password).QueryRow(context.Background(),
		`SELECT rolconfig FROM pg_roles WHERE rolname = $1`, names.WorkerRole).Scan(&config); err != nil ||
		!slices.Equal(config, []string{"search_path=" + names.Schema}) {
		t.Fatalf("the worker's settings are %q (%v), want its search_path the store's schema", config, err)
	}
	if ix != nil {
		got, err := ix.(engine.Fetcher).Fetch(context.Background(), []string{"own-1"})
		if err != nil || len(got) != 1 {
			t.Fatalf("the store's vector: %v, %v", got, err)
		}
	}
}

// useScratch is what a drill's Job does in the scratch copy, as the store's worker
// (and Milvus user, login): it restores memories and their vectors, forgets a scope
// part, and searches both ways; the scope's version moves with its writes.
func useScratch(t *testing.T, worker *pgxpool.Pool, scratch Names, vectors engine.Vectors, login engine.Login) vector.Index {
	t.Helper()
	ctx := context.Background()
	st := pgstore.New(worker, scratch.Schema)
	gone := scratchItem("g1", "restored and forgotten")
	gone.Scope = "user:gone"
	items := []memory.Item{scratchItem("d1", "restored saffron"), scratchItem("d2", "restored oolong"), scratchItem("d3", "restored espresso"), gone}
	res, err := st.Merge(ctx, items, pgstore.MergeOptions{})
	if err != nil {
		t.Fatalf("worker merge into the scratch copy: %v", err)
	}
	for i, o := range res.Outcomes {
		if o != pgstore.MergeInserted {
			t.Fatalf("item %d: outcome %v", i, o)
		}
	}
	version := func(scope string) int64 {
		t.Helper()
		v, err := st.ScopeVersion(ctx, scope)
		if err != nil {
			t.Fatalf("worker reads the scope version: %v", err)
		}
		return v
	}
	if v := version("user:gone"); v != 1 {
		t.Fatalf("scope version after the merge: %d, want 1", v)
	}
	ix, closeIx, err := vectors.Open(ctx, worker, scratch.Schema, scratchSpec, login)
	if err != nil {
		t.Fatalf("opening the scratch index: %v", err)
	}
	t.Cleanup(closeIx)
	entries := []vector.Entry{
		{ID: "d1", Scope: "user:drill", Type: "semantic", Vector: []float32{1, 0, 0, 0}},
		{ID: "d2", Scope: "user:drill", Type: "semantic", Vector: []float32{0, 1, 0, 0}},
		{ID: "d3", Scope: "user:drill", Type: "semantic", Vector: []float32{0, 0, 2, 0}},
	}
	if err := ix.Upsert(ctx, entries); err != nil {
		t.Fatalf("worker upsert into the scratch index: %v", err)
	}
	hits, err := ix.Search(ctx, vector.Query{Scope: "user:drill", Vector: []float32{0, 0, 1, 0.1}, K: 2})
	if err != nil || len(hits) != 2 || hits[0].ID != "d3" {
		t.Fatalf("worker search in the scratch index: %v, %v", hits, err)
	}
	got, err := ix.(engine.Fetcher).Fetch(ctx, []string{"d1", "d2", "d3", "own-1"})
	if err != nil || len(got) != 3 || !slices.Equal(got["d3"], []float32{0, 0, 1, 0}) {
		t.Fatalf("worker fetch from the scratch index: %v, %v", got, err)
	}
	lex, err := st.LexicalSearch(ctx, pgstore.LexicalQuery{Scope: "user:drill", Text: "oolong", K: 5})
	if err != nil || len(lex) != 1 || lex[0].MemoryID != "d2" {
		t.Fatalf("worker lexical search in the scratch copy: %v, %v", lex, err)
	}
	if err := ix.Delete(ctx, []string{"d1"}); err != nil {
		t.Fatalf("worker delete from the scratch index: %v", err)
	}
	if res, err := st.Forget(ctx, "user:gone", "drill", "test"); err != nil || res.Deleted != 1 {
		t.Fatalf("worker forget in the scratch copy: %+v, %v", res, err)
	}
	if v := version("user:gone"); v != 2 {
		t.Fatalf("scope version after the forget: %d, want 2", v)
	}
	return ix
}

// checkScratchGrants: on every table of the scratch schema the worker holds what it
// holds on the store's, the agent nothing, not even the schema's use.
func checkScratchGrants(t *testing.T, admin PostgresConn, names, scratch Names) {
	t.Helper()
	ctx := context.Background()
	conn := connectAs(t, admin, admin.User, admin.Password)
	rows, err := conn.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY 1`, scratch.Schema)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) < 18 {
		t.Fatalf("scratch schema tables: %v", tables)
	}
	privs := func(role, schema, table string) string {
		var got []string
		for _, p := range []string{"SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER"} {
			var has bool
			if err := conn.QueryRow(ctx, `SELECT has_table_privilege($1, $2, $3)`, role, pgx.Identifier{schema, table}.Sanitize(), p).Scan(&has); err != nil {
				t.Fatal(err)
			}
			if has {
				got = append(got, p)
			}
		}
		return strings.Join(got, ",")
	}
	for _, table := range tables {
		if got, want := privs(names.WorkerRole, scratch.Schema, table), privs(names.WorkerRole, names.Schema, table); got != want {
			t.Errorf("worker on scratch %s: %q, on the store's: %q", table, got, want)
		}
		if got := privs(names.Role, scratch.Schema, table); got != "" {
			t.Errorf("agent on scratch %s: %q", table, got)
		}
	}
	var agentUsage, workerCreate bool
	if err := conn.QueryRow(ctx, `SELECT has_schema_privilege($1, $3, 'USAGE'), has_schema_privilege($2, $3, 'CREATE')`,
		names.Role, names.WorkerRole, scratch.Schema).Scan(&agentUsage, &workerCreate); err != nil {
		t.Fatal(err)
	}
	if agentUsage || workerCreate {
		t.Errorf("agent uses the scratch schema: %v; worker creates in it: %v", agentUsage, workerCreate)
	}
}

// agentLockedOut: the store's agent role reads and writes nothing of the scratch copy.
func agentLockedOut(t *testing.T, agent *pgxpool.Pool, scratch Names, table string) {
	t.Helper()
	ctx := context.Background()
	for _, sql := range []string{
		`SELECT count(*) FROM ` + pgx.Identifier{scratch.Schema, "memories"}.Sanitize(),
		`SELECT count(*) FROM ` + pgx.Identifier{scratch.Schema, table}.Sanitize(),
		`INSERT INTO ` + pgx.Identifier{scratch.Schema, "tombstones"}.Sanitize() + ` (scope, forgotten_at) VALUES ('user:x', now())`,
	} {
		if _, err := agent.Exec(ctx, sql); !isDenied(err) {
			t.Errorf("agent %q: %v, want permission denied", sql, err)
		}
	}
	if _, err := pgstore.New(agent, scratch.Schema).LexicalSearch(ctx, pgstore.LexicalQuery{Scope: "user:drill", Text: "oolong", K: 5}); !isDenied(err) {
		t.Errorf("agent search of the scratch copy: %v, want permission denied", err)
	}
}

// checkScratchGone: the scratch schema is gone and the worker reaches nothing of it.
func checkScratchGone(t *testing.T, admin PostgresConn, worker *pgxpool.Pool, scratch Names) {
	t.Helper()
	if mark, ok := schemaMark(t, admin, scratch.Schema); ok {
		t.Fatalf("scratch schema %s still exists (mark %q)", scratch.Schema, mark)
	}
	if _, err := pgstore.New(worker, scratch.Schema).Merge(context.Background(), []memory.Item{scratchItem("late", "late")}, pgstore.MergeOptions{}); err == nil {
		t.Fatal("the worker still writes into the dropped scratch copy")
	}
}

func ensureScratch(t *testing.T, admin PostgresConn, m *MilvusConn, names Names, engineName string) Names {
	t.Helper()
	scratch, err := EnsureScratch(context.Background(), admin, m, names, scratchOwner, scratchSpec, engineName, pgvector.Params{ExactBelow: 20})
	if err != nil {
		t.Fatalf("EnsureScratch: %v", err)
	}
	if !reflect.DeepEqual(scratch, names.Scratch()) {
		t.Fatalf("EnsureScratch returned %+v, want %+v", scratch, names.Scratch())
	}
	if mark, ok := schemaMark(t, admin, scratch.Schema); !ok || mark != "memory-operator drill "+scratchOwner {
		t.Fatalf("scratch schema mark %q (exists %v)", mark, ok)
	}
	return scratch
}

func dropScratch(t *testing.T, admin PostgresConn, m *MilvusConn, names Names) {
	t.Helper()
	for i := range 2 {
		if err := DropScratch(context.Background(), admin, m, names, scratchOwner); err != nil {
			t.Fatalf("DropScratch #%d: %v", i+1, err)
		}
	}
}

// cleanupScratch drops what a failed test left.
func cleanupScratch(t *testing.T, admin PostgresConn, m *MilvusConn, names Names) {
	t.Cleanup(func() {
		if err := DropScratch(context.Background(), admin, m, names, scratchOwner); err != nil {
			t.Errorf("DropScratch: %v", err)
		}
	})
}

// TestScratchPostgres: on the embedded engine the store's worker restores into its
// scratch copy and searches it (vectors, words, scope versions), with exactly its
// privileges on its own schema and without its search_path moving; the agent role
// cannot touch it. EnsureScratch over a used copy makes it empty again; DropScratch
// removes it, twice; the store itself is never touched.
func TestScratchPostgres(t *testing.T) {
	admin, names, pw := provisioned(t)
	ctx := context.Background()
	if _, err := EnsureVectors(ctx, admin, nil, names, milvus.Owner{ID: scratchOwner}, scratchSpec); err != nil {
		t.Fatal(err)
	}
	cleanupScratch(t, admin, nil, names)
	worker, agent := rolePool(t, admin, names.WorkerRole, pw.Worker), rolePool(t, admin, names.Role, pw.Agent)
	vectors := engine.Vectors{VectorEngine: engine.Postgres}
	own, closeOwn, err := vectors.Open(ctx, worker, names.Schema, scratchSpec, engine.Login{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeOwn()
	seedStore(t, worker, names, own)

	scratch := ensureScratch(t, admin, nil, names, EnginePostgres)
	checkScratchGrants(t, admin, names, scratch)
	useScratch(t, worker, scratch, vectors, engine.Login{})
	agentLockedOut(t, agent, scratch, "vectors")
	checkStoreUntouched(t, admin, worker, names, own)

	// A leftover copy (a drill killed before its cleanup) is started over, empty.
	scratch = ensureScratch(t, admin, nil, names, EnginePostgres)
	for _, table := range []string{"memories", "vectors", "tombstones", "memory_terms", "scope_versions"} {
		if n := countRows(t, admin, scratch.Schema, table); n != 0 {
			t.Fatalf("after EnsureScratch over a used copy, %s holds %d rows", table, n)
		}
	}
	checkScratchGrants(t, admin, names, scratch)
	useScratch(t, worker, scratch, vectors, engine.Login{})

	dropScratch(t, admin, nil, names)
	checkScratchGone(t, admin, worker, scratch)
	checkStoreUntouched(t, admin, worker, names, own)
}

// TestScratchPGVector: on the PGVector engine the scratch copy has its own
// embeddings table and HNSW index, which the store's worker writes (COPY too),
// searches, and may drop and build around a bulk load, as in its store; the agent
// may do none of it.
func TestScratchPGVector(t *testing.T) {
	admin, names, pw := pgvectorStore(t)
	ctx := context.Background()
	if _, err := EnsurePGVector(ctx, admin, names, scratchSpec, pgvector.Params{ExactBelow: 20}); err != nil {
		t.Fatal(err)
	}
	cleanupScratch(t, admin, nil, names)
	worker, agent := rolePool(t, admin, names.WorkerRole, pw.Worker), rolePool(t, admin, names.Role, pw.Agent)
	vectors := engine.Vectors{VectorEngine: engine.PGVector, ExactBelow: 20}
	own, closeOwn, err := vectors.Open(ctx, worker, names.Schema, scratchSpec, engine.Login{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeOwn()
	seedStore(t, worker, names, own)

	scratch := ensureScratch(t, admin, nil, names, EnginePGVector)
	checkScratchGrants(t, admin, names, scratch)
	ix := useScratch(t, worker, scratch, vectors, engine.Login{})
	bulk := ix.(engine.BulkLoader)
	if err := bulk.DropSearchIndex(ctx); err != nil {
		t.Fatalf("worker DropSearchIndex in the scratch copy: %v", err)
	}
	var entries []vector.Entry
	for i := range 1100 { // the COPY path
		entries = append(entries, vector.Entry{ID: fmt.Sprintf("b%04d", i), Scope: "user:bulk", Type: "semantic", Vector: []float32{1, float32(i), 0, 1}})
	}
	if err := ix.Upsert(ctx, entries); err != nil {
		t.Fatalf("worker bulk upsert: %v", err)
	}
	if err := bulk.BuildSearchIndex(ctx, "64MB"); err != nil {
		t.Fatalf("worker BuildSearchIndex in the scratch copy: %v", err)
	}
	if hits, err := ix.Search(ctx, vector.Query{Scope: "user:bulk", Vector: entries[500].Vector, K: 3}); err != nil || len(hits) != 3 {
		t.Fatalf("search after the bulk load: %v, %v", hits, err)
	}
	agentLockedOut(t, agent, scratch, pgvector.Table)
	agentIx := pgvector.New(agent, scratch.Schema, scratchSpec, pgvector.Params{})
	if err := agentIx.DropSearchIndex(ctx); err == nil {
		t.Error("the agent drops the scratch copy's HNSW index")
	}
	if _, err := agentIx.Fetch(ctx, []string{"d2"}); !isDenied(err) {
		t.Errorf("agent fetch from the scratch copy: %v, want permission denied", err)
	}
	checkStoreUntouched(t, admin, worker, names, own)

	scratch = ensureScratch(t, admin, nil, names, EnginePGVector)
	for _, table := range []string{"memories", pgvector.Table} {
		if n := countRows(t, admin, scratch.Schema, table); n != 0 {
			t.Fatalf("after EnsureScratch over a used copy, %s holds %d rows", table, n)
		}
	}
	useScratch(t, worker, scratch, vectors, engine.Login{})

	dropScratch(t, admin, nil, names)
	checkScratchGone(t, admin, worker, scratch)
	checkStoreUntouched(t, admin, worker, names, own)
}

// milvusStore is a store provisioned as the operator does for the Milvus engine on
// the server with authentication: its schema and roles, its collection and its
// Milvus user (password milvusPassword), removed afterwards.
func milvusStore(t *testing.T) (PostgresConn, MilvusConn, Names, Passwords) {
	t.Helper()
	admin, names, pw := provisioned(t)
	m := milvusAdmin(t)
	t.Cleanup(func() {
		if err := DeleteMilvusTenant(context.Background(), m, names, milvus.Owner{ID: scratchOwner}); err != nil {
			t.Errorf("DeleteMilvusTenant: %v", err)
		}
		if err := DeleteVectors(context.Background(), admin, &m, names, milvus.Owner{ID: scratchOwner}); err != nil {
			t.Errorf("DeleteVectors: %v", err)
		}
	})
	if _, err := EnsureVectors(context.Background(), admin, &m, names, milvus.Owner{ID: scratchOwner}, scratchSpec); err != nil {
		t.Fatal(err)
	}
	ensureTenant(t, m, names, scratchOwner, milvusPassword, "")
	return admin, m, names, pw
}

const milvusPassword = "password-of-the-store"

// scratchReady calls ScratchMilvusReady until the server applies the scratch
// collection's grants, as a controller's requeues would.
func scratchReady(t *testing.T, m MilvusConn, names Names) {
	t.Helper()
	testutil.Eventually(t, "ScratchMilvusReady", func() (bool, error) {
		err := ScratchMilvusReady(context.Background(), m, names, scratchOwner, milvusPassword)
		if errors.Is(err, ErrMilvusTenantPending) {
			return false, err
		}
		return true, err
	})
}

// TestScratchMilvus: on a Milvus server with authentication the scratch copy's
// collection is made with a drill's mark, and the store's Milvus user (with the
// worker's PostgreSQL login) restores into and searches it with its role's grants,
// which are exactly the store's privileges on one more collection. EnsureScratch over
// a used copy makes the collection empty again; DropScratch revokes the grants and
// drops it, twice; the store's collection and its user's use of it stay as they were.
func TestScratchMilvus(t *testing.T) {
	admin, m, names, pw := milvusStore(t)
	ctx := context.Background()
	cleanupScratch(t, admin, &m, names)
	root := connectMilvusAs(t, m)
	worker := rolePool(t, admin, names.WorkerRole, pw.Worker)
	login := engine.Login{Username: names.MilvusUser, Password: milvusPassword}
	ownVectors := engine.Vectors{VectorEngine: engine.Milvus, MilvusAddress: m.Address, Collection: names.Collection}
	own, closeOwn, err := ownVectors.Open(ctx, worker, names.Schema, scratchSpec, login)
	if err != nil {
		t.Fatal(err)
	}
	defer closeOwn()
	seedStore(t, worker, names, own)
	storeGrants := grantsOf(t, root, names.MilvusRole)
	if err := ScratchMilvusReady(ctx, m, names, scratchOwner, milvusPassword); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("ScratchMilvusReady before EnsureScratch: %v", err)
	}

	scratch := ensureScratch(t, admin, &m, names, EngineMilvus)
	checkScratchGrants(t, admin, names, scratch)
	coll, err := root.DescribeCollection(ctx, scratch.Collection)
	if err != nil || coll.Properties[milvus.OwnerProperty] != scratchOwner+"/drill" {
		t.Fatalf("scratch collection: %+v, %v", coll, err)
	}
	want := slices.Clone(storeGrants)
	for _, p := range MilvusPrivileges {
		want = append(want, "Collection:"+scratch.Collection+":"+p)
	}
	slices.Sort(want)
	if got := grantsOf(t, root, names.MilvusRole); !slices.Equal(got, want) {
		t.Fatalf("role %s holds %v, want %v", names.MilvusRole, got, want)
	}
	scratchReady(t, m, names)
	vectors := engine.Vectors{VectorEngine: engine.Milvus, MilvusAddress: m.Address, Collection: scratch.Collection}
	ix := useScratch(t, worker, scratch, vectors, login)
	checkStoreUntouched(t, admin, worker, names, own)
	// The store's reconcile re-applies its own grants while the drill runs: those on
	// the scratch copy stay.
	if err := EnsureMilvusTenant(ctx, m, names, scratchOwner, milvusPassword, milvusPassword); err != nil {
		t.Fatal(err)
	}
	if got := grantsOf(t, root, names.MilvusRole); !slices.Equal(got, want) {
		t.Fatalf("after the store's EnsureMilvusTenant during a drill, role %s holds %v, want %v", names.MilvusRole, got, want)
	}

	// Over a used copy: the collection is made again, empty, and usable.
	ensureScratch(t, admin, &m, names, EngineMilvus)
	if got := grantsOf(t, root, names.MilvusRole); !slices.Equal(got, want) {
		t.Fatalf("after EnsureScratch again, role %s holds %v, want %v", names.MilvusRole, got, want)
	}
	rs, err := root.Query(ctx, scratch.Collection, nil, milvus.FieldID+` != ""`, []string{milvus.FieldID},
		client.WithSearchQueryConsistencyLevel(entity.ClStrong))
	if err != nil {
		t.Fatal(err)
	}
	if n := rs.GetColumn(milvus.FieldID).Len(); n != 0 {
		t.Fatalf("after EnsureScratch over a used copy, the collection holds %d vectors", n)
	}
	scratchReady(t, m, names)
	useScratch(t, worker, scratch, vectors, login)

	dropScratch(t, admin, &m, names)
	if has, err := root.HasCollection(ctx, scratch.Collection); err != nil || has {
		t.Fatalf("scratch collection after DropScratch: exists %v, %v", has, err)
	}
	if err := ScratchMilvusReady(ctx, m, names, scratchOwner, milvusPassword); err == nil {
		t.Fatal("ScratchMilvusReady after DropScratch: no error")
	}
	if got := grantsOf(t, root, names.MilvusRole); !slices.Equal(got, storeGrants) {
		t.Fatalf("after DropScratch, role %s holds %v, want the store's %v", names.MilvusRole, got, storeGrants)
	}
	if err := ix.Upsert(ctx, []vector.Entry{{ID: "late", Scope: "user:drill", Type: "semantic", Vector: []float32{1, 0, 0, 0}}}); err == nil {
		t.Fatal("the store's Milvus user still writes into the dropped scratch collection")
	}
	checkScratchGone(t, admin, worker, scratch)
	checkStoreUntouched(t, admin, worker, names, own)
	if hits, err := own.Search(ctx, vector.Query{Scope: "user:drill", Vector: []float32{0, 0, 0, 1}, K: 5}); err != nil || len(hits) != 1 {
		t.Fatalf("the store's user in its own collection after the drill: %v, %v", hits, err)
	}
}

// TestScratchMilvusLite: on a Milvus without authentication (Milvus Lite) there is
// no role to grant: the scratch collection is made, marked, used without a login and
// dropped.
func TestScratchMilvusLite(t *testing.T) {
	admin, names, pw := provisioned(t)
	ctx := context.Background()
	m := MilvusConn{Address: testutil.MilvusAddr(t)}
	cleanupScratch(t, admin, &m, names)
	worker := rolePool(t, admin, names.WorkerRole, pw.Worker)
	scratch := ensureScratch(t, admin, &m, names, EngineMilvus)
	if err := ScratchMilvusReady(ctx, m, names, scratchOwner, ""); err != nil {
		t.Fatalf("ScratchMilvusReady without authentication: %v", err)
	}
	c := connectMilvusAs(t, m)
	coll, err := c.DescribeCollection(ctx, scratch.Collection)
	if err != nil || coll.Properties[milvus.OwnerProperty] != scratchOwner+"/drill" {
		t.Fatalf("scratch collection: %+v, %v", coll, err)
	}
	useScratch(t, worker, scratch, engine.Vectors{VectorEngine: engine.Milvus, MilvusAddress: m.Address, Collection: scratch.Collection}, engine.Login{})
	dropScratch(t, admin, &m, names)
	if has, err := c.HasCollection(ctx, scratch.Collection); err != nil || has {
		t.Fatalf("scratch collection after DropScratch: exists %v, %v", has, err)
	}
	checkScratchGone(t, admin, worker, scratch)
}

// TestScratchRefusesForeignNames: a schema or collection of the scratch copy's name
// that is not marked as this store's drill (unmarked, another application's, another
// store's drill, or this store's own mark) gives TenantConflict from EnsureScratch,
// which then touches nothing at all, and from DropScratch, which leaves it and
// removes only what is its own; a store that is not owner's gets no scratch copy.
func TestScratchRefusesForeignNames(t *testing.T) {
	admin, names, _ := provisioned(t)
	ctx := context.Background()
	scratch := names.Scratch()
	conn := connectAs(t, admin, admin.User, admin.Password)
	sch := pgx.Identifier{scratch.Schema}.Sanitize()
	t.Cleanup(func() {
		_, _ = connectAs(t, admin, admin.User, admin.Password).Exec(context.Background(), `DROP SCHEMA IF EXISTS `+sch+` CASCADE`)
	})
	conflict := func(t *testing.T, what string, err error) {
		t.Helper()
		if ReasonOf(err) != ReasonTenantConflict || !isPermanent(err) {
			t.Fatalf("%s: %v (reason %s), want TenantConflict", what, err, ReasonOf(err))
		}
	}

	for _, mark := range []string{"", "another application", "memory-operator drill team-b/other", ownerComment(scratchOwner)} {
		t.Run("schema marked "+mark, func(t *testing.T) {
			if _, err := conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+sch+` CASCADE; CREATE SCHEMA `+sch+`;
				CREATE TABLE `+sch+`.precious (x int); INSERT INTO `+sch+`.precious VALUES (1)`); err != nil {
				t.Fatal(err)
			}
			if mark != "" {
				if err := execFormattedOn(ctx, conn, `COMMENT ON SCHEMA %I IS %L`, scratch.Schema, mark); err != nil {
					t.Fatal(err)
				}
			}
			for _, eng := range []string{EnginePostgres, EnginePGVector} {
				_, err := EnsureScratch(ctx, admin, nil, names, scratchOwner, scratchSpec, eng, pgvector.Params{})
				conflict(t, "EnsureScratch "+eng, err)
			}
			conflict(t, "DropScratch", DropScratch(ctx, admin, nil, names, scratchOwner))
			if got, ok := schemaMark(t, admin, scratch.Schema); !ok || got != mark || countRows(t, admin, scratch.Schema, "precious") != 1 {
				t.Fatalf("the foreign schema after all: mark %q (exists %v)", got, ok)
			}
			var tables int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1`, scratch.Schema).Scan(&tables); err != nil || tables != 1 {
				t.Fatalf("the foreign schema holds %d tables (%v)", tables, err)
			}
		})
	}
	if _, err := conn.Exec(ctx, `DROP SCHEMA `+sch+` CASCADE`); err != nil {
		t.Fatal(err)
	}

	// Another store's tenant: no scratch copy, for its worker role is not this store's.
	_, err := EnsureScratch(ctx, admin, nil, names, "team-b/other", scratchSpec, EnginePostgres, pgvector.Params{})
	conflict(t, "EnsureScratch for a store whose schema is another's", err)
	if _, ok := schemaMark(t, admin, scratch.Schema); ok {
		t.Fatal("a scratch schema was made for another's store")
	}
	if mark, _ := schemaMark(t, admin, names.Schema); mark != ownerComment(scratchOwner) {
		t.Fatalf("the store's schema mark: %q", mark)
	}
}

// TestScratchRefusesForeignCollection: a Milvus collection of the scratch copy's name
// marked as another's (or as the store's own collection is) stops EnsureScratch
// before anything is made or dropped, PostgreSQL included; DropScratch leaves it and
// its data but still drops the scratch schema that is its own.
func TestScratchRefusesForeignCollection(t *testing.T) {
	admin, m, names, _ := milvusStore(t)
	ctx := context.Background()
	scratch := names.Scratch()
	root := connectMilvusAs(t, m)
	for _, other := range []string{"team-x/other/drill", scratchOwner} {
		t.Run(other, func(t *testing.T) {
			foreign := milvus.Owner{ID: other}
			if _, err := milvus.EnsureCollection(ctx, root, scratch.Collection, scratchSpec, foreign); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = milvus.DropCollection(context.Background(), root, scratch.Collection, foreign) })
			if err := milvus.New(root, scratch.Collection, scratchSpec).Upsert(ctx,
				[]vector.Entry{{ID: "theirs", Scope: "user:1", Type: "semantic", Vector: []float32{1, 0, 0, 0}}}); err != nil {
				t.Fatal(err)
			}
			before := grantsOf(t, root, names.MilvusRole)

			_, err := EnsureScratch(ctx, admin, &m, names, scratchOwner, scratchSpec, EngineMilvus, pgvector.Params{})
			if ReasonOf(err) != ReasonTenantConflict || !strings.Contains(err.Error(), scratch.Collection) {
				t.Fatalf("EnsureScratch over a foreign collection: %v (reason %s), want TenantConflict", err, ReasonOf(err))
			}
			if _, ok := schemaMark(t, admin, scratch.Schema); ok {
				t.Fatal("EnsureScratch made the scratch schema although the collection is another's")
			}

			// A scratch schema of its own (a drill on the embedded engine, say) goes;
			// the collection stays.
			ensureScratch(t, admin, nil, names, EnginePostgres)
			err = DropScratch(ctx, admin, &m, names, scratchOwner)
			if ReasonOf(err) != ReasonTenantConflict {
				t.Fatalf("DropScratch over a foreign collection: %v (reason %s), want TenantConflict", err, ReasonOf(err))
			}
			if _, ok := schemaMark(t, admin, scratch.Schema); ok {
				t.Fatal("DropScratch left its own scratch schema")
			}
			coll, err := root.DescribeCollection(ctx, scratch.Collection)
			if err != nil || coll.Properties[milvus.OwnerProperty] != other {
				t.Fatalf("the foreign collection: %+v, %v", coll, err)
			}
			if got, err := milvus.New(root, scratch.Collection, scratchSpec).Fetch(ctx, []string{"theirs"}); err != nil || len(got) != 1 {
				t.Fatalf("the foreign collection's data: %v, %v", got, err)
			}
			if got := grantsOf(t, root, names.MilvusRole); !slices.Equal(got, before) {
				t.Fatalf("role %s holds %v, before %v", names.MilvusRole, got, before)
			}
		})
	}
}
