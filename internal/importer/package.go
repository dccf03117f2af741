package importer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/snapshot"
)

// PackageOptions say where an import's package goes.
type PackageOptions struct {
	Objects snapshot.Objects
	Prefix  string
	// Key encrypts the package; Unencrypted must be set to write without one.
	Key         *snapshot.Key
	Unencrypted bool
	// Source describes where the memories came from (the manifest's source).
	Source snapshot.SourceInfo
	// Producer and ProducerVersion name the importer ("memory-operator import").
	ProducerVersion string
	// SpillDir holds the sorter's temporary runs (os.TempDir() when empty).
	SpillDir string
	// SortBudget is the memory the sorter holds before spilling (0: a default).
	SortBudget int
}

// WritePackage runs an import (produce hands each converted memory to its callback)
// and writes the memories as a package, in the scope order a package needs. The
// restore engine then reads it like any snapshot: it verifies the whole package
// before writing anything, maps scopes, applies denylists and tombstones, resolves
// conflicts and is idempotent. A failed import leaves no manifest.
func WritePackage(ctx context.Context, o PackageOptions, produce func(fn func(memory.Item) error) (Stats, error)) (Stats, *snapshot.Manifest, error) {
	sorter := newScopeSorter(o.SpillDir, o.SortBudget)
	defer sorter.close()
	st, err := produce(sorter.add)
	if err != nil {
		return st, nil, err
	}
	w, err := snapshot.NewWriter(ctx, o.Objects, snapshot.WriterOptions{Prefix: o.Prefix, Key: o.Key, Unencrypted: o.Unencrypted,
		ReplaceIncomplete: true, Producer: "memory-operator import", ProducerVersion: o.ProducerVersion, Source: o.Source,
		Import: st.report()})
	if err != nil {
		return st, nil, err
	}
	if err := sorter.each(func(it memory.Item) error { return w.Add(ctx, it) }); err != nil {
		_ = w.Abort(context.WithoutCancel(ctx))
		return st, nil, fmt.Errorf("import: writing the package: %w", err)
	}
	m, err := w.Close(ctx)
	if err != nil {
		return st, nil, fmt.Errorf("import: writing the package: %w", err)
	}
	return st, m, nil
}

// Converted is an import converted and sorted, handed to the restore engine as it
// is (a restore.Package): the restore worker's import never writes, compresses,
// hashes and reads back a package of what it has just converted (measured: a sixth
// of an import's time). It reads as a package with one shard and no tombstones,
// the memories coming straight from the sorter's runs in its scratch directory;
// restore.Options.Written must be set (there is nothing to verify twice). Close
// removes the runs.
type Converted struct {
	sorter   *scopeSorter
	manifest snapshot.Manifest
	scopes   []string // sorted
	digest   string
}

// convertedShard names the one shard of a Converted.
const convertedShard = "converted"

// Convert runs an import (produce hands each converted memory to its callback) and
// sorts the memories into the order a package has, spilling to o.SpillDir, for the
// restore engine to read (o.Objects, o.Prefix and the encryption options are
// ignored). A failed import leaves nothing behind.
func Convert(_ context.Context, o PackageOptions, produce func(fn func(memory.Item) error) (Stats, error)) (Stats, *Converted, error) {
	sorter := newScopeSorter(o.SpillDir, o.SortBudget)
	sorter.counts, sorter.digest = map[string]int64{}, sha256.New()
	st, err := produce(sorter.add)
	if err == nil && len(sorter.buf) > 0 {
		err = sorter.spill() // every memory is in a run, which the digest covers
	}
	if err != nil {
		sorter.close()
		return st, nil, err
	}
	c := &Converted{sorter: sorter, digest: hex.EncodeToString(sorter.digest.Sum(nil))}
	c.scopes = slices.Sorted(maps.Keys(sorter.counts))
	now := time.Now().UTC()
	c.manifest = snapshot.Manifest{FormatVersion: snapshot.FormatVersion, PackageID: c.digest[:32],
		Producer: "memory-operator import", ProducerVersion: o.ProducerVersion, CreatedAt: now, CompletedAt: now, Source: o.Source,
		Counts: snapshot.Counts{Items: sorter.seq, Scopes: int64(len(c.scopes))}}
	if n := len(c.scopes); n > 0 {
		c.manifest.Shards = []snapshot.ShardInfo{{Name: convertedShard, FirstScope: c.scopes[0], LastScope: c.scopes[n-1],
			Scopes: int64(n), Items: sorter.seq}}
	}
	return st, c, nil
}

// Digest is the SHA-256 of the converted memories (of the sorter's runs): the same
// source converted by the same rules gives the same digest, which stands for the
// manifest's SHA-256 of a package (a rerun of a completed restore is recognized by
// it).
func (c *Converted) Digest() string { return c.digest }

// Close removes the sorter's runs.
func (c *Converted) Close() { c.sorter.close() }

// Manifest describes the converted memories as a package's manifest would.
func (c *Converted) Manifest() *snapshot.Manifest { return &c.manifest }

// StoredFormatVersion is the package format the memories are in: the current one.
func (c *Converted) StoredFormatVersion() int { return snapshot.FormatVersion }

// Prefix names the converted memories in errors.
func (c *Converted) Prefix() string { return "(converted import)" }

// TombstoneCount is 0: an import brings no tombstones.
func (c *Converted) TombstoneCount() int64 { return 0 }

// Tombstones calls fn for none.
func (c *Converted) Tombstones(context.Context, func(memory.Tombstone) error) error { return nil }

// ReadScopeCounts calls fn for every scope, in order, with its number of memories.
func (c *Converted) ReadScopeCounts(ctx context.Context, fn func(scope string, items int64) error) error {
	for _, s := range c.scopes {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(s, c.sorter.counts[s]); err != nil {
			return err
		}
	}
	return nil
}

// ShardItems calls fn for every memory of the one shard, in scope order (within a
// scope, in the source's order). It may be called again.
func (c *Converted) ShardItems(ctx context.Context, shard snapshot.ShardInfo, fn func(memory.Item) error) error {
	if shard.Name != convertedShard {
		return fmt.Errorf("import: no shard %q in the converted memories", shard.Name)
	}
	n := 0
	return c.sorter.each(func(it memory.Item) error {
		if n++; n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		return fn(it)
	})
}
