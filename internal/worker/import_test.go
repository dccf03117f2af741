package worker

import (
	"context"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/amemory/memory-operator/internal/langgraphns"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/test/importers"
)

// TestImportWorkerLangGraph: `memory-operator restore` with an import source reads
// real LangGraph data (PostgreSQL and SQLite checkpointers), converts it, and restores
// it through the restore engine: counts per source unit in the summary, the memories
// in the target, a rerun that changes nothing, a dry run that writes nothing, and
// the source's scopes mapped like a package's.
func TestImportWorkerLangGraph(t *testing.T) {
	exp := importers.Generate(t, importers.Options{})
	f := newFixture(t)
	ctx := context.Background()
	sqliteKey := "imports/" + t.Name() + "/checkpoints.sqlite"
	if _, err := f.s3.FPutObject(ctx, f.bucket, sqliteKey, exp.SQLitePath, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	normal := len(exp.ThreadsIn(importers.Normal))
	for _, kind := range []string{ImportLangGraphPostgres, ImportLangGraphSQLite} {
		t.Run(kind, func(t *testing.T) {
			schema := f.targetSchema(t)
			cfg := f.restoreConfig(schema, "")
			cfg.DetailKey = "imports/" + t.Name() + "/detail.jsonl.zst"
			cfg.Import = &ImportConfig{Kind: kind, UserMetadataKey: "user_id", UserPattern: `^u-(?P<user>[^:]+):`,
				InactiveAfter: 7 * 24 * time.Hour, SkipZombies: true, Dir: t.TempDir(),
				Namespaces: []langgraphns.Rule{{Namespace: []string{"memories", "{user}", "*"}, Scope: "user:{user}"},
					{Namespace: []string{"procedures", "{agent}"}, Scope: "agent:{agent}"}}}
			if kind == ImportLangGraphSQLite {
				cfg.Import.Object = sqliteKey
			}
			cfg.PrefixMap = []ScopeRule{{From: "user:", To: "user:acme-"}}
			// The contract: the controller renders, the worker parses the same config.
			parsed, err := ParseRestoreArgs(cfg.Args(), nil)
			if err != nil {
				t.Fatal(err)
			}
			parsed.RestoreUID, parsed.RestoreName, parsed.RestoreNamespace = "uid-"+kind, "import-a", "default"
			sec := f.restoreSecrets()
			sec.SourceKey, sec.ImportPostgresURI = "", exp.DSN

			dry := parsed
			dry.DryRun = true
			if _, err := RunRestore(ctx, dry, sec, RunOptions{Now: time.Now()}); err != nil {
				t.Fatal(err)
			}
			if n := len(scopesOf(t, f, schema)); n != 0 {
				t.Fatalf("a dry run wrote %d memories", n)
			}
			sum, err := RunRestore(ctx, parsed, sec, RunOptions{Now: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
			st := sum.Import
			if st == nil || st.Imported != int64(normal) || st.Zombie+st.Inactive != int64(len(exp.Threads)-normal) ||
				st.Inactive < int64(len(exp.ThreadsIn(importers.Old))) || st.Zombie == 0 || st.Unsupported != 0 {
				t.Fatalf("import stats %+v (normal threads %d)", st, normal)
			}
			if sum.Restored != st.Items || sum.Restored == 0 || sum.Skipped != (SkippedCount{}) {
				t.Fatalf("restored %d of %d imported memories (skipped %+v)", sum.Restored, st.Items, sum.Skipped)
			}
			for _, s := range scopesOf(t, f, schema) {
				if s[:5] == "user:" && s[:10] != "user:acme-" {
					t.Fatalf("scope %s was not mapped", s)
				}
			}
			// Its own Job retried after it completed writes nothing and reports what it
			// wrote; the digest of the converted memories recognizes it.
			retried, err := RunRestore(ctx, parsed, sec, RunOptions{Now: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
			if retried.Restored != sum.Restored || retried.ManifestSHA256 != sum.ManifestSHA256 || len(sum.ManifestSHA256) != 64 {
				t.Fatalf("retried Job: restored %d (digest %s), the first run %d (digest %s)", retried.Restored, retried.ManifestSHA256,
					sum.Restored, sum.ManifestSHA256)
			}
			// Another MemoryRestore of the same import runs again, without allowRepeat,
			// and changes nothing (deterministic ids, same content).
			again := parsed
			again.RestoreUID, again.RestoreName = "uid-b-"+kind, "import-b"
			sum2, err := RunRestore(ctx, again, sec, RunOptions{Now: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
			if sum2.AlreadyRestored != nil || sum2.Restored != 0 || sum2.Unchanged != st.Items || sum2.ManifestSHA256 != sum.ManifestSHA256 {
				t.Fatalf("rerun: %+v, want it run again: restored 0, unchanged %d", sum2, st.Items)
			}
			if n, _ := pgstore.New(f.pool, schema).Count(ctx); n != st.Items {
				t.Fatalf("target holds %d memories, the import made %d", n, st.Items)
			}
		})
	}
	// A database that is not a LangGraph checkpointer is refused before anything is written.
	schema := f.targetSchema(t)
	cfg := f.restoreConfig(schema, "")
	cfg.DetailKey = "imports/bad/detail.jsonl.zst"
	cfg.Import = &ImportConfig{Kind: ImportLangGraphPostgres, UserMetadataKey: "user_id", Schema: "no_such_schema"}
	sec := f.restoreSecrets()
	sec.ImportPostgresURI = exp.DSN
	if _, err := RunRestore(ctx, cfg, sec, RunOptions{Now: time.Now()}); err == nil {
		t.Fatal("imported from a schema with no checkpointer")
	}
}

// TestImportWorkerLettaAgentFile: a .af in object storage is imported: its blocks and
// conversation land in agent:<agent>.
func TestImportWorkerLettaAgentFile(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	key := "imports/" + t.Name() + "/support.af"
	if _, err := f.s3.FPutObject(ctx, f.bucket, key, "../importer/testdata/letta/support-double-encoded.af", minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	schema := f.targetSchema(t)
	cfg := f.restoreConfig(schema, "")
	cfg.DetailKey = "imports/" + t.Name() + "/detail.jsonl.zst"
	cfg.Import = &ImportConfig{Kind: ImportLettaAgentFile, Object: key, ScopeTemplate: "agent:{thread}", SkipZombies: true, Dir: t.TempDir()}
	parsed, err := ParseRestoreArgs(cfg.Args(), nil)
	if err != nil {
		t.Fatal(err)
	}
	sec := f.restoreSecrets()
	sec.SourceKey = ""
	sum, err := RunRestore(ctx, parsed, sec, RunOptions{Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Import == nil || sum.Import.Imported != 1 || sum.Import.StoreItems != 2 || sum.Restored != 3 {
		t.Fatalf("summary %+v, import %+v", sum, sum.Import)
	}
	for _, s := range scopesOf(t, f, schema) {
		if s[:len("agent:support-bot/")] != "agent:support-bot/" {
			t.Fatalf("memory %s outside agent:support-bot", s)
		}
	}
}
