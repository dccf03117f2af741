package snapshot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
)

var (
	clockStart = time.Date(2026, 4, 1, 2, 0, 0, 0, time.UTC)
	tombstones = []memory.Tombstone{
		{Scope: "user:zz-forgotten", ForgottenAt: time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), Reason: "gdpr request"},
		{Scope: "user:aa-forgotten", ForgottenAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
)

// fixedClock returns a clock that advances one second per call.
func fixedClock() func() time.Time {
	t := clockStart
	return func() time.Time {
		t = t.Add(time.Second)
		return t
	}
}

func baseOptions(prefix string) WriterOptions {
	since := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	k := testKey
	return WriterOptions{
		Prefix:          prefix,
		Key:             &k,
		Producer:        "memory-operator",
		ProducerVersion: "v0.1.0-test",
		Source:          SourceInfo{Namespace: "acme", Name: "agents", Tenant: "acme", Store: "mem_acme_agents", VectorEngine: "postgres"},
		Selection: Selection{
			ScopePrefixes:     []string{"user:", "session:", "agent:"},
			Types:             memory.AllTypes(),
			ActiveSince:       &since,
			IncludeEmbeddings: true,
		},
		Embedding: &EmbeddingInfo{Model: "text-embedding-3-small", Dimension: 16, Metric: "cosine"},
		Now:       fixedClock(),
	}
}

// expectedCounts computes what the manifest must say about items.
func expectedCounts(items []memory.Item) Counts {
	c := Counts{ByType: map[memory.Type]int64{}, ByScope: map[string]int64{}}
	for _, t := range memory.AllTypes() {
		c.ByType[t] = 0
	}
	for _, it := range items {
		c.Items++
		c.ByType[it.MemoryType]++
		c.ByScope[it.Scope]++
		if len(it.Embedding) > 0 {
			c.WithEmbedding++
		}
	}
	c.Scopes = int64(len(c.ByScope))
	return c
}

func TestRoundTripEncrypted(t *testing.T) {
	obj := newBucket(t)
	ctx := context.Background()
	items := genItems(genOptions{items: 3000, scopes: 400, dim: 16, seed: 1})
	opts := baseOptions("memory-operator/acme/snapshots/nightly-20260401-0200")
	opts.ShardTargetBytes = 256 << 10
	written := writePackage(t, obj, opts, items, tombstones)

	// The manifest: exact counts, shards, parameters, tombstones sorted by scope.
	if want := expectedCounts(items); !reflect.DeepEqual(written.Counts, want) {
		t.Fatalf("counts = %+v\nwant %+v", written.Counts, want)
	}
	if len(written.Shards) < 4 {
		t.Fatalf("%d shards; want several with a 256 KiB target", len(written.Shards))
	}
	if written.Encryption == nil || *written.Encryption != (EncryptionInfo{Algorithm: "AES-256-GCM", KDF: "HKDF-SHA256", KeyID: testKey.ID()}) {
		t.Fatalf("encryption = %+v", written.Encryption)
	}
	if written.Compression != (CompressionInfo{Algorithm: "zstd", Level: 1}) || written.Framing != (FramingInfo{Version: 1, ChunkSize: DefaultChunkSize}) {
		t.Fatalf("compression %+v, framing %+v", written.Compression, written.Framing)
	}
	if written.FormatVersion != FormatVersion || written.Producer != "memory-operator" || written.ProducerVersion != "v0.1.0-test" ||
		!written.CreatedAt.Equal(clockStart.Add(time.Second)) || !written.CompletedAt.Equal(clockStart.Add(2*time.Second)) ||
		written.Source != opts.Source || *written.Embedding != *opts.Embedding {
		t.Fatalf("manifest header = %+v", written)
	}
	wantTombs := TombstoneSet{Count: 2, Entries: []memory.Tombstone{tombstones[1], tombstones[0]}}
	if !reflect.DeepEqual(written.Tombstones, wantTombs) {
		t.Fatalf("tombstones = %+v", written.Tombstones)
	}

	// Stored objects: exactly the shards and the manifest, with the recorded sizes,
	// and no plaintext.
	prefix := "memory-operator/acme/snapshots/nightly-20260401-0200/"
	wantNames := []string{ManifestName}
	for _, s := range written.Shards {
		wantNames = append(wantNames, s.Name)
		b := getObject(t, obj, prefix+s.Name)
		if int64(len(b)) != s.Bytes || bytes.Contains(b, []byte("langgraph")) {
			t.Fatalf("shard %s: %d bytes stored, manifest %d; plaintext visible: %v", s.Name, len(b), s.Bytes, bytes.Contains(b, []byte("langgraph")))
		}
	}
	slices.Sort(wantNames)
	if got := listNames(t, obj, prefix); !slices.Equal(got, wantNames) {
		t.Fatalf("objects = %v, want %v", got, wantNames)
	}

	r, err := Open(ctx, obj, prefix, &testKey)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.Manifest(), written) {
		t.Fatalf("manifest read back differs:\n got %+v\nwant %+v", r.Manifest(), written)
	}
	if r.StoredFormatVersion() != FormatVersion {
		t.Fatalf("stored version %d", r.StoredFormatVersion())
	}
	sameItems(t, readItems(t, r), items)
	if err := r.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.VerifyChecksums(ctx); err != nil {
		t.Fatalf("VerifyChecksums of an intact package: %v", err)
	}

	// Shard by shard gives the same items; no scope straddles shards.
	var all []memory.Item
	for _, s := range r.Manifest().Shards {
		if err := r.ShardItems(ctx, s, func(it memory.Item) error {
			if it.Scope < s.FirstScope || it.Scope > s.LastScope {
				return fmt.Errorf("scope %s outside shard %s", it.Scope, s.Name)
			}
			all = append(all, it)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	sameItems(t, all, items)

	// An error from the callback stops reading and comes back as is.
	stop := errors.New("stop here")
	n := 0
	if err := r.Items(ctx, func(memory.Item) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
		t.Fatalf("callback error: %v after %d items", err, n)
	}
}

func TestRoundTripUnencrypted(t *testing.T) {
	obj := newBucket(t)
	ctx := context.Background()
	// About 3 MiB in one shard: several compressed frames.
	items := genItems(genOptions{items: 6000, scopes: 50, seed: 2})
	opts := baseOptions("pkg/plain")
	opts.Key, opts.Unencrypted = nil, true
	opts.Selection.IncludeEmbeddings, opts.Embedding = false, nil
	opts.CompressionLevel = 7
	m := writePackage(t, obj, opts, items, nil)
	if m.Encryption != nil || m.Compression.Level != 7 || m.Tombstones.Count != 0 || m.Tombstones.Entries != nil || m.Tombstones.Object != nil {
		t.Fatalf("manifest: encryption %+v, compression %+v, tombstones %#v", m.Encryption, m.Compression, m.Tombstones)
	}
	raw := getObject(t, obj, "pkg/plain/"+ManifestName)
	if bytes.Contains(raw, []byte(`"mac"`)) || !bytes.Contains(raw, []byte(`"tombstones": {`+"\n"+`    "count": 0`+"\n"+`  }`)) {
		t.Fatalf("unencrypted manifest:\n%s", raw)
	}

	if len(m.Shards) != 1 || m.Shards[0].RawBytes < 2*frameSize {
		t.Fatalf("want one shard of several frames: %+v", m.Shards)
	}
	r, err := Open(ctx, obj, "pkg/plain/", nil)
	if err != nil {
		t.Fatal(err)
	}
	sameItems(t, readItems(t, r), items)
	if err := r.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	// A key where none is needed is refused: an expected encrypted package must not
	// silently be replaced by a plaintext one.
	if _, err := Open(ctx, obj, "pkg/plain", &testKey); !errors.Is(err, ErrNotEncrypted) {
		t.Fatalf("Open with a key: %v", err)
	}
}

func TestEmptyPackage(t *testing.T) {
	obj := newBucket(t)
	m := writePackage(t, obj, baseOptions("empty"), nil, nil)
	if m.Counts.Items != 0 || len(m.Shards) != 0 || m.Counts.ByScope == nil {
		t.Fatalf("manifest = %+v", m)
	}
	r, err := Open(context.Background(), obj, "empty", &testKey)
	if err != nil {
		t.Fatal(err)
	}
	if got := readItems(t, r); len(got) != 0 {
		t.Fatalf("read %d items", len(got))
	}
}

func TestShardingKeepsScopesTogether(t *testing.T) {
	obj := newBucket(t)
	ctx := context.Background()
	items := genItems(genOptions{items: 2000, scopes: 200, seed: 3})
	// One scope far larger than the shard target, in the middle.
	var big []memory.Item
	for i, it := range genItems(genOptions{items: 600, scopes: 1, seed: 4}) {
		it.Scope, it.MemoryID = "session:000099x", fmt.Sprintf("big%04d", i)
		big = append(big, it)
	}
	at := slices.IndexFunc(items, func(it memory.Item) bool { return it.Scope > "session:000099x" })
	items = slices.Concat(items[:at], big, items[at:])

	opts := baseOptions("sharded")
	opts.Selection.IncludeEmbeddings, opts.Embedding = false, nil
	opts.ShardTargetBytes = 32 << 10
	m := writePackage(t, obj, opts, items, nil)
	if len(m.Shards) < 10 {
		t.Fatalf("%d shards; want many with a 32 KiB target", len(m.Shards))
	}
	r, err := Open(ctx, obj, "sharded", &testKey)
	if err != nil {
		t.Fatal(err)
	}
	owner := map[string]string{} // scope → shard
	bigShards := map[string]int{}
	for _, s := range m.Shards {
		if err := r.ShardItems(ctx, s, func(it memory.Item) error {
			if o, ok := owner[it.Scope]; ok && o != s.Name {
				return fmt.Errorf("scope %s is in shards %s and %s", it.Scope, o, s.Name)
			}
			owner[it.Scope] = s.Name
			if it.Scope == "session:000099x" {
				bigShards[s.Name]++
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if s.RawBytes < opts.ShardTargetBytes && s.Name != m.Shards[len(m.Shards)-1].Name {
			t.Errorf("shard %s was cut at %d bytes, below the target", s.Name, s.RawBytes)
		}
	}
	if len(bigShards) != 1 {
		t.Fatalf("the large scope is spread over %v", bigShards)
	}
	for _, n := range bigShards {
		if n != 600 {
			t.Fatalf("the large scope's shard holds %d of its 600 items", n)
		}
	}
	if len(owner) != 201 {
		t.Fatalf("%d scopes read, want 201", len(owner))
	}
}

func TestAddRefusesBadItems(t *testing.T) {
	obj := newBucket(t)
	ctx := context.Background()
	w, err := NewWriter(ctx, obj, baseOptions("refusals"))
	if err != nil {
		t.Fatal(err)
	}
	item := func(id, scope string) memory.Item {
		return memory.Item{MemoryID: id, MemoryType: memory.Semantic, Scope: scope, Content: []byte(`{}`), CreatedAt: clockStart, UpdatedAt: clockStart}
	}
	if err := w.Add(ctx, item("1", "user:b")); err != nil {
		t.Fatal(err)
	}
	err = w.Add(ctx, item("2", "user:a"))
	if !errors.Is(err, ErrScopeOrder) || !strings.Contains(err.Error(), `item 2 has scope "user:a", which sorts before the current scope "user:b"`) {
		t.Fatalf("out of order: %v", err)
	}
	bad := item("3", "user:c")
	bad.MemoryType = "dream"
	wrongDim := item("5", "user:c")
	wrongDim.Embedding = []float32{1, 2}
	for _, tc := range []struct {
		it   memory.Item
		want string
	}{
		{item("", "user:c"), `an item in scope "user:c" has no memory_id`},
		{item("3", ""), "item 3 has no scope"},
		{bad, `item 3: unknown memory type "dream"`},
		{item("4", "nobody"), `scope "nobody" has no kind`},
		{wrongDim, "item 5 has an embedding of 2 dimensions; the package's model text-embedding-3-small has 16"},
	} {
		if err := w.Add(ctx, tc.it); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
	// Refused items leave the writer usable.
	if err := w.Add(ctx, item("6", "user:b")); err != nil {
		t.Fatal(err)
	}
	if err := w.Add(ctx, item("7", "user:c")); err != nil {
		t.Fatal(err)
	}
	m, err := w.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.Counts.Items != 3 || !reflect.DeepEqual(m.Counts.ByScope, map[string]int64{"user:b": 2, "user:c": 1}) {
		t.Fatalf("counts = %+v", m.Counts)
	}
	if err := w.Add(ctx, item("8", "user:d")); err == nil || !strings.Contains(err.Error(), "writer is closed") {
		t.Fatalf("Add after Close: %v", err)
	}
}

func TestWriterOptions(t *testing.T) {
	obj := newBucket(t)
	ctx := context.Background()
	for _, tc := range []struct {
		edit func(o *WriterOptions)
		want string
	}{
		{func(o *WriterOptions) { o.Key = nil }, "no key given; set WriterOptions.Unencrypted"},
		{func(o *WriterOptions) { o.Unencrypted = true }, "both a key and Unencrypted are set"},
		{func(o *WriterOptions) { o.Prefix = "/" }, "Prefix is empty"},
		{func(o *WriterOptions) { o.CompressionLevel = 23 }, "compression level 23 is outside 1..22"},
		{func(o *WriterOptions) { o.ChunkSize = 100 }, "chunk size 100 is outside"},
		{func(o *WriterOptions) { o.Embedding = nil }, "IncludeEmbeddings is set but Embedding"},
		{func(o *WriterOptions) { o.Selection.IncludeEmbeddings = false }, "Embedding is set but Selection.IncludeEmbeddings is not"},
		{func(o *WriterOptions) { o.Embedding = &EmbeddingInfo{Model: "m"} }, `embedding model "m" with dimension 0 is incomplete`},
	} {
		o := baseOptions("opts")
		tc.edit(&o)
		if _, err := NewWriter(ctx, obj, o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
}

func TestNewWriterNeverOverwrites(t *testing.T) {
	obj := newBucket(t)
	ctx := context.Background()
	items := genItems(genOptions{items: 50, scopes: 5, dim: 16, seed: 5})
	writePackage(t, obj, baseOptions("done"), items, nil)
	if _, err := NewWriter(ctx, obj, baseOptions("done")); !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "holds a complete package") {
		t.Fatalf("over a complete package: %v", err)
	}
	o := baseOptions("done")
	o.ReplaceIncomplete = true
	if _, err := NewWriter(ctx, obj, o); !errors.Is(err, ErrExists) {
		t.Fatalf("ReplaceIncomplete over a complete package: %v", err)
	}

	putObject(t, obj, "leftover/shards/000001.jsonl.zst.sealed", []byte("partial"))
	if _, err := NewWriter(ctx, obj, baseOptions("leftover")); !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "holds 1 objects but no manifest") {
		t.Fatalf("over leftovers: %v", err)
	}
	o = baseOptions("leftover")
	o.ReplaceIncomplete = true
	m := writePackage(t, obj, o, items, nil)
	r, err := Open(ctx, obj, "leftover", &testKey)
	if err != nil {
		t.Fatal(err)
	}
	sameItems(t, readItems(t, r), items)
	if got := listNames(t, obj, "leftover/"); len(got) != len(m.Shards)+1 {
		t.Fatalf("objects after replacing leftovers: %v", got)
	}
}

func TestScopeCountsObject(t *testing.T) {
	obj := newBucket(t)
	ctx := context.Background()
	opts := baseOptions("many-scopes")
	opts.Selection.IncludeEmbeddings, opts.Embedding = false, nil
	items := genItems(genOptions{items: 2 * (MaxInlineScopes + 1), scopes: MaxInlineScopes + 1, seed: 6})
	m := writePackage(t, obj, opts, items, nil)
	ref := m.Counts.ScopeCountsObject
	if m.Counts.ByScope != nil || ref == nil || ref.Name != ScopeCountsName || m.Counts.Scopes != MaxInlineScopes+1 {
		t.Fatalf("counts = %+v", m.Counts)
	}
	if got := listNames(t, obj, "many-scopes/"); !slices.Contains(got, ScopeCountsName) {
		t.Fatalf("objects = %v", got)
	}
	r, err := Open(ctx, obj, "many-scopes", &testKey)
	if err != nil {
		t.Fatal(err)
	}
	want := expectedCounts(items).ByScope
	got := map[string]int64{}
	var order []string
	if err := r.ReadScopeCounts(ctx, func(scope string, n int64) error {
		got[scope] = n
		order = append(order, scope)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || !slices.IsSorted(order) {
		t.Fatalf("scope counts differ (sorted: %v)", slices.IsSorted(order))
	}
	if err := r.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.VerifyChecksums(ctx); err != nil {
		t.Fatalf("VerifyChecksums of an intact package: %v", err)
	}
	sameItems(t, readItems(t, r), items)

	// A scope counts object too large to spool in memory is streamed like a shard.
	opts = baseOptions("many-scopes-streamed")
	opts.Selection.IncludeEmbeddings, opts.Embedding = false, nil
	w, err := NewWriter(ctx, obj, opts)
	if err != nil {
		t.Fatal(err)
	}
	w.spoolLimit = 100 // the header fits, the first chunk does not
	for _, it := range items {
		if err := w.Add(ctx, it); err != nil {
			t.Fatal(err)
		}
	}
	streamed, err := w.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, up := range w.started {
		if up.name == ScopeCountsName && (up.pw == nil || up.spool != nil) {
			t.Fatalf("the scope counts were not streamed (%d bytes)", streamed.Counts.ScopeCountsObject.Bytes)
		}
	}
	r2, err := Open(ctx, obj, "many-scopes-streamed", &testKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := r2.Verify(ctx); err != nil {
		t.Fatal(err)
	}

	// Exactly MaxInlineScopes scopes stay inline.
	items = genItems(genOptions{items: MaxInlineScopes, scopes: MaxInlineScopes, seed: 7})
	opts = baseOptions("inline-scopes")
	opts.Selection.IncludeEmbeddings, opts.Embedding = false, nil
	m = writePackage(t, obj, opts, items, nil)
	if m.Counts.ScopeCountsObject != nil || len(m.Counts.ByScope) != MaxInlineScopes {
		t.Fatalf("%d scopes: counts object %v, %d inline", MaxInlineScopes, m.Counts.ScopeCountsObject, len(m.Counts.ByScope))
	}

	// The scope counts object is verified like a shard.
	name := "many-scopes/" + ScopeCountsName
	putObject(t, obj, name, flip(getObject(t, obj, name), headerSize+3))
	err = r.Verify(ctx)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "scope counts object "+ScopeCountsName+": chunk 0 failed authentication") {
		t.Fatalf("tampered scope counts: %v", err)
	}
}

func TestAbortLeavesNothing(t *testing.T) {
	obj := newBucket(t)
	ctx := context.Background()
	opts := baseOptions("aborted")
	opts.ShardTargetBytes = 16 << 10
	w, err := NewWriter(ctx, obj, opts)
	if err != nil {
		t.Fatal(err)
	}
	items := genItems(genOptions{items: 1500, scopes: MaxInlineScopes + 100, dim: 16, seed: 8})
	for _, it := range items {
		if err := w.Add(ctx, it); err != nil {
			t.Fatal(err)
		}
	}
	if got := listNames(t, obj, "aborted/"); len(got) == 0 {
		t.Fatal("no shard was uploaded before the abort; the test proves nothing")
	}
	if err := w.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if got := listNames(t, obj, "aborted/"); len(got) != 0 {
		t.Fatalf("objects left after Abort: %v", got)
	}
	assertNoIncompleteUploads(t, obj, "aborted/")
	if _, err := Open(ctx, obj, "aborted", &testKey); !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), "there is no package at aborted/") {
		t.Fatalf("Open after Abort: %v", err)
	}
	if _, err := w.Close(ctx); err == nil {
		t.Fatal("Close after Abort succeeded")
	}
}

func assertNoIncompleteUploads(t *testing.T, obj *MinioObjects, prefix string) {
	t.Helper()
	for u := range obj.Client.ListIncompleteUploads(context.Background(), obj.Bucket, prefix, true) {
		if u.Err != nil {
			t.Fatal(u.Err)
		}
		t.Errorf("unfinished upload left: %s", u.Key)
	}
}

// A writer that stops half-way (the process dies) leaves shards but no manifest: the
// prefix is an incomplete package that readers refuse.
func TestInterruptedWriterLeavesNoManifest(t *testing.T) {
	obj := newBucket(t)
	ctx := context.Background()
	opts := baseOptions("crashed")
	opts.ShardTargetBytes = 16 << 10
	w, err := NewWriter(ctx, obj, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range genItems(genOptions{items: 600, scopes: 60, dim: 16, seed: 9}) {
		if err := w.Add(ctx, it); err != nil {
			t.Fatal(err)
		}
	}
	if len(w.shards) < 3 {
		t.Fatalf("only %d shards finished", len(w.shards))
	}
	// Shards 1 .. n-1 are stored: finishing shard n waited for shard n-1.
	got := listNames(t, obj, "crashed/")
	if len(got) < len(w.shards)-1 || slices.Contains(got, ManifestName) {
		t.Fatalf("objects = %v", got)
	}
	_, err = Open(ctx, obj, "crashed", &testKey)
	if !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), "crashed/ holds") || !strings.Contains(err.Error(), "objects but no manifest.json") {
		t.Fatalf("Open: %v", err)
	}
	if err := w.Abort(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestCancelledWriterLeavesNoManifest(t *testing.T) {
	obj := newBucket(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	faulty := &faultObjects{Objects: obj}
	// Cancel while shard 3 is being uploaded, after some of its bytes went out.
	faulty.onPut = func(name string, r io.Reader) (io.Reader, error) {
		if strings.HasSuffix(name, "shards/000003.jsonl.zst.sealed") {
			return &afterBytes{r: r, n: 100, fn: cancel}, nil
		}
		return r, nil
	}
	opts := baseOptions("cancelled")
	opts.ShardTargetBytes = 16 << 10
	w, err := NewWriter(ctx, faulty, opts)
	if err != nil {
		t.Fatal(err)
	}
	var addErr error
	for _, it := range genItems(genOptions{items: 3000, scopes: 300, dim: 16, seed: 10}) {
		if addErr = w.Add(ctx, it); addErr != nil {
			break
		}
	}
	if addErr == nil {
		_, addErr = w.Close(ctx)
	}
	if !errors.Is(addErr, context.Canceled) {
		t.Fatalf("writing after the cancel: %v", addErr)
	}
	if _, err := w.Close(context.Background()); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close after the cancel: %v", err)
	}
	if got := listNames(t, obj, "cancelled/"); slices.Contains(got, ManifestName) {
		t.Fatalf("a manifest was written: %v", got)
	}
	if _, err := Open(context.Background(), obj, "cancelled", &testKey); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("Open: %v", err)
	}
	if err := w.Abort(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := listNames(t, obj, "cancelled/"); len(got) != 0 {
		t.Fatalf("objects left after Abort: %v", got)
	}
	assertNoIncompleteUploads(t, obj, "cancelled/")
}

func TestFailedUploadLeavesNoManifest(t *testing.T) {
	obj := newBucket(t)
	ctx := context.Background()
	faulty := &faultObjects{Objects: obj}
	boom := errors.New("injected: connection reset")
	faulty.onPut = func(name string, r io.Reader) (io.Reader, error) {
		if strings.HasSuffix(name, "shards/000002.jsonl.zst.sealed") {
			return nil, boom
		}
		return r, nil
	}
	opts := baseOptions("failed")
	opts.ShardTargetBytes = 16 << 10
	w, err := NewWriter(ctx, faulty, opts)
	if err != nil {
		t.Fatal(err)
	}
	var werr error
	for _, it := range genItems(genOptions{items: 1000, scopes: 100, dim: 16, seed: 11}) {
		if werr = w.Add(ctx, it); werr != nil {
			break
		}
	}
	if werr == nil {
		_, werr = w.Close(ctx)
	}
	if !errors.Is(werr, boom) || !strings.Contains(werr.Error(), "failed/shards/000002.jsonl.zst.sealed") {
		t.Fatalf("got %v", werr)
	}
	if _, err := w.Close(ctx); !errors.Is(err, boom) {
		t.Fatalf("Close after the failure: %v", err)
	}
	if _, err := Open(ctx, obj, "failed", &testKey); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("Open: %v", err)
	}
	if err := w.Abort(ctx); err != nil {
		t.Fatal(err)
	}
}

// tamperFixture writes a small encrypted package with many chunks per shard.
func tamperFixture(t *testing.T, obj Objects, prefix string, key *Key) *Manifest {
	t.Helper()
	opts := baseOptions(prefix)
	opts.ChunkSize = MinChunkSize
	opts.ShardTargetBytes = 64 << 10
	if key == nil {
		opts.Key, opts.Unencrypted = nil, true
	} else {
		opts.Key = key
	}
	m := writePackage(t, obj, opts, genItems(genOptions{items: 800, scopes: 80, dim: 16, seed: 12}), tombstones)
	if len(m.Shards) < 3 || m.Shards[1].Bytes < headerSize+4*(MinChunkSize+tagSize) {
		t.Fatalf("fixture too small: %d shards, shard 2 is %d bytes", len(m.Shards), m.Shards[1].Bytes)
	}
	return m
}

func TestTamperedShardsAreRefused(t *testing.T) {
	obj := newBucket(t)
	ctx := context.Background()
	const shard2 = "shards/000002.jsonl.zst.sealed"
	chunk := MinChunkSize + tagSize
	span := func(i int) (int, int) { return headerSize + i*chunk, headerSize + (i+1)*chunk }
	for _, tc := range []struct {
		name   string
		tamper func(b []byte) []byte
		want   string
	}{
		{"flipped byte", func(b []byte) []byte { s, _ := span(2); return flip(b, s+100) },
			"shard " + shard2 + ": chunk 2 failed authentication"},
		{"flipped header byte", func(b []byte) []byte { return flip(b, 40) },
			"shard " + shard2 + ": chunk 0 failed authentication"},
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] },
			"shard " + shard2 + " is truncated: it ends after"},
		{"final chunk dropped", func(b []byte) []byte { return b[:headerSize+(len(b)-headerSize-1)/chunk*chunk] },
			"shard " + shard2 + " is truncated"},
		{"chunk dropped", func(b []byte) []byte { s, e := span(1); return cat(b[:s], b[e:]) },
			"shard " + shard2 + ": chunk 1 failed authentication"},
		{"chunks reordered", func(b []byte) []byte {
			s1, e1 := span(1)
			s2, e2 := span(2)
			return cat(b[:s1], b[s2:e2], b[s1:e1], b[e2:])
		}, "shard " + shard2 + ": chunk 1 failed authentication"},
		{"data appended", func(b []byte) []byte { return cat(b, []byte("more")) },
			"shard " + shard2 + " is %d bytes; the manifest records %d"},
		{"header of another seal", func(b []byte) []byte { c := bytes.Clone(b); c[9] = byte(sealChecksum); return c },
			"shard " + shard2 + " is unencrypted (SHA-256 checksums) but the manifest says the package is AES-256-GCM"},
		{"not a shard", func([]byte) []byte { return bytes.Repeat([]byte("x"), 2000) },
			"shard " + shard2 + " does not start with the sealed-stream magic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := strings.ReplaceAll(tc.name, " ", "-")
			tamperFixture(t, obj, prefix, &testKey)
			name := prefix + "/" + shard2
			orig := getObject(t, obj, name)
			putObject(t, obj, name, tc.tamper(orig))
			if strings.Contains(tc.want, "%d") {
				tc.want = fmt.Sprintf(tc.want, len(orig)+4, len(orig))
			}
			r, err := Open(ctx, obj, prefix, &testKey)
			if err != nil {
				t.Fatal(err)
			}
			err = r.Verify(ctx)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Verify: %v\nwant ErrCorrupt containing %q", err, tc.want)
			}
			// The cheap check refuses every tampered shard too (on size or digest).
			if err := r.VerifyChecksums(ctx); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "shard "+shard2) {
				t.Fatalf("VerifyChecksums: %v", err)
			}
			// Items refuses the same way, after passing on the intact shard 1.
			n := int64(0)
			err = r.Items(ctx, func(memory.Item) error { n++; return nil })
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) || n < r.Manifest().Shards[0].Items {
				t.Fatalf("Items: %v after %d items", err, n)
			}
		})
	}
}

func TestPackageLevelTampering(t *testing.T) {
	obj := newBucket(t)
	ctx := context.Background()
	const shard1, shard2 = "shards/000001.jsonl.zst.sealed", "shards/000002.jsonl.zst.sealed"

	t.Run("missing manifest", func(t *testing.T) {
		tamperFixture(t, obj, "no-manifest", &testKey)
		if err := obj.Delete(ctx, "no-manifest/"+ManifestName); err != nil {
			t.Fatal(err)
		}
		_, err := Open(ctx, obj, "no-manifest", &testKey)
		if !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), "no-manifest/ holds") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("missing shard", func(t *testing.T) {
		tamperFixture(t, obj, "no-shard", &testKey)
		if err := obj.Delete(ctx, "no-shard/"+shard2); err != nil {
			t.Fatal(err)
		}
		r, err := Open(ctx, obj, "no-shard", &testKey)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Verify(ctx); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "shard "+shard2+" is missing") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("wrong key", func(t *testing.T) {
		tamperFixture(t, obj, "wrong-key", &testKey)
		other := testKey
		other[5] ^= 0x80
		_, err := Open(ctx, obj, "wrong-key", &other)
		if !errors.Is(err, ErrWrongKey) || !strings.Contains(err.Error(), "encrypted with key id "+testKey.ID()) {
			t.Fatalf("got %v", err)
		}
		if _, err := Open(ctx, obj, "wrong-key", nil); !errors.Is(err, ErrKeyRequired) {
			t.Fatalf("no key: %v", err)
		}
	})
	t.Run("edited manifest counts", func(t *testing.T) {
		m := tamperFixture(t, obj, "edited", &testKey)
		name := "edited/" + ManifestName
		raw := getObject(t, obj, name)
		old := fmt.Sprintf(`"items": %d`, m.Counts.Items)
		putObject(t, obj, name, bytes.Replace(raw, []byte(old), []byte(fmt.Sprintf(`"items": %d`, m.Counts.Items-1)), 1))
		_, err := Open(ctx, obj, "edited", &testKey)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "manifest.json failed authentication: it was modified after it was written") {
			t.Fatalf("got %v", err)
		}
		// Dropping a tombstone is refused the same way.
		putObject(t, obj, name, bytes.Replace(raw, []byte(`"user:aa-forgotten"`), []byte(`"user:zz-forgotten"`), 1))
		if _, err := Open(ctx, obj, "edited", &testKey); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("edited tombstones: %v", err)
		}
	})
	t.Run("future format version", func(t *testing.T) {
		tamperFixture(t, obj, "future", &testKey)
		name := "future/" + ManifestName
		putObject(t, obj, name, bytes.Replace(getObject(t, obj, name), fmt.Appendf(nil, `"formatVersion": %d,`, FormatVersion), fmt.Appendf(nil, `"formatVersion": %d,`, FormatVersion+1), 1))
		_, err := Open(ctx, obj, "future", &testKey)
		if !errors.Is(err, ErrUnsupportedVersion) || !strings.Contains(err.Error(), fmt.Sprintf("the package has format version %d; this reader supports versions 1 to %d", FormatVersion+1, FormatVersion)) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("shards swapped", func(t *testing.T) {
		tamperFixture(t, obj, "swapped", &testKey)
		a, b := getObject(t, obj, "swapped/"+shard1), getObject(t, obj, "swapped/"+shard2)
		putObject(t, obj, "swapped/"+shard1, b)
		putObject(t, obj, "swapped/"+shard2, a)
		r, err := Open(ctx, obj, "swapped", &testKey)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Verify(ctx); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "shard "+shard1+": chunk 0 failed authentication") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("shard from another package", func(t *testing.T) {
		tamperFixture(t, obj, "mine", &testKey)
		tamperFixture(t, obj, "theirs", &testKey)
		putObject(t, obj, "mine/"+shard1, getObject(t, obj, "theirs/"+shard1))
		r, err := Open(ctx, obj, "mine", &testKey)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Verify(ctx); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "shard "+shard1+" belongs to another package") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("unencrypted: flipped byte", func(t *testing.T) {
		tamperFixture(t, obj, "plain-flip", nil)
		name := "plain-flip/" + shard2
		putObject(t, obj, name, flip(getObject(t, obj, name), headerSize+MinChunkSize+tagSize+7))
		r, err := Open(ctx, obj, "plain-flip", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Verify(ctx); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "shard "+shard2+": chunk 1 failed its checksum") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("unencrypted: edited counts", func(t *testing.T) {
		m := tamperFixture(t, obj, "plain-edit", nil)
		name := "plain-edit/" + ManifestName
		raw := getObject(t, obj, name)
		// Move one item between two scopes' counts: the totals still add up, so only
		// reading the data can tell.
		var a, b string
		for s := range m.Counts.ByScope {
			if a == "" || s < a {
				a = s
			}
		}
		for s := range m.Counts.ByScope {
			if s != a && (b == "" || s < b) {
				b = s
			}
		}
		edit := bytes.Replace(raw, []byte(fmt.Sprintf(`"%s": %d`, a, m.Counts.ByScope[a])), []byte(fmt.Sprintf(`"%s": %d`, a, m.Counts.ByScope[a]+1)), 1)
		edit = bytes.Replace(edit, []byte(fmt.Sprintf(`"%s": %d`, b, m.Counts.ByScope[b])), []byte(fmt.Sprintf(`"%s": %d`, b, m.Counts.ByScope[b]-1)), 1)
		putObject(t, obj, name, edit)
		r, err := Open(ctx, obj, "plain-edit", nil)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("shard %s holds %d items of scope %q; the manifest records %d", shard1, m.Counts.ByScope[a], a, m.Counts.ByScope[a]+1)
		if err := r.Verify(ctx); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v\nwant %q", err, want)
		}
		// Totals that do not add up are refused at Open.
		putObject(t, obj, name, bytes.Replace(raw, []byte(fmt.Sprintf(`"items": %d`, m.Counts.Items)), []byte(`"items": 1`), 1))
		if _, err := Open(ctx, obj, "plain-edit", nil); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "shards hold 800 items but counts.items is 1") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("unencrypted: edited checksum", func(t *testing.T) {
		m := tamperFixture(t, obj, "plain-sum", nil)
		name := "plain-sum/" + ManifestName
		old := m.Shards[2].SHA256
		forged := strings.Repeat("0", 64)
		putObject(t, obj, name, bytes.Replace(getObject(t, obj, name), []byte(old), []byte(forged), 1))
		r, err := Open(ctx, obj, "plain-sum", nil)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("shard %s has SHA-256 %s; the manifest records %s", m.Shards[2].Name, old, forged)
		if err := r.Verify(ctx); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v", err)
		}
	})
}

// MinioObjects.Get reports missing objects as fs.ErrNotExist, which Open relies on.
func TestMinioObjectsNotExist(t *testing.T) {
	obj := newBucket(t)
	_, err := obj.Get(context.Background(), "nothing/here")
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "nothing/here") {
		t.Fatalf("got %v", err)
	}
	if err := obj.Delete(context.Background(), ""); err == nil {
		t.Fatal("Delete with an empty prefix succeeded")
	}
}

// Scan with several workers decoding and checking lines gives the items in the same
// order as one goroutine does, checks every one, and fails the same way on damage, a
// failing check or a cancelled context.
func TestScanInParallel(t *testing.T) {
	obj := newBucket(t)
	ctx := context.Background()
	items := genItems(genOptions{items: 20000, scopes: 400, seed: 9})
	opts := baseOptions("parallel")
	opts.Selection.IncludeEmbeddings, opts.Embedding = false, nil
	opts.ShardTargetBytes = 1 << 20
	m := writePackage(t, obj, opts, items, nil)
	if len(m.Shards) < 3 {
		t.Fatalf("%d shards; the test needs several", len(m.Shards))
	}
	r, err := Open(ctx, obj, "parallel", &testKey)
	if err != nil {
		t.Fatal(err)
	}
	collect := func(workers int) ([]string, int64, error) {
		var ids []string
		var checked atomic.Int64
		err := r.Scan(ctx, ScanFuncs{Workers: workers,
			Check: func(it *memory.Item) error { checked.Add(1); return it.Validate() },
			Item:  func(it memory.Item) error { ids = append(ids, it.MemoryID); return nil }})
		return ids, checked.Load(), err
	}
	one, n1, err := collect(1)
	if err != nil || n1 != int64(len(items)) {
		t.Fatalf("one worker: %v, %d checked", err, n1)
	}
	four, n4, err := collect(4)
	if err != nil || n4 != int64(len(items)) || !slices.Equal(one, four) {
		t.Fatalf("four workers: %v, %d checked, same order %v", err, n4, slices.Equal(one, four))
	}
	boom := errors.New("boom")
	if err := r.Scan(ctx, ScanFuncs{Workers: 4, Check: func(it *memory.Item) error {
		if it.MemoryID == items[15000].MemoryID {
			return boom
		}
		return nil
	}}); !errors.Is(err, boom) {
		t.Fatalf("failing check: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := r.Scan(cancelled, ScanFuncs{Workers: 4}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	// A damaged chunk in a later shard: both ways refuse it as corrupt.
	name := "parallel/" + m.Shards[2].Name
	body := getObject(t, obj, name)
	damaged := bytes.Clone(body)
	damaged[len(damaged)/2] ^= 0x40
	putObject(t, obj, name, damaged)
	for _, w := range []int{1, 4} {
		if err := r.Scan(ctx, ScanFuncs{Workers: w}); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%d workers over a damaged shard: %v", w, err)
		}
	}
}
