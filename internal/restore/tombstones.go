package restore

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
)

// applyTombstones forgets, in the target, what the package's tombstones cover, under
// their mapped scopes and exactly as Forget would (pgstore.ApplyTombstones: the
// memories they cover are deleted with their vectors, an audit record written), in
// batches streamed from the package. Then the vector deletions owed to an external
// index are done. In a dry run every batch is rolled back: the counts are what would
// happen.
func (r *runner) applyTombstones(ctx context.Context, res *Result) error {
	opts := pgstore.ApplyOptions{Actor: r.o.Actor, Source: r.o.Reader.Prefix(), RecordIndexDeletions: true, DryRun: r.o.DryRun}
	batch := make([]memory.Tombstone, 0, min(pgstore.MaxApplyBatch, r.o.Reader.TombstoneCount()))
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		ar, err := r.o.Target.ApplyTombstones(ctx, batch, opts)
		if err != nil {
			return err
		}
		res.Tombstones += ar.Added
		res.Forgotten += ar.Forgotten
		res.VectorsDeleted += ar.VectorsDeleted
		batch = batch[:0]
		return nil
	}
	err := r.o.Reader.Tombstones(ctx, func(t memory.Tombstone) error {
		target, ok, err := r.mapTombstone(t.Scope)
		if err != nil || !ok {
			return err // every tombstone mapped in the first pass
		}
		t.Scope = target
		t.ForgottenAt = r.atMostCut(t.ForgottenAt)
		if batch = append(batch, t); len(batch) == pgstore.MaxApplyBatch {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return fmt.Errorf("restore: applying the package's tombstones: %w", err)
	}
	if r.o.DryRun || res.Forgotten == 0 || r.o.Index == nil {
		return nil // without an index here, the next archival run does the deletions
	}
	if _, err := r.o.Target.ProcessDeletionEntries(ctx, pgstore.DeletionOptions{}, r.o.Index.Delete); err != nil {
		return fmt.Errorf("restore: deleting the vectors of forgotten memories: %w", err)
	}
	return nil
}

// atMostCut is t, or the package's cut when t is later: nothing in a package was
// recorded or forgotten after the database snapshot it was read from (a version 2
// producer could date a tombstone past it, after a memory dated ahead).
func (r *runner) atMostCut(t time.Time) time.Time {
	if cut := r.cut; !cut.IsZero() && t.After(cut) {
		return cut
	}
	return t
}

// tombstoneIndex holds the package's tombstones under their target scopes for a dry
// run, compactly (one byte arena, no string per entry), to find those of a batch's
// target scopes.
type tombstoneIndex struct {
	arena []byte
	ends  []uint32 // entry i's scope is arena[ends[i-1]:ends[i]]
	times []int64  // unix microseconds
	order []uint32 // entries sorted by scope, one per scope (the latest)
}

func (x *tombstoneIndex) add(target string, t memory.Tombstone) {
	x.arena = append(x.arena, target...)
	x.ends = append(x.ends, uint32(len(x.arena)))
	x.times = append(x.times, t.ForgottenAt.UnixMicro())
}

func (x *tombstoneIndex) scope(i uint32) []byte {
	start := uint32(0)
	if i > 0 {
		start = x.ends[i-1]
	}
	return x.arena[start:x.ends[i]]
}

// finish sorts the entries; of several for one target scope the latest is kept.
func (x *tombstoneIndex) finish() {
	x.order = make([]uint32, len(x.ends))
	for i := range x.order {
		x.order[i] = uint32(i)
	}
	slices.SortFunc(x.order, func(a, b uint32) int {
		if c := bytes.Compare(x.scope(a), x.scope(b)); c != 0 {
			return c
		}
		return cmp.Compare(x.times[b], x.times[a]) // latest first
	})
	keep := x.order[:0]
	for i, e := range x.order {
		if i > 0 && bytes.Equal(x.scope(e), x.scope(keep[len(keep)-1])) {
			continue
		}
		keep = append(keep, e)
	}
	x.order = keep
}

// lookup returns the tombstones of the given target scopes.
func (x *tombstoneIndex) lookup(targets []string) []memory.Tombstone {
	var out []memory.Tombstone
	for _, target := range targets {
		i, found := slices.BinarySearchFunc(x.order, target, func(e uint32, t string) int { return strings.Compare(string(x.scope(e)), t) })
		if found {
			out = append(out, memory.Tombstone{Scope: target, ForgottenAt: time.UnixMicro(x.times[x.order[i]]).UTC()})
		}
	}
	return out
}
