package restore_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/restore"
)

// TestGuaranteeDryRunReportsWhatARunDoes: a dry run counts exactly what the real run
// then does, for every conflict policy, also where the package's tombstones change
// what the items meet in the target: a user forgotten in the package after the target
// got memories of theirs, who came back and wrote again in the same slots.
func TestGuaranteeDryRunReportsWhatARunDoes(t *testing.T) {
	e := newEnv(t)
	// The clocks are real: the target's memories are recorded as the subtests seed
	// them, before the forget (a minute from now; a tombstone later than the target's
	// clock is applied at the clock's time), and the package is cut after it.
	forgotAt := time.Now().Add(time.Minute).UTC().Truncate(time.Microsecond)
	recorded := func(it memory.Item, at time.Time) memory.Item { it.RecordedAt = at; return it }
	// The target holds user:5's address and a fact from before the forget, and user:6.
	targetItems := []memory.Item{
		item("t-addr", "user:5", memory.Semantic, "address", `{"city":"Rome"}`, 5*day),
		item("t-fact", "user:5", memory.Semantic, "", `{"fact":"has a cat"}`, 4*day),
		item("t-six", "user:6", memory.Semantic, "address", `{"city":"Oslo"}`, 3*day),
	}
	// The package: user:5 forgotten at forgotAt and back since, writing the same slot;
	// user:6 with an older address; and a memory of user:5 recorded before the forget.
	pkg := e.writePackage(t, "p/dry-exact/", []memory.Item{
		recorded(item("p-addr", "user:5", memory.Semantic, "address", `{"city":"Lyon"}`, day), forgotAt.Add(30*time.Second)),
		recorded(item("p-old", "user:5", memory.Episodic, "", `{"event":"before the forget"}`, 3*day), forgotAt.Add(-time.Hour)),
		recorded(item("p-six", "user:6", memory.Semantic, "address", `{"city":"Bergen"}`, 4*day), forgotAt.Add(-time.Hour)),
	}, pkgOptions{key: testKey, now: forgotAt.Add(time.Minute), tombstones: []memory.Tombstone{{Scope: "user:5", ForgottenAt: forgotAt, Reason: "asked"}}})
	for _, policy := range []restore.ConflictPolicy{restore.KeepNewer, restore.Overwrite, restore.Skip} {
		t.Run(string(policy), func(t *testing.T) {
			dst := e.newStore(t)
			seed(t, dst, targetItems)
			opts := restore.Options{Reader: pkg, Target: dst.Store, Index: dst.index, Embedder: embed.NewHashing(dim), Conflict: policy}
			full := dryThenReal(t, dst, opts, nil)
			if full.Read != full.Restored+full.Unchanged+full.Skipped.Total() {
				t.Fatalf("counts do not add up: %+v", full)
			}
			// What the real run did: user:5's old memories forgotten, its new address in.
			if full.Tombstones != 1 || full.Forgotten != 2 || full.Skipped.Tombstoned != 1 || full.Inserted < 1 {
				t.Fatalf("real run %+v", full)
			}
			var got []string
			for _, it := range dst.exportAll(t) {
				got = append(got, it.MemoryID)
			}
			if !slices.Contains(got, "p-addr") || slices.Contains(got, "t-addr") || slices.Contains(got, "t-fact") || slices.Contains(got, "p-old") {
				t.Fatalf("target after the run: %v", got)
			}
		})
	}
}

// TestGuaranteeAllowMergeMergesOnPurpose: with allowMerge, two package scopes mapped
// to one target scope are merged as if they were one scope, conflicts resolved by the
// policy, and a tombstone of either forgets, in it, what it covers. The counts say how
// many target scopes there are.
func TestGuaranteeAllowMergeMergesOnPurpose(t *testing.T) {
	e := newEnv(t)
	pkg := e.writePackage(t, "p/merge/", []memory.Item{
		item("a-addr", "user:old-account", memory.Semantic, "address", `{"city":"Rome"}`, 5*day),
		item("a-pet", "user:old-account", memory.Semantic, "", `{"pet":"cat"}`, 5*day),
		item("b-addr", "user:new-account", memory.Semantic, "address", `{"city":"Lyon"}`, day),
		item("b-late", "user:new-account", memory.Semantic, "", `{"fact":"after the forget"}`, 0),
		item("c", "user:other", memory.Semantic, "", `{"x":1}`, day),
	}, pkgOptions{key: testKey, tombstones: []memory.Tombstone{{Scope: "user:new-account", ForgottenAt: testNow.Add(-2 * day)}}})
	m, err := restore.NewMapper(restore.UnmappedKeep)
	if err != nil {
		t.Fatal(err)
	}
	for _, from := range []string{"user:old-account", "user:new-account"} {
		if err := m.AddExact(from, "user:person"); err != nil {
			t.Fatal(err)
		}
	}
	dst := e.newStore(t)
	opts := restore.Options{Reader: pkg, Target: dst.Store, Index: dst.index, Embedder: embed.NewHashing(dim), Mapping: m}
	if _, err := restore.Run(context.Background(), opts); err == nil || !strings.Contains(err.Error(), "user:new-account and user:old-account to user:person") {
		t.Fatalf("without allowMerge: %v", err)
	}
	opts.AllowMerge = true
	res := run(t, opts)
	var got []string
	for _, it := range dst.exportAll(t) {
		got = append(got, it.Scope+"/"+it.MemoryID)
	}
	slices.Sort(got)
	// The tombstone of user:new-account, mapped, covers user:person's memories created
	// before it, from either account; b-addr is newer than it, and b-late.
	want := []string{"user:other/c", "user:person/b-addr", "user:person/b-late"}
	if !slices.Equal(got, want) {
		t.Fatalf("target %v, want %v", got, want)
	}
	// Two target scopes (user:person, user:other); one package scope restored under
	// another name (user:old-account's memories are all covered).
	if res.Scopes != 2 || res.MappedScopes != 1 || res.Skipped.Tombstoned != 2 {
		t.Fatalf("result %+v", res)
	}
	ts, err := dst.Tombstones(context.Background())
	if err != nil || len(ts) != 1 || ts[0].Scope != "user:person" {
		t.Fatalf("tombstones %+v, %v", ts, err)
	}
}
