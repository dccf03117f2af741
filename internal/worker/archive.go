package worker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/snapshot"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
)

// DefaultArchiveBatch is how many vector IDs one index delete carries when
// ArchiveConfig.BatchSize is 0.
const DefaultArchiveBatch = 1000

// RunArchive runs one archival of the store, the steps of ArchiveConfig in order. Every
// step is set-based in PostgreSQL and safe to interrupt: vector deletions are recorded
// with the change that owes them and done afterwards in batches (see pgstore's
// archival), so a run that fails midway (Milvus down after PostgreSQL marked rows)
// leaves them recorded, and the next run finishes them first (Recovered). Archived
// memories are invisible to recall and search from the moment they are marked.
//
// The index is contacted only when there is something to delete or to copy.
func RunArchive(ctx context.Context, cfg ArchiveConfig, sec Secrets, ro RunOptions) (ArchiveSummary, error) {
	if err := cfg.check(); err != nil {
		return ArchiveSummary{}, err
	}
	now := cfg.Now
	if now.IsZero() {
		now = ro.Now
	}
	if now.IsZero() {
		now = time.Now()
	}
	now = now.UTC().Truncate(time.Microsecond)
	a := &archiveRun{cfg: cfg, sec: sec, ro: ro, now: now, sum: ArchiveSummary{Now: now, DryRun: cfg.DryRun}}
	if a.cfg.BatchSize == 0 {
		a.cfg.BatchSize = DefaultArchiveBatch
	}
	if cfg.Cold != nil && !cfg.Unencrypted {
		k, err := parseKey(sec.EncryptionKey, EnvEncryptionKey)
		if err != nil {
			return ArchiveSummary{}, err
		}
		a.key = k
	}
	pool, store, err := openStore(ctx, sec.PostgresURI, cfg.Schema, cfg.Vectors)
	if err != nil {
		return ArchiveSummary{}, err
	}
	defer pool.Close()
	a.store = store
	a.index = &archiveIndex{cfg: cfg, login: sec.Milvus, pool: pool}
	defer a.index.close()

	// Deletions recorded before this moment (by the database's clock) were left by an
	// interrupted earlier run.
	if a.since, err = a.store.ServerTime(ctx); err != nil {
		return ArchiveSummary{}, err
	}
	for _, step := range []struct {
		name string
		run  func(context.Context) error
	}{
		{"finishing pending vector deletions", a.recover},
		{"marking", a.mark},
		{"writing the cold package", a.cold},
		{"deleting vectors", a.deleteVectors},
		{"purging expired memories", a.purge},
		{"deleting archived memories", a.deleteArchived},
	} {
		if err := step.run(ctx); err != nil {
			return ArchiveSummary{}, fmt.Errorf("archiving %s: %s: %w", cfg.Schema, step.name, err)
		}
	}
	return a.sum, nil
}

// archiveRun is the state of one RunArchive.
type archiveRun struct {
	cfg   ArchiveConfig
	sec   Secrets
	ro    RunOptions
	key   *snapshot.Key
	now   time.Time
	since time.Time
	store *pgstore.Store
	index *archiveIndex
	sum   ArchiveSummary
}

func (a *archiveRun) progress(format string, args ...any) {
	if a.ro.Progress != nil {
		fmt.Fprintf(a.ro.Progress, format+"\n", args...)
	}
}

// actor names the run in audit records.
func (a *archiveRun) actor() string {
	if a.cfg.RunName == "" {
		return "memory-operator archive"
	}
	return "memory-operator archive " + a.cfg.RunName
}

// recover is step 1: finish the vector deletions an interrupted run recorded. With a
// cold package configured, deletions of memories still waiting for their cold copy
// wait for step 4, so that the copy can take their vectors from the index.
func (a *archiveRun) recover(ctx context.Context) error {
	if a.cfg.DryRun {
		n, err := a.store.PendingIndexDeletions(ctx)
		a.sum.Recovered, a.sum.VectorsDeleted = n, n
		return err
	}
	return a.processDeletions(ctx, a.cfg.Cold != nil)
}

// processDeletions works off the recorded vector deletions, counting them.
func (a *archiveRun) processDeletions(ctx context.Context, holdForCold bool) error {
	res, err := a.store.ProcessIndexDeletions(ctx, pgstore.DeletionOptions{
		BatchSize: a.cfg.BatchSize, HoldForCold: holdForCold, RecordedBefore: a.since,
	}, a.index.delete)
	a.sum.VectorsDeleted += res.Deleted
	a.sum.Recovered += res.Recovered
	if res.Deleted > 0 {
		a.progress("deleted %d vectors (%d left by an earlier run)", res.Deleted, res.Recovered)
	}
	return err
}

// mark is step 2.
func (a *archiveRun) mark(ctx context.Context) error {
	res, err := a.store.MarkArchived(ctx, a.now, a.cfg.Threshold, a.cfg.HalfLives, a.cfg.DryRun)
	if err != nil {
		return err
	}
	a.sum.Scanned, a.sum.Archived = res.Scanned, res.Archived
	for t, n := range res.ByType {
		if a.sum.ArchivedByType == nil {
			a.sum.ArchivedByType = map[string]int64{}
		}
		a.sum.ArchivedByType[string(t)] = n
	}
	a.progress("scanned %d memories, archived %d", res.Scanned, res.Archived)
	return nil
}

// cold is step 3: the memories of every run without a cold copy (this one included)
// go into one v1 package at Cold.Prefix, vectors included, and the copy is recorded
// once the manifest is written.
func (a *archiveRun) cold(ctx context.Context) error {
	if a.cfg.Cold == nil {
		return nil
	}
	if a.cfg.DryRun {
		runs, err := a.store.ArchiveRuns(ctx)
		if err != nil {
			return err
		}
		a.sum.ColdItems = a.sum.Archived
		for _, r := range runs {
			if r.ColdWrittenAt == nil {
				a.sum.ColdItems += r.StillArchived
			}
		}
		return nil
	}
	prefix := a.cfg.Cold.Prefix
	runs, err := a.store.PrepareColdCopy(ctx, prefix)
	if err != nil || len(runs) == 0 {
		return err
	}
	objects, err := openDestination(ctx, *a.cfg.Cold, a.sec)
	if err != nil {
		return err
	}
	// Whatever is at the prefix is an earlier attempt of this run: incomplete, or
	// complete but no longer recorded (PrepareColdCopy just un-recorded it). Replace it.
	if names, err := objects.List(ctx, prefix); err != nil {
		return err
	} else if len(names) > 0 {
		if err := objects.Delete(ctx, prefix); err != nil {
			return fmt.Errorf("replacing the earlier attempt at %s: %w", prefix, err)
		}
	}
	m, err := a.writeCold(ctx, objects, runs)
	if err != nil {
		return err
	}
	if err := a.store.RecordColdCopy(ctx, prefix, runs, m.Counts.Items); err != nil {
		return err
	}
	a.sum.ColdPackage, a.sum.ColdItems = prefix, m.Counts.Items
	a.progress("wrote the cold package %s: %d memories of %d archival runs", prefix, m.Counts.Items, len(runs))
	return nil
}

func (a *archiveRun) writeCold(ctx context.Context, objects snapshot.Objects, runs []time.Time) (*snapshot.Manifest, error) {
	opts := snapshot.WriterOptions{
		Prefix: a.cfg.Cold.Prefix, Key: a.key, Unencrypted: a.cfg.Unencrypted, ReplaceIncomplete: true,
		Producer: Producer, ProducerVersion: a.ro.Version,
		Source: snapshot.SourceInfo{
			Namespace: a.cfg.StoreNamespace, Name: a.cfg.StoreName, Tenant: a.cfg.Tenant,
			Store: a.cfg.Schema, VectorEngine: a.cfg.VectorEngine,
		},
		Selection: snapshot.Selection{IncludeEmbeddings: true},
		Embedding: &snapshot.EmbeddingInfo{Model: a.cfg.EmbeddingModel, Dimension: a.cfg.Dimension, Metric: strings.ToLower(a.cfg.Metric),
			Roles: snapshot.EmbeddingRolesOf(a.cfg.EmbedderRoles)},
		Now: func() time.Time { return a.now },
	}
	fetcher, err := a.index.fetcher(ctx)
	if err != nil {
		return nil, err
	}
	// The store's tombstones travel along, read with the memories in one snapshot, so
	// that restoring the cold package anywhere honours them.
	filter := pgstore.ExportFilter{ArchivedAt: runs, IncludeEmbeddings: a.cfg.InSchema()}
	return writeCut(ctx, a.store, objects, opts, filter, fetcher, nil, time.Time{}, nil)
}

// deleteVectors is step 4: every recorded deletion, this run's included.
func (a *archiveRun) deleteVectors(ctx context.Context) error {
	if a.cfg.DryRun {
		a.sum.VectorsDeleted += a.sum.Archived
		return nil
	}
	return a.processDeletions(ctx, false)
}

// purge is step 5: expired memories go, their vectors through the deletions table.
func (a *archiveRun) purge(ctx context.Context) error {
	n, err := a.store.PurgeExpired(ctx, a.now, a.actor(), a.cfg.DryRun)
	if err != nil {
		return err
	}
	a.sum.ExpiredPurged = n
	if n > 0 {
		a.progress("purged %d expired memories", n)
	}
	if a.cfg.DryRun {
		a.sum.VectorsDeleted += n
		return nil
	}
	return a.processDeletions(ctx, false)
}

// deleteArchived is step 6.
func (a *archiveRun) deleteArchived(ctx context.Context) error {
	if a.cfg.DeleteAfter <= 0 {
		return nil
	}
	n, err := a.store.DeleteArchived(ctx, a.now.Add(-a.cfg.DeleteAfter), a.actor(), a.cfg.DryRun)
	a.sum.Deleted = n
	if n > 0 {
		a.progress("deleted %d archived memories with a cold copy", n)
	}
	return err
}

// archiveIndex opens the store's vector index on first use.
type archiveIndex struct {
	cfg     ArchiveConfig
	login   engine.Login
	pool    *pgxpool.Pool
	ix      vector.Index
	closeIx func()
}

func (x *archiveIndex) open(ctx context.Context) (vector.Index, error) {
	if x.ix != nil {
		return x.ix, nil
	}
	spec := vector.Spec{Dimension: x.cfg.Dimension, Metric: vector.Metric(strings.ToUpper(x.cfg.Metric))}
	ix, closeIx, err := x.cfg.Open(ctx, x.pool, x.cfg.Schema, spec, x.login)
	if err != nil {
		return nil, err
	}
	x.ix, x.closeIx = ix, closeIx
	return ix, nil
}

// fetcher is the index as a reader of stored vectors, for an engine whose vectors are
// not exported with the rows (nil for one whose are).
func (x *archiveIndex) fetcher(ctx context.Context) (engine.Fetcher, error) {
	if x.cfg.InSchema() {
		return nil, nil
	}
	ix, err := x.open(ctx)
	if err != nil {
		return nil, err
	}
	f, ok := ix.(engine.Fetcher)
	if !ok {
		return nil, fmt.Errorf("the %s engine cannot read its vectors back", x.cfg.VectorEngine)
	}
	return f, nil
}

// delete removes vectors by memory ID. An ID the index could never have held (longer or
// with more characters than vector.ValidateID allows; memory IDs may be) needs no
// delete, and must not fail the batch it is in.
func (x *archiveIndex) delete(ctx context.Context, ids []string) error {
	valid := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return vector.ValidateID(id) != nil })
	if len(valid) == 0 {
		return nil
	}
	ix, err := x.open(ctx)
	if err != nil {
		return err
	}
	return ix.Delete(ctx, valid)
}

func (x *archiveIndex) close() {
	if x.closeIx != nil {
		x.closeIx()
	}
}

// parseKey parses a package key from the named environment variable's value.
func parseKey(value, env string) (*snapshot.Key, error) {
	if value == "" {
		return nil, fmt.Errorf("no encryption key: set %s (or pass --unencrypted to write plaintext)", env)
	}
	k, err := snapshot.ParseKey([]byte(value))
	if err != nil {
		return nil, fmt.Errorf("encryption key from %s: %w", env, err)
	}
	return &k, nil
}
