package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/memory/service"
	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/snapshot"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
	"github.com/amemory/memory-operator/internal/vector/pgvector"
)

// scratchSchema makes an empty, migrated scratch copy with PostgreSQL-embedded vectors
// (as provision.EnsureScratch would, here as the fixture's superuser).
func (f *fixtureEnv) scratchSchema(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	scratch := testutil.UniqueName(ScratchSchemaPrefix)
	if _, err := pgstore.Migrate(ctx, f.pool, scratch); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = f.pool.Exec(context.Background(), `DROP SCHEMA `+pgx.Identifier{scratch}.Sanitize()+` CASCADE`)
	})
	if err := pgindex.Ensure(ctx, f.pool, scratch, spec8); err != nil {
		t.Fatal(err)
	}
	return scratch
}

// seedScopes writes n memories into each of scopes through the memory service.
func (f *fixtureEnv) seedScopes(t *testing.T, scopes []string, n int) {
	t.Helper()
	ctx := context.Background()
	if err := pgindex.Ensure(ctx, f.pool, f.schema, spec8); err != nil {
		t.Fatal(err)
	}
	m, err := service.New(f.store, pgindex.New(f.pool, f.schema, spec8), embed.NewHashing(8))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 5))
	var items []memory.Item
	for _, scope := range scopes {
		for i := range n {
			c, _ := json.Marshal(map[string]string{"text": moveText(rng, i)})
			items = append(items, memory.Item{MemoryType: memory.Episodic, Scope: scope, Content: c, Source: "drill@1", BaseScore: 0.5})
		}
	}
	if _, err := m.Write(ctx, items, service.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Forget(ctx, scopes[len(scopes)-1], "asked to", "test"); err != nil {
		t.Fatal(err)
	}
}

func (f *fixtureEnv) drillConfig(scratch, prefix string) DrillConfig {
	rc := f.restoreConfig(scratch, prefix)
	rc.Types = nil
	return DrillConfig{RestoreConfig: rc}
}

func TestDrillPassesOnASoundPackageAndNeverTouchesTheStore(t *testing.T) {
	f := newFixture(t)
	f.seedScopes(t, []string{"user:1", "user:2", "user:3", "user:gone"}, 120)
	ctx := context.Background()
	before, err := f.store.Census(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, withVectors := range []bool{true, false} {
		t.Run(fmt.Sprintf("embeddings=%v", withVectors), func(t *testing.T) {
			prefix := testutil.UniqueName("drill-") + "/"
			cfg := f.config(prefix)
			cfg.Types, cfg.IncludeEmbeddings = nil, withVectors
			m, err := RunSnapshot(ctx, cfg, f.sec, RunOptions{Now: testNow})
			if err != nil {
				t.Fatal(err)
			}
			scratch := f.scratchSchema(t)
			sum, err := RunDrill(ctx, f.drillConfig(scratch, prefix), f.restoreSecrets(), RunOptions{Now: testNow})
			if err != nil {
				t.Fatalf("drill: %v (%+v)", err, sum)
			}
			if !sum.Passed || sum.Items != 360 || sum.Memories != 360 || sum.Tombstones != 1 || sum.ScratchTombstones != 1 ||
				sum.Covered != 0 || sum.Shards != len(m.Shards) || sum.PackageID != m.PackageID || len(sum.ManifestSHA256) != 64 {
				t.Fatalf("summary = %+v", sum)
			}
			// Three scopes, five searches each, all exact on the embedded engine.
			if r := sum.Recall; r.Scopes != 3 || r.Queries != 15 || r.Mean != 1 || r.Min != 1 || !r.Exact || r.Missing != 0 {
				t.Fatalf("recall = %+v", r)
			}
			msg, err := sum.TerminationMessage()
			if err != nil || len(msg) > 4096 {
				t.Fatalf("termination message of %d bytes: %v", len(msg), err)
			}
			// Nothing beside the package: no restore detail object.
			for obj := range f.s3.ListObjects(ctx, f.bucket, minioList(prefix)) {
				if strings.Contains(obj.Key, "restores/") {
					t.Fatalf("the drill wrote %s", obj.Key)
				}
			}
		})
	}
	after, err := f.store.Census(ctx)
	if err != nil || after != before {
		t.Fatalf("the store changed under the drill: %+v, then %+v (%v)", before, after, err)
	}
}

func TestDrillRefusesAStoreOrAScratchCopyInUse(t *testing.T) {
	f := newFixture(t)
	f.seedScopes(t, []string{"user:1", "user:gone"}, 20)
	ctx := context.Background()
	prefix := testutil.UniqueName("drill-") + "/"
	cfg := f.config(prefix)
	cfg.Types = nil
	if _, err := RunSnapshot(ctx, cfg, f.sec, RunOptions{Now: testNow}); err != nil {
		t.Fatal(err)
	}
	before, err := f.store.Census(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The store itself is never a drill's target, whatever its content.
	if _, err := RunDrill(ctx, f.drillConfig(f.schema, prefix), f.restoreSecrets(), RunOptions{Now: testNow}); err == nil ||
		!strings.Contains(err.Error(), "not a scratch copy") {
		t.Fatalf("drill into the store: %v", err)
	}
	if after, _ := f.store.Census(ctx); after != before {
		t.Fatalf("the store changed: %+v, then %+v", before, after)
	}
	// A scratch copy that holds anything is refused: a drill counts what it restored.
	scratch := f.scratchSchema(t)
	if _, err := RunDrill(ctx, f.drillConfig(scratch, prefix), f.restoreSecrets(), RunOptions{Now: testNow}); err != nil {
		t.Fatal(err)
	}
	sum, err := RunDrill(ctx, f.drillConfig(scratch, prefix), f.restoreSecrets(), RunOptions{Now: testNow})
	if err == nil || sum.Passed || !strings.Contains(err.Error(), "is not empty") {
		t.Fatalf("drill into a used scratch copy: %v (%+v)", err, sum)
	}
	// And the worker's arguments say so before anything runs.
	if _, err := ParseDrillArgs(f.drillConfig(f.schema, prefix).Args(), &strings.Builder{}); err == nil || !strings.Contains(err.Error(), "not a scratch copy") {
		t.Fatalf("arguments for the store: %v", err)
	}
	got, err := ParseDrillArgs(f.drillConfig(scratch, prefix).Args(), &strings.Builder{})
	if err != nil || got.Schema != scratch {
		t.Fatalf("arguments round trip: %+v, %v", got, err)
	}
}

func TestDrillFailsOnADamagedPackageOrIndex(t *testing.T) {
	f := newFixture(t)
	f.seedScopes(t, []string{"user:1", "user:2", "user:gone"}, 60)
	ctx := context.Background()
	prefix := testutil.UniqueName("drill-") + "/"
	cfg := f.config(prefix)
	cfg.Types, cfg.IncludeEmbeddings = nil, true
	m, err := RunSnapshot(ctx, cfg, f.sec, RunOptions{Now: testNow})
	if err != nil {
		t.Fatal(err)
	}

	// A vector missing from the index after the restore: the recall sample reads every
	// live memory's vector back and finds it gone.
	scratch := f.scratchSchema(t)
	sum, err := RunDrill(ctx, f.drillConfig(scratch, prefix), f.restoreSecrets(), RunOptions{Now: testNow})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(ctx, `DELETE FROM `+pgx.Identifier{scratch, "vectors"}.Sanitize()+` WHERE memory_id IN (SELECT memory_id FROM `+
		pgx.Identifier{scratch, "vectors"}.Sanitize()+` ORDER BY memory_id LIMIT 5)`); err != nil {
		t.Fatal(err)
	}
	sc := f.drillConfig(scratch, prefix)
	sc.RecallScopes = 10
	r, err := sampleRecall(ctx, scratchStore(f, scratch), pgindex.New(f.pool, scratch, spec8), sc, &sum)
	if err != nil || r.Missing == 0 || sum.Passed || !strings.Contains(strings.Join(sum.Failures, ";"), "has no vector") {
		t.Fatalf("recall over a damaged index: %+v, %+v, %v", r, sum, err)
	}

	// A shard changed in the bucket: the restore refuses the package before writing,
	// and the drill fails saying why.
	shard := prefix + m.Shards[0].Name
	obj, err := snapshot.NewMinioObjects(f.s3, f.bucket).Get(ctx, shard)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, obj)
	body[len(body)/2] ^= 0xff
	if _, err := snapshot.NewMinioObjects(f.s3, f.bucket).Put(ctx, shard, strings.NewReader(string(body))); err != nil {
		t.Fatal(err)
	}
	scratch2 := f.scratchSchema(t)
	sum, err = RunDrill(ctx, f.drillConfig(scratch2, prefix), f.restoreSecrets(), RunOptions{Now: testNow})
	if err == nil || errors.Is(err, ErrDrillFailed) || sum.Passed || len(sum.Failures) == 0 || !strings.Contains(sum.Failures[0], "restore") {
		t.Fatalf("drill of a damaged package: %v (%+v)", err, sum)
	}
	if c, _ := scratchStore(f, scratch2).Census(ctx); c.Memories != 0 {
		t.Fatalf("the damaged package wrote %d memories", c.Memories)
	}
}

func scratchStore(f *fixtureEnv, schema string) *pgstore.Store { return pgstore.New(f.pool, schema) }

func minioList(prefix string) minio.ListObjectsOptions {
	return minio.ListObjectsOptions{Prefix: prefix, Recursive: true}
}

func readAll(t *testing.T, r io.ReadCloser) []byte {
	t.Helper()
	defer func() { _ = r.Close() }()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDrillOnEveryEngine runs the drill as the operator does, on each engine: the
// store provisioned as the operator provisions it, its scratch copy made by
// provision.EnsureScratch as the backend's admin, the drill run with the store's worker
// login (and on Milvus its own Milvus user) and the copy dropped after.
func TestDrillOnEveryEngine(t *testing.T) {
	f := newFixture(t) // MinIO, and the bucket
	for _, eng := range []string{engine.Postgres, engine.PGVector, engine.Milvus} {
		t.Run(eng, func(t *testing.T) {
			ctx := context.Background()
			const dim = 32
			s := provisionEngineStore(t, eng, dim)
			if eng == engine.PGVector {
				s.vectors.ExactBelow = 50 // scopes of 300 answer from the HNSW index
			}
			rng := rand.New(rand.NewPCG(11, uint64(len(eng))))
			var items []memory.Item
			for _, scope := range []string{"user:1", "user:2", "user:3", "user:gone"} {
				for i := range 300 {
					c, _ := json.Marshal(map[string]string{"text": moveText(rng, i)})
					items = append(items, memory.Item{MemoryType: memory.Episodic, Scope: scope, Content: c, Source: "drill@1", BaseScore: 0.5})
				}
			}
			m := s.memoryService(t)
			if _, err := m.Write(ctx, items, service.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := m.Forget(ctx, "user:gone", "asked to", "test"); err != nil {
				t.Fatal(err)
			}
			prefix := "drills/" + testutil.UniqueName(eng+"-") + "/"
			snap := SnapshotConfig{
				StoreNamespace: "team", StoreName: "src", Tenant: "src", SnapshotName: "nightly",
				Schema: s.names.Schema, Vectors: s.vectors, EmbeddingModel: embed.HashingModel, Dimension: dim, Metric: "COSINE",
				Destination:       Destination{Endpoint: f.s3cfg.Endpoint, Insecure: true, Bucket: f.bucket, Prefix: prefix},
				IncludeEmbeddings: true, Unencrypted: true, CompressionLevel: 1,
			}
			if _, err := RunSnapshot(ctx, snap, Secrets{PostgresURI: s.workerURI, S3AccessKey: f.s3cfg.AccessKey, S3SecretKey: f.s3cfg.SecretKey, Milvus: s.login},
				RunOptions{Now: time.Now()}); err != nil {
				t.Fatalf("snapshot: %v", err)
			}

			admin, root := engineAdmins(t, eng)
			owner := "engines/" + s.names.Tenant
			scratch, err := provision.EnsureScratch(ctx, admin, root, s.names, owner, s.spec, eng, pgvector.Params{})
			t.Cleanup(func() { _ = provision.DropScratch(context.Background(), admin, root, s.names, owner) })
			if err != nil {
				t.Fatal(err)
			}
			if root != nil && root.Username != "" {
				testutil.Eventually(t, "the scratch collection's grants applied", func() (bool, error) {
					err := provision.ScratchMilvusReady(ctx, *root, s.names, owner, s.login.Password)
					return !errors.Is(err, provision.ErrMilvusTenantPending), err
				})
			}
			vectors := s.vectors
			if eng == engine.Milvus {
				vectors.Collection = scratch.Collection
			}
			cfg := DrillConfig{RestoreConfig: RestoreConfig{
				RestoreNamespace: "team", RestoreName: "drill", Source: snap.Destination, Unencrypted: true,
				TargetNamespace: "team", TargetName: "src", Tenant: "src", Schema: scratch.Schema,
				Vectors: vectors, EmbeddingModel: embed.HashingModel, Dimension: dim, Metric: "COSINE", Embedder: "Hashing",
			}}
			sum, err := RunDrill(ctx, cfg, RestoreSecrets{PostgresURI: s.workerURI, SourceS3AccessKey: f.s3cfg.AccessKey,
				SourceS3SecretKey: f.s3cfg.SecretKey, Milvus: s.login}, RunOptions{Now: time.Now()})
			if err != nil {
				t.Fatalf("drill: %v (%+v)", err, sum)
			}
			r := sum.Recall
			t.Logf("%s: %d memories, recall@10 %.3f (min %.3f) over %d searches", eng, sum.Memories, r.Mean, r.Min, r.Queries)
			if !sum.Passed || sum.Memories != 900 || sum.ScratchTombstones != 1 || r.Queries != 15 || r.Exact != (eng == engine.Postgres) || r.Mean < 0.95 {
				t.Fatalf("summary = %+v", sum)
			}
			if err := provision.DropScratch(ctx, admin, root, s.names, owner); err != nil {
				t.Fatal(err)
			}
			// The store itself: as it was.
			if got := topTexts(t, m, "user:1", "coffee", 10); len(got) != 10 {
				t.Fatalf("the store answers %d results after the drill", len(got))
			}
		})
	}
}
