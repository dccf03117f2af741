package snapshot

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"

	"github.com/amemory/memory-operator/internal/jsonscan"
	"github.com/amemory/memory-operator/internal/memory"
)

// Writer defaults.
const (
	// DefaultCompressionLevel favours speed: zstd level 1 (klauspost "fastest").
	DefaultCompressionLevel = 1
	// DefaultShardTargetBytes is the uncompressed size after which a shard is cut at
	// the next scope boundary.
	DefaultShardTargetBytes = 64 << 20
	// DefaultProducer is recorded when WriterOptions.Producer is empty.
	DefaultProducer = "memory-operator"

	// zstdWindow is the largest window the writer uses; readers need no more.
	zstdWindow = 8 << 20
	// maxFinishing is how many finished shards may still be uploading while the next
	// one is produced: production and upload overlap, memory stays bounded.
	maxFinishing = 1
	// spoolLimit is how much of a spooled upload (the scope counts) is kept in memory
	// before it is streamed like a shard.
	spoolLimit = 8 << 20
)

// compressWorkers is how many frames are compressed at once: one per CPU, at least 2
// (so compression overlaps encoding), at most 8 (memory: about 2 MiB per frame).
func compressWorkers() int {
	return min(8, max(2, runtime.GOMAXPROCS(0)))
}

// ErrScopeOrder is returned by Add for an item whose scope sorts before the current
// one: items must arrive sorted by scope, or a scope would straddle shards.
var ErrScopeOrder = errors.New("items are not sorted by scope")

// WriterOptions configure a package.
type WriterOptions struct {
	// Prefix is the package's location in the bucket, e.g.
	// "memory-operator/acme/snapshots/nightly-20260101-0200/". A trailing "/" is added
	// when missing. The prefix must hold no objects (see ReplaceIncomplete).
	Prefix string
	// Key encrypts the package. A nil Key is refused unless Unencrypted is set: an
	// unencrypted package is written only when asked for explicitly.
	Key         *Key
	Unencrypted bool
	// ReplaceIncomplete lets NewWriter delete what an earlier, failed run left under
	// Prefix. A prefix holding a manifest (a complete package) is never replaced.
	ReplaceIncomplete bool
	// CompressionLevel is a zstd level 1..22, mapped to the encoder's four speeds
	// (1-2 fastest, 3-5 default, 6-9 better, 10+ best). 0 means
	// DefaultCompressionLevel.
	CompressionLevel int
	// ShardTargetBytes: a shard is cut at the first scope boundary after this many
	// uncompressed bytes (0 means DefaultShardTargetBytes). One scope is never split,
	// so a shard holding a single large scope may be larger.
	ShardTargetBytes int64
	// ChunkSize is the plaintext size of a sealed chunk (0 means DefaultChunkSize).
	ChunkSize int

	Producer        string // DefaultProducer when empty
	ProducerVersion string
	Source          SourceInfo
	// Import is recorded in the manifest of a package an import wrote.
	Import    *ImportReport
	Selection Selection
	// Embedding names the model of the items' embeddings. It is required when
	// Selection.IncludeEmbeddings is set and refused otherwise; every embedding must
	// have Embedding.Dimension elements.
	Embedding *EmbeddingInfo
	// CreatedAt is the time the items are as of (the manifest's createdAt): the time
	// of the database snapshot they were read from. Zero means Now() at NewWriter.
	CreatedAt time.Time
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Writer streams items into a new package. Items must arrive sorted by scope (byte
// order, as PostgreSQL's ORDER BY scope COLLATE "C"); within a scope their order is
// kept. Shards are compressed, sealed and uploaded while items arrive; nothing is
// visible as a package until Close writes the manifest. After any error other than a
// rejected item, the Writer is failed: call Abort. A Writer is not safe for concurrent
// use.
type Writer struct {
	obj       Objects
	opts      WriterOptions
	prefix    string
	key       *Key
	seal      sealKind
	packageID [16]byte
	createdAt time.Time

	ctx    context.Context // bounds every upload
	cancel context.CancelFunc

	enc    *zstd.Encoder // shared by every shard's frameCompressor
	frames framePool     // frame buffers, reused across shards
	raw    countWriter   // item lines → the shard's compressor, counting bytes
	buf    []byte        // the item line being encoded, reused

	cur     *shardState // the shard being written, nil between shards
	pending []*upload   // finished objects still uploading
	started []*upload   // every upload ever started, for fail and Abort
	shards  []ShardInfo

	scope      string // current scope, "" before the first item
	scopeItems int64
	items      int64
	byType     [4]int64
	withEmb    int64
	scopes     int64

	scopeCounts *spill[scopeCount]       // per-scope item counts
	tombstones  *spill[memory.Tombstone] // the source store's tombstones
	lastTomb    string                   // scope of the last tombstone added
	sessions    *spill[Session]          // live sessions (AddSession), always in their object
	lastSession string                   // ID of the last session added
	spoolLimit  int                      // spoolLimit; tests lower it

	closed bool
	err    error // sticky: the writer failed
}

type shardState struct {
	comp       *frameCompressor
	up         *upload
	info       ShardInfo
	rawStart   int64 // w.raw.n when the shard began
	itemsStart int64 // w.items when the shard began
}

type scopeCount struct {
	Scope string `json:"scope"`
	Items int64  `json:"items"`
}

// upload is one object of the package on its way to Objects.Put:
// sealed stream → hashing writer → upload (spool or pipe) → Put.
type upload struct {
	w       *Writer
	name    string // relative to the prefix
	hw      hashWriter
	seal    *sealWriter
	spool   *bytes.Buffer  // spooled uploads, until Put starts
	pw      *io.PipeWriter // set when Put reads from a pipe
	running bool           // Put was started; done will be closed
	done    chan struct{}
	size    int64 // set by Put when done
	err     error // set by Put when done
}

// NewWriter checks the options and the prefix and returns a Writer. ctx bounds the
// writer's whole life: cancelling it stops every upload, and Close then fails without
// writing a manifest.
func NewWriter(ctx context.Context, obj Objects, opts WriterOptions) (*Writer, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	w := &Writer{obj: obj, opts: opts, prefix: opts.Prefix, seal: sealChecksum, spoolLimit: spoolLimit}
	w.scopeCounts = &spill[scopeCount]{w: w, name: ScopeCountsName, limit: MaxInlineScopes, encode: appendScopeCount}
	w.tombstones = &spill[memory.Tombstone]{w: w, name: TombstonesName, limit: MaxInlineTombstones, encode: appendTombstone}
	w.sessions = &spill[Session]{w: w, name: SessionsName, limit: 0, encode: appendSession}
	if opts.Key != nil {
		k := *opts.Key
		w.key, w.seal = &k, sealAESGCM
	}
	if err := w.checkPrefix(ctx); err != nil {
		return nil, err
	}
	w.enc, err = zstd.NewWriter(nil,
		zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(opts.CompressionLevel)),
		zstd.WithEncoderConcurrency(compressWorkers()),
		zstd.WithWindowSize(zstdWindow))
	if err != nil {
		return nil, fmt.Errorf("zstd encoder: %w", err)
	}
	if _, err := rand.Read(w.packageID[:]); err != nil {
		return nil, err
	}
	w.createdAt = opts.CreatedAt.UTC()
	if opts.CreatedAt.IsZero() {
		w.createdAt = opts.Now().UTC()
	}
	w.ctx, w.cancel = context.WithCancel(ctx)
	return w, nil
}

func (o WriterOptions) withDefaults() (WriterOptions, error) {
	o.Prefix = strings.TrimLeft(o.Prefix, "/")
	if o.Prefix == "" {
		return o, errors.New("snapshot: WriterOptions.Prefix is empty")
	}
	if !strings.HasSuffix(o.Prefix, "/") {
		o.Prefix += "/"
	}
	switch {
	case o.Key == nil && !o.Unencrypted:
		return o, errors.New("snapshot: no key given; set WriterOptions.Unencrypted to write an unencrypted package")
	case o.Key != nil && o.Unencrypted:
		return o, errors.New("snapshot: both a key and Unencrypted are set")
	}
	if o.CompressionLevel == 0 {
		o.CompressionLevel = DefaultCompressionLevel
	}
	if o.CompressionLevel < 1 || o.CompressionLevel > 22 {
		return o, fmt.Errorf("snapshot: compression level %d is outside 1..22", o.CompressionLevel)
	}
	if o.ShardTargetBytes == 0 {
		o.ShardTargetBytes = DefaultShardTargetBytes
	}
	if o.ShardTargetBytes < 0 {
		return o, fmt.Errorf("snapshot: ShardTargetBytes %d is negative", o.ShardTargetBytes)
	}
	if o.ChunkSize == 0 {
		o.ChunkSize = DefaultChunkSize
	}
	if o.ChunkSize < MinChunkSize || o.ChunkSize > MaxChunkSize {
		return o, fmt.Errorf("snapshot: chunk size %d is outside %d..%d", o.ChunkSize, MinChunkSize, MaxChunkSize)
	}
	if o.Producer == "" {
		o.Producer = DefaultProducer
	}
	if err := o.checkEmbedding(); err != nil {
		return o, err
	}
	if o.Embedding != nil {
		e := *o.Embedding
		o.Embedding = &e
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o, nil
}

// checkEmbedding requires the model and dimension exactly when embeddings are included.
func (o WriterOptions) checkEmbedding() error {
	switch e := o.Embedding; {
	case e == nil && o.Selection.IncludeEmbeddings:
		return errors.New("snapshot: Selection.IncludeEmbeddings is set but Embedding (model and dimension) is not")
	case e != nil && !o.Selection.IncludeEmbeddings:
		return errors.New("snapshot: Embedding is set but Selection.IncludeEmbeddings is not")
	case e != nil && (e.Model == "" || e.Dimension < 1):
		return fmt.Errorf("snapshot: embedding model %q with dimension %d is incomplete", e.Model, e.Dimension)
	}
	return nil
}

// checkPrefix refuses a prefix that holds a package, and one that holds anything else
// unless ReplaceIncomplete allows deleting it.
func (w *Writer) checkPrefix(ctx context.Context) error {
	names, err := w.obj.List(ctx, w.prefix)
	if err != nil {
		return fmt.Errorf("snapshot: listing %s: %w", w.prefix, err)
	}
	if slices.Contains(names, w.prefix+ManifestName) {
		return fmt.Errorf("%w: %s holds a complete package (%s); a package is never overwritten", ErrExists, w.prefix, ManifestName)
	}
	if len(names) > 0 && !w.opts.ReplaceIncomplete {
		return fmt.Errorf("%w: %s holds %d objects but no manifest (an incomplete package); set ReplaceIncomplete to delete them", ErrExists, w.prefix, len(names))
	}
	if len(names) > 0 {
		if err := w.obj.Delete(ctx, w.prefix); err != nil {
			return fmt.Errorf("snapshot: deleting the incomplete package at %s: %w", w.prefix, err)
		}
	}
	if !w.opts.ReplaceIncomplete {
		return nil
	}
	// A writer killed midway leaves unfinished uploads, which no listing of the prefix
	// shows: abort those of every name it can have been writing.
	if _, err := w.obj.AbortUploads(ctx, leftoverNames(w.prefix, names)); err != nil {
		return fmt.Errorf("snapshot: cleaning up the incomplete package at %s: %w", w.prefix, err)
	}
	return nil
}

// leftoverNames are the objects a writer killed midway may have left unfinished
// uploads of, given the objects it completed: the scope counts and tombstone objects,
// and the shards up to two beyond the highest one stored (a writer uploads at most
// the current shard and the one before it at once, maxFinishing + 1).
func leftoverNames(prefix string, stored []string) []string {
	last := 0
	for _, name := range stored {
		var i int
		if _, err := fmt.Sscanf(strings.TrimPrefix(name, prefix), shardDir+"%06d.jsonl.zst.sealed", &i); err == nil {
			last = max(last, i)
		}
	}
	names := []string{prefix + ScopeCountsName, prefix + TombstonesName}
	for i := 1; i <= last+maxFinishing+1; i++ {
		names = append(names, prefix+shardName(i))
	}
	return names
}

// shardName is the object name of the i-th shard (from 1), relative to the prefix.
func shardName(i int) string { return shardDir + fmt.Sprintf("%06d", i) + ".jsonl.zst.sealed" }

// Prefix is the package's prefix, with its trailing "/".
func (w *Writer) Prefix() string { return w.prefix }

// Add appends an item. An item that breaks the rules (scope out of order, invalid
// scope or type, missing ID, an embedding not matching WriterOptions.Embedding) is
// refused with an error and the Writer stays usable; any other error fails the Writer.
func (w *Writer) Add(ctx context.Context, it memory.Item) error {
	if err := w.usable(); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return w.fail(ctx.Err())
	default:
	}
	if err := w.check(&it); err != nil {
		return err
	}
	if it.RecordedAt.Equal(it.CreatedAt) {
		// Absent reads as created_at: most memories (written with the server's
		// clock as their own time, imported, restored from version 2) carry none.
		it.RecordedAt = time.Time{}
	}
	// Encode before touching any state, so that an item that cannot be encoded
	// leaves the writer as it was.
	buf, err := appendItem(w.buf[:0], &it)
	if err != nil {
		return fmt.Errorf("snapshot: item %s cannot be encoded: %w", it.MemoryID, err)
	}
	w.buf = append(buf, '\n')
	if it.Scope != w.scope {
		if err := w.beginScope(it.Scope); err != nil {
			return err
		}
	}
	if _, err := w.raw.Write(w.buf); err != nil {
		return w.fail(w.streamErr(w.cur.up, err))
	}
	w.scopeItems++
	w.items++
	w.byType[typeIndex(it.MemoryType)]++
	if len(it.Embedding) > 0 {
		w.withEmb++
	}
	return nil
}

func (w *Writer) usable() error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return errors.New("snapshot: the writer is closed")
	}
	return nil
}

// check refuses an item before anything is written.
func (w *Writer) check(it *memory.Item) error {
	if it.MemoryID == "" {
		return fmt.Errorf("snapshot: an item in scope %q has no memory_id", it.Scope)
	}
	if it.Scope == "" {
		return fmt.Errorf("snapshot: item %s has no scope", it.MemoryID)
	}
	if !it.MemoryType.Valid() {
		return fmt.Errorf("snapshot: item %s: %v", it.MemoryID, it.MemoryType.Validate())
	}
	if it.Scope != w.scope {
		if err := memory.ValidateScope(it.Scope); err != nil {
			return fmt.Errorf("snapshot: item %s: %w", it.MemoryID, err)
		}
		if it.Scope < w.scope {
			return fmt.Errorf("%w: item %s has scope %q, which sorts before the current scope %q; items must arrive sorted by scope in byte order (ORDER BY scope COLLATE \"C\"), so a scope cannot reappear once another has begun",
				ErrScopeOrder, it.MemoryID, it.Scope, w.scope)
		}
	}
	if n := len(it.Embedding); n > 0 {
		if w.opts.Embedding == nil {
			return fmt.Errorf("snapshot: item %s has an embedding but the package includes none (set Selection.IncludeEmbeddings and Embedding)", it.MemoryID)
		}
		if n != w.opts.Embedding.Dimension {
			return fmt.Errorf("snapshot: item %s has an embedding of %d dimensions; the package's model %s has %d", it.MemoryID, n, w.opts.Embedding.Model, w.opts.Embedding.Dimension)
		}
	}
	return nil
}

func typeIndex(t memory.Type) int {
	switch t {
	case memory.Working:
		return 0
	case memory.Episodic:
		return 1
	case memory.Semantic:
		return 2
	}
	return 3
}

// beginScope ends the current scope and starts the next, cutting the shard first when
// it has reached its target size.
func (w *Writer) beginScope(scope string) error {
	if w.scope != "" {
		if err := w.endScope(); err != nil {
			return err
		}
	}
	if w.cur != nil && w.raw.n-w.cur.rawStart >= w.opts.ShardTargetBytes {
		if err := w.finishShard(); err != nil {
			return err
		}
	}
	if w.cur == nil {
		if err := w.openShard(scope); err != nil {
			return err
		}
	}
	w.scope, w.scopeItems = scope, 0
	w.cur.info.LastScope = scope
	w.cur.info.Scopes++
	return nil
}

func (w *Writer) openShard(firstScope string) error {
	name := shardName(len(w.shards) + 1)
	up, err := w.startUpload(name, false)
	if err != nil {
		return err
	}
	comp := newFrameCompressor(w.enc, &w.frames, up.seal, compressWorkers())
	w.raw.w = comp
	w.cur = &shardState{comp: comp, up: up, info: ShardInfo{Name: name, FirstScope: firstScope}, rawStart: w.raw.n, itemsStart: w.items}
	return nil
}

// finishShard completes the current shard's stream; its upload finishes while the
// next shard is produced.
func (w *Writer) finishShard() error {
	s := w.cur
	w.cur = nil
	if err := s.comp.Close(); err != nil {
		return w.fail(w.streamErr(s.up, err))
	}
	info, err := w.finishUpload(s.up)
	if err != nil {
		return err
	}
	s.info.Items = w.items - s.itemsStart
	s.info.RawBytes = w.raw.n - s.rawStart
	s.info.Bytes, s.info.SHA256 = info.Bytes, info.SHA256
	w.shards = append(w.shards, s.info)
	w.pending = append(w.pending, s.up)
	for len(w.pending) > maxFinishing {
		if err := w.await(w.pending[0]); err != nil {
			return err
		}
		w.pending = w.pending[1:]
	}
	return nil
}

// endScope records the finished scope's count: inline up to MaxInlineScopes scopes,
// then in the scope counts object.
func (w *Writer) endScope() error {
	w.scopes++
	return w.scopeCounts.add(scopeCount{Scope: w.scope, Items: w.scopeItems})
}

// AddTombstone records one of the source store's tombstones. Tombstones must arrive
// in strictly increasing scope order (byte order), one per scope, and may be added at
// any time before Close; like items they are streamed, so their number is not
// limited. A tombstone that breaks the rules is refused and the Writer stays usable.
func (w *Writer) AddTombstone(t memory.Tombstone) error {
	if err := w.usable(); err != nil {
		return err
	}
	if err := memory.ValidateScope(t.Scope); err != nil {
		return fmt.Errorf("snapshot: tombstone: %w", err)
	}
	if t.ForgottenAt.IsZero() {
		return fmt.Errorf("snapshot: tombstone of %s has no forgotten_at", t.Scope)
	}
	if !utf8.ValidString(t.Reason) {
		return fmt.Errorf("snapshot: tombstone of %s: reason is not valid UTF-8", t.Scope)
	}
	if w.tombstones.n > 0 && t.Scope <= w.lastTomb {
		return fmt.Errorf("%w: tombstone of %q follows %q; tombstones must arrive one per scope in increasing scope order (byte order)",
			ErrScopeOrder, t.Scope, w.lastTomb)
	}
	t.ForgottenAt = t.ForgottenAt.UTC()
	if err := w.tombstones.add(t); err != nil {
		return err
	}
	w.lastTomb = t.Scope
	return nil
}

// spill holds the entries of a list the manifest carries inline while they are few
// (scope counts, tombstones) and streams them, one JSON line each, into a sealed
// object of the package (like a shard) once there are more than limit.
type spill[T any] struct {
	w      *Writer
	name   string
	limit  int
	encode func([]byte, T) []byte
	inline []T
	n      int64   // entries added
	up     *upload // the object, once spilled
	enc    *zstd.Encoder
	ref    *ObjectRef // the finished object
	line   []byte
}

func (s *spill[T]) add(v T) error {
	s.n++
	if s.up == nil {
		if len(s.inline) < s.limit {
			s.inline = append(s.inline, v)
			return nil
		}
		if err := s.start(); err != nil {
			return err
		}
	}
	return s.write(v)
}

func (s *spill[T]) start() error {
	w := s.w
	up, err := w.startUpload(s.name, true)
	if err != nil {
		return err
	}
	s.up = up
	s.enc, err = zstd.NewWriter(up.seal,
		zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(w.opts.CompressionLevel)),
		zstd.WithWindowSize(zstdWindow), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return w.fail(fmt.Errorf("zstd encoder: %w", err))
	}
	for _, v := range s.inline {
		if err := s.write(v); err != nil {
			return err
		}
	}
	s.inline = nil
	return nil
}

func (s *spill[T]) write(v T) error {
	s.line = append(s.encode(s.line[:0], v), '\n')
	if _, err := s.enc.Write(s.line); err != nil {
		return s.w.fail(s.w.streamErr(s.up, err))
	}
	return nil
}

// finish ends the object, when there is one; its upload joins the pending ones.
func (s *spill[T]) finish() error {
	if s.up == nil {
		return nil
	}
	if err := s.enc.Close(); err != nil {
		return s.w.fail(s.w.streamErr(s.up, err))
	}
	ref, err := s.w.finishUpload(s.up)
	if err != nil {
		return err
	}
	s.w.pending = append(s.w.pending, s.up)
	s.ref, s.up = &ref, nil
	return nil
}

// appendScopeCount renders {"scope":"…","items":n}. Scopes are validated, so they
// hold no character that JSON escapes.
func appendScopeCount(b []byte, c scopeCount) []byte {
	b = append(b, `{"scope":"`...)
	b = append(b, c.Scope...)
	b = append(b, `","items":`...)
	b = strconv.AppendInt(b, c.Items, 10)
	return append(b, '}')
}

// appendTombstone renders a tombstone as memory.Tombstone marshals:
// {"scope":"…","forgotten_at":"<RFC 3339>","reason":"…"}, reason left out when empty.
func appendTombstone(b []byte, t memory.Tombstone) []byte {
	b = append(b, `{"scope":"`...)
	b = append(b, t.Scope...)
	b = append(b, `","forgotten_at":"`...)
	b = t.ForgottenAt.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	if t.Reason != "" {
		b = append(b, `,"reason":`...)
		b = jsonscan.AppendString(b, t.Reason)
	}
	return append(b, '}')
}

// startUpload starts a new object of the package: its sealed stream is written
// through a hashing writer into the upload. A streamed upload runs Put at once, in its
// own goroutine, reading from a pipe; a spooled one (the scope counts) keeps its bytes
// in memory until they exceed spoolLimit, and is then streamed the same way — a small
// object costs neither a multipart upload nor a part buffer for the whole export.
func (w *Writer) startUpload(name string, spooled bool) (*upload, error) {
	up := &upload{w: w, name: name, done: make(chan struct{})}
	up.hw = hashWriter{w: up, h: sha256.New()}
	w.started = append(w.started, up)
	if spooled {
		up.spool = new(bytes.Buffer)
	} else {
		w.startPut(up, nil)
	}
	seal, err := newSealWriter(&up.hw, newStreamHeader(w.seal, w.opts.ChunkSize, w.packageID), w.key, name)
	if err != nil {
		return nil, w.fail(w.streamErr(up, err))
	}
	up.seal = seal
	return up, nil
}

// startPut runs Put for the upload, reading body, or a new pipe when body is nil.
func (w *Writer) startPut(up *upload, body io.Reader) {
	var pr *io.PipeReader
	if body == nil {
		pr, up.pw = io.Pipe()
		body = pr
	}
	up.running = true
	go func() {
		defer close(up.done)
		up.size, up.err = w.obj.Put(w.ctx, w.prefix+up.name, body)
		if pr == nil {
			return
		}
		if up.err != nil {
			_ = pr.CloseWithError(up.err)
		} else {
			_ = pr.Close() // a Put that returned early makes further writes fail
		}
	}()
}

// Write takes the upload's sealed bytes: into the spool while it is small, into the
// pipe to Put otherwise.
func (up *upload) Write(p []byte) (int, error) {
	if up.pw == nil {
		if up.spool.Len()+len(p) <= up.w.spoolLimit {
			return up.spool.Write(p)
		}
		up.w.startPut(up, nil)
		if _, err := up.pw.Write(up.spool.Bytes()); err != nil {
			return 0, err
		}
		up.spool = nil
	}
	return up.pw.Write(p)
}

// finishUpload seals the final chunk and ends the stream; Put completes the object
// (a spooled upload starts its Put now).
func (w *Writer) finishUpload(up *upload) (ObjectRef, error) {
	if err := up.seal.Close(); err != nil {
		return ObjectRef{}, w.fail(w.streamErr(up, err))
	}
	if up.pw != nil {
		_ = up.pw.Close()
	} else {
		w.startPut(up, bytes.NewReader(up.spool.Bytes()))
	}
	return ObjectRef{Name: up.name, Bytes: up.hw.n, SHA256: hex.EncodeToString(up.hw.h.Sum(nil))}, nil
}

// await waits for an upload and checks that everything written was stored.
func (w *Writer) await(up *upload) error {
	<-up.done
	if up.err != nil {
		return w.fail(fmt.Errorf("snapshot: uploading %s: %w", w.prefix+up.name, up.err))
	}
	if up.size != up.hw.n {
		return w.fail(fmt.Errorf("snapshot: uploading %s: stored %d bytes, wrote %d", w.prefix+up.name, up.size, up.hw.n))
	}
	// Keep only the bookkeeping of a stored object: a long export has many shards.
	up.seal, up.spool, up.hw.h = nil, nil, nil
	return nil
}

// streamErr explains a failed write into an upload: the upload's own error when it
// failed (the pipe carries it), the write error otherwise.
func (w *Writer) streamErr(up *upload, err error) error {
	if w.ctx.Err() != nil && !errors.Is(err, w.ctx.Err()) {
		return fmt.Errorf("snapshot: writing %s: %w (%v)", w.prefix+up.name, w.ctx.Err(), err)
	}
	return fmt.Errorf("snapshot: writing %s: %w", w.prefix+up.name, err)
}

// fail makes the writer failed (once), stops every upload and returns the first error.
func (w *Writer) fail(err error) error {
	if w.err != nil {
		return w.err
	}
	w.err = err
	w.cancel()
	for _, up := range w.started {
		if up.pw != nil {
			_ = up.pw.CloseWithError(err)
		}
	}
	if w.cur != nil {
		_ = w.cur.comp.Close() // its output fails now; this stops its goroutines
	}
	return err
}

// Close finishes the last shard, the scope counts and the tombstones, waits for every
// upload, and then — only when all of them succeeded — writes the manifest, which
// makes the package complete. On error no manifest exists; call Abort to remove what
// was uploaded.
func (w *Writer) Close(ctx context.Context) (*Manifest, error) {
	if err := w.usable(); err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, w.cancel) // cancelling ctx stops the uploads too
	defer stop()
	if err := ctx.Err(); err != nil {
		return nil, w.fail(err)
	}
	if err := w.finishData(); err != nil {
		return nil, err
	}
	m := w.manifest()
	body, err := encodeManifest(m, w.key)
	if err != nil {
		return nil, w.fail(fmt.Errorf("snapshot: encoding the manifest: %w", err))
	}
	// The last chance to stop: a cancelled writer never writes a manifest.
	if err := w.ctx.Err(); err != nil {
		return nil, w.fail(err)
	}
	if _, err := w.obj.Put(w.ctx, w.prefix+ManifestName, bytes.NewReader(body)); err != nil {
		return nil, w.fail(fmt.Errorf("snapshot: writing %s: %w", w.prefix+ManifestName, err))
	}
	w.closed = true
	w.cancel()
	return m, nil
}

// finishData ends the last scope and shard, the scope counts and tombstone objects,
// and waits for every upload.
func (w *Writer) finishData() error {
	if w.scope != "" {
		if err := w.endScope(); err != nil {
			return err
		}
		w.scope = ""
	}
	if w.cur != nil {
		if err := w.finishShard(); err != nil {
			return err
		}
	}
	if err := w.scopeCounts.finish(); err != nil {
		return err
	}
	if err := w.tombstones.finish(); err != nil {
		return err
	}
	if err := w.sessions.finish(); err != nil {
		return err
	}
	for len(w.pending) > 0 {
		if err := w.await(w.pending[0]); err != nil {
			return err
		}
		w.pending = w.pending[1:]
	}
	return nil
}

func (w *Writer) manifest() *Manifest {
	m := &Manifest{
		FormatVersion:   FormatVersion,
		PackageID:       hex.EncodeToString(w.packageID[:]),
		Producer:        w.opts.Producer,
		ProducerVersion: w.opts.ProducerVersion,
		CreatedAt:       w.createdAt,
		CompletedAt:     w.opts.Now().UTC(),
		Source:          w.opts.Source,
		Selection:       w.opts.Selection,
		Counts: Counts{
			Items:         w.items,
			ByType:        make(map[memory.Type]int64, 4),
			WithEmbedding: w.withEmb,
			Scopes:        w.scopes,
		},
		Shards:      w.shards,
		Compression: CompressionInfo{Algorithm: CompressionZstd, Level: w.opts.CompressionLevel},
		Framing:     FramingInfo{Version: frameVersion, ChunkSize: w.opts.ChunkSize},
		Embedding:   w.opts.Embedding,
		Tombstones:  TombstoneSet{Count: w.tombstones.n, Entries: w.tombstones.inline, Object: w.tombstones.ref},
		Import:      w.opts.Import,
	}
	if m.Shards == nil {
		m.Shards = []ShardInfo{}
	}
	if w.sessions.ref != nil {
		m.Sessions = &SessionSet{Count: w.sessions.n, Object: w.sessions.ref}
	}
	for _, t := range memory.AllTypes() {
		m.Counts.ByType[t] = w.byType[typeIndex(t)]
	}
	if ref := w.scopeCounts.ref; ref != nil {
		m.Counts.ScopeCountsObject = ref
	} else {
		m.Counts.ByScope = make(map[string]int64, len(w.scopeCounts.inline))
		for _, c := range w.scopeCounts.inline {
			m.Counts.ByScope[c.Scope] = c.Items
		}
	}
	if w.key != nil {
		m.Encryption = &EncryptionInfo{Algorithm: EncryptionAES, KDF: KDFHKDFSHA256, KeyID: w.key.ID()}
	}
	return m
}

// Abort stops a writer that has not completed and deletes everything it uploaded.
// It never writes a manifest. After a successful Close it does nothing: the package is
// complete and is deleted like any other (Objects.Delete on its prefix).
func (w *Writer) Abort(ctx context.Context) error {
	if w.closed {
		return nil
	}
	_ = w.fail(errors.New("snapshot: writer aborted"))
	for _, up := range w.started {
		if up.running {
			<-up.done
		}
	}
	w.pending, w.cur, w.scopeCounts.up, w.tombstones.up = nil, nil, nil, nil
	if err := w.obj.Delete(ctx, w.prefix); err != nil {
		return fmt.Errorf("snapshot: aborting: deleting %s: %w", w.prefix, err)
	}
	names := make([]string, 0, len(w.started))
	for _, up := range w.started {
		names = append(names, w.prefix+up.name)
	}
	if _, err := w.obj.AbortUploads(ctx, names); err != nil {
		return fmt.Errorf("snapshot: aborting: %w", err)
	}
	return nil
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// hashWriter hashes and counts the bytes written through it.
type hashWriter struct {
	w io.Writer
	h hash.Hash
	n int64
}

func (hw *hashWriter) Write(p []byte) (int, error) {
	n, err := hw.w.Write(p)
	hw.h.Write(p[:n])
	hw.n += int64(n)
	return n, err
}
