package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/memory/service"
	"github.com/amemory/memory-operator/internal/provision"
	"github.com/amemory/memory-operator/internal/snapshot"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
	"github.com/amemory/memory-operator/internal/vector/milvus"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
)

// These tests run the archive worker against the real PostgreSQL (as the store's own
// worker role, as a Job does), MinIO and Milvus Lite, with an injected clock.

var archiveHalfLives = memory.HalfLives{memory.Working: 6 * time.Hour, memory.Episodic: 30 * 24 * time.Hour, memory.Semantic: 180 * 24 * time.Hour}

const archiveThreshold = 0.3

// archiveEnv is a provisioned store (schema, roles) with generated memories, its
// vector index, and a bucket for cold packages.
type archiveEnv struct {
	*fixtureEnv
	engine string
	index  vector.Index
	mix    *milvus.Index // the Milvus index, nil with the Postgres engine
	mem    *service.Memory
	items  []memory.Item
	job    Secrets // the worker role's connection, what the Job gets
	milvus string  // Milvus address
	coll   string
}

func newArchiveEnv(t *testing.T, engine string, n int) *archiveEnv {
	t.Helper()
	ctx := context.Background()
	f := newFixture(t)
	pg := testutil.PostgresParts(t)
	admin := provision.PostgresConn{Host: pg.Host, Port: pg.PortNumber, Database: "postgres", SSLMode: "disable", User: pg.User, Password: pg.Password}
	names, err := provision.NamesFor(testutil.UniqueName("arch-"), "")
	if err != nil {
		t.Fatal(err)
	}
	const owner = "team-a/bot"
	if _, err := provision.EnsurePostgres(ctx, admin, names, owner, provision.Passwords{Agent: "agent-pw", Worker: "worker-pw"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := provision.DeletePostgres(context.Background(), admin, names, owner); err != nil {
			t.Errorf("removing the store's schema and roles: %v", err)
		}
	})
	w := admin
	w.User, w.Password = names.WorkerRole, "worker-pw"
	f.schema, f.store = names.Schema, pgstore.New(f.pool, names.Schema)

	e := &archiveEnv{fixtureEnv: f, engine: engine, job: f.sec}
	e.job.PostgresURI = w.URL(nil)
	if engine == "Milvus" {
		e.milvus = testutil.MilvusAddr(t)
		c, err := milvus.Connect(ctx, milvus.Conn{Address: e.milvus})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		e.coll = testutil.UniqueName("arch_")
		if _, err := milvus.EnsureCollection(ctx, c, e.coll, spec8, milvus.Owner{ID: "test"}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = milvus.DropCollection(context.Background(), c, e.coll, milvus.Owner{ID: "test"}) })
		e.mix = milvus.New(c, e.coll, spec8)
		e.index = e.mix
	} else {
		if err := pgindex.Ensure(ctx, f.pool, f.schema, spec8); err != nil {
			t.Fatal(err)
		}
		e.index = pgindex.New(f.pool, f.schema, spec8)
	}
	if e.mem, err = service.New(f.store, e.index, embed.NewHashing(8)); err != nil {
		t.Fatal(err)
	}
	e.items = archiveItems(n)
	if _, err := e.mem.RememberBatch(ctx, e.items); err != nil {
		t.Fatal(err)
	}
	// A tombstone covering memories that are still stored (only direct SQL can leave
	// that state: Forget and a restore's tombstones delete what they cover): archival
	// must leave them all alone. It covers what the store recorded up to now.
	if _, err := f.pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{f.schema, "tombstones"}.Sanitize()+` VALUES ('user:gone', clock_timestamp(), '')`); err != nil {
		t.Fatal(err)
	}
	return e
}

// archiveItems are n memories of every type over many ages (up to two years, one a day
// in the future) and base scores, some expired, some expiring later, one archived long
// ago without any archival run, spread over scopes of which user:gone gets a tombstone.
func archiveItems(n int) []memory.Item {
	rng := mrand.New(mrand.NewPCG(42, 1))
	scopes := []string{"user:1", "user:2", "user:3", "session:s1", "agent:planner", "user:gone"}
	items := make([]memory.Item, 0, n)
	for i := range n {
		typ := memory.AllTypes()[i%4]
		age := time.Duration(rng.Int64N(int64(2*365*24*time.Hour))) - 24*time.Hour
		it := mem(fmt.Sprintf("a%04d", i), scopes[rng.IntN(len(scopes))], typ, "",
			fmt.Sprintf("memory %d about coffee, trains and %d other things", i, rng.IntN(1000)), age)
		it.BaseScore = rng.Float64()
		switch i % 17 {
		case 3:
			it.ExpiresAt = ptr(testNow.Add(-time.Minute))
		case 4:
			it.ExpiresAt = ptr(testNow.Add(time.Hour))
		}
		if i == 5 {
			it.ArchivedAt = ptr(testNow.Add(-400 * 24 * time.Hour))
		}
		items = append(items, it)
	}
	return items
}

// expect is what a run at `at` must archive and purge, by the Go rule
// (memory.HalfLives.Score), over the store's current memories, and which archived
// memories are kept (not expired by then).
type expect struct {
	archived, purged []string
	byType           map[string]int64
	live             int64
}

func (e *archiveEnv) expect(t *testing.T, at time.Time) expect {
	t.Helper()
	x := expect{byType: map[string]int64{}}
	for _, it := range e.stored(t) {
		if it.Scope == "user:gone" {
			continue
		}
		// Expired memories are purged, archived or not: their time is up.
		if it.ExpiresAt != nil && !it.ExpiresAt.After(at) {
			x.purged = append(x.purged, it.MemoryID)
			continue
		}
		if it.ArchivedAt != nil {
			continue
		}
		x.live++
		if archiveHalfLives.Score(it, at) < archiveThreshold {
			x.archived = append(x.archived, it.MemoryID)
			x.byType[string(it.MemoryType)]++
		}
	}
	sort.Strings(x.archived)
	sort.Strings(x.purged)
	return x
}

func (e *archiveEnv) stored(t *testing.T) []memory.Item {
	t.Helper()
	var out []memory.Item
	if err := e.store.Export(context.Background(), pgstore.ExportFilter{IncludeArchived: true}, func(it memory.Item) error {
		out = append(out, it)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func (e *archiveEnv) archivedAt(t *testing.T, at time.Time) []string {
	t.Helper()
	var out []string
	for _, it := range e.stored(t) {
		if it.ArchivedAt != nil && it.ArchivedAt.Equal(at) {
			out = append(out, it.MemoryID)
		}
	}
	sort.Strings(out)
	return out
}

// vectors returns which of ids have a vector in the index, read from the index itself.
func (e *archiveEnv) vectors(t *testing.T, ids []string) map[string][]float32 {
	t.Helper()
	ctx := context.Background()
	if e.mix != nil {
		v, err := e.mix.Fetch(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	rows, err := e.pool.Query(ctx, `SELECT memory_id, embedding FROM `+pgx.Identifier{e.schema, "vectors"}.Sanitize()+` WHERE memory_id = ANY($1)`, ids)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	for rows.Next() {
		var (
			id  string
			raw []byte
		)
		if err := rows.Scan(&id, &raw); err != nil {
			t.Fatal(err)
		}
		v, err := pgindex.DecodeVector(raw)
		if err != nil {
			t.Fatal(err)
		}
		out[id] = v
	}
	return out
}

func (e *archiveEnv) config(run string) ArchiveConfig {
	c := ArchiveConfig{
		StoreNamespace: "team-a", StoreName: "bot", Tenant: "acme", RunName: run,
		Schema: e.schema, Vectors: engine.Vectors{VectorEngine: e.engine}, EmbeddingModel: "memory-operator/hashing-v1", Dimension: 8, Metric: "COSINE",
		Now: testNow, Threshold: archiveThreshold, HalfLives: archiveHalfLives,
		Cold:      &Destination{Endpoint: e.s3cfg.Endpoint, Insecure: true, Bucket: e.bucket, Prefix: "acme/" + ArchiveFolder + run + "/"},
		BatchSize: 40,
	}
	if e.engine == "Milvus" {
		c.MilvusAddress, c.Collection = e.milvus, e.coll
	}
	return c
}

// state is everything a dry run must leave as it was.
func (e *archiveEnv) state(t *testing.T) string {
	t.Helper()
	ids := make([]string, len(e.items))
	for i, it := range e.items {
		ids[i] = it.MemoryID
	}
	stored, _ := json.Marshal(e.stored(t))
	vecs := e.vectors(t, ids)
	names, err := snapshot.NewMinioObjects(e.s3, e.bucket).List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := e.pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM `+pgx.Identifier{e.schema, "index_deletions"}.Sanitize()+`)
		+ (SELECT count(*) FROM `+pgx.Identifier{e.schema, "archive_runs"}.Sanitize()+`)
		+ (SELECT count(*) FROM `+pgx.Identifier{e.schema, "audit_log"}.Sanitize()+`)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s\n%d vectors\nobjects %v\n%d bookkeeping rows", stored, len(vecs), names, n)
}

func TestArchiveRun(t *testing.T) {
	for _, engine := range []string{"Milvus", "Postgres"} {
		t.Run(engine, func(t *testing.T) { testArchiveRun(t, engine) })
	}
}

func testArchiveRun(t *testing.T, engine string) {
	e := newArchiveEnv(t, engine, 300)
	ctx := context.Background()
	want := e.expect(t, testNow)
	if len(want.archived) < 40 || int64(len(want.archived)) > want.live-40 || len(want.purged) < 5 {
		t.Fatalf("fixture: %d of %d live memories below the threshold, %d expired; want a real mix", len(want.archived), want.live, len(want.purged))
	}
	forgotten := map[string]bool{}
	for _, it := range e.stored(t) {
		if it.Scope == "user:gone" {
			forgotten[it.MemoryID] = true
		}
	}

	// A dry run counts what the run will do and changes nothing anywhere.
	before := e.state(t)
	dry := e.config("dry")
	dry.DryRun = true
	sum, err := RunArchive(ctx, dry, e.job, RunOptions{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	wantSum := ArchiveSummary{Now: testNow, DryRun: true, Scanned: want.live, Archived: int64(len(want.archived)), ArchivedByType: want.byType,
		ExpiredPurged: int64(len(want.purged)), VectorsDeleted: int64(len(want.archived) + len(want.purged)), ColdItems: int64(len(want.archived))}
	if msg, _ := json.Marshal(sum); !jsonEqual(sum, wantSum) {
		t.Fatalf("dry run summary = %s, want %+v", msg, wantSum)
	}
	if after := e.state(t); after != before {
		t.Fatalf("the dry run changed the store:\nbefore %s\nafter  %s", before, after)
	}

	// The run.
	cfg := e.config("run-1")
	sum, err = RunArchive(ctx, cfg, e.job, RunOptions{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	wantSum.DryRun, wantSum.ColdPackage = false, cfg.Cold.Prefix
	if msg, _ := json.Marshal(sum); !jsonEqual(sum, wantSum) {
		t.Fatalf("summary = %s, want %+v", msg, wantSum)
	}
	if got := e.archivedAt(t, testNow); !slices.Equal(got, want.archived) {
		t.Fatalf("archived %d memories, want exactly the %d below the threshold", len(got), len(want.archived))
	}
	storedNow := map[string]memory.Item{}
	for _, it := range e.stored(t) {
		storedNow[it.MemoryID] = it
	}
	for _, id := range want.purged {
		if _, ok := storedNow[id]; ok {
			t.Fatalf("expired memory %s is still stored", id)
		}
	}
	for id := range forgotten {
		if it, ok := storedNow[id]; !ok || it.ArchivedAt != nil {
			t.Fatalf("memory %s of the forgotten scope was touched: %+v (present %v)", id, it, ok)
		}
	}
	if it := storedNow["a0005"]; it.ArchivedAt == nil || !it.ArchivedAt.Equal(testNow.Add(-400*24*time.Hour)) {
		t.Fatalf("the memory archived before was touched: %+v", it)
	}
	// Vectors: the archived and purged are gone from the index; every other memory's,
	// the forgotten scope's included, is still there.
	var gone, kept []string
	gone = append(append(gone, want.archived...), want.purged...)
	for id, it := range storedNow {
		if it.ArchivedAt == nil {
			kept = append(kept, id)
		}
	}
	if v := e.vectors(t, gone); len(v) != 0 {
		t.Fatalf("%d vectors of archived or purged memories are still in the index", len(v))
	}
	if v := e.vectors(t, kept); len(v) != len(kept) {
		t.Fatalf("%d of %d live memories kept their vectors", len(v), len(kept))
	}
	if pending, err := e.store.PendingIndexDeletions(ctx); err != nil || pending != 0 {
		t.Fatalf("pending deletions = %d, %v", pending, err)
	}
	e.assertInvisible(t, want.archived)

	// The cold package: a v1 package the snapshot reader takes, holding exactly the
	// archived memories as stored, each with the vector it had in the index.
	r, items := e.open(t, cfg.Cold.Prefix, key(t))
	if got := sorted(ids(items)); !slices.Equal(got, want.archived) {
		t.Fatalf("the cold package holds %d memories, want the %d archived", len(got), len(want.archived))
	}
	if m := r.Manifest(); m.Counts.WithEmbedding != int64(len(want.archived)) || m.Embedding == nil || m.Embedding.Dimension != 8 ||
		m.Source.Tenant != "acme" || m.Tombstones.Count != 1 || m.Tombstones.Entries[0].Scope != "user:gone" {
		t.Fatalf("manifest = %+v", m)
	}
	h := embed.NewHashing(8)
	for _, it := range items {
		stored, _ := json.Marshal(storedNow[it.MemoryID])
		emb := it.Embedding
		it.Embedding = nil
		if got, _ := json.Marshal(it); string(got) != string(stored) {
			t.Fatalf("%s in the cold package:\n got %s\nwant %s", it.MemoryID, got, stored)
		}
		v, _ := h.Embed(ctx, embed.Passage, []string{it.EmbeddingText()})
		if !closeVec(emb, vector.Normalize(v[0])) {
			t.Fatalf("%s: cold embedding %v, want %v", it.MemoryID, emb, v[0])
		}
	}
	runs, err := e.store.ArchiveRuns(ctx)
	if err != nil || len(runs) != 1 || runs[0].ColdPackage != cfg.Cold.Prefix || runs[0].ColdItems != int64(len(want.archived)) {
		t.Fatalf("archive runs = %+v, %v", runs, err)
	}

	// Again at the same clock: nothing left to do.
	again := e.config("run-2")
	sum, err = RunArchive(ctx, again, e.job, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Archived != 0 || sum.ExpiredPurged != 0 || sum.VectorsDeleted != 0 || sum.ColdPackage != "" || sum.Scanned != want.live-int64(len(want.archived)) {
		t.Fatalf("second run = %+v", sum)
	}
	if names, _ := snapshot.NewMinioObjects(e.s3, e.bucket).List(ctx, again.Cold.Prefix); len(names) != 0 {
		t.Fatalf("a run with nothing to copy wrote %v", names)
	}

	// Two months later, with deletion 30 days after archival: run 1's memories have a
	// cold copy and go; the newly archived stay (archived now); the memory archived
	// long ago without a run (so without a cold copy) stays.
	later := testNow.Add(60 * 24 * time.Hour)
	want3 := e.expect(t, later)
	var toDelete []string // run 1's memories that are not purged as expired first
	for _, id := range want.archived {
		if !slices.Contains(want3.purged, id) {
			toDelete = append(toDelete, id)
		}
	}
	if len(toDelete) == len(want.archived) || len(toDelete) == 0 {
		t.Fatalf("fixture: %d of run 1's %d memories expire by the third run; want some", len(want.archived)-len(toDelete), len(want.archived))
	}
	third := e.config("run-3")
	third.Now, third.DeleteAfter = later, 30*24*time.Hour
	sum, err = RunArchive(ctx, third, e.job, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Archived == 0 || sum.Archived != int64(len(want3.archived)) || sum.Deleted != int64(len(toDelete)) ||
		sum.ExpiredPurged != int64(len(want3.purged)) || sum.ColdItems != sum.Archived || sum.ColdPackage != third.Cold.Prefix {
		t.Fatalf("third run = %+v, want %d archived, %d purged and run 1's other %d deleted", sum, len(want3.archived), len(want3.purged), len(toDelete))
	}
	if left := e.archivedAt(t, testNow); len(left) != 0 {
		t.Fatalf("run 1's memories not deleted: %v", left)
	}
	if got := e.archivedAt(t, later); !slices.Equal(got, want3.archived) {
		t.Fatalf("archived at the third run: %d, want %d", len(got), len(want3.archived))
	}
	if _, err := e.store.Get(ctx, "a0005"); err != nil {
		t.Fatalf("the memory archived without a cold copy was deleted: %v", err)
	}
	if _, items := e.open(t, third.Cold.Prefix, key(t)); !slices.Equal(sorted(ids(items)), want3.archived) {
		t.Fatalf("the third cold package holds %v", ids(items))
	}
}

// assertInvisible checks that neither recall nor search returns any of ids.
func (e *archiveEnv) assertInvisible(t *testing.T, hidden []string) {
	t.Helper()
	ctx := context.Background()
	byID := map[string]memory.Item{}
	for _, it := range e.items {
		byID[it.MemoryID] = it
	}
	for _, scope := range []string{"user:1", "user:2", "user:3", "session:s1", "agent:planner"} {
		rec, err := e.store.Recall(ctx, pgstore.RecallQuery{Scope: scope, Now: testNow, HalfLives: archiveHalfLives, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rec {
			if slices.Contains(hidden, r.MemoryID) {
				t.Fatalf("recall of %s returned archived %s", scope, r.MemoryID)
			}
		}
	}
	for _, id := range hidden {
		it := byID[id]
		res, err := e.mem.Search(ctx, service.SearchQuery{Scope: it.Scope, Text: it.EmbeddingText(), K: 20, Now: testNow})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if slices.Contains(hidden, r.Item.MemoryID) {
				t.Fatalf("search for archived %s returned archived %s", id, r.Item.MemoryID)
			}
		}
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func sorted(ss []string) []string {
	out := slices.Clone(ss)
	sort.Strings(out)
	return out
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// TestArchiveCompletesAfterMilvusOutage: Milvus is unreachable once PostgreSQL has
// marked the rows. The run fails; the archived memories are already out of recall and
// search; the next run, with Milvus back, completes the vector deletions.
func TestArchiveCompletesAfterMilvusOutage(t *testing.T) {
	defer func(d time.Duration) { engine.DialTimeout = d }(engine.DialTimeout)
	engine.DialTimeout = 2 * time.Second
	for _, withCold := range []bool{false, true} {
		t.Run(fmt.Sprintf("cold=%v", withCold), func(t *testing.T) {
			e := newArchiveEnv(t, "Milvus", 200)
			ctx := context.Background()
			want := e.expect(t, testNow)

			down := e.config("run-1")
			down.MilvusAddress = closedAddr(t)
			if !withCold {
				down.Cold = nil
			}
			_, err := RunArchive(ctx, down, e.job, RunOptions{})
			if err == nil || !strings.Contains(err.Error(), "connecting to Milvus "+down.MilvusAddress) {
				t.Fatalf("run with Milvus down: %v", err)
			}
			// PostgreSQL marked the rows; the vectors are still in the index and their
			// deletions recorded; no cold package is complete.
			if got := e.archivedAt(t, testNow); !slices.Equal(got, want.archived) {
				t.Fatalf("after the failed run %d memories are archived, want %d", len(got), len(want.archived))
			}
			if v := e.vectors(t, want.archived); len(v) != len(want.archived) {
				t.Fatalf("%d of %d vectors left in the index", len(v), len(want.archived))
			}
			if n, err := e.store.PendingIndexDeletions(ctx); err != nil || n != int64(len(want.archived)) {
				t.Fatalf("pending deletions = %d, %v; want %d", n, err, len(want.archived))
			}
			if withCold {
				if _, err := snapshot.Open(ctx, snapshot.NewMinioObjects(e.s3, e.bucket), down.Cold.Prefix, key(t)); !errors.Is(err, snapshot.ErrIncomplete) {
					t.Fatalf("cold package after the failure: %v, want ErrIncomplete", err)
				}
			}
			e.assertInvisible(t, want.archived)

			// The next run (the Job's retry: same clock, same place) finishes the job.
			up := e.config("run-1")
			if !withCold {
				up.Cold = nil
			}
			sum, err := RunArchive(ctx, up, e.job, RunOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if sum.Recovered != int64(len(want.archived)) || sum.Archived != 0 || sum.VectorsDeleted != int64(len(want.archived)+len(want.purged)) {
				t.Fatalf("recovering run = %+v, want %d recovered", sum, len(want.archived))
			}
			if v := e.vectors(t, want.archived); len(v) != 0 {
				t.Fatalf("%d vectors of archived memories survived the recovery", len(v))
			}
			if n, _ := e.store.PendingIndexDeletions(ctx); n != 0 {
				t.Fatalf("pending deletions after the recovery = %d", n)
			}
			if got := e.archivedAt(t, testNow); !slices.Equal(got, want.archived) {
				t.Fatalf("archived after the recovery: %d, want %d", len(got), len(want.archived))
			}
			if withCold {
				// The copy waited for the vectors: every memory carries its embedding.
				r, items := e.open(t, up.Cold.Prefix, key(t))
				if got := sorted(ids(items)); !slices.Equal(got, want.archived) || r.Manifest().Counts.WithEmbedding != int64(len(want.archived)) {
					t.Fatalf("cold package: %d memories, %d with embeddings; want %d each", len(items), r.Manifest().Counts.WithEmbedding, len(want.archived))
				}
				if sum.ColdPackage != up.Cold.Prefix || sum.ColdItems != int64(len(want.archived)) {
					t.Fatalf("recovering run's cold copy: %+v", sum)
				}
			}
		})
	}
}

func TestArchiveRefusesUnusableSetups(t *testing.T) {
	e := newArchiveEnv(t, "Postgres", 20)
	ctx := context.Background()
	noKey := e.job
	noKey.EncryptionKey = ""
	if _, err := RunArchive(ctx, e.config("r"), noKey, RunOptions{}); err == nil || !strings.Contains(err.Error(), EnvEncryptionKey) {
		t.Fatalf("without a key: %v", err)
	}
	if _, err := RunArchive(ctx, e.config("r"), Secrets{EncryptionKey: testKey}, RunOptions{}); err == nil || !strings.Contains(err.Error(), EnvPostgresURI) {
		t.Fatalf("without PostgreSQL: %v", err)
	}
	bad := e.config("r")
	bad.Threshold = -1
	if _, err := RunArchive(ctx, bad, e.job, RunOptions{}); err == nil || !strings.Contains(err.Error(), "--threshold -1") {
		t.Fatalf("negative threshold: %v", err)
	}
	// A store not yet migrated to the schema this binary writes is refused before anything.
	old := testutil.UniqueName("v1_")
	if _, err := e.pool.Exec(ctx, `CREATE SCHEMA `+old+`; CREATE TABLE `+old+`.schema_migrations (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now()); INSERT INTO `+old+`.schema_migrations VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.pool.Exec(context.Background(), `DROP SCHEMA `+old+` CASCADE`) })
	v1 := e.config("r")
	v1.Schema = old // read as the superuser (e.sec): the agent may not read another schema
	if _, err := RunArchive(ctx, v1, e.sec, RunOptions{}); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("is at version 1; this worker needs version %d", pgstore.LatestVersion)) {
		t.Fatalf("old schema: %v", err)
	}
	// Missing bucket: the rows are marked, the run fails before deleting vectors, and
	// the next run with a bucket completes: the copy, then the deletions.
	missing := e.config("r")
	missing.Cold.Bucket = "no-such-bucket-4711"
	if _, err := RunArchive(ctx, missing, e.job, RunOptions{}); err == nil || !strings.Contains(err.Error(), "bucket no-such-bucket-4711 does not exist") {
		t.Fatalf("missing bucket: %v", err)
	}
	archived := e.archivedAt(t, testNow)
	if len(archived) == 0 {
		t.Fatal("fixture: nothing archived")
	}
	sum, err := RunArchive(ctx, e.config("r"), e.job, RunOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.ColdItems != int64(len(archived)) || sum.Archived != 0 || sum.Recovered != int64(len(archived)) {
		t.Fatalf("completing run = %+v, want %d copied and recovered", sum, len(archived))
	}
}

// TestArchiveProcess runs `memory-operator archive` as a Job would: the summary on
// stdout is what ParseArchiveSummary reads, bad arguments exit 2.
func TestArchiveProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	e := newArchiveEnv(t, "Postgres", 100)
	want := e.expect(t, testNow)
	bin := filepath.Join(t.TempDir(), "memory-operator")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/amemory/memory-operator").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := func(args ...string) (*exec.Cmd, []byte, error) {
		cmd := exec.Command(bin, append([]string{"archive"}, args...)...)
		cmd.Env = append(os.Environ(), EnvPostgresURI+"="+e.job.PostgresURI, EnvS3AccessKey+"="+e.job.S3AccessKey,
			EnvS3SecretKey+"="+e.job.S3SecretKey, EnvEncryptionKey+"="+testKey)
		out, err := cmd.Output()
		return cmd, out, err
	}
	cmd, _, err := run("--schema=x")
	if err == nil || cmd.ProcessState.ExitCode() != 2 {
		t.Fatalf("bad arguments: %v (exit %d), want exit 2", err, cmd.ProcessState.ExitCode())
	}
	_, out, err := run(e.config("proc").Args()...)
	if err != nil {
		t.Fatalf("archive: %v\n%s", err, out)
	}
	sum, err := ParseArchiveSummary(string(out))
	if err != nil {
		t.Fatalf("stdout %q: %v", out, err)
	}
	if sum.Archived != int64(len(want.archived)) || sum.ExpiredPurged != int64(len(want.purged)) || !sum.Now.Equal(testNow) || sum.ColdPackage == "" {
		t.Fatalf("summary = %+v, want %d archived, %d purged", sum, len(want.archived), len(want.purged))
	}
	if strings.Contains(string(out), "agent-pw") || strings.Contains(string(out), testKey) {
		t.Fatal("the summary carries a secret")
	}
}

// TestRehydrateFromTheColdPackage undoes an archival declaratively: the run's cold
// package, restored into the same store with Rehydrate (what a MemoryRestore with
// spec.rehydrate does), brings every archived memory back live, with its vector.
func TestRehydrateFromTheColdPackage(t *testing.T) {
	e := newArchiveEnv(t, "Milvus", 200)
	ctx := context.Background()
	want := e.expect(t, testNow)
	cfg := e.config("run-1")
	if _, err := RunArchive(ctx, cfg, e.job, RunOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := e.archivedAt(t, testNow); len(got) == 0 || !slices.Equal(got, want.archived) {
		t.Fatalf("archived %d memories, want %d", len(got), len(want.archived))
	}
	if v := e.vectors(t, want.archived); len(v) != 0 {
		t.Fatalf("%d archived memories kept their vectors", len(v))
	}

	rc := RestoreConfig{
		RestoreNamespace: "team-a", RestoreName: "rehydrate",
		Source:          *cfg.Cold,
		TargetNamespace: "team-a", TargetName: "bot", Tenant: "acme", Schema: e.schema,
		Vectors:        engine.Vectors{VectorEngine: "Milvus", MilvusAddress: e.milvus, Collection: e.coll},
		EmbeddingModel: "memory-operator/hashing-v1", Dimension: 8, Metric: "COSINE", Embedder: "Hashing",
		Unmapped: "Keep", ConflictPolicy: "KeepNewer", Embeddings: "Reuse",
		Types:     []string{"working", "episodic", "semantic", "procedural"},
		Rehydrate: true,
		DetailKey: cfg.Cold.Prefix + "restores/rehydrate/" + restoreDetailSuffix,
	}
	sec := RestoreSecrets{PostgresURI: e.job.PostgresURI, SourceS3AccessKey: e.sec.S3AccessKey,
		SourceS3SecretKey: e.sec.S3SecretKey, SourceKey: e.sec.EncryptionKey}
	sum, err := RunRestore(ctx, rc, sec, RunOptions{Now: testNow})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Rehydrated != int64(len(want.archived)) || sum.Restored != 0 {
		t.Fatalf("summary %+v: want %d rehydrated, nothing else written", sum, len(want.archived))
	}
	if got := e.archivedAt(t, testNow); len(got) != 0 {
		t.Fatalf("%d memories still archived", len(got))
	}
	if v := e.vectors(t, want.archived); len(v) != len(want.archived) {
		t.Fatalf("%d of %d rehydrated memories have a vector", len(v), len(want.archived))
	}
}
