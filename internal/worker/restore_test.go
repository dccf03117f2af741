package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/klauspost/compress/zstd"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/snapshot"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
)

// targetSchema makes a fresh, migrated store schema with PostgreSQL-embedded vectors.
func (f *fixtureEnv) targetSchema(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	schema := testutil.UniqueName("target_")
	if _, err := pgstore.Migrate(ctx, f.pool, schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = f.pool.Exec(context.Background(), `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	})
	if err := pgindex.Ensure(ctx, f.pool, schema, spec8); err != nil {
		t.Fatal(err)
	}
	return schema
}

func (f *fixtureEnv) restoreConfig(schema, pkg string) RestoreConfig {
	return RestoreConfig{
		RestoreNamespace: "team-b", RestoreName: "migrate",
		Source:          Destination{Endpoint: f.s3cfg.Endpoint, Insecure: true, Bucket: f.bucket, Prefix: pkg},
		TargetNamespace: "team-b", TargetName: "bot-v2", Tenant: "acme2", Schema: schema,
		Vectors: engine.Vectors{VectorEngine: "Postgres"}, EmbeddingModel: "memory-operator/hashing-v1", Dimension: 8, Metric: "COSINE", Embedder: "Hashing",
		Unmapped: "Keep", ConflictPolicy: "KeepNewer", Embeddings: "Reuse",
		Types: []string{"episodic", "semantic", "procedural"},
	}
}

func (f *fixtureEnv) restoreSecrets() RestoreSecrets {
	return RestoreSecrets{PostgresURI: f.sec.PostgresURI, SourceS3AccessKey: f.sec.S3AccessKey,
		SourceS3SecretKey: f.sec.S3SecretKey, SourceKey: testKey}
}

// scopesOf lists the target's memories as "scope/memory_id", sorted.
func scopesOf(t *testing.T, f *fixtureEnv, schema string) []string {
	t.Helper()
	var out []string
	err := pgstore.New(f.pool, schema).Export(context.Background(), pgstore.ExportFilter{IncludeArchived: true}, func(it memory.Item) error {
		out = append(out, it.Scope+"/"+it.MemoryID)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func TestRestoreWorkerMapsScopesAndKeepsForgottenUsersForgotten(t *testing.T) {
	f := newFixture(t)
	f.seed(t, f.pgIndex(t))
	ctx := context.Background()
	cfg := f.config("pkg/")
	cfg.IncludeEmbeddings = true
	man, err := RunSnapshot(ctx, cfg, f.sec, RunOptions{Now: testNow})
	if err != nil {
		t.Fatal(err)
	}
	_ = man

	target := f.targetSchema(t)
	mapFile := filepath.Join(t.TempDir(), "map.csv")
	if err := os.WriteFile(mapFile, []byte("from,to\nuser:2,user:u2new\nuser:3,user:u3new\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rc := f.restoreConfig(target, "pkg/")
	rc.ScopeMap = []ScopeRule{{From: "user:1", To: "user:dbc0a3"}}
	rc.PrefixMap = []ScopeRule{{From: "session:", To: "session:legacy-"}}
	rc.MapFile, rc.MapFormat = mapFile, MapFormatCSV
	rc.DetailKey = RestoreDetailKey("pkg/", "migrate-1234abcd")

	sum, err := RunRestore(ctx, rc, f.restoreSecrets(), RunOptions{Now: testNow})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"agent:planner/a-plan", "session:legacy-abc/s-abc", "user:dbc0a3/u1-coffee", "user:dbc0a3/u1-trip", "user:u2new/u2-city"}
	if got := scopesOf(t, f, target); !slices.Equal(got, want) {
		t.Fatalf("target holds %v, want %v", got, want)
	}
	// Four vectors: the archived u2-city is restored but stays out of the index.
	if sum.Restored != 5 || sum.MappedScopes != 3 || sum.Scopes != 4 || sum.Vectors != 4 || sum.Embeddings != "Reuse" ||
		sum.FormatVersion != snapshot.FormatVersion || sum.DetailKey != rc.DetailKey || len(sum.ManifestSHA256) != 64 {
		t.Fatalf("summary = %+v", sum)
	}
	// The package's tombstone is mapped and recorded in the target: user:3 stays
	// forgotten under its new name.
	forgotten, err := pgstore.New(f.pool, target).IsForgotten(ctx, "user:u3new")
	if err != nil || !forgotten {
		t.Fatalf("user:u3new forgotten = %v, %v", forgotten, err)
	}

	// The per-scope detail sits next to the package.
	obj, err := snapshot.NewMinioObjects(f.s3, f.bucket).Get(ctx, rc.DetailKey)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = obj.Close() }()
	dec, err := zstd.NewReader(obj)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	var lines []map[string]any
	jd := json.NewDecoder(dec)
	for jd.More() {
		var l map[string]any
		if err := jd.Decode(&l); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	}
	if len(lines) != 4 || lines[3]["scope"] != "user:2" || lines[3]["mapped_to"] != "user:u2new" {
		t.Fatalf("detail = %v", lines)
	}

	// Running it again changes nothing.
	before := scopesOf(t, f, target)
	again, err := RunRestore(ctx, rc, f.restoreSecrets(), RunOptions{Now: testNow})
	if err != nil {
		t.Fatal(err)
	}
	if again.Restored != 0 || !slices.Equal(scopesOf(t, f, target), before) {
		t.Fatalf("second run restored %d; target %v", again.Restored, scopesOf(t, f, target))
	}
}

func TestRestoreWorkerRefusesBadInputBeforeWriting(t *testing.T) {
	f := newFixture(t)
	f.seed(t, f.pgIndex(t))
	ctx := context.Background()
	if _, err := RunSnapshot(ctx, f.config("pkg/"), f.sec, RunOptions{Now: testNow}); err != nil {
		t.Fatal(err)
	}
	target := f.targetSchema(t)

	changed := f.restoreConfig(target, "pkg/")
	changed.ExpectManifestSHA256 = strings.Repeat("0", 64)
	if _, err := RunRestore(ctx, changed, f.restoreSecrets(), RunOptions{Now: testNow}); err == nil ||
		!strings.Contains(err.Error(), "changed since its snapshot completed") {
		t.Fatalf("replaced package: %v", err)
	}

	badMap := f.restoreConfig(target, "pkg/")
	badMap.MapFile = filepath.Join(t.TempDir(), "map.jsonl")
	badMap.MapFormat = MapFormatJSONLines
	if err := os.WriteFile(badMap.MapFile, []byte(`{"from":"user:1","to":"user:9"}`+"\n"+`{"from":"user:2"`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := RunRestore(ctx, badMap, f.restoreSecrets(), RunOptions{Now: testNow}); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("malformed map: %v", err)
	}

	wrongKey := f.restoreSecrets()
	wrongKey.SourceKey = strings.Repeat("cd", 32)
	if _, err := RunRestore(ctx, f.restoreConfig(target, "pkg/"), wrongKey, RunOptions{Now: testNow}); err == nil {
		t.Fatal("a wrong key was accepted")
	}
	if got := scopesOf(t, f, target); len(got) != 0 {
		t.Fatalf("refused restores wrote %v", got)
	}
}

// TestRestoreProcessKilledThenRerunCompletes runs the real binary, kills it (SIGKILL,
// as an evicted pod) once batches have committed, then runs it again as a new
// MemoryRestore would (another detail object): the target ends exactly as after one
// uninterrupted restore.
func TestRestoreProcessKilledThenRerunCompletes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and restores 60k memories")
	}
	f := newFixture(t)
	ctx := context.Background()
	const n = 60_000
	f.importGenerated(t, n)
	snap := f.config("kill-restore/")
	snap.ShardTargetBytes = 1 << 20
	if _, err := RunSnapshot(ctx, snap, f.sec, RunOptions{Now: testNow}); err != nil {
		t.Fatal(err)
	}
	config := func(schema, detail string) RestoreConfig {
		c := f.restoreConfig(schema, "kill-restore/")
		c.PrefixMap = []ScopeRule{{From: "user:", To: "user:legacy-"}}
		c.Embeddings = "Defer"
		c.DetailKey = "kill-restore/restores/" + detail + "/" + restoreDetailSuffix
		return c
	}

	// The reference: one uninterrupted run.
	ref := f.targetSchema(t)
	if _, err := RunRestore(ctx, config(ref, "ref"), f.restoreSecrets(), RunOptions{Now: testNow}); err != nil {
		t.Fatal(err)
	}

	bin := buildBinary(t)
	target := f.targetSchema(t)
	run := func(detail string) *exec.Cmd {
		cmd := exec.Command(bin, append([]string{"restore"}, config(target, detail).Args()...)...)
		sec := f.restoreSecrets()
		cmd.Env = append(os.Environ(), EnvPostgresURI+"="+sec.PostgresURI, EnvSourceS3AccessKey+"="+sec.SourceS3AccessKey,
			EnvSourceS3SecretKey+"="+sec.SourceS3SecretKey, EnvSourceKey+"="+sec.SourceKey)
		return cmd
	}
	// Kill it once some batches have committed: the restore is then midway.
	killOnProgress(t, run("first"), func(line string) bool {
		var read, restored, skipped int64
		_, err := fmt.Sscanf(line, "read %d, restored %d, skipped %d", &read, &restored, &skipped)
		return err == nil && restored >= 10_000
	})
	partial := len(scopesOf(t, f, target))
	if partial == 0 || partial >= n {
		t.Fatalf("killed run left %d of %d memories: not midway", partial, n)
	}

	if out, err := run("second").CombinedOutput(); err != nil {
		t.Fatalf("second run: %v\n%s", err, out)
	}
	want, got := exportItems(t, f, ref), exportItems(t, f, target)
	if len(got) != n || !reflect.DeepEqual(got, want) {
		t.Fatalf("after the rerun: %d memories (want %d), equal to the reference: %v", len(got), n, reflect.DeepEqual(got, want))
	}
	if !strings.HasPrefix(got[0].Scope, "user:legacy-") {
		t.Fatalf("scope %q was not mapped", got[0].Scope)
	}
}

// exportItems reads every memory of a schema, in export order.
func exportItems(t *testing.T, f *fixtureEnv, schema string) []memory.Item {
	t.Helper()
	var out []memory.Item
	err := pgstore.New(f.pool, schema).Export(context.Background(), pgstore.ExportFilter{IncludeArchived: true}, func(it memory.Item) error {
		out = append(out, it)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// An unreachable Milvus fails the snapshot and restore workers within the connect
// timeout, saying so, instead of leaving their Jobs hanging until their deadline.
func TestWorkersGiveUpOnAnUnreachableMilvus(t *testing.T) {
	defer func(d time.Duration) { engine.DialTimeout = d }(engine.DialTimeout)
	engine.DialTimeout = time.Second
	f := newFixture(t)
	f.seed(t, f.pgIndex(t))
	ctx := context.Background()
	addr := closedAddr(t)

	snap := f.config("unreachable/")
	snap.VectorEngine, snap.MilvusAddress, snap.Collection, snap.IncludeEmbeddings = "Milvus", addr, "mem_x", true
	start := time.Now()
	_, err := RunSnapshot(ctx, snap, f.sec, RunOptions{Now: testNow})
	want := "connecting to Milvus " + addr + ": no answer within 1s"
	if err == nil || !strings.Contains(err.Error(), want) || time.Since(start) > 20*time.Second {
		t.Fatalf("snapshot: %v after %s, want %q", err, time.Since(start), want)
	}

	if _, err := RunSnapshot(ctx, f.config("reachable/"), f.sec, RunOptions{Now: testNow}); err != nil {
		t.Fatal(err)
	}
	rc := f.restoreConfig(f.targetSchema(t), "reachable/")
	rc.DetailKey = "reachable/restores/x/" + restoreDetailSuffix
	rc.VectorEngine, rc.MilvusAddress, rc.Collection = "Milvus", addr, "mem_x"
	start = time.Now()
	if _, err := RunRestore(ctx, rc, f.restoreSecrets(), RunOptions{Now: testNow}); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("restore: %v after %s, want %q", err, time.Since(start), want)
	}
	if got := scopesOf(t, f, rc.Schema); len(got) != 0 {
		t.Fatalf("the failed restore wrote %d memories", len(got))
	}
}

// TestGuaranteeRecreatedRestoreNeverRerunsIntoALiveStore: a GitOps tool that deletes
// and recreates an identical MemoryRestore (self-heal, a re-sync) must not restore the
// package again into a store that received it and moved on: with conflictPolicy
// Overwrite that would undo what agents wrote since. The second restore writes nothing
// and names the first; spec.allowRepeat restores it again on purpose; the first
// restore's own Job retry is a no-op too.
func TestGuaranteeRecreatedRestoreNeverRerunsIntoALiveStore(t *testing.T) {
	f := newFixture(t)
	f.seed(t, f.pgIndex(t))
	ctx := context.Background()
	if _, err := RunSnapshot(ctx, f.config("pkg/"), f.sec, RunOptions{Now: testNow}); err != nil {
		t.Fatal(err)
	}
	target := f.targetSchema(t)
	store := pgstore.New(f.pool, target)
	coffee := func() string {
		t.Helper()
		it, err := store.Get(ctx, "u1-coffee")
		if err != nil {
			t.Fatal(err)
		}
		return string(it.Content)
	}
	restoreAs := func(uid string, allowRepeat bool) RestoreSummary {
		t.Helper()
		rc := f.restoreConfig(target, "pkg/")
		rc.RestoreUID, rc.RestoreName, rc.AllowRepeat, rc.ConflictPolicy = uid, "migrate-"+uid, allowRepeat, "Overwrite"
		sum, err := RunRestore(ctx, rc, f.restoreSecrets(), RunOptions{Now: testNow})
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}

	first := restoreAs("uid-1", false)
	if first.Restored == 0 || first.AlreadyRestored != nil {
		t.Fatalf("first restore: %+v", first)
	}
	packageValue := coffee()
	// An agent changes its mind after the migration.
	if _, err := store.Put(ctx, mem("u1-coffee", "user:1", memory.Semantic, "preference.coffee", "espresso, no milk", 0)); err != nil {
		t.Fatal(err)
	}
	agentValue := coffee()
	if agentValue == packageValue {
		t.Fatalf("the agent's write did not change the memory: %s", agentValue)
	}

	// The restore deleted and recreated by a GitOps tool: a new UID, the same package.
	again := restoreAs("uid-2", false)
	if again.AlreadyRestored == nil || again.AlreadyRestored.UID != "uid-1" || again.AlreadyRestored.Name != "team-b/migrate-uid-1" ||
		again.Read != 0 || again.Restored != 0 || again.ManifestSHA256 != first.ManifestSHA256 {
		t.Fatalf("recreated restore: %+v (prior %+v)", again, again.AlreadyRestored)
	}
	if got := coffee(); got != agentValue {
		t.Fatalf("the recreated restore overwrote the agent's memory: %s, want %s", got, agentValue)
	}
	// The first restore's Job retried after it completed: nothing written either, and
	// it reports what it had done.
	retry := restoreAs("uid-1", false)
	if retry.AlreadyRestored != nil || retry.Restored != first.Restored || coffee() != agentValue {
		t.Fatalf("retried restore: %+v; memory %s", retry, coffee())
	}
	last, err := store.LastRestore(ctx)
	if err != nil || last == nil || last.UID != "uid-1" {
		t.Fatalf("last restore = %+v, %v", last, err)
	}

	// Asked for on purpose, the package is restored again, and recorded.
	repeat := restoreAs("uid-3", true)
	if repeat.AlreadyRestored != nil || repeat.Read == 0 || coffee() != packageValue {
		t.Fatalf("allowRepeat restore: %+v; memory %s, want %s", repeat, coffee(), packageValue)
	}
	if last, err := store.LastRestore(ctx); err != nil || last == nil || last.UID != "uid-3" || last.Source != "s3://"+f.bucket+"/pkg/" {
		t.Fatalf("last restore after the repeat = %+v, %v", last, err)
	}
	// A dry run is never recorded.
	rc := f.restoreConfig(target, "pkg/")
	rc.RestoreUID, rc.AllowRepeat, rc.DryRun = "uid-dry", true, true
	if _, err := RunRestore(ctx, rc, f.restoreSecrets(), RunOptions{Now: testNow}); err != nil {
		t.Fatal(err)
	}
	if last, err := store.LastRestore(ctx); err != nil || last.UID != "uid-3" {
		t.Fatalf("a dry run was recorded: %+v, %v", last, err)
	}
}
