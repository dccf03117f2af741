package pgvector_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/pgvector"
	"github.com/amemory/memory-operator/internal/vector/vectortest"
)

var randomVector = vectortest.RandomVector

func fill(rng *rand.Rand, dim int, scope string, n int, typeOf func(i int) string) []vector.Entry {
	out := make([]vector.Entry, n)
	for i := range out {
		out[i] = vector.Entry{ID: fmt.Sprintf("%s-%05d", strings.TrimPrefix(scope, "user:"), i), Scope: scope, Type: typeOf(i), Vector: randomVector(rng, dim)}
	}
	return out
}

func semantic(int) string { return "semantic" }

func explain(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) string {
	t.Helper()
	rows, err := pool.Query(context.Background(), "EXPLAIN "+sql, args...)
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", sql, err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// TestSearchPaths: which path answers which search, and that each is what it claims:
// the HNSW index for a big scope, the exact scan (never the HNSW index) for a small
// one, the HNSW index again with a raised ef_search when its first answer is short
// (the scope is a share of the store), and the exact redo when even ef_search 1000
// leaves it short.
func TestSearchPaths(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	spec := vector.Spec{Dimension: 16, Metric: vector.Cosine}
	p := pgvector.Params{ExactBelow: 100, EfSearch: 40}
	ix := pgvector.New(e.rolePool, e.newSchema(t, spec, p), spec, p)
	rng := rand.New(rand.NewPCG(1, 2))
	var entries []vector.Entry
	entries = append(entries, fill(rng, spec.Dimension, "user:big", 3000, func(i int) string {
		if i%20 == 0 {
			return "procedural" // 150: above ExactBelow, 5% of the scope
		}
		return "semantic"
	})...)
	entries = append(entries, fill(rng, spec.Dimension, "user:mid", 200, semantic)...) // above ExactBelow, 6% of the store
	entries = append(entries, fill(rng, spec.Dimension, "user:small", 30, semantic)...)
	if err := ix.Upsert(ctx, entries); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.Exec(ctx, `ANALYZE `+pgx.Identifier{ix.Schema(), "embeddings"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	var midVec []float32
	for _, tc := range []struct {
		scope string
		types []string
		k     int
		path  string
	}{
		{"user:big", nil, 10, "ann"},
		{"user:small", nil, 10, "exact"},
		{"user:small", nil, 100, "exact"},
		// 5% and 6% of the store: ef_search 40 yields about 2 of them, 250-400 enough.
		{"user:big", []string{"procedural"}, 10, "raised"},
		{"user:mid", nil, 10, "raised"},
		// ef_search 1000, the most there is, yields about 930 of user:big's 3000.
		{"user:big", nil, 1000, "fallback"},
		{"user:big", nil, 1001, "exact"}, // above hnsw.ef_search's limit
	} {
		exact0, ann0, fb0 := pgvector.Paths(ix)
		raised0 := pgvector.Raised(ix)
		v := randomVector(rng, spec.Dimension)
		if tc.scope == "user:mid" {
			midVec = v
		}
		hits, err := ix.Search(ctx, vector.Query{Scope: tc.scope, Types: tc.types, Vector: v, K: tc.k})
		if err != nil {
			t.Fatal(err)
		}
		exact1, ann1, fb1 := pgvector.Paths(ix)
		raised := pgvector.Raised(ix) - raised0
		got := map[[3]int64]string{{1, 0, 0}: "exact", {0, 1, 0}: "ann", {0, 0, 1}: "fallback"}[[3]int64{exact1 - exact0, ann1 - ann0, fb1 - fb0}]
		if got == "ann" && raised > 0 {
			got = "raised"
		}
		if got != tc.path {
			t.Errorf("scope %s, types %v, k %d: answered by %q (%d, %d, %d, raised %d), want %q", tc.scope, tc.types, tc.k, got,
				exact1-exact0, ann1-ann0, fb1-fb0, raised, tc.path)
		}
		if len(hits) != min(tc.k, map[string]int{"user:big": 3000 - 2850*len(tc.types), "user:mid": 200, "user:small": 30}[tc.scope]) {
			t.Errorf("scope %s, types %v, k %d: %d hits", tc.scope, tc.types, tc.k, len(hits))
		}
	}

	// The next search of a scope that needed a raised walk starts at that ef_search
	// (the same query: what ef_search another needs varies).
	_, ann0, _ := pgvector.Paths(ix)
	raised0 := pgvector.Raised(ix)
	if hits, err := ix.Search(ctx, vector.Query{Scope: "user:mid", Vector: midVec, K: 10}); err != nil || len(hits) != 10 {
		t.Fatalf("user:mid again: %d hits, %v", len(hits), err)
	}
	if _, ann1, _ := pgvector.Paths(ix); ann1-ann0 != 1 || pgvector.Raised(ix) != raised0 {
		t.Errorf("user:mid again: %d by the index, %d walks raised; want one walk at the remembered ef_search", ann1-ann0, pgvector.Raised(ix)-raised0)
	}

	// The plans, as the store's role gets them.
	exactSQL, annSQL, err := pgvector.SearchSQL(ctx, ix, false)
	if err != nil {
		t.Fatal(err)
	}
	q := pgvector.TextVector(vector.Normalize(randomVector(rng, spec.Dimension)))
	if plan := explain(t, e.rolePool, annSQL, "user:big", q, 10); !strings.Contains(plan, "Index Scan using embeddings_hnsw_idx") {
		t.Errorf("the HNSW search of a big scope does not use the HNSW index:\n%s", plan)
	}
	for _, scope := range []string{"user:big", "user:small"} {
		if plan := explain(t, e.rolePool, exactSQL, scope, q, 10); strings.Contains(plan, "hnsw") {
			t.Errorf("the exact search of %s uses the HNSW index:\n%s", scope, plan)
		}
	}
	exactSQL, _, err = pgvector.SearchSQL(ctx, ix, true)
	if err != nil {
		t.Fatal(err)
	}
	if plan := explain(t, e.rolePool, exactSQL, "user:big", q, []string{"procedural"}, 10); strings.Contains(plan, "hnsw") {
		t.Errorf("the exact search with types uses the HNSW index:\n%s", plan)
	}
}

// TestEfSearchFollowsK: a search for more hits than EfSearch raises hnsw.ef_search to
// K for that search only, so the index yields K rows (at the default 40 it would
// yield 40 and the search would be redone exactly), and the setting does not stay
// on the connection.
func TestEfSearchFollowsK(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	spec := vector.Spec{Dimension: 8, Metric: vector.L2}
	p := pgvector.Params{ExactBelow: 50, EfSearch: 40}
	schema := e.newSchema(t, spec, p)
	pool := e.roleConnection(t, nil)
	ix := pgvector.New(pool, schema, spec, p)
	rng := rand.New(rand.NewPCG(5, 6))
	if err := ix.Upsert(ctx, fill(rng, spec.Dimension, "user:one", 3000, semantic)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.Exec(ctx, `ANALYZE `+pgx.Identifier{schema, "embeddings"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	_, annSQL, err := pgvector.SearchSQL(ctx, ix, false)
	if err != nil {
		t.Fatal(err)
	}
	if plan := explain(t, e.rolePool, annSQL, "user:one", pgvector.TextVector(randomVector(rng, spec.Dimension)), 1000); !strings.Contains(plan, "embeddings_hnsw_idx") {
		t.Fatalf("the search for 1000 does not use the HNSW index; the test would prove nothing:\n%s", plan)
	}
	for _, k := range []int{10, 200, 1000} {
		_, ann0, fb0 := pgvector.Paths(ix)
		hits, err := ix.Search(ctx, vector.Query{Scope: "user:one", Vector: randomVector(rng, spec.Dimension), K: k})
		if err != nil {
			t.Fatal(err)
		}
		_, ann1, fb1 := pgvector.Paths(ix)
		if len(hits) != k || ann1-ann0 != 1 || fb1 != fb0 {
			t.Errorf("k %d: %d hits, %d by the index, %d redone exactly; want %d by the index", k, len(hits), ann1-ann0, fb1-fb0, k)
		}
	}
	var ef string
	if err := pool.QueryRow(ctx, `SHOW hnsw.ef_search`).Scan(&ef); err != nil || ef != "40" {
		t.Fatalf("hnsw.ef_search after the searches = %q (%v), want pgvector's default 40", ef, err)
	}
}

// TestStaleSizesNeverShort: the cached size of a scope may be stale; a search still
// returns min(K, matches).
func TestStaleSizesNeverShort(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	spec := vector.Spec{Dimension: 8, Metric: vector.IP}
	p := pgvector.Params{ExactBelow: 50}
	ix := pgvector.New(e.rolePool, e.newSchema(t, spec, p), spec, p)
	rng := rand.New(rand.NewPCG(7, 8))
	others := fill(rng, spec.Dimension, "user:others", 2000, semantic)
	if err := ix.Upsert(ctx, others); err != nil {
		t.Fatal(err)
	}
	search := func(k int) []vector.Hit {
		t.Helper()
		hits, err := ix.Search(ctx, vector.Query{Scope: "user:grow", Vector: randomVector(rng, spec.Dimension), K: k})
		if err != nil {
			t.Fatal(err)
		}
		return hits
	}
	if got := search(10); len(got) != 0 {
		t.Fatalf("empty scope: %v", got)
	}
	// Cached as empty, now 500: the exact path, all of K.
	grow := fill(rng, spec.Dimension, "user:grow", 500, semantic)
	if err := ix.Upsert(ctx, grow); err != nil {
		t.Fatal(err)
	}
	if got := search(30); len(got) != 30 {
		t.Fatalf("scope grown under a cached size: %d hits, want 30", len(got))
	}
	// Cached as big, now 5 (a small part of the store): the index's answer is short
	// and redone exactly.
	pgvector.ForgetSizes(ix)
	search(1)
	var gone []string
	for _, en := range grow[5:] {
		gone = append(gone, en.ID)
	}
	if err := ix.Delete(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if got := search(10); len(got) != 5 {
		t.Fatalf("scope shrunk under a cached size: %d hits, want 5", len(got))
	}
}

// TestSearchPlannedPerScope: an HNSW search walks the index even on a connection
// whose plan cache would run the statement's generic plan, which cannot know that
// the scope is most of the table (here: one scope of 3000 among 300 of 10, where the
// generic plan sorts the scope's rows found through the scope index). The connection
// is made to prefer generic plans (plan_cache_mode), and the index's use is read from
// PostgreSQL's statistics on the same connection.
func TestSearchPlannedPerScope(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	spec := vector.Spec{Dimension: 16, Metric: vector.Cosine}
	p := pgvector.Params{ExactBelow: 100, EfSearch: 40}
	schema := e.newSchema(t, spec, p)
	// The statistics are read on the connection that searched.
	pool := e.roleConnection(t, map[string]string{"search_path": `"$user"`, "plan_cache_mode": "force_generic_plan"})
	ix := pgvector.New(pool, schema, spec, p)
	rng := rand.New(rand.NewPCG(3, 4))
	entries := fill(rng, spec.Dimension, "user:big", 3000, semantic)
	for i := range 300 {
		entries = append(entries, fill(rng, spec.Dimension, fmt.Sprintf("user:s%03d", i), 10, semantic)...)
	}
	if err := ix.Upsert(ctx, entries); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.Exec(ctx, `ANALYZE `+pgx.Identifier{schema, "embeddings"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	indexScans := func() int64 {
		t.Helper()
		// Flush this connection's pending statistics with the next statement's end.
		if _, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		var n int64
		if err := pool.QueryRow(ctx, `SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_indexes
			WHERE schemaname = $1 AND indexrelname = 'embeddings_hnsw_idx'`, schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := indexScans()
	const searches = 8 // more than the five custom plans a prepared statement starts with
	for range searches {
		hits, err := ix.Search(ctx, vector.Query{Scope: "user:big", Vector: randomVector(rng, spec.Dimension), K: 10})
		if err != nil || len(hits) != 10 {
			t.Fatalf("%d hits, %v", len(hits), err)
		}
	}
	_, ann, _ := pgvector.Paths(ix)
	if got := indexScans() - before; ann != searches || got < searches {
		t.Fatalf("%d searches by the HNSW path, %d scans of the HNSW index; want %d of each (a generic plan sorted the scope instead)", ann, got, searches)
	}
}

// roleConnection is a pool of one connection as the env's role, with params set on it.
func (e *env) roleConnection(t *testing.T, params map[string]string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testutil.PGVectorDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User, cfg.ConnConfig.Password, cfg.MaxConns = e.role, e.pw, 1
	for k, v := range params {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
