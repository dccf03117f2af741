package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/shortterm"
	"github.com/amemory/memory-operator/internal/snapshot"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
)

// Secrets holds what a worker reads from its environment (filled from Secrets).
type Secrets struct {
	PostgresURI   string
	S3AccessKey   string
	S3SecretKey   string
	EncryptionKey string
	// Milvus is the store's own Milvus user (engine.EnvMilvusUsername/Password).
	Milvus engine.Login
	// RedisPassword is the store's Redis user's (EnvRedisPassword).
	RedisPassword string
}

// SecretsFromEnv reads the worker's secrets from the process environment.
func SecretsFromEnv() Secrets { return SecretsFrom(os.Getenv) }

// SecretsFrom reads the snapshot and archive workers' secrets through getenv.
func SecretsFrom(getenv func(string) string) Secrets {
	return Secrets{
		PostgresURI:   getenv(EnvPostgresURI),
		S3AccessKey:   getenv(EnvS3AccessKey),
		S3SecretKey:   getenv(EnvS3SecretKey),
		EncryptionKey: getenv(EnvEncryptionKey),
		Milvus:        engine.Login{Username: getenv(engine.EnvMilvusUsername), Password: getenv(engine.EnvMilvusPassword)},
		RedisPassword: getenv(EnvRedisPassword),
	}
}

// Producer names this program in package manifests.
const Producer = "memory-operator"

// milvusFetchBatch is how many items wait for their vectors from Milvus at a time.
const milvusFetchBatch = 1000

// RunOptions are the worker's runtime facts: who it is, what time the export is "as
// of", and where progress lines go.
type RunOptions struct {
	Version string
	Now     time.Time
	// Progress receives a line every ProgressEvery items (nil: no progress).
	Progress io.Writer
}

// ProgressEvery is how often (in items) a worker reports progress.
const ProgressEvery = 100_000

// RunSnapshot exports the store's selected memories, with its tombstones, as a package
// at the destination. Both are read from one snapshot of the database (pgstore.Cut),
// whose time is the manifest's createdAt. The manifest is written last: on any failure
// the partial package is removed (best effort) and, whatever happens, never looks
// complete.
func RunSnapshot(ctx context.Context, cfg SnapshotConfig, sec Secrets, ro RunOptions) (*snapshot.Manifest, error) {
	now := ro.Now
	key, err := packageKey(cfg, sec)
	if err != nil {
		return nil, err
	}
	// A snapshot also reads a store whose schema an operator upgrade has yet to
	// migrate: the one it takes before migrating.
	pool, store, version, err := openStoreFrom(ctx, sec.PostgresURI, cfg.Schema, cfg.Vectors, pgstore.ExportableFrom)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if version < pgstore.LatestVersion {
		if store, err = store.ReadingVersion(version); err != nil {
			return nil, err
		}
	}

	objects, err := openDestination(ctx, cfg.Destination, sec)
	if err != nil {
		return nil, err
	}

	filter, err := exportFilter(cfg, now)
	if err != nil {
		return nil, err
	}
	var fetcher engine.Fetcher
	opts := snapshot.WriterOptions{
		Prefix:      cfg.Destination.Prefix,
		Key:         key,
		Unencrypted: cfg.Unencrypted,
		// A Job retried after a crash finds the first attempt's shards: replace them
		// (a prefix with a manifest, a complete package, is never touched).
		ReplaceIncomplete: true,
		CompressionLevel:  cfg.CompressionLevel,
		ShardTargetBytes:  cfg.ShardTargetBytes,
		Producer:          Producer,
		ProducerVersion:   ro.Version,
		Source: snapshot.SourceInfo{
			Namespace: cfg.StoreNamespace, Name: cfg.StoreName, Tenant: cfg.Tenant,
			Store: cfg.Schema, VectorEngine: cfg.VectorEngine,
		},
		Selection: snapshot.Selection{
			Scopes: filter.Scopes, ScopePrefixes: filter.ScopePrefixes, Types: filter.Types,
			IncludeEmbeddings: cfg.IncludeEmbeddings, ExcludeExpiredAt: &now,
		},
		Now: func() time.Time { return now },
	}
	if cfg.ActiveWithin > 0 {
		since := now.Add(-cfg.ActiveWithin)
		opts.Selection.ActiveSince = &since
	}
	if cfg.IncludeEmbeddings {
		opts.Embedding = &snapshot.EmbeddingInfo{Model: cfg.EmbeddingModel, Dimension: cfg.Dimension, Metric: strings.ToLower(cfg.Metric),
			Roles: snapshot.EmbeddingRolesOf(cfg.EmbedderRoles)}
		if !cfg.InSchema() {
			spec := vector.Spec{Dimension: cfg.Dimension, Metric: vector.Metric(strings.ToUpper(cfg.Metric))}
			ix, closeIndex, err := cfg.Open(ctx, pool, cfg.Schema, spec, sec.Milvus)
			if err != nil {
				return nil, err
			}
			defer closeIndex()
			if fetcher, _ = ix.(engine.Fetcher); fetcher == nil {
				return nil, fmt.Errorf("the %s engine cannot read its vectors back", cfg.VectorEngine)
			}
		}
	}
	var sessions shortterm.Store
	// A store on PostgreSQL sessions before their table existed had none.
	if cfg.IncludeSessions && (cfg.Sessions.RedisAddress != "" || store.HasSessions()) {
		st, closeSessions, err := cfg.Sessions.open(ctx, store, sec.RedisPassword)
		if err != nil {
			return nil, err
		}
		defer closeSessions()
		sessions = st
	}
	m, err := writeCut(ctx, store, objects, opts, filter, fetcher, sessions, now, func(n int64) {
		if ro.Progress != nil && n%ProgressEvery == 0 {
			fmt.Fprintf(ro.Progress, "exported %d memories\n", n)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("exporting %s: %w", cfg.Schema, err)
	}
	return m, nil
}

// writeCut writes a package from one cut of the store: all its tombstones and the
// memories filter selects, read in one database snapshot whose time becomes the
// manifest's createdAt, with their vectors fetched from the index when fetcher is set.
// progress, when set, is called with the running count of memories. On failure
// whatever was uploaded is removed.
func writeCut(ctx context.Context, store *pgstore.Store, objects snapshot.Objects, opts snapshot.WriterOptions,
	filter pgstore.ExportFilter, fetcher engine.Fetcher, sessions shortterm.Store, now time.Time, progress func(n int64)) (*snapshot.Manifest, error) {
	var m *snapshot.Manifest
	err := store.ReadCut(ctx, func(ctx context.Context, cut *pgstore.Cut) error {
		opts.CreatedAt = cut.Time
		w, err := snapshot.NewWriter(ctx, objects, opts)
		if err != nil {
			return err
		}
		add := w.Add
		var flush func(context.Context) error
		if fetcher != nil {
			add, flush = withFetchedVectors(fetcher, w.Add)
		}
		var n int64
		err = cut.EachTombstone(ctx, w.AddTombstone)
		if err == nil {
			err = cut.Export(ctx, filter, func(it memory.Item) error {
				if n++; progress != nil {
					progress(n)
				}
				return add(ctx, it)
			})
		}
		if err == nil && flush != nil {
			err = flush(ctx)
		}
		if err == nil && sessions != nil {
			// The sessions live now, as the short-term tier holds them (not part of
			// the database snapshot: Redis has none, and they change by the second).
			err = sessions.Export(ctx, now, func(s shortterm.Session) error { return w.AddSession(packageSession(s)) })
		}
		if err == nil {
			m, err = w.Close(ctx)
		}
		if err != nil {
			abort(ctx, w)
		}
		return err
	})
	return m, err
}

// requiredSchemaVersion is the store schema version the workers need: pgstore's
// latest, which the operator (the same binary) migrates every store to when it
// reconciles it, before it runs any Job for it.
const requiredSchemaVersion = pgstore.LatestVersion

// openStore connects to the store's PostgreSQL and checks its schema version. The
// store reads and writes in-schema vectors where vectors says (the Postgres engine's
// serving index generation).
func openStore(ctx context.Context, uri, schema string, vectors engine.Vectors) (*pgxpool.Pool, *pgstore.Store, error) {
	pool, store, _, err := openStoreFrom(ctx, uri, schema, vectors, requiredSchemaVersion)
	return pool, store, err
}

// openStoreFrom is openStore for a worker that reads schema versions from oldest
// up; it also returns the version.
func openStoreFrom(ctx context.Context, uri, schema string, vectors engine.Vectors, oldest int) (*pgxpool.Pool, *pgstore.Store, int, error) {
	if uri == "" {
		return nil, nil, 0, fmt.Errorf("no PostgreSQL connection: set %s", EnvPostgresURI)
	}
	cfg, err := pgxpool.ParseConfig(uri) // its errors leave the password out
	if err != nil {
		return nil, nil, 0, fmt.Errorf("PostgreSQL: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("PostgreSQL: %w", err)
	}
	v, err := pgstore.Version(ctx, pool, schema)
	switch {
	case err != nil:
		err = fmt.Errorf("PostgreSQL: reading the schema version of %s: %w", schema, err)
	case v < oldest:
		err = fmt.Errorf("store schema %s is at version %d; this worker needs version %d (the operator migrates a store when it reconciles it)",
			schema, v, oldest)
	}
	if err != nil {
		pool.Close()
		return nil, nil, 0, err
	}
	return pool, pgstore.New(pool, schema).WithVectorsTable(vectors.Table()), v, nil
}

// abort removes what a failed run uploaded. Best effort: without a manifest the
// leftovers are an incomplete package that no reader accepts, and a retry replaces them.
func abort(ctx context.Context, w *snapshot.Writer) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	_ = w.Abort(ctx)
}

// packageKey parses the encryption key; nil (and no error) only for --unencrypted.
func packageKey(cfg SnapshotConfig, sec Secrets) (*snapshot.Key, error) {
	if cfg.Unencrypted {
		return nil, nil
	}
	return parseKey(sec.EncryptionKey, EnvEncryptionKey)
}

// exportFilter turns the selection into a store filter: scopes ending in '*' are
// prefixes; expired items are left out, archived ones kept (archival never loses data).
func exportFilter(cfg SnapshotConfig, now time.Time) (pgstore.ExportFilter, error) {
	f := pgstore.ExportFilter{
		Now: now, ExcludeExpired: true, IncludeArchived: true,
		IncludeEmbeddings: cfg.IncludeEmbeddings && cfg.InSchema(),
	}
	for _, s := range cfg.Scopes {
		s = memory.NormalizeScope(s) // stored scopes are NFC
		if p, ok := strings.CutSuffix(s, "*"); ok {
			f.ScopePrefixes = append(f.ScopePrefixes, p)
		} else {
			f.Scopes = append(f.Scopes, s)
		}
	}
	for _, t := range cfg.Types {
		mt, err := memory.ParseType(t)
		if err != nil {
			return f, err
		}
		f.Types = append(f.Types, mt)
	}
	if cfg.ActiveWithin > 0 {
		f.ActiveSince = now.Add(-cfg.ActiveWithin)
	}
	return f, nil
}

// milvusFetchBytes bounds the size of the items waiting for their vectors.
const milvusFetchBytes = 8 << 20

// withMilvusVectors wraps add so that items are held in batches (of milvusFetchBatch
// items or milvusFetchBytes of content) whose vectors are fetched from Milvus in one
// request each; flush sends the last batch.
func withFetchedVectors(ix engine.Fetcher, add func(context.Context, memory.Item) error) (
	func(context.Context, memory.Item) error, func(context.Context) error) {
	batch := make([]memory.Item, 0, milvusFetchBatch)
	var bytes int
	flush := func(ctx context.Context) error {
		bytes = 0
		if len(batch) == 0 {
			return nil
		}
		ids := make([]string, len(batch))
		for i, it := range batch {
			ids[i] = it.MemoryID
		}
		vecs, err := ix.Fetch(ctx, ids)
		if err != nil {
			return err
		}
		for _, it := range batch {
			it.Embedding = vecs[it.MemoryID]
			if err := add(ctx, it); err != nil {
				return err
			}
		}
		batch = batch[:0]
		return nil
	}
	return func(ctx context.Context, it memory.Item) error {
		batch = append(batch, it)
		bytes += len(it.Content)
		for _, h := range it.History {
			bytes += len(h.Content)
		}
		if len(batch) == milvusFetchBatch || bytes >= milvusFetchBytes {
			return flush(ctx)
		}
		return nil
	}, flush
}

// openDestination connects to the S3 endpoint and checks the bucket is there.
func openDestination(ctx context.Context, d Destination, sec Secrets) (snapshot.Objects, error) {
	c, err := openBucket(ctx, d, sec.S3AccessKey, sec.S3SecretKey, EnvS3AccessKey, EnvS3SecretKey)
	if err != nil {
		return nil, err
	}
	return snapshot.NewMinioObjects(c, d.Bucket), nil
}

// openBucket connects to an S3 endpoint with the given keys (read from the named
// environment variables, for the error message) and checks the bucket exists.
func openBucket(ctx context.Context, d Destination, accessKey, secretKey, accessEnv, secretEnv string) (*minio.Client, error) {
	if accessKey == "" || secretKey == "" {
		return nil, fmt.Errorf("no object-storage credentials: set %s and %s", accessEnv, secretEnv)
	}
	c, err := minio.New(d.Endpoint, &minio.Options{
		Creds: credentials.NewStaticV4(accessKey, secretKey, ""), Secure: !d.Insecure, Region: d.Region,
	})
	if err != nil {
		return nil, fmt.Errorf("object storage %s: %w", d.Endpoint, err)
	}
	ok, err := c.BucketExists(ctx, d.Bucket)
	if err != nil {
		return nil, fmt.Errorf("object storage %s: bucket %s: %w", d.Endpoint, d.Bucket, err)
	}
	if !ok {
		return nil, errors.New("object storage " + d.Endpoint + ": bucket " + d.Bucket + " does not exist")
	}
	return c, nil
}
