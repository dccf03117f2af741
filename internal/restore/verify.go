package restore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"runtime"
	"slices"
	"strings"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/snapshot"
)

// maxReportedErrors bounds the mapping errors and scope collisions listed when the
// checks before writing fail.
const maxReportedErrors = 10

// verify is the first pass over the package, before anything is written: it reads
// every tombstone and every shard whole (decrypting, decompressing, parsing and
// checking each line, and every count, order and checksum against the manifest),
// validates every item, and maps every scope. It fails when any of that fails, when a
// scope cannot be mapped, when the mapping sends two package scopes to one target
// scope, or renames one onto a scope that holds memories of its own in the target
// (unless Options.AllowMerge, or for the latter Options.IntoExisting).
func (r *runner) verify(ctx context.Context) error {
	v := &verifier{r: r, ctx: ctx}
	if r.o.DryRun {
		r.dryTombs = &tombstoneIndex{}
	}
	var err error
	if r.o.Written {
		err = r.o.Reader.Tombstones(ctx, v.tombstone)
		if err == nil {
			err = r.o.Reader.ReadScopeCounts(ctx, func(scope string, _ int64) error {
				return v.mapScope(scope)
			})
		}
	} else {
		// The second pass must read what this one verified: the chunks are pinned.
		r.pins = snapshot.NewPins()
		// Lines are decoded and checked on every CPU; scopes are mapped in order here.
		err = r.o.Reader.(verifiablePackage).Scan(ctx, snapshot.ScanFuncs{Tombstone: v.tombstone, Item: v.item, Check: r.check,
			Workers: max(2, runtime.GOMAXPROCS(0)), Pins: r.pins})
	}
	if err != nil {
		return fmt.Errorf("restore: verifying the package at %s: %w; nothing was written", r.o.Reader.Prefix(), err)
	}
	if v.failed > 0 {
		errs := v.errs
		if v.failed > maxReportedErrors {
			errs = append(errs, fmt.Errorf("... and %d more", v.failed-maxReportedErrors))
		}
		return fmt.Errorf("restore: %d package scopes cannot be mapped; nothing was written: %w", v.failed, errors.Join(errs...))
	}
	if r.dryTombs != nil {
		r.dryTombs.finish()
	}
	if r.o.AllowMerge {
		return nil
	}
	if err := r.checkNoMerge(ctx, v.claims); err != nil {
		return err
	}
	if err := v.flushRenamed(); err != nil {
		return err
	}
	return r.checkLiveTargets(ctx, v.live)
}

// verifier receives the first pass's tombstones and items.
type verifier struct {
	r      *runner
	ctx    context.Context
	scope  string // the current item scope
	claims []claim
	errs   []error
	failed int
	// renamed are package scopes (and tombstones) mapped onto another scope, not yet
	// looked up in the target; live those whose target scope holds memories there.
	renamed, live []renaming
}

// renaming is a package scope the mapping sends to another target scope.
type renaming struct{ source, target string }

// renamedBatch is how many renamed target scopes are looked up in the target at once.
const renamedBatch = 1000

// claim records that the package scope with hash source lands on the target scope
// with hash target.
type claim struct{ target, source uint64 }

func (v *verifier) hash(s string) uint64 { return maphash.String(v.r.seed, s) }

func (v *verifier) fail(err error) {
	if v.failed++; v.failed <= maxReportedErrors {
		v.errs = append(v.errs, err)
	}
}

func (v *verifier) tombstone(t memory.Tombstone) error {
	target, ok, err := v.r.mapTombstone(t.Scope)
	if err != nil {
		v.fail(fmt.Errorf("tombstone of %s: %w", t.Scope, err))
		return nil
	}
	if !ok {
		return nil
	}
	v.claims = append(v.claims, claim{target: v.hash(target), source: v.hash(t.Scope)})
	if v.r.dryTombs != nil {
		t.ForgottenAt = v.r.atMostCut(t.ForgottenAt)
		v.r.dryTombs.add(target, t)
	}
	return v.rename(t.Scope, target)
}

func (v *verifier) item(it memory.Item) error {
	if it.Scope != v.scope {
		v.scope = it.Scope
		return v.mapScope(it.Scope)
	}
	return nil
}

// mapScope maps one package scope and records where it lands.
func (v *verifier) mapScope(scope string) error {
	d, err := v.r.decide(scope)
	switch {
	case err != nil:
		v.fail(err)
	case d.skip == noSkip:
		v.claims = append(v.claims, claim{target: v.hash(d.target), source: v.hash(scope)})
		return v.rename(scope, d.target)
	}
	return nil
}

// rename notes a package scope landing on another target scope, whose memories in
// the target (if any) are someone else's: unless the restore says it merges on
// purpose (AllowMerge, IntoExisting), such targets are looked up, a batch at a time.
func (v *verifier) rename(source, target string) error {
	if source == target || v.r.o.AllowMerge || v.r.o.IntoExisting {
		return nil
	}
	if v.renamed = append(v.renamed, renaming{source: source, target: target}); len(v.renamed) >= renamedBatch {
		return v.flushRenamed()
	}
	return nil
}

// flushRenamed looks the noted target scopes up in the target and keeps those that
// hold memories.
func (v *verifier) flushRenamed() error {
	if len(v.renamed) == 0 {
		return nil
	}
	targets := make([]string, len(v.renamed))
	for i, rn := range v.renamed {
		targets[i] = rn.target
	}
	live, err := v.r.o.Target.LiveScopes(v.ctx, targets)
	if err != nil {
		return fmt.Errorf("restore: looking up the mapping's target scopes: %w", err)
	}
	if len(live) > 0 {
		isLive := make(map[string]bool, len(live))
		for _, sc := range live {
			isLive[sc] = true
		}
		for _, rn := range v.renamed {
			if isLive[rn.target] {
				v.live = append(v.live, rn)
			}
		}
	}
	v.renamed = v.renamed[:0]
	return nil
}

// check is the first pass's work on each item, on several goroutines at once: it is
// validated (the merge skips what fails, as Invalid, counted and reported; checking
// here proves before the first write that every item parses as what it claims to be).
// Validity does not depend on the scope, so mapping it later changes nothing. The
// second pass validates again while preparing the merge: keeping each item's
// preparation instead was measured slower, and costs memory.
func (r *runner) check(it *memory.Item) error {
	_ = it.Validate()
	return nil
}

// mapTombstone is the target scope of a package tombstone, and false when it has no
// known target identity (its scope is unmapped and the policy is Skip or Fail): such
// a tombstone is not applied, and its scope's items are not restored either.
func (r *runner) mapTombstone(scope string) (string, bool, error) {
	target, keep, err := r.o.Mapping.Map(scope)
	if errors.Is(err, ErrUnmapped) {
		return "", false, nil
	}
	return target, keep && err == nil, err
}

// checkNoMerge fails when two package scopes land on one target scope. The first
// pass kept only hashes; the package's scope list is read again for the names only
// when two hashes meet.
func (r *runner) checkNoMerge(ctx context.Context, claims []claim) error {
	slices.SortFunc(claims, func(a, b claim) int { return cmp.Or(cmp.Compare(a.target, b.target), cmp.Compare(a.source, b.source)) })
	suspects := map[uint64]bool{}
	for i := 1; i < len(claims); i++ {
		if claims[i].target == claims[i-1].target && claims[i].source != claims[i-1].source {
			suspects[claims[i].target] = true
		}
	}
	if len(suspects) == 0 {
		return nil
	}
	// target scope -> the package scopes landing on it, in scope order.
	landing := map[string][]string{}
	note := func(source, target string) {
		if !suspects[maphash.String(r.seed, target)] {
			return
		}
		if l := landing[target]; !slices.Contains(l, source) {
			landing[target] = append(l, source)
		}
	}
	err := r.o.Reader.Tombstones(ctx, func(t memory.Tombstone) error {
		if target, ok, _ := r.mapTombstone(t.Scope); ok {
			note(t.Scope, target)
		}
		return nil
	})
	if err == nil {
		err = r.o.Reader.ReadScopeCounts(ctx, func(scope string, _ int64) error {
			if d, err := r.decide(scope); err == nil && d.skip == noSkip {
				note(scope, d.target)
			}
			return nil
		})
	}
	if err != nil {
		return fmt.Errorf("restore: reading the package's scopes: %w", err)
	}
	var merged []string
	for target, sources := range landing {
		if len(sources) > 1 {
			slices.Sort(sources)
			names := sources[0] + " and " + sources[1]
			if len(sources) > 2 {
				names = fmt.Sprintf("%s, %s and %d more", sources[0], sources[1], len(sources)-2)
			}
			merged = append(merged, names+" to "+target)
		}
	}
	if len(merged) == 0 {
		return nil // hashes met, scopes did not
	}
	slices.Sort(merged)
	n := len(merged)
	if n > maxReportedErrors {
		merged = append(merged[:maxReportedErrors], fmt.Sprintf("... and %d more", n-maxReportedErrors))
	}
	return fmt.Errorf("restore: the mapping sends %d groups of package scopes to one target scope each, which would mix their memories "+
		"(and let one's tombstone forget the other's); nothing was written: %s. Map them to different scopes, or set allowMerge to merge them on purpose",
		n, strings.Join(merged, "; "))
}

// checkLiveTargets fails when the mapping renames a package scope onto a target
// scope that already holds memories of its own: restoring would put one person's
// memories into another's (Overwrite replacing theirs) and let the package scope's
// tombstone forget theirs. A target scope that an earlier restore filled from the
// same scope of the same source store is that person's (a newer snapshot restored
// with the same mapping). Memories the package itself put there (a rerun of an
// interrupted restore) are not the target's own either: they have a package item's
// ID and value (content hash). The package is read again only for the scopes that
// land on such targets.
func (r *runner) checkLiveTargets(ctx context.Context, live []renaming) error {
	live, err := r.unknownRenames(ctx, live)
	if err != nil || len(live) == 0 {
		return err
	}
	sources := make(map[string]bool, len(live))
	for _, rn := range live {
		sources[rn.source] = true
	}
	own, err := r.packageMemories(ctx, sources)
	if err != nil {
		return err
	}
	byTarget := map[string][]string{}
	var targets []string
	for _, rn := range live {
		if _, ok := byTarget[rn.target]; !ok {
			targets = append(targets, rn.target)
		}
		byTarget[rn.target] = append(byTarget[rn.target], rn.source)
	}
	slices.Sort(targets)
	var refused []string
	for _, target := range targets {
		var theirs []pgstore.OwnMemory
		for _, src := range byTarget[target] {
			theirs = append(theirs, own[src]...)
		}
		n, first, err := r.o.Target.ForeignMemories(ctx, target, theirs)
		if err != nil {
			return fmt.Errorf("restore: %w", err)
		}
		if n > 0 {
			srcs := slices.Compact(slices.Sorted(slices.Values(byTarget[target])))
			refused = append(refused, fmt.Sprintf("%s to %s, which holds %d memories of its own (%s, ...)", strings.Join(srcs, " and "), target, n, first))
		}
	}
	if len(refused) == 0 {
		return nil
	}
	n := len(refused)
	if n > maxReportedErrors {
		refused = append(refused[:maxReportedErrors], fmt.Sprintf("... and %d more", n-maxReportedErrors))
	}
	return fmt.Errorf("restore: the mapping sends %d package scopes onto scopes that already hold memories in the target, which would mix "+
		"two people's memories (and let one's tombstone forget the other's); nothing was written: %s. Map them to scopes of their own, "+
		"or set mapping.intoExisting (or allowMerge) to restore into them on purpose",
		n, strings.Join(refused, "; "))
}

// unknownRenames leaves out of live the renamings an earlier restore from the same
// source store recorded in the target (pgstore.KnownRenames).
func (r *runner) unknownRenames(ctx context.Context, live []renaming) ([]renaming, error) {
	if len(live) == 0 {
		return nil, nil
	}
	pairs := make([]pgstore.ScopeRename, len(live))
	for i, rn := range live {
		pairs[i] = pgstore.ScopeRename{Source: rn.source, Target: rn.target}
	}
	known, err := r.o.Target.KnownRenames(ctx, r.source, pairs)
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	isKnown := make(map[pgstore.ScopeRename]bool, len(known))
	for _, k := range known {
		isKnown[k] = true
	}
	return slices.DeleteFunc(live, func(rn renaming) bool { return isKnown[pgstore.ScopeRename{Source: rn.source, Target: rn.target}] }), nil
}

// packageMemories reads, from the shards that hold them, the IDs and content hashes of
// the items of the package scopes given.
func (r *runner) packageMemories(ctx context.Context, scopes map[string]bool) (map[string][]pgstore.OwnMemory, error) {
	own := map[string][]pgstore.OwnMemory{}
	collect := func(it memory.Item) error {
		if !scopes[it.Scope] {
			return nil
		}
		if h, err := it.ContentHash(); err == nil { // an invalid item is never written
			own[it.Scope] = append(own[it.Scope], pgstore.OwnMemory{ID: it.MemoryID, Hash: h})
		}
		return nil
	}
	for _, sh := range r.o.Reader.Manifest().Shards {
		if !shardHoldsAny(sh, scopes) {
			continue
		}
		var err error
		if r.pins != nil {
			err = r.o.Reader.(verifiablePackage).ShardItemsPinned(ctx, sh, r.pins, collect)
		} else {
			err = r.o.Reader.ShardItems(ctx, sh, collect)
		}
		if err != nil {
			return nil, fmt.Errorf("restore: reading the package's memory IDs: %w", err)
		}
	}
	return own, nil
}

// shardHoldsAny reports whether the shard's scope range holds one of scopes.
func shardHoldsAny(sh snapshot.ShardInfo, scopes map[string]bool) bool {
	for sc := range scopes {
		if sc >= sh.FirstScope && sc <= sh.LastScope {
			return true
		}
	}
	return false
}
