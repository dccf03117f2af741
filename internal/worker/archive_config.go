package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/vector/engine"
)

// The archive worker reads EnvPostgresURI (the store's connection Secret), and, when it
// writes a cold package, EnvS3AccessKey/EnvS3SecretKey and EnvEncryptionKey (unless
// Unencrypted): the same variables as the snapshot worker.

// ArchiveFolder is where cold packages go, under the store's object-storage prefix: one
// package per run, at ArchiveFolder + "<run name>/".
const ArchiveFolder = "archive/"

// ArchiveConfig is everything `memory-operator archive` needs besides its secrets.
//
// One run, in this order (each step set-based in PostgreSQL, batched against the vector
// index, and safe to interrupt: the next run finishes what an earlier one left):
//  1. finish vector deletions an interrupted earlier run recorded but did not do (with
//     Cold set, those of memories still waiting for their cold copy wait for step 4,
//     so that the copy carries their vectors);
//  2. mark live memories whose effective score at Now is below Threshold as archived
//     (archived_at = Now), recording their vector deletions in the same transaction;
//  3. with Cold set, write the memories archived by this run (and by any earlier run
//     whose cold copy is missing) as a v1 package under Cold.Prefix;
//  4. delete the recorded vectors from the index, in batches;
//  5. purge expired memories (expires_at <= Now, archived or not), recording their
//     vector deletions in the same transaction, and do those deletions;
//  6. with DeleteAfter > 0, delete from PostgreSQL the memories archived before
//     Now - DeleteAfter whose cold copy was written.
//
// Tombstoned scopes are never touched. DryRun only counts.
type ArchiveConfig struct {
	// Store, for the audit log and the cold package's manifest.
	StoreNamespace, StoreName, Tenant string
	// RunName names this run (the Job's name): the cold package's folder and audit entry.
	RunName string
	// Schema is the store's PostgreSQL schema.
	Schema string
	// Vectors is where the store's vectors are (cfg.VectorEngine, cfg.MilvusAddress…).
	engine.Vectors
	EmbeddingModel string
	// EmbedderRoles is the store's resolved roles convention (status.embedder.roles),
	// recorded with the vectors in the package.
	EmbedderRoles embed.Roles
	Dimension     int
	Metric        string

	// Now is the run's clock: ages are measured to it and archived_at is set to it. Zero
	// means the time the worker starts (tests inject a clock through it).
	Now time.Time
	// Threshold: a memory whose effective score is below it is archived.
	Threshold float64
	// HalfLives per memory type; a type without one does not decay (and so is archived
	// only when its base score is below Threshold).
	HalfLives memory.HalfLives
	DryRun    bool

	// Cold, when set, is where this run's cold package goes (Prefix ends in '/').
	Cold *Destination
	// Unencrypted writes a plaintext cold package; otherwise the key is in EnvEncryptionKey.
	Unencrypted bool
	// DeleteAfter > 0 deletes archived memories from PostgreSQL this long after they
	// were archived, once their cold copy exists. It needs Cold.
	DeleteAfter time.Duration
	// BatchSize is how many vector IDs one index delete carries (0: a default).
	BatchSize int
}

// Args renders the configuration as the worker's command-line arguments (after the
// subcommand). ParseArchiveArgs(c.Args()) gives c back.
func (c ArchiveConfig) Args() []string {
	args := []string{
		"--store-namespace=" + c.StoreNamespace,
		"--store-name=" + c.StoreName,
		"--tenant=" + c.Tenant,
		"--run-name=" + c.RunName,
		"--schema=" + c.Schema,
		"--embedding-model=" + c.EmbeddingModel,
		fmt.Sprintf("--dimension=%d", c.Dimension),
		"--metric=" + c.Metric,
		"--threshold=" + strconv.FormatFloat(c.Threshold, 'g', -1, 64),
	}
	opt := func(flag, v string) {
		if v != "" {
			args = append(args, flag+"="+v)
		}
	}
	args = append(args, c.Vectors.Args()...)
	if !c.Now.IsZero() {
		args = append(args, "--now="+c.Now.UTC().Format(time.RFC3339Nano))
	}
	opt("--half-lives", formatHalfLives(c.HalfLives))
	if c.DryRun {
		args = append(args, "--dry-run")
	}
	if c.Cold != nil {
		args = append(args, "--cold-endpoint="+c.Cold.Endpoint, "--cold-bucket="+c.Cold.Bucket, "--cold-prefix="+c.Cold.Prefix)
		opt("--cold-region", c.Cold.Region)
		if c.Cold.Insecure {
			args = append(args, "--cold-insecure")
		}
	}
	if c.Unencrypted {
		args = append(args, "--unencrypted")
	}
	if c.DeleteAfter > 0 {
		args = append(args, "--delete-after="+c.DeleteAfter.String())
	}
	if c.BatchSize > 0 {
		args = append(args, fmt.Sprintf("--batch-size=%d", c.BatchSize))
	}
	return append(args, embed.RolesArgs(c.EmbedderRoles)...)
}

// formatHalfLives renders "type=duration,..." in type order, so Args is deterministic.
func formatHalfLives(h memory.HalfLives) string {
	parts := make([]string, 0, len(h))
	for _, t := range slices.Sorted(maps.Keys(h)) {
		parts = append(parts, string(t)+"="+h[t].String())
	}
	return strings.Join(parts, ",")
}

// parseHalfLives reads what formatHalfLives writes. No half-lives at all is nil (not an
// empty map), so that a configuration without them survives Args and back unchanged.
func parseHalfLives(s string) (memory.HalfLives, error) {
	var h memory.HalfLives
	for _, p := range splitList(s) {
		t, d, ok := strings.Cut(p, "=")
		if !ok {
			return nil, fmt.Errorf("--half-lives: %q is not type=duration", p)
		}
		if err := memory.Type(t).Validate(); err != nil {
			return nil, fmt.Errorf("--half-lives: %w", err)
		}
		if _, dup := h[memory.Type(t)]; dup {
			return nil, fmt.Errorf("--half-lives: %s is given twice", t)
		}
		dur, err := time.ParseDuration(d)
		if err != nil || dur <= 0 {
			return nil, fmt.Errorf("--half-lives: %s=%s is not a positive duration", t, d)
		}
		if h == nil {
			h = memory.HalfLives{}
		}
		h[memory.Type(t)] = dur
	}
	return h, nil
}

// ParseArchiveArgs parses the worker's arguments and checks them.
func ParseArchiveArgs(args []string, stderr io.Writer) (ArchiveConfig, error) {
	var c ArchiveConfig
	var now, halfLives, threshold string
	var cold Destination
	fs := flag.NewFlagSet("archive", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.StoreNamespace, "store-namespace", "", "namespace of the MemoryStore")
	fs.StringVar(&c.StoreName, "store-name", "", "name of the MemoryStore")
	fs.StringVar(&c.Tenant, "tenant", "", "tenant of the store")
	fs.StringVar(&c.RunName, "run-name", "", "name of this run (the Job's name)")
	fs.StringVar(&c.Schema, "schema", "", "PostgreSQL schema of the store")
	c.Register(fs)
	fs.StringVar(&c.EmbeddingModel, "embedding-model", "", "model the store's vectors were made with")
	fs.IntVar(&c.Dimension, "dimension", 0, "vector dimension")
	fs.StringVar(&c.Metric, "metric", "COSINE", "vector metric")
	fs.StringVar(&now, "now", "", "the run's clock, RFC 3339 (default: the start time)")
	fs.StringVar(&threshold, "threshold", "", "archive memories whose effective score is below this")
	fs.StringVar(&halfLives, "half-lives", "", "comma-separated type=duration half-lives")
	fs.BoolVar(&c.DryRun, "dry-run", false, "only count")
	fs.StringVar(&cold.Endpoint, "cold-endpoint", "", "S3 endpoint host:port of the cold package")
	fs.StringVar(&cold.Region, "cold-region", "", "S3 region of the cold package")
	fs.BoolVar(&cold.Insecure, "cold-insecure", false, "use plain HTTP")
	fs.StringVar(&cold.Bucket, "cold-bucket", "", "bucket of the cold package")
	fs.StringVar(&cold.Prefix, "cold-prefix", "", "prefix of the cold package, ending in '/'")
	fs.BoolVar(&c.Unencrypted, "unencrypted", false, "write a plaintext cold package")
	fs.DurationVar(&c.DeleteAfter, "delete-after", 0, "delete archived memories with a cold copy this long after archival")
	fs.IntVar(&c.BatchSize, "batch-size", 0, "vector IDs per index delete (0: default)")
	var roles embed.RolesFlags
	roles.Register(fs, "")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	var err error
	if c.EmbedderRoles, err = jobRoles(&roles); err != nil {
		return c, err
	}
	if now != "" {
		if c.Now, err = time.Parse(time.RFC3339Nano, now); err != nil {
			return c, fmt.Errorf("--now: %w", err)
		}
		c.Now = c.Now.UTC()
	}
	if c.Threshold, err = strconv.ParseFloat(threshold, 64); err != nil {
		return c, fmt.Errorf("--threshold %q is not a non-negative number", threshold)
	}
	if c.HalfLives, err = parseHalfLives(halfLives); err != nil {
		return c, err
	}
	if cold != (Destination{}) {
		c.Cold = &cold
	}
	return c, c.check()
}

// check validates a configuration, parsed or built in code (RunArchive checks too).
func (c ArchiveConfig) check() error {
	if c.Schema == "" {
		return errors.New("missing required flags: --schema")
	}
	if err := c.checkScoring(); err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return err
	}
	if err := c.checkCold(); err != nil {
		return err
	}
	if c.DeleteAfter < 0 {
		return errors.New("--delete-after must not be negative")
	}
	if c.DeleteAfter > 0 && c.Cold == nil {
		return errors.New("--delete-after needs a cold package (--cold-*): archived memories are deleted only once copied")
	}
	if c.BatchSize < 0 {
		return errors.New("--batch-size must not be negative")
	}
	return nil
}

func (c ArchiveConfig) checkScoring() error {
	if c.Threshold < 0 || math.IsInf(c.Threshold, 0) || math.IsNaN(c.Threshold) {
		return fmt.Errorf("--threshold %v is not a non-negative number", c.Threshold)
	}
	for _, t := range slices.Sorted(maps.Keys(c.HalfLives)) {
		if err := t.Validate(); err != nil {
			return fmt.Errorf("--half-lives: %w", err)
		}
		if c.HalfLives[t] <= 0 {
			return fmt.Errorf("--half-lives: %s=%s is not a positive duration", t, c.HalfLives[t])
		}
	}
	return nil
}

func (c ArchiveConfig) checkCold() error {
	if c.Cold == nil {
		return nil
	}
	if c.Cold.Endpoint == "" || c.Cold.Bucket == "" || c.Cold.Prefix == "" {
		return errors.New("a cold package needs --cold-endpoint, --cold-bucket and --cold-prefix")
	}
	if !strings.HasSuffix(c.Cold.Prefix, "/") {
		return errors.New("--cold-prefix must end in '/'")
	}
	// The cold package carries the vectors, so that rehydration needs no embedder;
	// its manifest must name their model and dimension.
	if c.EmbeddingModel == "" || c.Dimension < 1 {
		return errors.New("a cold package needs --embedding-model and a positive --dimension (it carries the vectors)")
	}
	return nil
}

// ArchiveSummary is what an archive worker that succeeded writes to its termination log
// and the controller copies into the store's status. In a dry run the counts are what
// would have happened.
type ArchiveSummary struct {
	// Now is the run's clock (archived_at of the memories it archived).
	Now    time.Time `json:"now"`
	DryRun bool      `json:"dryRun,omitempty"`
	// Scanned is the number of live (not archived, not expired, not tombstoned)
	// memories scored.
	Scanned int64 `json:"scanned"`
	// Archived memories, in total and by type.
	Archived       int64            `json:"archived"`
	ArchivedByType map[string]int64 `json:"archivedByType,omitempty"`
	// ExpiredPurged memories were deleted because expires_at had passed.
	ExpiredPurged int64 `json:"expiredPurged"`
	// Deleted archived memories were removed from PostgreSQL after DeleteAfter.
	Deleted int64 `json:"deleted"`
	// VectorsDeleted from the index, Recovered of them left by an interrupted earlier run.
	VectorsDeleted int64 `json:"vectorsDeleted"`
	Recovered      int64 `json:"recovered"`
	// ColdPackage is the prefix of the cold package written (empty when none was) and
	// ColdItems the number of memories in it.
	ColdPackage string `json:"coldPackage,omitempty"`
	ColdItems   int64  `json:"coldItems,omitempty"`
}

// TerminationMessage encodes the summary for the termination log, refusing one that
// would not fit.
func (s ArchiveSummary) TerminationMessage() ([]byte, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxTerminationMessage {
		return nil, fmt.Errorf("archive summary is %d bytes; a termination message holds %d", len(b), MaxTerminationMessage)
	}
	return b, nil
}

// ParseArchiveSummary reads a termination message written by TerminationMessage and
// checks that it is one.
func ParseArchiveSummary(msg string) (ArchiveSummary, error) {
	var s ArchiveSummary
	dec := json.NewDecoder(bytes.NewReader([]byte(strings.TrimSpace(msg))))
	if err := dec.Decode(&s); err != nil {
		return ArchiveSummary{}, fmt.Errorf("archive summary: %w", err)
	}
	if dec.More() {
		return ArchiveSummary{}, errors.New("archive summary: trailing data after the JSON object")
	}
	if s.Now.IsZero() {
		return ArchiveSummary{}, errors.New("archive summary: no run time")
	}
	counts := []int64{s.Scanned, s.Archived, s.ExpiredPurged, s.Deleted, s.VectorsDeleted, s.Recovered, s.ColdItems}
	for t, n := range s.ArchivedByType {
		if !memory.Type(t).Valid() {
			return ArchiveSummary{}, fmt.Errorf("archive summary: unknown memory type %q", t)
		}
		counts = append(counts, n)
	}
	if slices.Min(counts) < 0 {
		return ArchiveSummary{}, errors.New("archive summary: a negative count")
	}
	return s, nil
}
