package worker

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/snapshot"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
)

// A restore drill restores a package into a scratch copy of its store (an empty schema
// and vector index the operator made for it: provision.EnsureScratch) and checks that
// what came back is what the package holds: its counts against the manifest, every
// checksum, that no forgotten memory came back, and that searches find what exact
// search over the restored vectors finds. It never writes into the store itself: it
// refuses any schema but a scratch copy's, and any scratch copy that is not empty.

// ScratchSchemaPrefix starts the name of every scratch copy's schema (and Milvus
// collection); a store's own names start with "mem_" (provision.Names.Scratch).
const ScratchSchemaPrefix = "drill_"

// Recall sample defaults.
const (
	// DefaultDrillScopes is how many scopes the recall sample searches.
	DefaultDrillScopes = 20
	// DefaultDrillQueries is how many of each sampled scope's memories serve as queries.
	DefaultDrillQueries = 5
	// DefaultDrillMinRecall is the least mean recall@10 accepted from an approximate
	// engine (PGVector's HNSW, Milvus); the exact engine must give the exact top 10.
	DefaultDrillMinRecall = 0.95
	// drillK is the recall sample's top K.
	drillK = 10
	// drillPage is how many IDs of a scope are read and scored at a time.
	drillPage = 1000
	// scoreTolerance lets a hit whose score equals the exact K-th best count as found:
	// among tied memories any may rank K-th.
	scoreTolerance = 1e-4
)

// DrillConfig is everything `memory-operator drill` needs besides its secrets (those
// of a restore): the package and the store's vector and embedder settings as a restore
// takes them, with Schema (and Collection, on Milvus) naming the scratch copy.
type DrillConfig struct {
	RestoreConfig
	// RecallScopes and RecallQueries size the recall sample (0: the defaults);
	// MinRecall is the mean recall@10 an approximate engine must reach.
	RecallScopes, RecallQueries int
	MinRecall                   float64
}

// Args renders the configuration as the worker's arguments; ParseDrillArgs gives it
// back.
func (c DrillConfig) Args() []string {
	args := c.RestoreConfig.Args()
	if c.RecallScopes > 0 {
		args = append(args, fmt.Sprintf("--recall-scopes=%d", c.RecallScopes))
	}
	if c.RecallQueries > 0 {
		args = append(args, fmt.Sprintf("--recall-queries=%d", c.RecallQueries))
	}
	if c.MinRecall > 0 {
		args = append(args, fmt.Sprintf("--min-recall=%g", c.MinRecall))
	}
	return args
}

// ParseDrillArgs parses and checks the drill worker's arguments.
func ParseDrillArgs(args []string, stderr io.Writer) (DrillConfig, error) {
	var c DrillConfig
	fs := flag.NewFlagSet("drill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	finish := registerRestoreFlags(fs, &c.RestoreConfig)
	fs.IntVar(&c.RecallScopes, "recall-scopes", 0, fmt.Sprintf("scopes the recall sample searches (0: %d)", DefaultDrillScopes))
	fs.IntVar(&c.RecallQueries, "recall-queries", 0, fmt.Sprintf("queries per sampled scope (0: %d)", DefaultDrillQueries))
	fs.Float64Var(&c.MinRecall, "min-recall", 0, fmt.Sprintf("mean recall@10 an approximate engine must reach (0: %g)", DefaultDrillMinRecall))
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if err := finish(); err != nil {
		return c, err
	}
	return c, c.check()
}

func (c DrillConfig) check() error {
	if c.Import != nil {
		return errors.New("a drill restores a snapshot package, not an import")
	}
	if !strings.HasPrefix(c.Schema, ScratchSchemaPrefix) {
		return fmt.Errorf("--schema %q is not a scratch copy (%s...): a drill never restores into a store", c.Schema, ScratchSchemaPrefix)
	}
	if c.External() && !strings.HasPrefix(c.Collection, ScratchSchemaPrefix) {
		return fmt.Errorf("--collection %q is not a scratch copy (%s...): a drill never restores into a store", c.Collection, ScratchSchemaPrefix)
	}
	if c.RecallScopes < 0 || c.RecallQueries < 0 || c.MinRecall < 0 || c.MinRecall > 1 {
		return errors.New("--recall-scopes and --recall-queries must be positive, --min-recall between 0 and 1")
	}
	return drillRestore(c.RestoreConfig).checkWith(false)
}

// DrillSummary is what a drill found, as the Job's termination message carries it.
type DrillSummary struct {
	// Passed is true when every check passed.
	Passed bool `json:"passed"`
	// Failures says which checks failed and how (a few, shortened).
	Failures []string `json:"failures,omitempty"`

	PackageID      string    `json:"packageId,omitempty"`
	ManifestSHA256 string    `json:"manifestSHA256,omitempty"`
	CreatedAt      time.Time `json:"createdAt,omitzero"`
	// Shards read whole, each against its checksum.
	Shards int `json:"shards"`
	// Items and Tombstones are the manifest's counts; Memories, ScratchTombstones and
	// Covered the scratch copy's after the restore (Covered: memories a tombstone
	// covers, which must be none).
	Items             int64 `json:"items"`
	Tombstones        int64 `json:"tombstones"`
	Memories          int64 `json:"memories"`
	ScratchTombstones int64 `json:"scratchTombstones"`
	Covered           int64 `json:"covered"`
	Vectors           int64 `json:"vectors"`

	Recall DrillRecall `json:"recall"`
	// Duration is the whole drill's, restore included.
	Duration string `json:"duration"`
}

// DrillRecall is the recall sample's result: searches of the scratch copy's index,
// with sampled memories' own vectors as queries, against exact search over every
// restored vector of their scopes.
type DrillRecall struct {
	Scopes  int `json:"scopes"`
	Queries int `json:"queries"`
	// Mean and Min are the recall@10 of the searches.
	Mean float64 `json:"mean"`
	Min  float64 `json:"min"`
	// Exact says the engine searches exactly (then every search must find the exact
	// top 10); Threshold is the mean an approximate engine must reach.
	Exact     bool    `json:"exact"`
	Threshold float64 `json:"threshold"`
	// Missing counts sampled live memories with no vector in the index.
	Missing int64 `json:"missing,omitempty"`
}

// maxDrillFailures and maxFailureBytes keep the summary inside a termination message.
const (
	maxDrillFailures = 5
	maxFailureBytes  = 300
)

func (s *DrillSummary) fail(format string, args ...any) {
	if len(s.Failures) < maxDrillFailures {
		s.Failures = append(s.Failures, truncateUTF8(fmt.Sprintf(format, args...), maxFailureBytes))
	}
	s.Passed = false
}

// TerminationMessage is the summary as JSON, as the controller reads it.
func (s DrillSummary) TerminationMessage() ([]byte, error) { return json.Marshal(s) }

// ParseDrillSummary reads a drill's termination message into sum.
func ParseDrillSummary(msg string, sum *DrillSummary) error {
	if err := json.Unmarshal([]byte(msg), sum); err != nil {
		return fmt.Errorf("drill summary: %w", err)
	}
	if sum.Duration == "" {
		return errors.New("drill summary: not a drill's summary")
	}
	return nil
}

// ErrDrillFailed is returned when the drill ran and a check failed.
var ErrDrillFailed = errors.New("restore drill failed")

// RunDrill restores cfg's package into the scratch copy cfg names and checks it. It
// returns ErrDrillFailed (wrapped) with a summary saying which checks failed; any
// other error means the drill could not run to its end (the summary says how far it
// got). The scratch copy is left for its owner to drop.
func RunDrill(ctx context.Context, cfg DrillConfig, sec RestoreSecrets, ro RunOptions) (DrillSummary, error) {
	start := time.Now()
	sum := DrillSummary{Passed: true}
	finish := func(err error) (DrillSummary, error) {
		sum.Duration = time.Since(start).Round(time.Millisecond).String()
		if err != nil {
			sum.fail("%v", err)
			return sum, err
		}
		if !sum.Passed {
			return sum, fmt.Errorf("%w: %s", ErrDrillFailed, strings.Join(sum.Failures, "; "))
		}
		return sum, nil
	}
	if err := cfg.check(); err != nil {
		return finish(err)
	}
	manifest, err := drillManifest(ctx, cfg.RestoreConfig, sec)
	if err != nil {
		return finish(err)
	}
	sum.PackageID, sum.CreatedAt = manifest.PackageID, manifest.CreatedAt
	sum.Items, sum.Tombstones = manifest.Counts.Items, manifest.Tombstones.Count

	pool, scratch, err := openStore(ctx, sec.PostgresURI, cfg.Schema, cfg.Vectors)
	if err != nil {
		return finish(fmt.Errorf("scratch copy: %w", err))
	}
	defer pool.Close()
	if before, err := scratch.Census(ctx); err != nil {
		return finish(fmt.Errorf("scratch copy: %w", err))
	} else if before.Memories > 0 || before.Tombstones > 0 {
		return finish(fmt.Errorf("scratch copy %s is not empty (%d memories, %d tombstones): a drill restores into an empty one",
			cfg.Schema, before.Memories, before.Tombstones))
	}

	rsum, err := RunRestore(ctx, drillRestore(cfg.RestoreConfig), sec, ro)
	sum.ManifestSHA256, sum.Shards, sum.Vectors = rsum.ManifestSHA256, rsum.Shards, rsum.Vectors
	if err != nil {
		return finish(fmt.Errorf("restore: %w", err))
	}
	if sum.Shards != len(manifest.Shards) {
		sum.fail("read %d of the package's %d shards", sum.Shards, len(manifest.Shards))
	}
	after, err := scratch.Census(ctx)
	if err != nil {
		return finish(fmt.Errorf("scratch copy: %w", err))
	}
	sum.Memories, sum.ScratchTombstones, sum.Covered = after.Memories, after.Tombstones, after.Covered
	if after.Memories != manifest.Counts.Items {
		sum.fail("the scratch copy holds %d memories, the manifest says %d (%s)", after.Memories, manifest.Counts.Items, skippedText(rsum.Skipped))
	}
	if after.Tombstones != manifest.Tombstones.Count {
		sum.fail("the scratch copy holds %d tombstones, the manifest says %d", after.Tombstones, manifest.Tombstones.Count)
	}
	if after.Covered > 0 {
		sum.fail("%d memories a tombstone covers came back: forgotten memories must stay forgotten", after.Covered)
	}

	index, closeIndex, err := targetIndex(ctx, cfg.RestoreConfig, sec, pool)
	if err != nil {
		return finish(fmt.Errorf("scratch copy: %w", err))
	}
	defer closeIndex()
	sum.Recall, err = sampleRecall(ctx, scratch, index, cfg, &sum)
	if err != nil {
		return finish(fmt.Errorf("recall sample: %w", err))
	}
	return finish(nil)
}

// drillRestore is the restore a drill runs: the package whole, as it is, into the
// scratch copy, writing nothing anywhere else (no detail object beside the package,
// no sessions into the store's short-term tier, no record of the restore).
func drillRestore(c RestoreConfig) RestoreConfig {
	c.DetailKey = ""
	c.SkipSessions = true
	c.DryRun, c.Rehydrate, c.AllowMerge, c.IntoExisting = false, false, false, false
	c.AllowRepeat = true
	c.RestoreUID = ""
	c.ScopeMap, c.PrefixMap, c.MapFile, c.MapObject, c.MapBucket, c.MapFormat = nil, nil, "", "", "", ""
	c.Unmapped, c.ConflictPolicy, c.Embeddings = "Keep", "KeepNewer", "Reuse"
	c.Denylist, c.Types = nil, nil
	return c
}

// drillManifest reads the package's manifest (verified against the expected digest
// when there is one); the restore then reads the package whole.
func drillManifest(ctx context.Context, cfg RestoreConfig, sec RestoreSecrets) (*snapshot.Manifest, error) {
	objects, client, err := openSource(ctx, cfg.Source, sec)
	if err != nil {
		return nil, err
	}
	pkg, err := openPackage(ctx, cfg, sec, objects, client)
	if err != nil {
		return nil, err
	}
	defer pkg.cleanup()
	return pkg.reader.Manifest(), nil
}

func skippedText(s SkippedCount) string {
	b, _ := json.Marshal(s)
	return "skipped " + string(b)
}

// sampleRecall searches the index of the scratch copy with sampled memories' own
// vectors and compares each answer with the exact top drillK over every live memory
// of the query's scope, read back from the index a page at a time (so a scope of
// any size is scored in bounded memory).
func sampleRecall(ctx context.Context, store *pgstore.Store, index vector.Index, cfg DrillConfig, sum *DrillSummary) (DrillRecall, error) {
	r := DrillRecall{Exact: !cfg.External() && cfg.VectorEngine != engine.PGVector, Threshold: cfg.MinRecall, Min: 1}
	if r.Threshold == 0 {
		r.Threshold = DefaultDrillMinRecall
	}
	nScopes, nQueries := orDefault(cfg.RecallScopes, DefaultDrillScopes), orDefault(cfg.RecallQueries, DefaultDrillQueries)
	fetcher, ok := index.(engine.Fetcher)
	if !ok {
		return r, fmt.Errorf("the %s engine cannot read its vectors back", cfg.VectorEngine)
	}
	spec := index.Spec()
	scopes, err := store.SampleScopes(ctx, nScopes)
	if err != nil {
		return r, err
	}
	var total float64
	for _, scope := range scopes {
		recalls, err := scopeRecall(ctx, store, index, fetcher, spec, scope, nQueries, &r, sum)
		if err != nil {
			return r, err
		}
		r.Scopes++
		for _, rc := range recalls {
			r.Queries++
			total += rc
			r.Min = min(r.Min, rc)
			if r.Exact && rc < 1 {
				sum.fail("scope %q: a search found %.2f of the exact top %d on an exact engine", scope, rc, drillK)
			}
		}
	}
	if r.Queries == 0 {
		r.Min = 0
		if sum.Items > 0 {
			sum.fail("no live memory to search: the recall sample is empty")
		}
		return r, nil
	}
	r.Mean = total / float64(r.Queries)
	if r.Mean < r.Threshold {
		sum.fail("recall@%d of the sample is %.3f, below %.2f (%d searches over %d scopes)", drillK, r.Mean, r.Threshold, r.Queries, r.Scopes)
	}
	return r, nil
}

// scopeRecall is the recall@drillK of each of up to n searches of scope.
func scopeRecall(ctx context.Context, store *pgstore.Store, index vector.Index, fetcher engine.Fetcher, spec vector.Spec,
	scope string, n int, r *DrillRecall, sum *DrillSummary) ([]float64, error) {
	qids, err := store.SampleMemories(ctx, scope, n)
	if err != nil {
		return nil, err
	}
	qvecs, err := fetcher.Fetch(ctx, qids)
	if err != nil {
		return nil, err
	}
	var queries [][]float32
	for _, id := range qids {
		if v, ok := qvecs[id]; ok {
			queries = append(queries, vector.Prepare(spec.Metric, v))
		}
	}
	exact := make([]topK, len(queries))
	for after := ""; ; {
		ids, err := store.LiveIDs(ctx, scope, after, drillPage)
		if err != nil {
			return nil, err
		}
		if len(ids) == 0 {
			break
		}
		after = ids[len(ids)-1]
		vecs, err := fetcher.Fetch(ctx, ids)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			v, ok := vecs[id]
			if !ok {
				if r.Missing == 0 {
					sum.fail("memory %q of scope %q has no vector in the index", id, scope)
				}
				r.Missing++
				continue
			}
			v = vector.Prepare(spec.Metric, v)
			for qi, q := range queries {
				exact[qi].offer(vector.Hit{ID: id, Score: vector.Score(spec.Metric, v, q)})
			}
		}
	}
	out := make([]float64, len(queries))
	for qi, q := range queries {
		hits, err := index.Search(ctx, vector.Query{Scope: scope, Vector: q, K: drillK})
		if err != nil {
			return nil, err
		}
		out[qi] = exact[qi].recall(hits)
	}
	return out, nil
}

// topK keeps the drillK best hits offered, best first (ties by ID).
type topK struct{ hits []vector.Hit }

func (t *topK) offer(h vector.Hit) {
	better := func(a, b vector.Hit) bool { return a.Score > b.Score || (a.Score == b.Score && a.ID < b.ID) }
	if len(t.hits) == drillK && !better(h, t.hits[drillK-1]) {
		return
	}
	i, _ := slices.BinarySearchFunc(t.hits, h, func(a, b vector.Hit) int {
		if better(a, b) {
			return -1
		}
		return 1
	})
	t.hits = slices.Insert(t.hits, i, h)
	if len(t.hits) > drillK {
		t.hits = t.hits[:drillK]
	}
}

// recall is the share of the exact top K that hits found: a hit counts when it is
// one of them, or scores as the K-th does (a tie the engine broke otherwise).
func (t *topK) recall(hits []vector.Hit) float64 {
	if len(t.hits) == 0 {
		return 1
	}
	want := make(map[string]bool, len(t.hits))
	for _, h := range t.hits {
		want[h.ID] = true
	}
	kth := t.hits[len(t.hits)-1].Score
	found := 0
	for _, h := range hits {
		if want[h.ID] || h.Score >= kth-scoreTolerance {
			found++
		}
	}
	return min(1, float64(found)/float64(len(t.hits)))
}

func orDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}
