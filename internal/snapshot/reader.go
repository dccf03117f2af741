package snapshot

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"slices"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/amemory/memory-operator/internal/memory"
)

// Limits a reader applies to what it decodes.
const (
	// MaxLineBytes is the longest item line accepted (an item with its content,
	// history and embedding).
	MaxLineBytes = 64 << 20
	// readWindow is the largest zstd window accepted; writers use at most 8 MiB.
	readWindow = zstdWindow
	// readBuffer sizes the buffers between object, frames, decoder and lines.
	readBuffer = 256 << 10
	// decoderConcurrency 2 decodes ahead in a goroutine (decryption and decompression
	// overlap JSON parsing) with a bounded number of blocks in flight.
	decoderConcurrency = 2
)

// Reader reads a complete package. Open checks the manifest; Items, ShardItems and
// Verify stream the data and check it as they go: every chunk is authenticated before
// its content is used, and each stream's size, SHA-256, item and scope counts and
// scope order are compared with the manifest at its end. A Reader holds no state
// between calls, so ShardItems may run concurrently for different shards.
type Reader struct {
	obj       Objects
	prefix    string
	key       *Key
	m         *Manifest
	stored    int // format version the package was written in
	packageID [16]byte
	seal      sealKind
	itemUp    func([]byte) ([]byte, error) // nil when items need no upgrade
}

// Open reads and checks the manifest of the package at prefix. key must be given for
// an encrypted package and must be nil for an unencrypted one. Errors wrap
// ErrIncomplete (no manifest), ErrUnsupportedVersion, ErrKeyRequired, ErrWrongKey,
// ErrNotEncrypted or ErrCorrupt (invalid or modified manifest).
func Open(ctx context.Context, obj Objects, prefix string, key *Key) (*Reader, error) {
	prefix = strings.TrimLeft(prefix, "/")
	if prefix == "" {
		return nil, errors.New("snapshot: empty package prefix")
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	raw, err := readManifest(ctx, obj, prefix)
	if err != nil {
		return nil, err
	}
	var k *Key
	if key != nil {
		kk := *key
		k = &kk
	}
	m, stored, err := decodeManifest(raw, k)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", prefix, err)
	}
	r := &Reader{obj: obj, prefix: prefix, key: k, m: m, stored: stored, seal: sealChecksum}
	if m.Encryption != nil {
		r.seal = sealAESGCM
	}
	_, _ = hex.Decode(r.packageID[:], []byte(m.PackageID)) // validated
	r.itemUp = itemUpgrader(stored, upgrades, FormatVersion)
	return r, nil
}

func readManifest(ctx context.Context, obj Objects, prefix string) ([]byte, error) {
	rc, err := obj.Get(ctx, prefix+ManifestName)
	if errors.Is(err, fs.ErrNotExist) {
		names, lerr := obj.List(ctx, prefix)
		switch {
		case lerr != nil:
			return nil, fmt.Errorf("%w: %s has no %s (and listing it failed: %v)", ErrIncomplete, prefix, ManifestName, lerr)
		case len(names) == 0:
			return nil, fmt.Errorf("%w: there is no package at %s (no objects under the prefix)", ErrIncomplete, prefix)
		}
		return nil, fmt.Errorf("%w: %s holds %d objects but no %s: the writer failed, was aborted or is still running", ErrIncomplete, prefix, len(names), ManifestName)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot: reading %s: %w", prefix+ManifestName, err)
	}
	defer func() { _ = rc.Close() }()
	raw, err := io.ReadAll(io.LimitReader(rc, maxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("snapshot: reading %s: %w", prefix+ManifestName, err)
	}
	if len(raw) > maxManifestBytes {
		return nil, corruptf("%s is larger than %d bytes", prefix+ManifestName, maxManifestBytes)
	}
	return raw, nil
}

// Manifest returns the package's manifest, upgraded to FormatVersion. Callers must not
// modify it.
func (r *Reader) Manifest() *Manifest { return r.m }

// StoredFormatVersion is the format version the package was written in (the manifest
// and items are upgraded from it to FormatVersion when read).
func (r *Reader) StoredFormatVersion() int { return r.stored }

// Prefix is the package's prefix, with its trailing "/".
func (r *Reader) Prefix() string { return r.prefix }

// Verify reads the whole package and checks everything Scan checks, without keeping
// anything: every chunk's tag, every stream's size and SHA-256, every tombstone, every
// line as an item, scope order, and the item counts per shard, scope and type.
func (r *Reader) Verify(ctx context.Context) error { return r.Scan(ctx, ScanFuncs{}) }

// VerifyChecksums is a cheap check of a package's integrity: every object of the
// package (shards, the scope counts and tombstone objects) is there with the size
// and SHA-256 the manifest records, and the first shard's first chunk opens with the
// key and decompresses. With the manifest authenticated (its MAC, when encrypted) this
// proves the stored bytes are the ones the writer sealed, without decompressing and
// parsing every item as Verify does. It does not prove what the writer sealed is a
// valid package (an unencrypted one can be edited and re-hashed): a restore verifies
// the whole package with Scan before it writes.
func (r *Reader) VerifyChecksums(ctx context.Context) error {
	for _, ref := range r.m.objects() {
		if err := r.checkObject(ctx, ref); err != nil {
			return err
		}
	}
	if len(r.m.Shards) == 0 {
		return nil
	}
	dec, err := newDecoder()
	if err != nil {
		return err
	}
	defer dec.Close()
	first := r.m.Shards[0]
	st, err := r.openStream(ctx, ObjectRef{Name: first.Name, Bytes: first.Bytes, SHA256: first.SHA256}, "shard "+first.Name, dec)
	if err != nil {
		return err
	}
	defer st.close()
	if _, err := st.next(); err != nil && err != io.EOF {
		return err
	}
	return nil
}

// checkObject streams one object through SHA-256 and compares size and digest with
// the manifest.
func (r *Reader) checkObject(ctx context.Context, ref ObjectRef) error {
	what := "object " + ref.Name
	if strings.HasPrefix(ref.Name, "shards/") {
		what = "shard " + ref.Name
	}
	body, err := r.obj.Get(ctx, r.prefix+ref.Name)
	if errors.Is(err, fs.ErrNotExist) {
		return corruptf("%s is missing", what)
	}
	if err != nil {
		return fmt.Errorf("snapshot: %s: %w", what, err)
	}
	defer func() { _ = body.Close() }()
	h := sha256.New()
	n, err := io.Copy(h, body)
	if err != nil {
		return fmt.Errorf("snapshot: reading %s: %w", what, err)
	}
	if n != ref.Bytes {
		return corruptf("%s is %d bytes; the manifest records %d", what, n, ref.Bytes)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != ref.SHA256 {
		return corruptf("%s has SHA-256 %s; the manifest records %s", what, sum, ref.SHA256)
	}
	return nil
}

// Items calls fn for every item, in shard order (so sorted by scope, and in the order
// they were written within a scope), checking the whole package as Scan does.
func (r *Reader) Items(ctx context.Context, fn func(memory.Item) error) error {
	return r.Scan(ctx, ScanFuncs{Item: fn})
}

// ScanFuncs receive what Scan reads; any may be nil.
type ScanFuncs struct {
	// Tombstone is called for every tombstone, in scope order, before any item.
	Tombstone func(memory.Tombstone) error
	// Item is called for every item, in shard order.
	Item func(memory.Item) error
	// Check, when set, is called for every item before Item sees it, from Workers
	// goroutines at once and in no particular order: the place for expensive work on
	// single items (validation). Lines are then decoded on those goroutines too.
	Check func(it *memory.Item) error
	// Workers is the number of goroutines decoding and checking lines (default 1:
	// on the reading goroutine, with Check run there too).
	Workers int
	// Pins, when set, receives the chunk tags of every shard (see Pins).
	Pins *Pins
	// Session is called for every live session the package carries, in order,
	// after the tombstones and before any item.
	Session func(Session) error
}

// Scan reads the whole package: the tombstones, then every shard with the scope counts
// streamed alongside. It checks the package as it goes and returns an ErrCorrupt
// error at the first problem; an error from a callback stops it and is returned as
// is. The callbacks see only authenticated data, but an error at the end of a stream
// (a count or checksum) can still follow entries already passed to them: a consumer
// that must not act on a package that fails anywhere scans it whole first.
func (r *Reader) Scan(ctx context.Context, f ScanFuncs) error {
	tomb := f.Tombstone
	if tomb == nil {
		tomb = func(memory.Tombstone) error { return nil }
	}
	if err := r.Tombstones(ctx, tomb); err != nil {
		return err
	}
	sess := f.Session
	if sess == nil {
		sess = func(Session) error { return nil }
	}
	if err := r.Sessions(ctx, sess); err != nil {
		return err
	}
	fn := f.Item
	if fn == nil {
		fn = func(memory.Item) error { return nil }
	}
	dec, err := newDecoder()
	if err != nil {
		return err
	}
	defer dec.Close()
	sc, err := r.scopeChecker(ctx, true)
	if err != nil {
		return err
	}
	defer sc.close()
	var tc typeCounts
	for _, shard := range r.m.Shards {
		var pin *streamPin
		if f.Pins != nil {
			pin = f.Pins.record(shard.Name)
		}
		var err error
		if f.Workers > 1 {
			err = r.readShardParallel(ctx, shard, pin, dec, sc, &tc, f)
		} else {
			check := fn
			if f.Check != nil {
				check = func(it memory.Item) error {
					if err := f.Check(&it); err != nil {
						return err
					}
					return fn(it)
				}
			}
			err = r.readShard(ctx, shard, pin, dec, sc, &tc, check)
		}
		if err != nil {
			return err
		}
	}
	if err := sc.finish(); err != nil {
		return err
	}
	return tc.check(r.m.Counts)
}

// Pins hold the chunk tags of a package's shards from a first read (Scan with
// ScanFuncs.Pins), so that a second read (ShardItemsPinned) fails at the first chunk
// that differs, before releasing any of it: what a consumer gets the second time is
// exactly what the first read verified, even if the bucket's objects change in
// between. They cost 16 bytes per 64 KiB of package.
type Pins struct {
	mu     sync.Mutex
	shards map[string]*streamPin
}

// NewPins returns empty Pins.
func NewPins() *Pins { return &Pins{shards: map[string]*streamPin{}} }

func (p *Pins) record(name string) *streamPin {
	p.mu.Lock()
	defer p.mu.Unlock()
	sp := &streamPin{}
	p.shards[name] = sp
	return sp
}

func (p *Pins) checker(name string) (*streamPin, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sp, ok := p.shards[name]
	if !ok {
		return nil, fmt.Errorf("snapshot: shard %s was not read before", name)
	}
	return &streamPin{check: true, tags: sp.tags}, nil
}

// lineBatch is a run of a shard's lines on its way through readShardParallel: copied
// out of the stream, decoded (and checked) by a worker, then consumed in order.
type lineBatch struct {
	first int64  // line number of the first line
	buf   []byte // the lines, back to back
	ends  []int  // line i is buf[ends[i-1]:ends[i]]
	items []memory.Item
	err   error
	done  chan struct{}
}

// parallelBatchBytes bounds a batch of lines (one longer line is a batch alone).
const parallelBatchBytes = 256 << 10

// readShardParallel is readShard with the lines decoded and checked by f.Workers
// goroutines, and every per-shard check and f.Item run, in line order, here.
func (r *Reader) readShardParallel(ctx context.Context, shard ShardInfo, pin *streamPin, dec *zstd.Decoder, sc *scopeChecker, tc *typeCounts, f ScanFuncs) error {
	what := fmt.Sprintf("shard %s", shard.Name)
	s, err := r.openPinnedStream(ctx, ObjectRef{Name: shard.Name, Bytes: shard.Bytes, SHA256: shard.SHA256}, what, dec, pin)
	if err != nil {
		return err
	}
	defer s.close()
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan *lineBatch)
	ordered := make(chan *lineBatch, 2*f.Workers) // bounds the batches in flight
	var readErr error
	var wg sync.WaitGroup
	for range f.Workers {
		wg.Go(func() {
			for b := range jobs {
				r.decodeBatch(what, b, f.Check)
				close(b.done)
			}
		})
	}
	go func() {
		defer close(ordered)
		defer close(jobs)
		readErr = batchLines(ctx, s, ordered, jobs)
	}()
	st := shardCheck{what: what, shard: shard, sc: sc, tc: tc}
	err = deliverBatches(ordered, &st, f.Item)
	cancel()
	for b := range ordered { // let the reader stop
		<-b.done
	}
	wg.Wait()
	if err != nil {
		return err
	}
	if readErr != nil {
		return readErr
	}
	if err := parent.Err(); err != nil {
		return err
	}
	if err := s.finish(); err != nil {
		return err
	}
	return st.end()
}

// batchLines reads the stream's lines into batches and sends each to ordered (in
// line order, for delivery) and to jobs (for decoding). It returns the stream's read
// error, or nil when the stream ended or ctx was cancelled.
func batchLines(ctx context.Context, s *stream, ordered, jobs chan<- *lineBatch) error {
	newBatch := func(first int64) *lineBatch {
		return &lineBatch{first: first, buf: make([]byte, 0, parallelBatchBytes+4096), ends: make([]int, 0, 1024), done: make(chan struct{})}
	}
	b := newBatch(1)
	send := func() bool {
		select {
		case ordered <- b:
		case <-ctx.Done():
			return false
		}
		select {
		case jobs <- b:
		case <-ctx.Done():
			b.err = ctx.Err()
			close(b.done) // never decoded: its consumer must not wait
			return false
		}
		b = newBatch(s.lines + 1)
		return true
	}
	for {
		line, err := s.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		b.buf = append(b.buf, line...)
		b.ends = append(b.ends, len(b.buf))
		if len(b.buf) >= parallelBatchBytes && !send() {
			return nil
		}
	}
	if len(b.ends) > 0 {
		send()
	}
	return nil
}

// deliverBatches waits for each decoded batch in line order and passes its items to
// the shard's checks and then to fn (when set), stopping at the first error.
func deliverBatches(ordered <-chan *lineBatch, st *shardCheck, fn func(memory.Item) error) error {
	for b := range ordered {
		<-b.done
		if b.err != nil {
			return b.err
		}
		for i := range b.items {
			if err := st.add(b.first+int64(i), &b.items[i]); err != nil {
				return err
			}
			if fn != nil {
				if err := fn(b.items[i]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// decodeBatch decodes (and checks) the lines of b into b.items.
func (r *Reader) decodeBatch(what string, b *lineBatch, check func(*memory.Item) error) {
	b.items = make([]memory.Item, len(b.ends))
	start := 0
	for i, end := range b.ends {
		line := b.first + int64(i)
		it, err := r.decodeItem(what, line, b.buf[start:end])
		if err == nil && check != nil {
			err = check(&it)
		}
		if err != nil {
			b.err = err
			return
		}
		b.items[i] = it
		start = end
	}
}

// TombstoneCount is the number of the package's tombstones.
func (r *Reader) TombstoneCount() int64 { return r.m.Tombstones.Count }

// Tombstones calls fn for each of the package's tombstones, one per scope in
// increasing scope order, from the manifest or streamed from the tombstone object
// (verified like a shard: its count, order, size and SHA-256; an error at its end can
// follow tombstones already passed to fn).
func (r *Reader) Tombstones(ctx context.Context, fn func(memory.Tombstone) error) error {
	set := r.m.Tombstones
	if set.Object == nil {
		for _, t := range set.Entries {
			if err := fn(t); err != nil {
				return err
			}
		}
		return nil
	}
	what := "tombstone object " + set.Object.Name
	var prev string
	var n int64
	err := r.eachLine(ctx, *set.Object, what, func(lineNo int64, line []byte) error {
		var t memory.Tombstone
		if err := json.Unmarshal(line, &t); err != nil {
			return corruptf("%s line %d is not a tombstone: %v", what, lineNo, err)
		}
		if err := checkTombstone(t, prev); err != nil {
			return corruptf("%s line %d: %v", what, lineNo, err)
		}
		prev = t.Scope
		if n++; n > set.Count {
			return corruptf("%s holds more than the %d tombstones the manifest records", what, set.Count)
		}
		t.ForgottenAt = t.ForgottenAt.UTC()
		return fn(t)
	})
	if err != nil {
		return err
	}
	if n != set.Count {
		return corruptf("%s holds %d tombstones; the manifest records %d", what, n, set.Count)
	}
	return nil
}

// eachLine streams the side object ref (verified like a shard: size, SHA-256 and, when
// encrypted, every chunk) and calls fn with each line and its number (from 1). An
// error at the object's end can follow lines already passed to fn.
func (r *Reader) eachLine(ctx context.Context, ref ObjectRef, what string, fn func(lineNo int64, line []byte) error) error {
	dec, err := newDecoder()
	if err != nil {
		return err
	}
	defer dec.Close()
	s, err := r.openStream(ctx, ref, what, dec)
	if err != nil {
		return err
	}
	defer s.close()
	for {
		line, err := s.next()
		if err == io.EOF {
			return s.finish()
		}
		if err != nil {
			return err
		}
		if err := fn(s.lines, line); err != nil {
			return err
		}
	}
}

// ShardItems calls fn for every item of one shard, checking it like Items does (the
// per-scope counts against the manifest only when they are inline). Shards hold
// disjoint sets of scopes, so restores run shards in parallel; ShardItems is safe for
// concurrent use.
func (r *Reader) ShardItems(ctx context.Context, shard ShardInfo, fn func(memory.Item) error) error {
	var info *ShardInfo
	for i := range r.m.Shards {
		if r.m.Shards[i].Name == shard.Name {
			info = &r.m.Shards[i]
		}
	}
	if info == nil {
		return fmt.Errorf("snapshot: %s has no shard %q", r.prefix, shard.Name)
	}
	dec, err := newDecoder()
	if err != nil {
		return err
	}
	defer dec.Close()
	sc, err := r.scopeChecker(ctx, false)
	if err != nil {
		return err
	}
	return r.readShard(ctx, *info, nil, dec, sc, nil, fn)
}

// ShardItemsPinned is ShardItems of a shard a Scan read before with pins: it fails,
// as corrupt, at the first chunk that is not the one the Scan verified, before any of
// its bytes reach fn.
func (r *Reader) ShardItemsPinned(ctx context.Context, shard ShardInfo, pins *Pins, fn func(memory.Item) error) error {
	pin, err := pins.checker(shard.Name)
	if err != nil {
		return err
	}
	dec, err := newDecoder()
	if err != nil {
		return err
	}
	defer dec.Close()
	sc, err := r.scopeChecker(ctx, false)
	if err != nil {
		return err
	}
	return r.readShard(ctx, shard, pin, dec, sc, nil, fn)
}

func newDecoder() (*zstd.Decoder, error) {
	dec, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(decoderConcurrency),
		zstd.WithDecoderMaxWindow(readWindow))
	if err != nil {
		return nil, fmt.Errorf("zstd decoder: %w", err)
	}
	return dec, nil
}

// readShard streams one shard through fn with every per-shard check.
func (r *Reader) readShard(ctx context.Context, shard ShardInfo, pin *streamPin, dec *zstd.Decoder, sc *scopeChecker, tc *typeCounts, fn func(memory.Item) error) error {
	what := fmt.Sprintf("shard %s", shard.Name)
	s, err := r.openPinnedStream(ctx, ObjectRef{Name: shard.Name, Bytes: shard.Bytes, SHA256: shard.SHA256}, what, dec, pin)
	if err != nil {
		return err
	}
	defer s.close()
	st := shardCheck{what: what, shard: shard, sc: sc, tc: tc}
	for {
		line, err := s.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		it, err := r.decodeItem(what, s.lines, line)
		if err != nil {
			return err
		}
		if err := st.add(s.lines, &it); err != nil {
			return err
		}
		if err := fn(it); err != nil {
			return err
		}
	}
	if err := s.finish(); err != nil {
		return err
	}
	return st.end()
}

// decodeItem upgrades and parses one item line.
func (r *Reader) decodeItem(what string, lineNo int64, line []byte) (memory.Item, error) {
	var it memory.Item
	if r.itemUp != nil {
		var err error
		if line, err = r.itemUp(line); err != nil {
			return it, corruptf("%s line %d: %v", what, lineNo, err)
		}
	}
	if err := unmarshalItem(line, &it); err != nil {
		return it, corruptf("%s line %d is not a memory item: %v", what, lineNo, err)
	}
	if it.MemoryID == "" || !it.MemoryType.Valid() {
		return it, corruptf("%s line %d: item has no memory_id or an unknown memory_type %q", what, lineNo, it.MemoryType)
	}
	return it, nil
}

// shardCheck checks one shard's items against its manifest entry as they stream by.
type shardCheck struct {
	what               string
	shard              ShardInfo
	sc                 *scopeChecker
	tc                 *typeCounts // nil when the package's totals are not checked
	scope              string
	scopeItems, scopes int64
	items              int64
}

func (st *shardCheck) add(lineNo int64, it *memory.Item) error {
	if it.Scope != st.scope {
		if err := checkScopeStep(st.what, lineNo, st.shard, st.scope, it.Scope); err != nil {
			return err
		}
		if st.scope != "" {
			if err := st.sc.check(st.what, st.scope, st.scopeItems); err != nil {
				return err
			}
		}
		st.scope, st.scopeItems = it.Scope, 0
		st.scopes++
	}
	st.scopeItems++
	st.items++
	if st.tc != nil {
		st.tc.add(it)
	}
	return nil
}

// end checks the shard's totals once its stream has been read to the end.
func (st *shardCheck) end() error {
	if st.scope != "" {
		if err := st.sc.check(st.what, st.scope, st.scopeItems); err != nil {
			return err
		}
	}
	switch {
	case st.items != st.shard.Items:
		return corruptf("%s holds %d items; the manifest records %d", st.what, st.items, st.shard.Items)
	case st.scopes != st.shard.Scopes:
		return corruptf("%s holds %d scopes; the manifest records %d", st.what, st.scopes, st.shard.Scopes)
	case st.scope != st.shard.LastScope:
		return corruptf("%s ends with scope %q; the manifest records %q", st.what, st.scope, st.shard.LastScope)
	}
	return nil
}

// checkScopeStep checks a change of scope inside a shard: the first scope is the
// shard's FirstScope, later ones ascend and stay within the shard's range.
func checkScopeStep(what string, line int64, shard ShardInfo, prev, next string) error {
	switch {
	case prev == "" && next != shard.FirstScope:
		return corruptf("%s starts with scope %q; the manifest records %q", what, next, shard.FirstScope)
	case next < prev:
		return corruptf("%s line %d: scope %q follows scope %q (scopes must ascend)", what, line, next, prev)
	case next > shard.LastScope:
		return corruptf("%s line %d: scope %q is after the shard's last scope %q", what, line, next, shard.LastScope)
	}
	return nil
}

// typeCounts accumulates the per-type counts of a whole package.
type typeCounts struct {
	byType  [4]int64
	withEmb int64
}

func (t *typeCounts) add(it *memory.Item) {
	t.byType[typeIndex(it.MemoryType)]++
	if len(it.Embedding) > 0 {
		t.withEmb++
	}
}

func (t *typeCounts) check(c Counts) error {
	for _, typ := range memory.AllTypes() {
		if got, want := t.byType[typeIndex(typ)], c.ByType[typ]; got != want {
			return corruptf("the package holds %d %s items; the manifest records %d", got, typ, want)
		}
	}
	if t.withEmb != c.WithEmbedding {
		return corruptf("the package holds %d items with embeddings; the manifest records %d", t.withEmb, c.WithEmbedding)
	}
	return nil
}

// scopeChecker compares each scope's item count, as scopes end, with the manifest's
// inline table or — streaming alongside the items — the scope counts object.
type scopeChecker struct {
	inline map[string]int64 // nil when the counts are in an object
	stream *stream          // the scope counts object, when checked
	dec    *zstd.Decoder
	seen   int64
}

func (r *Reader) scopeChecker(ctx context.Context, withObject bool) (*scopeChecker, error) {
	c := r.m.Counts
	if c.ScopeCountsObject == nil {
		return &scopeChecker{inline: c.ByScope}, nil
	}
	if !withObject {
		return &scopeChecker{}, nil
	}
	dec, err := newDecoder()
	if err != nil {
		return nil, err
	}
	s, err := r.openStream(ctx, *c.ScopeCountsObject, "scope counts object "+c.ScopeCountsObject.Name, dec)
	if err != nil {
		dec.Close()
		return nil, err
	}
	return &scopeChecker{stream: s, dec: dec}, nil
}

func (c *scopeChecker) check(what, scope string, items int64) error {
	c.seen++
	switch {
	case c.inline != nil:
		if want, ok := c.inline[scope]; !ok || want != items {
			return corruptf("%s holds %d items of scope %q; the manifest records %d", what, items, scope, want)
		}
	case c.stream != nil:
		line, err := c.stream.next()
		if err == io.EOF {
			return corruptf("%s has no entry for scope %q (%s)", c.stream.what, scope, what)
		}
		if err != nil {
			return err
		}
		var sc scopeCount
		if err := json.Unmarshal(line, &sc); err != nil {
			return corruptf("%s line %d: %v", c.stream.what, c.stream.lines, err)
		}
		if sc.Scope != scope || sc.Items != items {
			return corruptf("%s holds %d items of scope %q; %s line %d records %d items of scope %q",
				what, items, scope, c.stream.what, c.stream.lines, sc.Items, sc.Scope)
		}
	}
	return nil
}

// finish checks, after every shard, that no scope counted in the manifest is missing.
func (c *scopeChecker) finish() error {
	switch {
	case c.inline != nil:
		if c.seen != int64(len(c.inline)) {
			return corruptf("the package holds %d scopes; the manifest's byScope lists %d", c.seen, len(c.inline))
		}
	case c.stream != nil:
		if _, err := c.stream.next(); err != io.EOF {
			if err != nil {
				return err
			}
			return corruptf("%s lists more scopes than the package holds (%d)", c.stream.what, c.seen)
		}
		return c.stream.finish()
	}
	return nil
}

func (c *scopeChecker) close() {
	if c.stream != nil {
		c.stream.close()
		c.dec.Close()
	}
}

// stream reads one sealed stream's decompressed content as lines:
// object → hash → buffer → frames → zstd → buffer → lines.
type stream struct {
	what  string
	ref   ObjectRef
	body  io.ReadCloser
	hr    *hashReader
	fr    *frameReader
	dec   *zstd.Decoder
	br    *bufio.Reader
	long  []byte
	lines int64
}

func (r *Reader) openStream(ctx context.Context, ref ObjectRef, what string, dec *zstd.Decoder) (*stream, error) {
	return r.openPinnedStream(ctx, ref, what, dec, nil)
}

// openPinnedStream is openStream with the stream's chunks pinned (recorded or
// checked, see Pins). The pin is in place before the decoder reads anything.
func (r *Reader) openPinnedStream(ctx context.Context, ref ObjectRef, what string, dec *zstd.Decoder, pin *streamPin) (*stream, error) {
	body, err := r.obj.Get(ctx, r.prefix+ref.Name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, corruptf("%s is missing", what)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot: %s: %w", what, err)
	}
	s := &stream{what: what, ref: ref, body: body, dec: dec}
	s.hr = &hashReader{r: body, h: sha256.New()}
	src := bufio.NewReaderSize(s.hr, readBuffer)
	header := make([]byte, headerSize)
	if n, err := io.ReadFull(src, header); err != nil {
		_ = body.Close()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, corruptf("%s is truncated: it ends after %d of the %d bytes the manifest records", what, n, ref.Bytes)
		}
		return nil, fmt.Errorf("snapshot: reading %s: %w", what, err)
	}
	h, err := r.checkHeader(header, what)
	if err != nil {
		_ = body.Close()
		return nil, err
	}
	aead, err := streamAEAD(h, r.key)
	if err != nil {
		_ = body.Close()
		return nil, fmt.Errorf("snapshot: %s: %w", what, err)
	}
	s.fr = newFrameReader(src, h, header, aead, ref.Name, what, ref.Bytes)
	s.fr.pin = pin
	if err := dec.Reset(s.fr); err != nil {
		_ = body.Close()
		return nil, fmt.Errorf("snapshot: zstd decoder: %w", err)
	}
	s.br = bufio.NewReaderSize(dec, readBuffer)
	return s, nil
}

// checkHeader checks a stream header against the manifest.
func (r *Reader) checkHeader(header []byte, what string) (frameHeader, error) {
	h, err := parseHeader(header)
	switch {
	case err != nil:
		return h, corruptf("%s %v", what, err)
	case h.PackageID != r.packageID:
		return h, corruptf("%s belongs to another package (package id %x; this package is %s)", what, h.PackageID, r.m.PackageID)
	case h.Seal != r.seal:
		return h, corruptf("%s is %s but the manifest says the package is %s", what, h.Seal, r.seal)
	case h.ChunkSize != r.m.Framing.ChunkSize:
		return h, corruptf("%s has chunk size %d; the manifest records %d", what, h.ChunkSize, r.m.Framing.ChunkSize)
	}
	return h, nil
}

// next returns the next line without its newline, valid until the next call, or
// io.EOF at the end of the content.
func (s *stream) next() ([]byte, error) {
	line, err := s.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		s.long = append(s.long[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			if len(s.long) > MaxLineBytes {
				return nil, corruptf("%s line %d is longer than %d bytes", s.what, s.lines+1, MaxLineBytes)
			}
			line, err = s.br.ReadSlice('\n')
			s.long = append(s.long, line...)
		}
		line = s.long
	}
	switch {
	case err == nil:
		s.lines++
		if len(line) == 1 {
			return nil, corruptf("%s line %d is empty", s.what, s.lines)
		}
		return line[:len(line)-1], nil
	case err == io.EOF && len(line) == 0:
		return nil, io.EOF
	case err == io.EOF:
		return nil, corruptf("%s ends inside line %d (no final newline)", s.what, s.lines+1)
	}
	return nil, s.readErr(err)
}

// readErr explains an error from the decompressed stream: the frame reader's own
// error when it failed (truncation, authentication), a decompression error otherwise.
func (s *stream) readErr(err error) error {
	if s.fr.err != nil && s.fr.err != io.EOF {
		return s.fr.err
	}
	if errors.Is(err, ErrCorrupt) {
		return err
	}
	return corruptf("%s: decompressing: %v", s.what, err)
}

// finish checks the end of a fully read stream: the final chunk was seen, nothing
// follows it, and size and SHA-256 match the manifest.
func (s *stream) finish() error {
	switch {
	case !s.fr.final:
		return corruptf("%s: the compressed data ended before the final chunk", s.what)
	case s.hr.n != s.ref.Bytes:
		return corruptf("%s is %d bytes; the manifest records %d", s.what, s.hr.n, s.ref.Bytes)
	}
	if sum := hex.EncodeToString(s.hr.h.Sum(nil)); sum != s.ref.SHA256 {
		return corruptf("%s has SHA-256 %s; the manifest records %s", s.what, sum, s.ref.SHA256)
	}
	return nil
}

// close stops the decoder before closing the object it reads from.
func (s *stream) close() {
	_ = s.dec.Reset(nil)
	_ = s.body.Close()
}

// hashReader hashes and counts the bytes read through it.
type hashReader struct {
	r io.Reader
	h hash.Hash
	n int64
}

func (hr *hashReader) Read(p []byte) (int, error) {
	n, err := hr.r.Read(p)
	hr.h.Write(p[:n])
	hr.n += int64(n)
	return n, err
}

// ReadScopeCounts calls fn for each scope and its item count, in scope order, from the
// manifest's inline table or the scope counts object (verified like a shard).
func (r *Reader) ReadScopeCounts(ctx context.Context, fn func(scope string, items int64) error) error {
	c := r.m.Counts
	if c.ScopeCountsObject == nil {
		scopes := make([]string, 0, len(c.ByScope))
		for s := range c.ByScope {
			scopes = append(scopes, s)
		}
		slices.Sort(scopes)
		for _, s := range scopes {
			if err := fn(s, c.ByScope[s]); err != nil {
				return err
			}
		}
		return nil
	}
	what := "scope counts object " + c.ScopeCountsObject.Name
	var prev string
	var n int64
	err := r.eachLine(ctx, *c.ScopeCountsObject, what, func(lineNo int64, line []byte) error {
		var sc scopeCount
		if err := json.Unmarshal(line, &sc); err != nil || sc.Scope <= prev || sc.Items < 1 {
			return corruptf("%s line %d is not a valid scope count in ascending scope order", what, lineNo)
		}
		prev = sc.Scope
		n++
		return fn(sc.Scope, sc.Items)
	})
	if err != nil {
		return err
	}
	if n != c.Scopes {
		return corruptf("%s lists %d scopes; the manifest records %d", what, n, c.Scopes)
	}
	return nil
}
