package restore_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/restore"
	"github.com/amemory/memory-operator/internal/snapshot"
	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/milvus"
)

// withVectors gives items the hashing embedder's vectors, as a package exported
// with embeddings carries them.
func withVectors(t testing.TB, items []memory.Item) []memory.Item {
	t.Helper()
	out := slices.Clone(items)
	h := embed.NewHashing(dim)
	for i := range out {
		v, err := h.Embed(context.Background(), embed.Passage, []string{out[i].EmbeddingText()})
		if err != nil {
			t.Fatal(err)
		}
		out[i].Embedding = v[0]
	}
	return out
}

var hashingEmbedding = &snapshot.EmbeddingInfo{Model: hashingModel, Dimension: dim, Metric: "cosine"}

// TestGuaranteeAllowMergeWithVectors: two package scopes holding the same key and the
// same content, merged on purpose into one target scope, end with exactly the rows and
// vectors that restoring the two scopes one after the other leaves, under every
// conflict and embeddings policy and both index engines; the dry run predicts the run.
func TestGuaranteeAllowMergeWithVectors(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	pkg := e.writePackage(t, "p/merge-vectors/", withVectors(t, []memory.Item{
		item("a-addr", "user:a", memory.Semantic, "address", `{"city":"Rome"}`, 5*day),
		item("a-pet", "user:a", memory.Semantic, "", `{"pet":"cat"}`, 4*day),
		item("a-only", "user:a", memory.Episodic, "", `{"event":"moved"}`, 3*day),
		item("b-addr", "user:b", memory.Semantic, "address", `{"city":"Lyon"}`, day),
		item("b-pet", "user:b", memory.Semantic, "", `{"pet":"cat"}`, 2*day),
		item("b-old", "user:b", memory.Semantic, "coffee", `{"drink":"tea"}`, 6*day),
		item("b-new", "user:b", memory.Semantic, "coffee", `{"drink":"espresso"}`, 2*day),
	}), pkgOptions{key: testKey, embedding: hashingEmbedding})
	mapper := func(t *testing.T) *restore.Mapper {
		m, err := restore.NewMapper(restore.UnmappedKeep)
		if err != nil {
			t.Fatal(err)
		}
		for _, from := range []string{"user:a", "user:b"} {
			if err := m.AddExact(from, "user:p"); err != nil {
				t.Fatal(err)
			}
		}
		return m
	}
	mc := milvusClient(t)
	type target struct {
		*store
		index vector.Index
		fetch *milvus.Index // nil: the PostgreSQL index, whose vectors are in the dump
	}
	newTarget := func(t *testing.T, engine string) target {
		s := e.newStore(t)
		if engine == "Milvus" {
			ix := newMilvusIndex(t, mc, spec16)
			return target{store: s, index: ix, fetch: ix}
		}
		return target{store: s, index: s.index}
	}
	vectors := func(t *testing.T, tg target) map[string][]float32 {
		if tg.fetch == nil {
			return tg.vectorsOf(t)
		}
		var ids []string
		for _, it := range tg.exportAll(t) {
			ids = append(ids, it.MemoryID)
		}
		got, err := tg.fetch.Fetch(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, engine := range []string{"Postgres", "Milvus"} {
		for _, policy := range []restore.ConflictPolicy{restore.KeepNewer, restore.Overwrite, restore.Skip} {
			for _, emb := range []restore.EmbeddingsPolicy{restore.Reuse, restore.Reembed} {
				t.Run(engine+"/"+string(policy)+"/"+string(emb), func(t *testing.T) {
					merged := newTarget(t, engine)
					opts := restore.Options{Reader: pkg, Target: merged.Store, Index: merged.index, Embedder: embed.NewHashing(dim),
						Mapping: mapper(t), Conflict: policy, Embeddings: emb, AllowMerge: true}
					res := dryThenReal(t, merged.store, opts, nil)
					if res.Scopes != 1 || res.Vectors == 0 {
						t.Fatalf("merged: %+v", res)
					}

					// The same scopes restored one after the other, user:a first (the
					// package's order, which a merge follows).
					seq := newTarget(t, engine)
					one := opts
					one.Target, one.Index, one.AllowMerge, one.Mapping = seq.Store, seq.index, false, mapper(t)
					one.Denylist = []string{"user:b"}
					run(t, one)
					one.Denylist, one.IntoExisting = []string{"user:a"}, true
					run(t, one)

					if got, want := merged.dump(t), seq.dump(t); !slices.Equal(got.memories, want.memories) || !slices.Equal(got.vectors, want.vectors) {
						assertSameDump(t, got, want)
					}
					gv, wv := vectors(t, merged), vectors(t, seq)
					if len(gv) != len(wv) || len(gv) != int(merged.count(t)) {
						t.Fatalf("%d vectors merged, %d one after the other, %d memories", len(gv), len(wv), merged.count(t))
					}
					for id, v := range wv {
						if !vectorsClose(gv[id], v) {
							t.Fatalf("vector of %s: merged %v, one after the other %v", id, gv[id], v)
						}
					}
				})
			}
		}
	}
}

// TestGuaranteeDryRunChecksVectorsAsTheRunWrites: package vectors the index cannot
// take (the zero vector under COSINE) are computed again, in the run and in the dry
// run alike, instead of failing the run midway after a dry run said yes.
func TestGuaranteeDryRunChecksVectorsAsTheRunWrites(t *testing.T) {
	e := newEnv(t)
	items := withVectors(t, []memory.Item{
		item("z1", "user:1", memory.Semantic, "k", `{"v":1}`, day),
		item("z2", "user:2", memory.Semantic, "k", `{"v":2}`, day),
	})
	items[1].Embedding = make([]float32, dim) // finite, valid as an item, no direction
	pkg := e.writePackage(t, "p/zero-vector/", items, pkgOptions{key: testKey, embedding: hashingEmbedding})
	dst := e.newStore(t)
	res := dryThenReal(t, dst, restore.Options{Reader: pkg, Target: dst.Store, Index: dst.index, Embedder: embed.NewHashing(dim),
		Embeddings: restore.Reuse}, nil)
	if res.Vectors != 2 || res.Embedded != 1 {
		t.Fatalf("result %+v", res)
	}
	want, _ := embed.NewHashing(dim).Embed(context.Background(), embed.Passage, []string{items[1].EmbeddingText()})
	if got := dst.vectorsOf(t)["z2"]; !vectorsClose(got, vector.Normalize(want[0])) && !vectorsClose(got, want[0]) {
		t.Fatalf("z2's vector %v, want the embedder's %v", got, want[0])
	}
}

// TestGuaranteeMappingOntoALiveScope: a mapping that renames a package scope onto a
// scope that already holds someone's memories in the target (the same keys, the same
// IDs, or none in common) is refused, dry run and run alike, with nothing written,
// unless intoExisting (or allowMerge) says so; so is one that brings a package
// tombstone onto it. A rerun of a restore into a scope it filled itself is not
// refused. Without a mapping, an ID held by another user's memory is reported as
// such, not as a conflict.
func TestGuaranteeMappingOntoALiveScope(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	bob := []memory.Item{
		item("bob-addr", "user:bob", memory.Semantic, "address", `{"city":"Oslo"}`, 3*day),
		item("bob-fact", "user:bob", memory.Semantic, "", `{"fact":"has a dog"}`, 3*day),
	}
	alice := []memory.Item{
		item("alice-addr", "user:alice", memory.Semantic, "address", `{"city":"Rome"}`, day), // bob's key
		item("bob-fact", "user:alice", memory.Semantic, "", `{"fact":"likes tea"}`, day),     // bob's ID
		item("alice-only", "user:alice", memory.Episodic, "", `{"event":"signed up"}`, day),
	}
	pkg := e.writePackage(t, "p/live/", alice, pkgOptions{key: testKey})
	tombOnly := e.writePackage(t, "p/live-tomb/", nil, pkgOptions{key: testKey,
		tombstones: []memory.Tombstone{{Scope: "user:alice", ForgottenAt: testNow}}})
	aliceToBob := func(t *testing.T) *restore.Mapper {
		m, err := restore.NewMapper(restore.UnmappedKeep)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.AddExact("user:alice", "user:bob"); err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, policy := range []restore.ConflictPolicy{restore.KeepNewer, restore.Overwrite, restore.Skip} {
		t.Run(string(policy), func(t *testing.T) {
			dst := e.newStore(t)
			seed(t, dst, bob)
			before := dst.dump(t)
			for _, p := range []*snapshot.Reader{pkg, tombOnly} {
				for _, dry := range []bool{true, false} {
					_, err := restore.Run(ctx, restore.Options{Reader: p, Target: dst.Store, Index: dst.index, Embedder: embed.NewHashing(dim),
						Mapping: aliceToBob(t), Conflict: policy, DryRun: dry, Now: testNow})
					if err == nil || !strings.Contains(err.Error(), "user:alice to user:bob, which holds 2 memories of its own (bob-addr") ||
						!strings.Contains(err.Error(), "intoExisting") || !strings.Contains(err.Error(), "nothing was written") {
						t.Fatalf("%s, dry run %v: %v", p.Prefix(), dry, err)
					}
					assertSameDump(t, dst.dump(t), before)
				}
			}
			// Asked for: restored into bob's scope by the policy; bob's ID stays bob's.
			res := dryThenReal(t, dst, restore.Options{Reader: pkg, Target: dst.Store, Index: dst.index, Embedder: embed.NewHashing(dim),
				Mapping: aliceToBob(t), Conflict: policy, IntoExisting: true}, nil)
			if res.Skipped.IDInUseByOtherScope != 0 || res.Read != 3 {
				t.Fatalf("into existing: %+v", res)
			}
		})
	}

	// A rerun into a scope the restore filled itself, after it stopped midway (here:
	// the first run took only the semantic memories), goes on.
	dst := e.newStore(t)
	opts := restore.Options{Reader: pkg, Target: dst.Store, Index: dst.index, Embedder: embed.NewHashing(dim), Mapping: aliceToBob(t),
		Types: []memory.Type{memory.Semantic}}
	if res := run(t, opts); res.Restored != 2 {
		t.Fatalf("first run: %+v", res)
	}
	opts.Types = nil
	if res := run(t, opts); res.Restored != 1 || res.Unchanged != 2 {
		t.Fatalf("rerun: %+v", res)
	}
	if res := run(t, opts); res.Restored != 0 || res.Unchanged != 3 {
		t.Fatalf("third run: %+v", res)
	}

	// A newer package of the same source store, restored with the same mapping into
	// the scope the first one filled (which bob's agent has written to since): the
	// same person, not refused, and it brings her forget. The same scope of another
	// store is someone else.
	if _, err := dst.Put(ctx, item("since", "user:bob", memory.Semantic, "", `{"written":"after the migration"}`, 0)); err != nil {
		t.Fatal(err)
	}
	newer := e.writePackage(t, "p/live-newer/", alice[:1], pkgOptions{key: testKey,
		tombstones: []memory.Tombstone{{Scope: "user:alice", ForgottenAt: testNow.Add(-2 * day)}}})
	other := e.writePackage(t, "p/live-other/", alice[:1], pkgOptions{key: testKey, source: &snapshot.SourceInfo{Name: "elsewhere", Store: "x"}})
	if _, err := restore.Run(ctx, restore.Options{Reader: other, Target: dst.Store, Index: dst.index, Embedder: embed.NewHashing(dim),
		Mapping: aliceToBob(t), Now: testNow}); err == nil || !strings.Contains(err.Error(), "which holds 3 memories of its own") {
		t.Fatalf("another store's user:alice: %v", err)
	}
	if res := run(t, restore.Options{Reader: newer, Target: dst.Store, Index: dst.index, Embedder: embed.NewHashing(dim), Mapping: aliceToBob(t)}); res.Tombstones != 1 {
		t.Fatalf("newer package: %+v", res)
	}

	// No mapping: alice's memory whose ID is bob's is skipped under its own reason.
	dst = e.newStore(t)
	seed(t, dst, bob)
	res := dryThenReal(t, dst, restore.Options{Reader: pkg, Target: dst.Store, Index: dst.index, Embedder: embed.NewHashing(dim)}, nil)
	if res.Skipped.IDInUseByOtherScope != 1 || res.Skipped.Conflict != 0 || res.IDConflicts != 0 || res.Restored != 2 {
		t.Fatalf("without a mapping: %+v", res)
	}
}

// TestGuaranteeLiveScopeFoundPastABatch: a prefix mapping over thousands of scopes is
// checked against the target in batches; one live target scope deep in the package
// (past the first batch) is found.
func TestGuaranteeLiveScopeFoundPastABatch(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	var items []memory.Item
	for i := range 2500 {
		items = append(items, item(fmt.Sprintf("m%04d", i), fmt.Sprintf("user:%04d", i), memory.Semantic, "", fmt.Sprintf(`{"n":%d}`, i), day))
	}
	pkg := e.writePackage(t, "p/live-batches/", items, pkgOptions{key: testKey})
	m, err := restore.NewMapper(restore.UnmappedKeep)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.AddPrefix("user:", "user:new-"); err != nil {
		t.Fatal(err)
	}
	dst := e.newStore(t)
	if _, err := dst.Put(ctx, item("someone", "user:new-2200", memory.Semantic, "", `{"mine":true}`, day)); err != nil {
		t.Fatal(err)
	}
	_, err = restore.Run(ctx, restore.Options{Reader: pkg, Target: dst.Store, Index: dst.index, Embedder: embed.NewHashing(dim), Mapping: m, Now: testNow})
	if err == nil || !strings.Contains(err.Error(), "user:2200 to user:new-2200, which holds 1 memories of its own (someone") {
		t.Fatalf("err = %v", err)
	}
	if n := dst.count(t); n != 1 {
		t.Fatalf("%d memories in the target", n)
	}
}

// uploadDir copies a package directory (the snapshot package's fixtures) into the
// bucket under prefix.
func (e *env) uploadDir(t testing.TB, dir, prefix string) {
	t.Helper()
	testutil.EachFile(t, dir, func(rel string, b []byte) {
		if _, err := e.obj.Put(context.Background(), prefix+rel, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	})
}

// TestGuaranteeWhoseClockForgets: what a package's tombstone covers in the target is
// decided by the time the store recorded each memory, never by its created_at. A
// memory dated 2090 already in the target (written before created_at was bounded)
// does not survive the tombstone of a later package; a version 2 package (no
// recorded_at: read as created_at, at most the package's cut) restores with its
// tombstones meaning what they meant, and its memory dated a year past its cut is
// refused as invalid, naming created_at.
func TestGuaranteeWhoseClockForgets(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	dst := e.newStore(t)
	// An old gateway stored it dated 2090; the migration recorded it no later than
	// it ran.
	if _, err := dst.db.Exec(ctx, `INSERT INTO `+pgx.Identifier{dst.schema, "memories"}.Sanitize()+`
		(memory_id, memory_type, scope, content, content_hash, base_score, created_at, updated_at, recorded_at)
		VALUES ('dated-2090', 'semantic', 'user:9', '{"v":"2090"}', '\x01', 0.5, '2090-01-01', '2090-01-01', clock_timestamp())`); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Second)
	pkg := e.writePackage(t, "p/clock/", nil, pkgOptions{key: testKey, now: later.Add(time.Second),
		tombstones: []memory.Tombstone{{Scope: "user:9", ForgottenAt: later}}})
	res := dryThenReal(t, dst, restore.Options{Reader: pkg, Target: dst.Store, Index: dst.index, Embedder: embed.NewHashing(dim)}, nil)
	if res.Forgotten != 1 || dst.count(t) != 0 {
		t.Fatalf("the package's tombstone left the memory dated 2090: %+v, %d memories", res, dst.count(t))
	}

	for _, fixture := range []struct {
		dir string
		key *snapshot.Key
	}{{"v2-plain", nil}, {"v2-encrypted", mustKey("snapshot-test-key-0123456789abcd")}} {
		t.Run(fixture.dir, func(t *testing.T) {
			e.uploadDir(t, filepath.Join("..", "snapshot", "testdata", fixture.dir), fixture.dir+"/")
			v2 := e.open(t, fixture.dir+"/", fixture.key)
			if v2.StoredFormatVersion() != 2 {
				t.Fatalf("stored format version %d", v2.StoredFormatVersion())
			}
			dst := e.newStore(t)
			res := dryThenReal(t, dst, restore.Options{Reader: v2, Target: dst.Store, Index: dst.index, Embedder: embed.NewHashing(dim)}, nil)
			// user:2's three memories were created before its tombstone; v2-u3-m2 is
			// dated a year after the cut.
			if res.Read != 12 || res.Restored != 8 || res.Skipped.Tombstoned != 3 || res.Skipped.Invalid != 1 ||
				!strings.Contains(res.FirstInvalid, `"v2-u3-m2": created_at`) || !strings.Contains(res.FirstInvalid, "after the server's clock") {
				t.Fatalf("result %+v", res)
			}
			cut := v2.Manifest().CreatedAt
			for _, it := range dst.exportAll(t) {
				if !it.RecordedAt.Equal(it.CreatedAt) || it.RecordedAt.After(cut) {
					t.Fatalf("%s recorded at %s (created %s, cut %s): want its created_at", it.MemoryID, it.RecordedAt, it.CreatedAt, cut)
				}
			}
		})
	}
}

// TestGuaranteeDenylistIsNormalised: a denylist entry spelled decomposed (NFD) matches the
// package's scope, which is NFC, exactly and as a prefix.
func TestGuaranteeDenylistIsNormalised(t *testing.T) {
	e := newEnv(t)
	pkg := e.writePackage(t, "p/deny-nfc/", []memory.Item{
		item("z1", "user:zoë", memory.Semantic, "", `{"v":1}`, day),
		item("z2", "user:zoë-2", memory.Semantic, "", `{"v":2}`, day),
		item("o1", "user:other", memory.Semantic, "", `{"v":3}`, day),
	}, pkgOptions{key: testKey})
	for _, deny := range [][]string{{"user:zoe\u0308", "user:zoe\u0308-2"}, {"user:zoe\u0308*"}} {
		dst := e.newStore(t)
		res := run(t, restore.Options{Reader: pkg, Target: dst.Store, Index: dst.index, Embedder: embed.NewHashing(dim), Denylist: deny})
		if res.Skipped.Denylisted != 2 || res.Restored != 1 {
			t.Fatalf("denylist %q: %+v", deny, res)
		}
	}
}

// TestGuaranteeEmbedderLimitInRestores: a restore computing vectors holds the target's
// embedder input limit as its gateway does. Under Refuse a memory whose text is over
// it is not restored (counted textTooLong), in the dry run and the run alike; under
// Truncate it is restored and indexed on its text's first bytes; a memory whose
// package vector is reused sends no text, and is restored under either.
func TestGuaranteeEmbedderLimitInRestores(t *testing.T) {
	e := newEnv(t)
	long := item("long", "user:1", memory.Episodic, "", `{"text":"`+strings.Repeat("ünïcödé ", 2000)+`"}`, day)
	items := []memory.Item{long, item("short", "user:1", memory.Semantic, "", `{"v":1}`, day), item("other", "user:2", memory.Semantic, "", `{"v":2}`, day)}
	pkg := e.writePackage(t, "p/limit/", items, pkgOptions{key: testKey})
	limit := func(o embed.Overflow) embed.Limit { return embed.Limit{MaxInputBytes: 1000, Overflow: o} }

	dst := e.newStore(t)
	res := dryThenReal(t, dst, restore.Options{Reader: pkg, Target: dst.Store, Index: dst.index, Embedder: embed.NewHashing(dim),
		EmbedLimit: limit(embed.Refuse)}, nil)
	if res.Skipped.TextTooLong != 1 || res.Restored != 2 || res.Vectors != 2 {
		t.Fatalf("under Refuse: %+v", res)
	}

	dst = e.newStore(t)
	res = dryThenReal(t, dst, restore.Options{Reader: pkg, Target: dst.Store, Index: dst.index, Embedder: embed.NewHashing(dim),
		EmbedLimit: limit(embed.Truncate)}, nil)
	if res.Skipped.TextTooLong != 0 || res.Restored != 3 || res.Vectors != 3 {
		t.Fatalf("under Truncate: %+v", res)
	}
	cut, truncated, err := limit(embed.Truncate).Prepare("long", long.EmbeddingText())
	if err != nil || !truncated || len(cut) > 1000 {
		t.Fatalf("Prepare: %d bytes, %v, %v", len(cut), truncated, err)
	}
	want, _ := embed.NewHashing(dim).Embed(context.Background(), embed.Passage, []string{cut})
	if got := dst.vectorsOf(t)["long"]; !vectorsClose(got, vector.Normalize(want[0])) && !vectorsClose(got, want[0]) {
		t.Fatalf("the long memory's vector is not the truncated text's")
	}

	// Its package vector reused: nothing is sent to the embedder, nothing refused.
	withVec := e.writePackage(t, "p/limit-reuse/", withVectors(t, items), pkgOptions{key: testKey, embedding: hashingEmbedding})
	dst = e.newStore(t)
	res = dryThenReal(t, dst, restore.Options{Reader: withVec, Target: dst.Store, Index: dst.index, Embedder: embed.NewHashing(dim),
		Embeddings: restore.Reuse, EmbedLimit: limit(embed.Refuse)}, nil)
	if res.Skipped.TextTooLong != 0 || res.Restored != 3 || res.Embedded != 0 {
		t.Fatalf("reusing package vectors under Refuse: %+v", res)
	}
}
