package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/snapshot"
)

// memoryTarget is the most a worker process may use (peak RSS).
const memoryTarget = 256 << 20

// runMeasured runs the worker binary with args and the environment, and returns its
// stdout and peak RSS in bytes, as the worker reports it (VmHWM); it fails the test
// if the worker fails.
func runMeasured(t *testing.T, bin string, env []string, args ...string) (string, int64) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", args[0], err, stderr.String())
	}
	var mib int64
	for _, line := range strings.Split(stderr.String(), "\n") {
		if _, err := fmt.Sscanf(line, "memory-operator "+args[0]+": peak memory %d MiB", &mib); err == nil {
			break
		}
	}
	if mib == 0 {
		t.Fatalf("%s did not report its peak memory:\n%s", args[0], stderr.String())
	}
	t.Logf("%s: %s, peak RSS %d MiB", args[0], time.Since(start).Round(time.Millisecond), mib)
	return stdout.String(), mib << 20
}

// TestGuaranteeMillionTombstones: a store that has forgotten a million users still
// snapshots and restores, within the workers' memory target: the tombstones travel
// streamed beside the shards (the manifest stays small), and the restore applies
// every one of them to the target, forgetting what it held of those users.
func TestGuaranteeMillionTombstones(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a million tombstones")
	}
	const n = 1_000_000
	f := newFixture(t)
	ctx := context.Background()
	tomb := func(schema string) string { return pgx.Identifier{schema, "tombstones"}.Sanitize() }
	if _, err := f.pool.Exec(ctx, `INSERT INTO `+tomb(f.schema)+` SELECT 'user:' || lpad(i::text, 7, '0'), now() - interval '1 day',
		CASE WHEN i % 1000 = 0 THEN 'erasure request #' || i ELSE '' END FROM generate_series(1, $1) i`, n); err != nil {
		t.Fatal(err)
	}
	f.importGenerated(t, 2000) // memories of other users (user:NNNNNN)
	bin := buildBinary(t)
	cfg := f.config("million/")
	env := []string{EnvPostgresURI + "=" + f.sec.PostgresURI, EnvS3AccessKey + "=" + f.sec.S3AccessKey,
		EnvS3SecretKey + "=" + f.sec.S3SecretKey, EnvEncryptionKey + "=" + f.sec.EncryptionKey}
	out, snapRSS := runMeasured(t, bin, env, append([]string{"snapshot"}, cfg.Args()...)...)
	var summary map[string]any
	if err := json.Unmarshal([]byte(out), &summary); err != nil || summary["tombstones"] != float64(n) {
		t.Fatalf("snapshot summary %s (%v)", out, err)
	}
	st, err := f.s3.StatObject(ctx, f.bucket, "million/"+snapshot.ManifestName, minio.StatObjectOptions{})
	if err != nil || st.Size > 64<<10 {
		t.Fatalf("the manifest of a package with %d tombstones is %d bytes (%v)", n, st.Size, err)
	}

	// The target holds memories of 1000 of the forgotten users, written before they
	// were forgotten.
	target := f.targetSchema(t)
	i := 0
	if _, err := pgstore.New(f.pool, target).Import(ctx, func() (memory.Item, bool, error) {
		if i == 1000 {
			return memory.Item{}, false, nil
		}
		i++
		return memoryOf(fmt.Sprintf("old-%d", i), fmt.Sprintf("user:%07d", i*997), "from before the forget", time.Now().Add(-48*time.Hour)), true, nil
	}); err != nil {
		t.Fatal(err)
	}
	rc := f.restoreConfig(target, "million/")
	rc.DetailKey = RestoreDetailKey("million/", "r1")
	rsec := f.restoreSecrets()
	renv := []string{EnvPostgresURI + "=" + rsec.PostgresURI, EnvSourceS3AccessKey + "=" + rsec.SourceS3AccessKey,
		EnvSourceS3SecretKey + "=" + rsec.SourceS3SecretKey, EnvSourceKey + "=" + rsec.SourceKey}
	out, restoreRSS := runMeasured(t, bin, renv, append([]string{"restore"}, rc.Args()...)...)
	sum, err := ParseRestoreSummary(out)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Tombstones != n || sum.Forgotten != 1000 || sum.Restored != 2000 {
		t.Fatalf("restore summary %+v: want %d tombstones applied, 1000 memories forgotten, 2000 restored", sum, n)
	}
	var tombs, left int64
	if err := f.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+tomb(target)+`),
		(SELECT count(*) FROM `+pgx.Identifier{target, "memories"}.Sanitize()+` WHERE memory_id LIKE 'old-%')`).Scan(&tombs, &left); err != nil {
		t.Fatal(err)
	}
	if tombs != n || left != 0 {
		t.Fatalf("the target has %d tombstones and %d of the forgotten users' memories", tombs, left)
	}
	for name, rss := range map[string]int64{"snapshot": snapRSS, "restore": restoreRSS} {
		if rss > memoryTarget {
			t.Errorf("the %s worker peaked at %d MiB with %d tombstones; the target is %d MiB", name, rss>>20, n, memoryTarget>>20)
		}
	}
}

// TestGuaranteeLargeMemoriesStayWithinTheMemoryTarget snapshots and restores memories
// of 1 KiB to 4 MiB each (about 100 MiB in all): batches are bounded by bytes as well
// as by count, so neither worker outgrows its memory target.
func TestGuaranteeLargeMemoriesStayWithinTheMemoryTarget(t *testing.T) {
	if testing.Short() {
		t.Skip("moves about 100 MiB of memories")
	}
	f := newFixture(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(11, 12))
	const n = 120
	letters := []byte("abcdefghijklmnopqrstuvwxyz     ")
	var total int
	i := 0
	if _, err := f.store.Import(ctx, func() (memory.Item, bool, error) {
		if i == n {
			return memory.Item{}, false, nil
		}
		i++
		size := int(1024 * math.Pow(4096, rng.Float64())) // 1 KiB .. 4 MiB, log-uniform
		if i%10 == 0 {
			size = 4 << 20
		}
		text := make([]byte, size)
		for j := range text {
			text[j] = letters[rng.IntN(len(letters))]
		}
		total += size
		c, _ := json.Marshal(map[string]string{"text": string(text)})
		it := memoryOf(fmt.Sprintf("big-%03d", i), fmt.Sprintf("user:%02d", i%7), "", time.Now().Add(-time.Hour))
		it.Content = c
		return it, true, nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d memories, %d MiB of content", n, total>>20)
	bin := buildBinary(t)
	cfg := f.config("big/")
	env := []string{EnvPostgresURI + "=" + f.sec.PostgresURI, EnvS3AccessKey + "=" + f.sec.S3AccessKey,
		EnvS3SecretKey + "=" + f.sec.S3SecretKey, EnvEncryptionKey + "=" + f.sec.EncryptionKey}
	_, snapRSS := runMeasured(t, bin, env, append([]string{"snapshot"}, cfg.Args()...)...)

	target := f.targetSchema(t)
	rc := f.restoreConfig(target, "big/")
	rc.DetailKey = RestoreDetailKey("big/", "r1")
	rc.Embeddings = "Defer"
	rsec := f.restoreSecrets()
	renv := []string{EnvPostgresURI + "=" + rsec.PostgresURI, EnvSourceS3AccessKey + "=" + rsec.SourceS3AccessKey,
		EnvSourceS3SecretKey + "=" + rsec.SourceS3SecretKey, EnvSourceKey + "=" + rsec.SourceKey}
	out, restoreRSS := runMeasured(t, bin, renv, append([]string{"restore"}, rc.Args()...)...)
	if sum, err := ParseRestoreSummary(out); err != nil || sum.Restored != n {
		t.Fatalf("restore summary %+v (%v)", sum, err)
	}
	for name, rss := range map[string]int64{"snapshot": snapRSS, "restore": restoreRSS} {
		if rss > memoryTarget {
			t.Errorf("the %s worker peaked at %d MiB; the target is %d MiB", name, rss>>20, memoryTarget>>20)
		}
	}
}

// incompleteUploads counts the unfinished multipart uploads of the named objects
// (listed by exact name, the only way MinIO lists them).
func (f *fixtureEnv) incompleteUploads(t *testing.T, names ...string) int {
	t.Helper()
	n := 0
	for _, name := range names {
		for up := range f.s3.ListIncompleteUploads(context.Background(), f.bucket, name, false) {
			if up.Err != nil {
				t.Fatal(up.Err)
			}
			if up.Key == name {
				n++
			}
		}
	}
	return n
}

// TestGuaranteeKilledSnapshotLeavesNoUploadsBehind kills a snapshot worker (SIGKILL,
// as an evicted pod) while a shard's multipart upload is under way: its parts hold
// storage but no listing of the prefix shows them. The rerun, as the Job's retry does,
// aborts them, and writes the package.
func TestGuaranteeKilledSnapshotLeavesNoUploadsBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("uploads about 30 MiB")
	}
	f := newFixture(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	i := 0
	if _, err := f.store.Import(ctx, func() (memory.Item, bool, error) {
		if i == 30 {
			return memory.Item{}, false, nil
		}
		i++
		raw := make([]byte, 768<<10)
		for j := range raw {
			raw[j] = byte(rng.Uint32())
		}
		c, _ := json.Marshal(map[string][]byte{"blob": raw}) // base64: hardly compressible
		it := memoryOf(fmt.Sprintf("blob-%02d", i), "user:blobs", "", time.Now().Add(-time.Hour))
		it.Content = c
		return it, true, nil
	}); err != nil {
		t.Fatal(err)
	}
	bin := buildBinary(t)
	cfg := f.config("killed/")
	cmd := exec.Command(bin, append([]string{"snapshot"}, cfg.Args()...)...)
	cmd.Env = append(os.Environ(), EnvPostgresURI+"="+f.sec.PostgresURI, EnvS3AccessKey+"="+f.sec.S3AccessKey,
		EnvS3SecretKey+"="+f.sec.S3SecretKey, EnvEncryptionKey+"="+f.sec.EncryptionKey)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	shard := "killed/shards/000001.jsonl.zst.sealed"
	deadline := time.Now().Add(30 * time.Second)
	for f.incompleteUploads(t, shard) == 0 {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatal("the snapshot never started a multipart upload")
		}
		time.Sleep(5 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	if f.incompleteUploads(t, shard) == 0 {
		t.Fatal("the killed worker left no unfinished upload: the test shows nothing")
	}

	if _, err := RunSnapshot(ctx, cfg, f.sec, RunOptions{Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	names := []string{"killed/" + snapshot.ScopeCountsName, "killed/" + snapshot.TombstonesName}
	for k := 1; k <= 3; k++ {
		names = append(names, fmt.Sprintf("killed/shards/%06d.jsonl.zst.sealed", k))
	}
	if n := f.incompleteUploads(t, names...); n != 0 {
		t.Fatalf("%d unfinished uploads of the killed run remain after the rerun", n)
	}
	if _, items := f.open(t, "killed/", key(t)); len(items) != 30 {
		t.Fatalf("the rerun's package holds %d memories, want 30", len(items))
	}
}
