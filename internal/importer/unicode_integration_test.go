package importer

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/restore"
	"github.com/amemory/memory-operator/internal/snapshot"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/milvus"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
	"github.com/amemory/memory-operator/test/importers"
)

// unicodeSource is what unicode_langgraph.py writes with LangGraph: users and threads
// named in any language, one user spelled composed in one thread and decomposed in
// another, thread ids with '/' and ':', and one thread whose user no scope can hold.
var unicodeSource = map[string]any{
	"threads": []map[string]any{
		{"thread_id": "thread/1:zoë", "user_id": "zoë-ユーザー", "turns": []string{"こんにちは", "Grüße"}},
		{"thread_id": "tenant:acme/会话/2", "user_id": "zoe\u0308-ユーザー", "turns": []string{"还是老规矩"}},
		{"thread_id": "u-用户123:sess-3", "user_id": nil, "turns": []string{"我的订单呢？"}},
		{"thread_id": "スレッド:4/𠮷", "user_id": "𠮷野家", "turns": []string{"牛丼"}},
		{"thread_id": "cafe\u0301/6", "user_id": "ஷ", "turns": []string{"வணக்கம்"}},
		{"thread_id": "bad thread 5", "user_id": "a b", "turns": []string{"hello"}},
	},
	"items": []map[string]any{
		{"namespace": []string{"memories", "zoë-ユーザー"}, "key": "profile", "value": map[string]any{"lang": "ja"}},
		{"namespace": []string{"memories", "zoe\u0308-ユーザー"}, "key": "likes", "value": map[string]any{"drink": "抹茶"}},
		{"namespace": []string{"memories", "用户123", "家族"}, "key": "成员", "value": map[string]any{"n": 3}},
		{"namespace": []string{"sessions", "tenant:acme/会话/2"}, "key": "summary", "value": map[string]any{"text": "要热的"}},
	},
}

// unicodeWant is what lands where: memories per scope and type.
var unicodeWant = map[string]map[memory.Type]int{
	"user:zoë-ユーザー":            {memory.Episodic: 3, memory.Semantic: 2}, // both spellings: one user
	"user:用户123":               {memory.Episodic: 1, memory.Semantic: 1},
	"user:𠮷野家":                 {memory.Episodic: 1},
	"user:ஷ":                   {memory.Episodic: 1},
	"session:thread/1:zoë":     {memory.Working: 4},
	"session:tenant:acme/会话/2": {memory.Working: 2, memory.Semantic: 1},
	"session:u-用户123:sess-3":   {memory.Working: 2},
	"session:スレッド:4/𠮷":         {memory.Working: 2},
	"session:café/6":           {memory.Working: 2}, // the thread id composed
}

// writeUnicodeSource runs unicode_langgraph.py into a SQLite file and a database of
// its own, and returns both readers.
func writeUnicodeSource(t *testing.T) map[string]LangGraphSource {
	t.Helper()
	if testing.Short() {
		t.Skip("writes LangGraph data with LangGraph: not a -short test")
	}
	ctx := context.Background()
	dsn := testutil.PostgresDSN(t)
	python := testutil.HarnessFile(t, filepath.Join(testutil.RepoRoot(t), "bin", "clients-venv", "bin", "python"),
		"run `hack/install-tools.sh clients` or `make tools`")
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	db := testutil.UniqueName("lg_unicode_")
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), `DROP DATABASE IF EXISTS `+db+` WITH (FORCE)`) })
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + db
	sqlitePath := filepath.Join(t.TempDir(), "langgraph.sqlite")

	spec, _ := json.Marshal(unicodeSource)
	cmd := exec.CommandContext(ctx, python, filepath.Join("testdata", "unicode_langgraph.py"), "--sqlite", sqlitePath, "--postgres-dsn", u.String())
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	cmd.Stdin = bytes.NewReader(spec)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("unicode_langgraph.py: %v\n%s", err, out)
	}

	return readers(t, importers.Expected{DSN: u.String(), SQLitePath: sqlitePath})
}

// packageObject is every name a package's objects may have: scopes never become part
// of an object name (shards are numbered), so no scope needs encoding for a key.
var packageObject = regexp.MustCompile(`^pkg/(manifest\.json|[a-z-]+\.jsonl\.zst\.sealed|shards/[0-9]+\.jsonl\.zst\.sealed)$`)

// TestGuaranteeImportUnicodeIdentities: LangGraph data whose users and threads are named in
// any language (written by LangGraph itself, read by both readers) imports into a
// package whose object names hold no scope, and restores into PostgreSQL with the
// embedded index and with Milvus: every memory in the scope of its user or thread,
// one scope per user whatever the spelling, each scope's vectors its own.
func TestGuaranteeImportUnicodeIdentities(t *testing.T) {
	srcs := writeUnicodeSource(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testutil.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	mc, err := milvus.Connect(ctx, milvus.Conn{Address: testutil.MilvusAddr(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mc.Close() })
	now := time.Now().UTC()
	opts := LangGraphOptions{Rules: Rules{UserMetadataKey: "user_id", UserPattern: regexp.MustCompile(`^u-(?P<user>[^:]+):`),
		KeepWorking: true, Now: now, Source: "langgraph"}}
	spec := vector.Spec{Dimension: 8, Metric: vector.Cosine}

	for name, src := range srcs {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			st, m, err := WritePackage(ctx, PackageOptions{Objects: snapshot.DirObjects{Root: dir}, Prefix: "pkg/", Unencrypted: true, SpillDir: t.TempDir()},
				func(fn func(memory.Item) error) (Stats, error) { return ImportLangGraph(ctx, src, opts, fn) })
			if err != nil {
				t.Fatal(err)
			}
			if st.Threads != 6 || st.Imported != 5 || st.NoUser != 1 || st.StoreItems != 4 || st.StoreSkipped != 0 {
				t.Fatalf("stats %+v", st)
			}
			if !strings.HasPrefix(st.FirstProblem, `thread "bad thread 5": `) {
				t.Fatalf("first problem %q", st.FirstProblem)
			}
			if int(m.Counts.Scopes) != len(unicodeWant) {
				t.Fatalf("the package holds %d scopes, want %d: %v", m.Counts.Scopes, len(unicodeWant), m.Counts.ByScope)
			}
			objects := 0
			err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				objects++
				rel, _ := filepath.Rel(dir, path)
				if !packageObject.MatchString(filepath.ToSlash(rel)) {
					t.Errorf("package object %q", rel)
				}
				return nil
			})
			if err != nil || objects < 2 {
				t.Fatalf("%d package objects: %v", objects, err)
			}

			for _, target := range []string{"pgindex", "milvus"} {
				t.Run(target, func(t *testing.T) {
					pkg, err := snapshot.Open(ctx, snapshot.DirObjects{Root: dir}, "pkg/", nil)
					if err != nil {
						t.Fatal(err)
					}
					schema := testutil.UniqueName("uni_")
					t.Cleanup(func() {
						_, _ = pool.Exec(context.Background(), `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
					})
					if _, err := pgstore.Migrate(ctx, pool, schema); err != nil {
						t.Fatal(err)
					}
					var idx vector.Index
					if target == "pgindex" {
						if err := pgindex.Ensure(ctx, pool, schema, spec); err != nil {
							t.Fatal(err)
						}
						idx = pgindex.New(pool, schema, spec)
					} else {
						coll := testutil.UniqueName("uni_")
						t.Cleanup(func() { _ = milvus.DropCollection(context.Background(), mc, coll, milvus.Owner{ID: "test"}) })
						if _, err := milvus.EnsureCollection(ctx, mc, coll, spec, milvus.Owner{ID: "test"}); err != nil {
							t.Fatal(err)
						}
						idx = milvus.New(mc, coll, spec)
					}
					store := pgstore.New(pool, schema)
					res, err := restore.Run(ctx, restore.Options{Reader: pkg, Target: store, Index: idx, Embedder: embed.NewHashing(8),
						Types: memory.AllTypes(), Now: now})
					if err != nil {
						t.Fatal(err)
					}
					if res.Skipped.Total() != 0 || res.FirstInvalid != "" {
						t.Fatalf("restore skipped %+v (%s)", res.Skipped, res.FirstInvalid)
					}
					checkUnicodeScopes(t, store, idx)
				})
			}
		})
	}
}

// checkUnicodeScopes checks every scope's memories by type, and that a search in a
// scope finds its memories and no other scope's.
func checkUnicodeScopes(t *testing.T, store *pgstore.Store, idx vector.Index) {
	t.Helper()
	ctx := context.Background()
	for scope, want := range unicodeWant {
		items, err := store.List(ctx, pgstore.ListQuery{Scope: scope, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		got := map[memory.Type]int{}
		var ids []string
		for _, it := range items {
			got[it.MemoryType]++
			ids = append(ids, it.MemoryID)
		}
		if !maps.Equal(got, want) {
			t.Fatalf("scope %q holds %v, want %v", scope, got, want)
		}
		hits, err := idx.Search(ctx, vector.Query{Scope: scope, Vector: []float32{1, 1, 1, 1, 1, 1, 1, 1}, K: 100})
		if err != nil {
			t.Fatal(err)
		}
		var hitIDs []string
		for _, h := range hits {
			hitIDs = append(hitIDs, h.ID)
		}
		slices.Sort(ids)
		slices.Sort(hitIDs)
		if !slices.Equal(hitIDs, ids) {
			t.Fatalf("search in %q found %v, the scope holds %v", scope, hitIDs, ids)
		}
	}
}

// TestRestoreRefusesNonNFCScope: a memory whose scope is not NFC (a producer that
// did not normalise) is refused by the restore as invalid, the message naming the
// NFC spelling; the package's other memories restore.
func TestRestoreRefusesNonNFCScope(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testutil.PostgresDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	at := time.Date(2026, 11, 20, 8, 0, 0, 0, time.UTC)
	mk := func(id, scope string) memory.Item {
		return memory.Item{MemoryID: id, MemoryType: memory.Semantic, Scope: scope, Content: json.RawMessage(`{"id":"` + id + `"}`),
			Source: "test", BaseScore: 0.5, CreatedAt: at, UpdatedAt: at}
	}
	items := []memory.Item{mk("ok-1", "user:zoë"), mk("nfd-1", "user:zoe\u0308"), mk("ok-2", "user:用户123")}
	_, conv, err := Convert(ctx, PackageOptions{SpillDir: t.TempDir()}, produceItems(items))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conv.Close)
	schema := testutil.UniqueName("nfc_")
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	})
	if _, err := pgstore.Migrate(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	res, err := restore.Run(ctx, restore.Options{Reader: conv, Written: true, Target: pgstore.New(pool, schema), Types: memory.AllTypes(),
		Now: at.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Inserted != 2 || res.Skipped.Invalid != 1 || !strings.Contains(res.FirstInvalid, "not in Unicode normalization form NFC") {
		t.Fatalf("restored %+v, first invalid %q", res, res.FirstInvalid)
	}
}
