package restore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/shortterm"
	"github.com/amemory/memory-operator/internal/snapshot"
	"github.com/amemory/memory-operator/internal/vector"
)

// ConflictPolicy resolves an item that meets a memory already in the target.
type ConflictPolicy = pgstore.ConflictPolicy

// The conflict policies (see pgstore.ConflictPolicy).
const (
	// KeepNewer (the default) keeps the value updated last; the other goes to history.
	KeepNewer = pgstore.KeepNewer
	// Overwrite lets the package win.
	Overwrite = pgstore.Overwrite
	// Skip lets the target win.
	Skip = pgstore.SkipExisting
)

// EmbeddingsPolicy says where restored memories' vectors come from.
type EmbeddingsPolicy string

// The embeddings policies (spelled as the MemoryRestore API spells them).
const (
	// Reuse writes the package's vectors when they were made by the target's model
	// and dimension, and otherwise falls back to Options.ReuseFallback.
	Reuse EmbeddingsPolicy = "Reuse"
	// Reembed computes every vector with the target's embedder.
	Reembed EmbeddingsPolicy = "Reembed"
	// Defer writes no vectors: the store's re-embedding catches up.
	Defer EmbeddingsPolicy = "Defer"
)

// Defaults.
const (
	// DefaultBatchSize is how many items are merged per transaction.
	DefaultBatchSize = 5000
	// DefaultBatchBytes bounds a batch's items by size: with the batches in flight
	// and the one being read, a restore holds a few times this much item data.
	DefaultBatchBytes = 2 << 20
	// maxEmbedTexts bounds the texts of one Embed call.
	maxEmbedTexts = 1024
)

// Package is what Run restores: a snapshot package opened by snapshot.Open (a
// *snapshot.Reader), or memories the caller has converted itself and never wrote as
// one (an import's, importer.Converted; only with Options.Written).
type Package interface {
	Manifest() *snapshot.Manifest
	StoredFormatVersion() int
	// Prefix names the package in errors and audit records.
	Prefix() string
	TombstoneCount() int64
	Tombstones(ctx context.Context, fn func(memory.Tombstone) error) error
	ReadScopeCounts(ctx context.Context, fn func(scope string, items int64) error) error
	ShardItems(ctx context.Context, shard snapshot.ShardInfo, fn func(memory.Item) error) error
}

// verifiablePackage is a package Run reads twice: whole first, to verify it before
// writing, then again exactly as verified.
type verifiablePackage interface {
	Package
	Scan(ctx context.Context, f snapshot.ScanFuncs) error
	ShardItemsPinned(ctx context.Context, shard snapshot.ShardInfo, pins *snapshot.Pins, fn func(memory.Item) error) error
}

var _ verifiablePackage = (*snapshot.Reader)(nil)

// Options configure Run.
type Options struct {
	// Reader is the package: opened (with its key) by snapshot.Open, or converted by
	// the caller (see Package).
	Reader Package
	// Written says the caller made the package itself, from data it has already read
	// and converted whole (an import): the pass before writing then maps the scopes
	// from the package's scope list and reads its tombstones, without reading every
	// shard a first time. A package file's one pass still checks every line, count
	// and checksum as it reads; what that guards against then is local disk
	// corruption within the run, which fails the restore midway (a rerun converges)
	// instead of before the first write.
	Written bool
	// Target is the store restored into (migrated).
	Target *pgstore.Store
	// Index is the target's vector index; nil when vectors are left for later (the
	// embeddings policy must then be Defer or empty).
	Index vector.Index
	// Embedder is the target's embedder: its model, dimension and roles decide whether
	// package vectors can be reused, and Reembed uses it. Required unless the
	// embeddings policy is Defer.
	Embedder embed.Embedder
	// EmbedLimit is the target store's limit on the text sent to its embedder
	// (spec.embedder.maxInputBytes and overflow; the zero Limit is none). A memory
	// whose vector is computed here gets it from its text's first MaxInputBytes bytes
	// under Truncate; under Refuse it is not restored (Skipped.TextTooLong), as the
	// gateway would refuse it. One whose package vector is reused is not affected.
	EmbedLimit embed.Limit
	// Mapping renames scopes; nil keeps every scope.
	Mapping *Mapper
	// Denylist names package scopes (before mapping) never restored: exact scopes,
	// or prefixes ending in '*' ("user:test-*").
	Denylist []string
	// Types are the memory types restored; empty means all but working.
	Types []memory.Type
	// Now is the time expiry is judged against; zero means time.Now().
	Now time.Time
	// Conflict is the conflict policy; empty means KeepNewer.
	Conflict ConflictPolicy
	// Embeddings is the embeddings policy; empty means Reuse, or Defer when Index is nil.
	Embeddings EmbeddingsPolicy
	// ReuseFallback applies under Reuse when the package's vectors cannot be used (or
	// an item has none): Reembed (the default) or Defer.
	ReuseFallback EmbeddingsPolicy
	// DryRun does everything but write (see the package documentation).
	DryRun bool
	// Rehydrate brings memories that are archived in the package back live (restoring
	// an archival's cold package, see the archive worker): once its batch has
	// committed, each such memory that the target now holds with the package's value
	// (inserted, replaced or unchanged) is un-archived in place (pgstore.Unarchive:
	// its age restarts) and indexed like any restored memory. A memory whose target
	// value differs (the conflict policy kept the target's) is left as it is.
	Rehydrate bool
	// Parallelism is how many merge transactions run at once, and how many shards are
	// read at once (default 1); a shard may have several batches in flight. It is
	// capped at half the target pool's connections: a batch holds one connection for
	// its transaction, and a PostgreSQL vector index needs another.
	Parallelism int
	// BatchSize is the number of items per merge transaction (DefaultBatchSize if 0).
	BatchSize int
	// BatchBytes bounds a batch by the size of its items too (content, history,
	// embedding; DefaultBatchBytes if 0), so that large memories keep the memory a
	// restore needs bounded.
	BatchBytes int64
	// AllowMerge lets the mapping send several package scopes to one target scope:
	// their memories are merged into it as if they had been one scope (conflicts
	// between them resolved by the conflict policy), and a tombstone of any of them
	// forgets, in it, what it covers. Without it such a mapping is refused before
	// anything is written: a restore never mixes two people's memories by accident.
	AllowMerge bool
	// IntoExisting lets the mapping rename package scopes onto target scopes that
	// already hold memories of their own in the target (restoring a user's package
	// into the account they use now). Without it (or AllowMerge) such a restore is
	// refused before anything is written: the target scope's memories are someone's,
	// and the package's would mix with them.
	IntoExisting bool
	// Actor names the restore in the audit records of the tombstones it applies.
	Actor string
	// Detail, when set, receives one JSON line per package scope (ScopeDetail), in
	// scope order, each shard's lines once the shard is done.
	Detail io.Writer
	// Progress, when set, is called after every committed batch (one call at a
	// time).
	Progress func(Progress)
	// BeforeWrite, when set, is called once the package has verified and every scope
	// maps, right before the first write (not in a dry run): what a caller changes
	// in the target for the load (the worker takes a search index away) waits until
	// the restore is known to write. Its error stops the restore, nothing written.
	BeforeWrite func(ctx context.Context) error
	// Sessions, when set, receives the live sessions the package carries (a
	// snapshot with includeSessions): the target's short-term tier. Nil leaves them
	// out.
	Sessions shortterm.Store
}

// Skipped counts the package's items that were not restored, by reason.
type Skipped struct {
	// Denylisted: the package scope is on the denylist.
	Denylisted int64 `json:"denylisted,omitempty"`
	// Tombstoned: a tombstone covers the item (its scope was forgotten, in the package
	// or in the target, after the item was created).
	Tombstoned int64 `json:"tombstoned,omitempty"`
	// Unmapped: no rule maps the scope and the unmapped policy is Skip.
	Unmapped int64 `json:"unmapped,omitempty"`
	// Expired: expires_at at or before Options.Now.
	Expired int64 `json:"expired,omitempty"`
	// Type: a memory type not asked for.
	Type int64 `json:"type,omitempty"`
	// Conflict: the target's memory was kept (KeepNewer with the target newer, whose
	// history then records the package's value; Skip), or the memory_id belongs to a
	// memory of another slot of the same scope in the target.
	Conflict int64 `json:"conflict,omitempty"`
	// IDInUseByOtherScope: the memory_id belongs to a memory of another scope in the
	// target (another user's): memory IDs are stable and never move, so the item is
	// not written. Not a conflict between two values of one memory.
	IDInUseByOtherScope int64 `json:"idInUseByOtherScope,omitempty"`
	// Invalid: the item failed validation (Result.FirstInvalid says why).
	Invalid int64 `json:"invalid,omitempty"`
	// TextTooLong: its vector had to be computed here, and its text is over the
	// target's embedder input limit with overflow Refuse (Options.EmbedLimit).
	TextTooLong int64 `json:"textTooLong,omitempty"`
}

// Total is the number of skipped items.
func (s Skipped) Total() int64 {
	return s.Denylisted + s.Tombstoned + s.Unmapped + s.Expired + s.Type + s.Conflict + s.IDInUseByOtherScope + s.Invalid + s.TextTooLong
}

func (s *Skipped) add(o Skipped) {
	s.Denylisted += o.Denylisted
	s.Tombstoned += o.Tombstoned
	s.Unmapped += o.Unmapped
	s.Expired += o.Expired
	s.Type += o.Type
	s.Conflict += o.Conflict
	s.IDInUseByOtherScope += o.IDInUseByOtherScope
	s.Invalid += o.Invalid
	s.TextTooLong += o.TextTooLong
}

// Result is what a restore did (in a dry run: would have done). Every item read is
// restored, unchanged or skipped: Read == Restored + Unchanged + Skipped.Total().
type Result struct {
	DryRun        bool   `json:"dryRun,omitempty"`
	PackageID     string `json:"packageId"`
	FormatVersion int    `json:"formatVersion"` // as stored
	// Shards verified and read.
	Shards int `json:"shards"`
	// Embeddings is the policy that applied: Reuse, Reembed (also when Reuse fell
	// back to it for the whole package) or Defer.
	Embeddings EmbeddingsPolicy `json:"embeddings"`

	// Read is the number of items read from the package.
	Read int64 `json:"read"`
	// Restored items were written as the current value of a memory: Inserted as new
	// memories, or Replaced the value of one already stored.
	Restored       int64                 `json:"restored"`
	Inserted       int64                 `json:"inserted"`
	Replaced       int64                 `json:"replaced"`
	RestoredByType map[memory.Type]int64 `json:"restoredByType,omitempty"`
	// Unchanged items were already in the target with the same value (a rerun).
	Unchanged int64   `json:"unchanged"`
	Skipped   Skipped `json:"skipped"`
	// HistoryRecorded counts package values added to the history of a newer target
	// memory (KeepNewer; included in Skipped.Conflict).
	HistoryRecorded int64 `json:"historyRecorded,omitempty"`
	// IDConflicts counts items whose memory_id belongs to a memory of another slot of
	// the same scope in the target (included in Skipped.Conflict; another scope's is
	// Skipped.IDInUseByOtherScope).
	IDConflicts int64 `json:"idConflicts,omitempty"`
	// FirstInvalid describes the first invalid item, when there is one.
	FirstInvalid string `json:"firstInvalid,omitempty"`

	// Mapped counts items handed to the target under another scope than the
	// package's (restored, unchanged or resolved by the conflict policy).
	Mapped int64 `json:"mapped"`
	// Scopes is the number of target scopes that hold the package's memories after
	// the restore (restored or unchanged); MappedScopes is the number of package
	// scopes restored under another name.
	Scopes       int64 `json:"scopes"`
	MappedScopes int64 `json:"mappedScopes"`

	// Vectors written to the index (reused or embedded); Embedded of them computed
	// by the target's embedder. VectorsDeleted: stale vectors removed (a replaced
	// memory that is archived, or under Defer).
	Vectors        int64 `json:"vectors"`
	Embedded       int64 `json:"embedded"`
	VectorsDeleted int64 `json:"vectorsDeleted,omitempty"`
	// Rehydrated memories were archived in the target and are live again (Rehydrate;
	// in a dry run: the package's archived memories that would be).
	Rehydrated int64 `json:"rehydrated,omitempty"`
	// Tombstones is the number of the package's tombstones (mapped) that were new to
	// the target, or later than its own; Forgotten the number of the target's memories
	// they covered, which were deleted with their vectors (in a dry run: would be).
	Tombstones int64 `json:"tombstones"`
	Forgotten  int64 `json:"forgotten,omitempty"`
	// Batches is the number of batches committed (in a dry run: merged).
	Batches int64 `json:"batches"`
	// Sessions is what became of the live sessions the package carries (nil when it
	// carries none or they were not asked for).
	Sessions *SessionsResult `json:"sessions,omitempty"`
}

// ScopeDetail is one line of the per-scope detail: what happened to the items of one
// package scope.
type ScopeDetail struct {
	Scope string `json:"scope"`
	// MappedTo is the target scope; empty when the scope was not mapped (Unmapped,
	// or skipped before mapping).
	MappedTo        string  `json:"mapped_to,omitempty"`
	Restored        int64   `json:"restored"`
	Unchanged       int64   `json:"unchanged,omitempty"`
	SkippedByReason Skipped `json:"skipped_by_reason"`
}

// Progress is reported after every committed batch, with running totals.
type Progress struct {
	Batches  int64
	Read     int64
	Restored int64
	Skipped  int64
}

// check validates the options and fills in the defaults.
func (o *Options) check() error {
	switch {
	case o.Reader == nil:
		return errors.New("restore: no package reader")
	case o.Target == nil:
		return errors.New("restore: no target store")
	}
	if _, ok := o.Reader.(verifiablePackage); !ok && !o.Written {
		return fmt.Errorf("restore: %s cannot be verified before writing: only a package the caller made itself (Options.Written) is read once", o.Reader.Prefix())
	}
	if o.Conflict == "" {
		o.Conflict = KeepNewer
	}
	if !o.Conflict.Valid() {
		return fmt.Errorf("restore: unknown conflict policy %q (want KeepNewer, Overwrite or Skip)", o.Conflict)
	}
	if len(o.Types) == 0 {
		o.Types = []memory.Type{memory.Episodic, memory.Semantic, memory.Procedural}
	}
	for _, t := range o.Types {
		if err := t.Validate(); err != nil {
			return fmt.Errorf("restore: types: %w", err)
		}
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.BatchBytes <= 0 {
		o.BatchBytes = DefaultBatchBytes
	}
	if o.Parallelism <= 0 {
		o.Parallelism = 1
	}
	if o.Actor == "" {
		o.Actor = "restore"
	}
	if err := o.EmbedLimit.Validate(); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	o.Parallelism = max(1, min(o.Parallelism, o.Target.PoolSize()/2))
	return nil
}

// embeddingPlan is the resolved embeddings policy.
type embeddingPlan struct {
	applied  EmbeddingsPolicy
	reuse    bool             // package vectors are written
	fallback EmbeddingsPolicy // for items without a usable package vector: Reembed or Defer
}

func (o *Options) planEmbeddings(m *snapshot.Manifest) (embeddingPlan, error) {
	p, fb, err := o.embeddingPolicies()
	if err != nil {
		return embeddingPlan{}, err
	}
	switch {
	case p == Defer:
		return embeddingPlan{applied: Defer, fallback: Defer}, nil
	case o.Index == nil:
		return embeddingPlan{}, fmt.Errorf("restore: embeddings policy %s needs the target's vector index (or use Defer)", p)
	case o.Embedder == nil:
		return embeddingPlan{}, fmt.Errorf("restore: embeddings policy %s needs the target's embedder (or use Defer)", p)
	}
	plan := embeddingPlan{applied: Reembed, fallback: Reembed}
	if p == Reuse {
		switch {
		case o.reusable(m.Embedding):
			plan = embeddingPlan{applied: Reuse, reuse: true, fallback: fb}
		case fb == Defer:
			return embeddingPlan{applied: Defer, fallback: Defer}, nil
		}
	}
	if plan.fallback == Reembed {
		if err := checkEmbedderDim(o.Embedder, o.Index.Spec()); err != nil {
			return embeddingPlan{}, err
		}
	}
	return plan, nil
}

// embeddingPolicies returns the embeddings policy and the reuse fallback, defaulted
// and checked.
func (o *Options) embeddingPolicies() (policy, fallback EmbeddingsPolicy, err error) {
	policy, fallback = o.Embeddings, o.ReuseFallback
	if policy == "" {
		policy = Reuse
		if o.Index == nil {
			policy = Defer
		}
	}
	if fallback == "" {
		fallback = Reembed
	}
	switch {
	case policy != Reuse && policy != Reembed && policy != Defer:
		return "", "", fmt.Errorf("restore: unknown embeddings policy %q (want Reuse, Reembed or Defer)", policy)
	case fallback != Reembed && fallback != Defer:
		return "", "", fmt.Errorf("restore: reuse fallback %q must be Reembed or Defer", fallback)
	}
	return policy, fallback, nil
}

// reusable reports whether the package's vectors live in the target's embedding space:
// the same model, dimension and roles convention as the target's embedder (a package
// that records no roles was embedded with none), the index's dimension, and the
// index's metric when the package records one.
func (o *Options) reusable(e *snapshot.EmbeddingInfo) bool {
	spec := o.Index.Spec()
	return e != nil && e.Model == o.Embedder.Model() && e.Dimension == o.Embedder.Dimension() && e.Dimension == spec.Dimension &&
		e.EmbedRoles().Equal(o.Embedder.Roles()) &&
		(e.Metric == "" || strings.EqualFold(e.Metric, string(spec.Metric)))
}

func checkEmbedderDim(e embed.Embedder, spec vector.Spec) error {
	if e.Dimension() != spec.Dimension {
		return fmt.Errorf("restore: %w", vector.DimensionError("embedder "+e.Model(), spec.Dimension, e.Dimension()))
	}
	return nil
}

// denylist matches package scopes.
type denylist struct {
	exact    map[string]bool
	prefixes []string
}

func newDenylist(entries []string) (denylist, error) {
	d := denylist{exact: map[string]bool{}}
	for _, e := range entries {
		e = memory.NormalizeScope(e) // package scopes are NFC: so must their denylist be
		if p, ok := strings.CutSuffix(e, "*"); ok {
			d.prefixes = append(d.prefixes, p)
			continue
		}
		if err := memory.ValidateScope(e); err != nil {
			return d, fmt.Errorf("restore: denylist entry %q: %w (a prefix ends in '*')", e, err)
		}
		d.exact[e] = true
	}
	return d, nil
}

func (d denylist) match(scope string) bool {
	if d.exact[scope] {
		return true
	}
	for _, p := range d.prefixes {
		if strings.HasPrefix(scope, p) {
			return true
		}
	}
	return false
}

// skipReason is a scope-level reason to skip every item of a scope.
type skipReason uint8

const (
	noSkip skipReason = iota
	skipDenylisted
	skipUnmapped
)

// scopeDecision is what happens to a package scope as a whole.
type scopeDecision struct {
	target string
	skip   skipReason
}

// runner holds what every shard shares.
type runner struct {
	o     Options
	plan  embeddingPlan
	types map[memory.Type]bool
	deny  denylist
	// dryTombs are the package's tombstones under their target scopes, kept for a dry
	// run, which applies them in each batch's rolled-back transaction instead of once.
	dryTombs *tombstoneIndex
	// pins make the second pass read exactly what the first verified.
	pins *snapshot.Pins

	mu       sync.Mutex // guards progress, the detail writer and targets
	progress Progress
	detail   *detailWriter
	// targets are the target scopes that received memories, when several package
	// scopes may share one (AllowMerge): their number is Result.Scopes.
	targets map[uint64]struct{}
	seed    maphash.Seed
	// merging admits at most Parallelism merge transactions at once, whichever
	// shards they come from: one large shard keeps every connection busy.
	merging chan struct{}
	// source names the package's source store in the target's record of renamed
	// scopes (pgstore.KnownRenames).
	source string
	// cut is the package's createdAt, the time of the database snapshot it was read
	// from: the latest its items can have been recorded and its tombstones written,
	// and the clock their created_at and updated_at are judged against
	// (pgstore.PrepareItemAt).
	cut time.Time
}

// sourceIdentity names the store a package comes from: snapshots of one store name
// it alike, whatever vector engine it had at the time.
func sourceIdentity(s snapshot.SourceInfo) string {
	return fmt.Sprintf("%s/%s tenant=%s store=%s", s.Namespace, s.Name, s.Tenant, s.Store)
}

// decide maps a package scope and applies the scope-level rules.
func (r *runner) decide(scope string) (scopeDecision, error) {
	if r.deny.match(scope) {
		return scopeDecision{skip: skipDenylisted}, nil
	}
	target, keep, err := r.o.Mapping.Map(scope)
	if err != nil {
		return scopeDecision{}, err
	}
	if !keep {
		return scopeDecision{skip: skipUnmapped}, nil
	}
	return scopeDecision{target: target}, nil
}

// Run restores the package into the target. See the package documentation for what
// it does, in which order, and what it guarantees. On error the Result holds what was
// written so far (nil when the error came before any write: a package that fails
// verification, or a mapping that is refused, writes nothing).
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	man := o.Reader.Manifest()
	plan, err := o.planEmbeddings(man)
	if err != nil {
		return nil, err
	}
	r := &runner{o: o, plan: plan, types: map[memory.Type]bool{}, merging: make(chan struct{}, o.Parallelism), seed: maphash.MakeSeed(),
		source: sourceIdentity(man.Source), cut: man.CreatedAt}
	for _, t := range o.Types {
		r.types[t] = true
	}
	if r.deny, err = newDenylist(o.Denylist); err != nil {
		return nil, err
	}
	if o.AllowMerge {
		r.targets = map[uint64]struct{}{}
	}

	// Nothing is written before the whole package verifies and every scope maps,
	// onto a target scope of its own unless merging is allowed.
	if err := r.verify(ctx); err != nil {
		return nil, err
	}
	if o.BeforeWrite != nil && !o.DryRun {
		if err := o.BeforeWrite(ctx); err != nil {
			return nil, err
		}
	}

	res := &Result{DryRun: o.DryRun, PackageID: man.PackageID, FormatVersion: o.Reader.StoredFormatVersion(),
		Shards: len(man.Shards), Embeddings: plan.applied}
	if err := r.applyTombstones(ctx, res); err != nil {
		if res.Tombstones == 0 && res.Forgotten == 0 {
			return nil, err
		}
		return res, err
	}
	if o.Detail != nil {
		r.detail = &detailWriter{w: o.Detail, pending: map[int][]byte{}}
	}
	err = r.runShards(ctx, man.Shards, res)
	if r.targets != nil {
		res.Scopes = int64(len(r.targets))
	}
	if err != nil {
		return res, err
	}
	if err := r.restoreSessions(ctx, res); err != nil {
		return res, err
	}
	return res, nil
}

// runShards restores the shards with o.Parallelism workers and sums their results.
func (r *runner) runShards(ctx context.Context, shards []snapshot.ShardInfo, res *Result) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan int)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
			cancel()
		}
	}
	for range min(r.o.Parallelism, max(1, len(shards))) {
		wg.Go(func() {
			for i := range jobs {
				sh := &shardRun{r: r, idx: i, byType: map[memory.Type]int64{}}
				err := sh.run(ctx, shards[i])
				mu.Lock()
				sh.addTo(res)
				mu.Unlock()
				if err != nil {
					fail(err)
				}
			}
		})
	}
	for i := range shards {
		select {
		case jobs <- i:
			continue
		case <-ctx.Done():
		}
		break
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

// report records a committed batch and calls the Progress callback.
func (r *runner) report(read, restored, skipped int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.progress.Batches++
	r.progress.Read += read
	r.progress.Restored += restored
	r.progress.Skipped += skipped
	if r.o.Progress != nil {
		r.o.Progress(r.progress)
	}
}
