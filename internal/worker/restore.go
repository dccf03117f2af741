package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/restore"
	"github.com/amemory/memory-operator/internal/shortterm"
	"github.com/amemory/memory-operator/internal/snapshot"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
)

// restoreParallelism is how many shards a restore worker merges at once.
const restoreParallelism = 2

// RunRestore restores the package described by cfg into the target store. Nothing is
// written before the package verifies whole (restore.Run), and a manifest that changed
// since the snapshot recorded it is refused before that.
func RunRestore(ctx context.Context, cfg RestoreConfig, sec RestoreSecrets, ro RunOptions) (RestoreSummary, error) {
	var sum RestoreSummary
	objects, client, err := openSource(ctx, cfg.Source, sec)
	if err != nil {
		return sum, err
	}
	pkg, err := openPackage(ctx, cfg, sec, objects, client)
	if err != nil {
		return sum, err
	}
	defer pkg.cleanup()
	reader, manifestSHA := pkg.reader, pkg.manifestSHA

	pool, target, err := openStore(ctx, sec.PostgresURI, cfg.Schema, cfg.Vectors)
	if err != nil {
		return sum, fmt.Errorf("target: %w", err)
	}
	defer pool.Close()
	prior, err := priorRestore(ctx, cfg, target, reader, manifestSHA)
	if err != nil {
		return sum, err
	}
	if prior != nil {
		prior.Import = pkg.imported
		return *prior, nil
	}
	index, closeIndex, err := targetIndex(ctx, cfg, sec, pool)
	if err != nil {
		return sum, err
	}
	defer closeIndex()
	embedder, err := targetEmbedder(cfg, sec)
	if err != nil {
		return sum, err
	}
	mapper, err := loadMapper(ctx, cfg, client)
	if err != nil {
		return sum, err
	}
	var types []memory.Type
	for _, t := range cfg.Types {
		mt, err := memory.ParseType(t)
		if err != nil {
			return sum, err
		}
		types = append(types, mt)
	}

	// The search index goes only once the package has verified: a restore that
	// writes nothing leaves the store as it was.
	var bulk engine.BulkLoader
	beforeWrite := func(ctx context.Context) (err error) {
		if bulk, err = beginBulkLoad(ctx, cfg, index, target, reader.Manifest().Counts.Items); err != nil {
			return err
		}
		return beginFreshLoad(ctx, cfg, index, reader.Manifest().Counts.Items, ro)
	}
	if fl, ok := index.(engine.FreshLoader); ok {
		defer fl.EndFreshLoad()
	}
	sessions, closeSessions, err := targetSessions(ctx, cfg, reader.Manifest(), target, sec)
	if err != nil {
		return sum, err
	}
	defer closeSessions()
	detail := newDetailUpload(ctx, objects, cfg.DetailKey)
	res, err := restore.Run(ctx, restore.Options{
		Reader: reader, Written: pkg.imported != nil, Target: target, Index: index, Embedder: embedder, EmbedLimit: cfg.embedLimit(),
		Mapping: mapper, Denylist: cfg.Denylist, Types: types, Now: ro.Now,
		Conflict: restore.ConflictPolicy(cfg.ConflictPolicy), Embeddings: restore.EmbeddingsPolicy(cfg.Embeddings),
		DryRun: cfg.DryRun, Rehydrate: cfg.Rehydrate, AllowMerge: cfg.AllowMerge, IntoExisting: cfg.IntoExisting, Parallelism: restoreParallelism, Detail: detail,
		Actor: "restore " + cfg.RestoreNamespace + "/" + cfg.RestoreName, BeforeWrite: beforeWrite, Sessions: sessions,
		Progress: func(p restore.Progress) {
			if ro.Progress != nil {
				fmt.Fprintf(ro.Progress, "read %d, restored %d, skipped %d\n", p.Read, p.Restored, p.Skipped)
			}
		},
	})
	detailKey := detail.finish(err)
	if res == nil {
		return sum, err // nothing was written
	}
	sum = summarize(res, manifestSHA)
	sum.Import = pkg.imported
	if err != nil {
		// Some of it was written before the restore failed (a backend lost midway):
		// the summary says what, and the error why it stopped.
		sum.Error = truncateUTF8(err.Error(), maxSummaryError)
		return sum, err
	}
	sum.DetailKey = detailKey
	if err := finishBulkLoad(ctx, cfg, bulk, ro); err != nil {
		// Everything was written and searches are right, only slower until the
		// index is built: the rerun (the Job's retry) builds it.
		sum.Error = truncateUTF8(err.Error(), maxSummaryError)
		return sum, err
	}
	if err := recordRestore(ctx, cfg, target, sum); err != nil {
		// Everything was written; only the record is missing, and a rerun of this
		// restore (the Job's retry) is idempotent.
		sum.Error = truncateUTF8(err.Error(), maxSummaryError)
		return sum, err
	}
	return sum, nil
}

// bulkLoadMin is the package size from which a restore into an empty store loads the
// PGVector engine's table without its HNSW index and builds the index once, after
// the load: inserting into the graph row by row costs about 15 times as much.
const bulkLoadMin = 10_000

// targetSessions is the target's short-term tier, when the package carries live
// sessions and the restore does not skip them (nil otherwise).
func targetSessions(ctx context.Context, cfg RestoreConfig, m *snapshot.Manifest, target *pgstore.Store, sec RestoreSecrets) (shortterm.Store, func(), error) {
	if cfg.SkipSessions || m.Sessions == nil {
		return nil, func() {}, nil
	}
	st, closeSessions, err := cfg.Sessions.open(ctx, target, sec.RedisPassword)
	if err != nil {
		return nil, nil, fmt.Errorf("the package carries live sessions: %w (spec.skipSessions leaves them out)", err)
	}
	return st, closeSessions, nil
}

// beginBulkLoad takes the target's search index away for the load when that is
// worth it (an empty store, a package of at least bulkLoadMin memories, an engine
// that can: engine.BulkLoader) and returns the index to build afterwards; nil when
// the load goes through the index. A store that already holds memories keeps its
// index: its agents search it now.
func beginBulkLoad(ctx context.Context, cfg RestoreConfig, index vector.Index, target *pgstore.Store, items int64) (engine.BulkLoader, error) {
	bl, ok := index.(engine.BulkLoader)
	if !ok || cfg.DryRun {
		return nil, nil
	}
	// A rerun finds the index its first run took away, and builds it when done.
	if since, err := bl.SearchIndexDeferred(ctx); err != nil || since != "" {
		return bl, err
	}
	if items < bulkLoadMin {
		return nil, nil
	}
	n, err := target.Count(ctx)
	if err != nil || n > 0 {
		return nil, err
	}
	if err := bl.DropSearchIndex(ctx); err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	return bl, nil
}

// beginFreshLoad tells an index that can load an empty index more cheaply
// (engine.FreshLoader: Milvus) that this restore may, when it is empty.
func beginFreshLoad(ctx context.Context, cfg RestoreConfig, index vector.Index, items int64, ro RunOptions) error {
	fl, ok := index.(engine.FreshLoader)
	if !ok || cfg.DryRun {
		return nil
	}
	fresh, err := fl.BeginFreshLoad(ctx, items)
	if err != nil {
		return fmt.Errorf("target: %w", err)
	}
	if fresh && ro.Progress != nil {
		fmt.Fprintln(ro.Progress, "the target's vector index is empty: vectors are inserted, not upserted")
	}
	return nil
}

// finishBulkLoad builds the search index beginBulkLoad took away.
func finishBulkLoad(ctx context.Context, cfg RestoreConfig, bl engine.BulkLoader, ro RunOptions) error {
	if bl == nil {
		return nil
	}
	if ro.Progress != nil {
		fmt.Fprintln(ro.Progress, "building the search index")
	}
	if err := bl.BuildSearchIndex(ctx, cfg.IndexBuildMemory); err != nil {
		return fmt.Errorf("target: %w", err)
	}
	return nil
}

// sourceKey is the package key from the environment, nil for an unencrypted package.
func sourceKey(cfg RestoreConfig, sec RestoreSecrets) (*snapshot.Key, error) {
	if cfg.Unencrypted {
		return nil, nil
	}
	if sec.SourceKey == "" {
		return nil, fmt.Errorf("no package key: set %s (or pass --unencrypted for a plaintext package)", EnvSourceKey)
	}
	k, err := snapshot.ParseKey([]byte(sec.SourceKey))
	if err != nil {
		return nil, fmt.Errorf("package key from %s: %w", EnvSourceKey, err)
	}
	return &k, nil
}

// priorRestore is the summary of a restore that must not run, nil when it must: a
// package the target already received is not restored again unless asked
// (AllowRepeat), since a GitOps tool recreating a MemoryRestore must not re-run it
// into live data, where it could bring back what agents changed or deleted since.
// Nor is this restore run twice (its Job retried after it completed).
func priorRestore(ctx context.Context, cfg RestoreConfig, target *pgstore.Store, reader restore.Package, manifestSHA string) (*RestoreSummary, error) {
	prior, err := target.ReceivedPackage(ctx, manifestSHA)
	if err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	// An import is run again by any other MemoryRestore (the digest of its converted
	// memories only recognizes its own Job retried): re-reading a framework's data is
	// idempotent, and what is new in the source since must come in.
	if prior == nil || (prior.UID != cfg.RestoreUID && (cfg.AllowRepeat || cfg.Import != nil)) {
		return nil, nil
	}
	sum := &RestoreSummary{ManifestSHA256: manifestSHA, FormatVersion: reader.StoredFormatVersion(),
		PackageID: reader.Manifest().PackageID, DryRun: cfg.DryRun, Embeddings: cfg.Embeddings}
	if prior.UID == cfg.RestoreUID {
		sum.Restored, sum.Unchanged = prior.Restored, prior.Unchanged
	} else {
		sum.AlreadyRestored = &PriorRestore{Name: prior.Name, UID: prior.UID, CompletedAt: prior.CompletedAt}
	}
	return sum, nil
}

// recordRestore records in the target a restore that completed (not a dry run, and
// only one the controller started: it has a UID).
func recordRestore(ctx context.Context, cfg RestoreConfig, target *pgstore.Store, sum RestoreSummary) error {
	if cfg.DryRun || cfg.RestoreUID == "" {
		return nil
	}
	return target.RecordRestore(ctx, pgstore.ReceivedRestore{
		UID: cfg.RestoreUID, Name: cfg.RestoreNamespace + "/" + cfg.RestoreName,
		PackageID: sum.PackageID, ManifestSHA256: sum.ManifestSHA256,
		Source:      restoreSource(cfg),
		CompletedAt: time.Now().UTC(), Restored: sum.Restored, Unchanged: sum.Unchanged,
	})
}

// restoreSource is where a restore read from, for the target's record.
func restoreSource(cfg RestoreConfig) string {
	switch {
	case cfg.Import == nil:
		return "s3://" + cfg.Source.Bucket + "/" + cfg.Source.Prefix
	case cfg.Import.Object != "":
		return "import " + cfg.Import.Kind + " s3://" + cfg.Source.Bucket + "/" + cfg.Import.Object
	}
	return "import " + cfg.Import.Kind
}

// summarize turns the engine's result into the summary the controller reads.
func summarize(res *restore.Result, manifestSHA string) RestoreSummary {
	sum := RestoreSummary{
		ManifestSHA256: manifestSHA, FormatVersion: res.FormatVersion, PackageID: res.PackageID, Shards: res.Shards,
		DryRun: res.DryRun, Embeddings: string(res.Embeddings), Read: res.Read,
		Restored: res.Restored, Unchanged: res.Unchanged, Scopes: res.Scopes, MappedScopes: res.MappedScopes,
		Vectors: res.Vectors, Rehydrated: res.Rehydrated, Tombstones: res.Tombstones, Forgotten: res.Forgotten,
		Skipped: SkippedCount{
			Denylisted: res.Skipped.Denylisted, Tombstoned: res.Skipped.Tombstoned, Unmapped: res.Skipped.Unmapped,
			Expired: res.Skipped.Expired, Type: res.Skipped.Type, Conflict: res.Skipped.Conflict, Invalid: res.Skipped.Invalid,
			IDInUseByOtherScope: res.Skipped.IDInUseByOtherScope, TextTooLong: res.Skipped.TextTooLong,
		},
		FirstInvalid: truncateUTF8(res.FirstInvalid, maxFirstInvalid),
		Sessions:     res.Sessions,
	}
	if len(res.RestoredByType) > 0 {
		sum.RestoredByType = map[string]int64{}
		for t, n := range res.RestoredByType {
			sum.RestoredByType[string(t)] = n
		}
	}
	return sum
}

// openSource connects to the package's object storage.
func openSource(ctx context.Context, d Destination, sec RestoreSecrets) (*snapshot.MinioObjects, *minio.Client, error) {
	c, err := openBucket(ctx, d, sec.SourceS3AccessKey, sec.SourceS3SecretKey, EnvSourceS3AccessKey, EnvSourceS3SecretKey)
	if err != nil {
		return nil, nil, err
	}
	return snapshot.NewMinioObjects(c, d.Bucket), c, nil
}

// manifestDigest is the hex SHA-256 of the stored manifest; a missing one is the
// reader's ErrIncomplete.
func manifestDigest(ctx context.Context, objects snapshot.Objects, prefix string) (string, error) {
	r, err := objects.Get(ctx, prefix+snapshot.ManifestName)
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%w: no %s under %s", snapshot.ErrIncomplete, snapshot.ManifestName, prefix)
	}
	if err != nil {
		return "", err
	}
	defer func() { _ = r.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(r, 64<<20)); err != nil {
		return "", fmt.Errorf("reading the manifest: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// targetIndex opens the target store's vector index.
func targetIndex(ctx context.Context, cfg RestoreConfig, sec RestoreSecrets, pool *pgxpool.Pool) (vector.Index, func(), error) {
	spec := vector.Spec{Dimension: cfg.Dimension, Metric: vector.Metric(strings.ToUpper(cfg.Metric))}
	return cfg.Open(ctx, pool, cfg.Schema, spec, sec.Milvus)
}

// targetEmbedder is the target store's embedder, which re-embedding uses.
func targetEmbedder(cfg RestoreConfig, sec RestoreSecrets) (embed.Embedder, error) {
	if cfg.Embedder == "OpenAI" {
		return embed.NewOpenAI(embed.Config{BaseURL: cfg.EmbedderEndpoint, Model: cfg.EmbeddingModel,
			Dimension: cfg.Dimension, APIKey: sec.EmbedderAPIKey, Roles: cfg.EmbedderRoles})
	}
	return embed.NewHashing(cfg.Dimension), nil
}

// loadMapper builds the scope mapping: exact and prefix rules, then the large map
// streamed from its file or object (a bad line fails with its number).
func loadMapper(ctx context.Context, cfg RestoreConfig, c *minio.Client) (*restore.Mapper, error) {
	m, err := restore.NewMapper(restore.UnmappedPolicy(cfg.Unmapped))
	if err != nil {
		return nil, err
	}
	for _, r := range cfg.ScopeMap {
		if err := m.AddExact(r.From, r.To); err != nil {
			return nil, err
		}
	}
	for _, r := range cfg.PrefixMap {
		if err := m.AddPrefix(r.From, r.To); err != nil {
			return nil, err
		}
	}
	var src io.ReadCloser
	switch {
	case cfg.MapFile != "":
		f, err := os.Open(cfg.MapFile)
		if err != nil {
			return nil, fmt.Errorf("scope map: %w", err)
		}
		src = f
	case cfg.MapObject != "":
		bucket := cfg.MapBucket
		if bucket == "" {
			bucket = cfg.Source.Bucket
		}
		r, err := snapshot.NewMinioObjects(c, bucket).Get(ctx, cfg.MapObject)
		if err != nil {
			return nil, fmt.Errorf("scope map %s in bucket %s: %w", cfg.MapObject, bucket, err)
		}
		src = r
	default:
		return m, nil
	}
	defer func() { _ = src.Close() }()
	if _, err := m.Load(src, restore.MapFormat(cfg.MapFormat)); err != nil {
		return nil, err
	}
	return m, nil
}

// detailUpload streams the per-scope detail, zstd-compressed, into an object. The
// detail is a convenience: when it cannot be written (read-only credentials of a
// cross-cluster source, say) the restore goes on and the summary says no detail.
type detailUpload struct {
	pw     *io.PipeWriter
	enc    *zstd.Encoder
	key    string
	done   chan struct{} // closed when the upload ended, with upErr set
	upErr  error
	mu     sync.Mutex
	broken bool
}

func newDetailUpload(ctx context.Context, objects snapshot.Objects, key string) *detailUpload {
	d := &detailUpload{key: key}
	if key == "" {
		return d
	}
	pr, pw := io.Pipe()
	enc, err := zstd.NewWriter(pw, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		d.broken = true
		return d
	}
	d.pw, d.enc, d.done = pw, enc, make(chan struct{})
	go func() {
		defer close(d.done)
		_, d.upErr = objects.Put(ctx, key, pr)
		_ = pr.CloseWithError(d.upErr) // unblocks the writer when the upload gave up
	}()
	return d
}

// Write never fails the restore: a broken upload turns the rest into no-ops.
func (d *detailUpload) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.enc == nil || d.broken {
		return len(p), nil
	}
	if _, err := d.enc.Write(p); err != nil {
		d.broken = true
	}
	return len(p), nil
}

// finish completes the upload (or abandons it when the restore failed) and returns
// the object's key, "" when there is none.
func (d *detailUpload) finish(runErr error) string {
	if d.enc == nil {
		return ""
	}
	if runErr != nil || d.broken {
		_ = d.pw.CloseWithError(errors.New("restore failed; detail abandoned"))
		<-d.done // the upload fails on purpose: no object appears
		return ""
	}
	err := d.enc.Close()
	if cerr := d.pw.Close(); err == nil {
		err = cerr
	}
	<-d.done
	if err == nil {
		err = d.upErr
	}
	if err != nil {
		return ""
	}
	return d.key
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
