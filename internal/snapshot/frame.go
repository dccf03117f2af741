package snapshot

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Framing (docs/snapshot-format.md, "Sealed streams"). Every object of a package
// except the manifest is a sealed stream: a 64-byte header followed by chunks. Each
// chunk holds a fixed amount of plaintext (the last one may hold less) followed by a
// 16-byte tag, which is the AES-256-GCM tag in encrypted packages and a truncated
// SHA-256 checksum in unencrypted ones. The nonce is the chunk's index and a final
// flag, and the header and the object's name are additional authenticated data, so a
// chunk cannot be altered, dropped, reordered, moved to another object or appended
// after the final one without the reader noticing.
const (
	frameMagic   = "memsnap\x00"
	frameVersion = 1
	headerSize   = 64
	tagSize      = 16
	nonceSize    = 12

	// DefaultChunkSize is the plaintext size of a chunk written by this package.
	DefaultChunkSize = 64 << 10
	// MinChunkSize and MaxChunkSize bound the chunk size a reader accepts, which bounds
	// the memory it needs per stream.
	MinChunkSize = 1 << 10
	MaxChunkSize = 16 << 20
)

// sealKind says how chunks are sealed; it is byte 9 of the header.
type sealKind byte

const (
	sealChecksum sealKind = 0 // unencrypted: tag = SHA-256(aad || nonce || data)[:16]
	sealAESGCM   sealKind = 1 // AES-256-GCM with a per-stream key from HKDF
)

func (s sealKind) String() string {
	switch s {
	case sealChecksum:
		return "unencrypted (SHA-256 checksums)"
	case sealAESGCM:
		return "AES-256-GCM"
	}
	return fmt.Sprintf("unknown seal %d", byte(s))
}

// frameHeader is the 64-byte header of a sealed stream:
//
//	[0:8]   magic "memsnap\x00"
//	[8]     framing version (1)
//	[9]     seal: 0 unencrypted, 1 AES-256-GCM
//	[10:12] reserved, zero
//	[12:16] chunk size, big-endian uint32 (plaintext bytes per chunk)
//	[16:32] package ID (the manifest's packageId)
//	[32:64] salt for the stream key (random per stream)
type frameHeader struct {
	Seal      sealKind
	ChunkSize int
	PackageID [16]byte
	Salt      [32]byte
}

func (h frameHeader) marshal() []byte {
	b := make([]byte, headerSize)
	copy(b[0:8], frameMagic)
	b[8] = frameVersion
	b[9] = byte(h.Seal)
	binary.BigEndian.PutUint32(b[12:16], uint32(h.ChunkSize))
	copy(b[16:32], h.PackageID[:])
	copy(b[32:64], h.Salt[:])
	return b
}

// parseHeader decodes a header; its errors describe what is wrong without naming the
// object (the caller does).
func parseHeader(b []byte) (frameHeader, error) {
	var h frameHeader
	if len(b) != headerSize {
		return h, fmt.Errorf("header is %d bytes, want %d", len(b), headerSize)
	}
	if string(b[0:8]) != frameMagic {
		return h, errors.New("does not start with the sealed-stream magic (not a snapshot object)")
	}
	if b[8] != frameVersion {
		return h, fmt.Errorf("has framing version %d; this reader knows version %d", b[8], frameVersion)
	}
	h.Seal = sealKind(b[9])
	if h.Seal != sealChecksum && h.Seal != sealAESGCM {
		return h, fmt.Errorf("has an unknown seal kind %d", b[9])
	}
	if b[10] != 0 || b[11] != 0 {
		return h, errors.New("has non-zero reserved header bytes")
	}
	cs := binary.BigEndian.Uint32(b[12:16])
	if cs < MinChunkSize || cs > MaxChunkSize {
		return h, fmt.Errorf("has chunk size %d, outside %d..%d", cs, MinChunkSize, MaxChunkSize)
	}
	h.ChunkSize = int(cs)
	copy(h.PackageID[:], b[16:32])
	copy(h.Salt[:], b[32:64])
	return h, nil
}

// newStreamHeader returns a header with a fresh random salt.
func newStreamHeader(seal sealKind, chunkSize int, packageID [16]byte) frameHeader {
	h := frameHeader{Seal: seal, ChunkSize: chunkSize, PackageID: packageID}
	if _, err := rand.Read(h.Salt[:]); err != nil {
		panic("snapshot: crypto/rand failed: " + err.Error()) // never happens on supported platforms
	}
	return h
}

// streamAEAD returns the chunk sealer for a stream: AES-256-GCM under
// HKDF-SHA256(master, salt, "memory-operator snapshot v1 shard"), or the checksum sealer.
func streamAEAD(h frameHeader, key *Key) (cipher.AEAD, error) {
	switch h.Seal {
	case sealChecksum:
		return checksumSeal{}, nil
	case sealAESGCM:
		if key == nil {
			return nil, ErrKeyRequired
		}
		block, err := aes.NewCipher(key.derive(h.Salt[:], shardKeyInfo))
		if err != nil {
			return nil, err
		}
		return cipher.NewGCM(block)
	}
	return nil, fmt.Errorf("unknown seal kind %d", byte(h.Seal))
}

// streamAAD is the additional data of every chunk: the header bytes followed by the
// object's name relative to the package prefix.
func streamAAD(header []byte, name string) []byte {
	aad := make([]byte, 0, len(header)+len(name))
	return append(append(aad, header...), name...)
}

// chunkNonce is the 11-byte big-endian chunk index followed by the final flag.
func chunkNonce(nonce *[nonceSize]byte, index uint64, final bool) []byte {
	*nonce = [nonceSize]byte{}
	binary.BigEndian.PutUint64(nonce[3:11], index)
	if final {
		nonce[11] = 1
	}
	return nonce[:]
}

// checksumSeal is the "AEAD" of unencrypted packages: the data is stored as is and the
// tag is the first 16 bytes of SHA-256(aad || nonce || data). It detects corruption,
// truncation and reordering, but not deliberate tampering by someone who recomputes it.
type checksumSeal struct{}

func (checksumSeal) NonceSize() int { return nonceSize }
func (checksumSeal) Overhead() int  { return tagSize }

func (checksumSeal) tag(nonce, data, aad []byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write(aad)
	h.Write(nonce)
	h.Write(data)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

func (c checksumSeal) Seal(dst, nonce, plaintext, aad []byte) []byte {
	sum := c.tag(nonce, plaintext, aad)
	dst = append(dst, plaintext...)
	return append(dst, sum[:tagSize]...)
}

func (c checksumSeal) Open(dst, nonce, ciphertext, aad []byte) ([]byte, error) {
	if len(ciphertext) < tagSize {
		return nil, errors.New("chunk shorter than its tag")
	}
	data := ciphertext[:len(ciphertext)-tagSize]
	sum := c.tag(nonce, data, aad)
	if subtle.ConstantTimeCompare(sum[:tagSize], ciphertext[len(data):]) != 1 {
		return nil, errors.New("checksum mismatch")
	}
	return append(dst, data...), nil
}

// sealWriter writes a sealed stream: the header at creation, then a chunk whenever a
// full chunk of plaintext is buffered and more follows; Close seals the final chunk.
// Only one chunk is ever buffered.
type sealWriter struct {
	w       io.Writer
	aead    cipher.AEAD
	aad     []byte
	buf     []byte // pending plaintext; capacity chunk+tag for in-place sealing
	chunk   int
	counter uint64
	nonce   [nonceSize]byte
	err     error
}

func newSealWriter(w io.Writer, h frameHeader, key *Key, name string) (*sealWriter, error) {
	aead, err := streamAEAD(h, key)
	if err != nil {
		return nil, err
	}
	header := h.marshal()
	if _, err := w.Write(header); err != nil {
		return nil, err
	}
	return &sealWriter{
		w:     w,
		aead:  aead,
		aad:   streamAAD(header, name),
		buf:   make([]byte, 0, h.ChunkSize+tagSize),
		chunk: h.ChunkSize,
	}, nil
}

func (s *sealWriter) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	written := 0
	for len(p) > 0 {
		if len(s.buf) == s.chunk {
			if err := s.seal(false); err != nil {
				return written, err
			}
		}
		n := copy(s.buf[len(s.buf):s.chunk], p)
		s.buf = s.buf[:len(s.buf)+n]
		p = p[n:]
		written += n
	}
	return written, nil
}

// Close seals the final chunk (empty only when the stream is empty). It does not close
// the underlying writer.
func (s *sealWriter) Close() error {
	if s.err != nil {
		return s.err
	}
	if err := s.seal(true); err != nil {
		return err
	}
	s.err = errors.New("sealed stream is closed")
	return nil
}

func (s *sealWriter) seal(final bool) error {
	out := s.aead.Seal(s.buf[:0], chunkNonce(&s.nonce, s.counter, final), s.buf, s.aad)
	s.counter++
	if _, err := s.w.Write(out); err != nil {
		s.err = err
		return err
	}
	s.buf = s.buf[:0]
	return nil
}

// frameReader opens a sealed stream chunk by chunk and returns only plaintext that has
// been authenticated. what names the object in errors ("shard \"shards/000001...\"").
// expected is the stream's size recorded in the manifest (-1 when unknown); with it a
// short stream is reported as truncated rather than as a failed tag.
type frameReader struct {
	r        *bufio.Reader
	aead     cipher.AEAD
	aad      []byte
	what     string
	chunk    int
	buf      []byte // one sealed chunk as read
	out      []byte // its opened plaintext
	plain    []byte // the part of out not yet returned
	counter  uint64
	nonce    [nonceSize]byte
	final    bool
	consumed int64 // bytes of the stream read so far, header included
	expected int64
	err      error
	// pin, when set, records (first read) or checks (later reads) the tag of every
	// chunk, so that a later read releases only the bytes the first one did.
	pin *streamPin
}

// streamPin is one stream's chunk tags from its first read.
type streamPin struct {
	check bool
	tags  [][tagSize]byte
}

func newFrameReader(r *bufio.Reader, h frameHeader, header []byte, aead cipher.AEAD, name, what string, expected int64) *frameReader {
	return &frameReader{
		r:        r,
		aead:     aead,
		aad:      streamAAD(header, name),
		what:     what,
		chunk:    h.ChunkSize,
		buf:      make([]byte, h.ChunkSize+tagSize),
		out:      make([]byte, 0, h.ChunkSize),
		consumed: headerSize,
		expected: expected,
	}
}

func (f *frameReader) Read(p []byte) (int, error) {
	for len(f.plain) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		if f.final {
			return 0, io.EOF
		}
		if err := f.next(); err != nil {
			f.err = err
			return 0, err
		}
	}
	n := copy(p, f.plain)
	f.plain = f.plain[n:]
	return n, nil
}

// next reads, authenticates and opens the next chunk. Chunks are opened into f.out,
// never in place: a failed GCM open zeroes its output, and a chunk that fails as one
// kind (final or not) is tried as the other to tell truncation from tampering.
func (f *frameReader) next() error {
	n, atEOF, err := f.read()
	if err != nil {
		return err
	}
	data := f.buf[:n]
	plain, oerr := f.aead.Open(f.out[:0], chunkNonce(&f.nonce, f.counter, atEOF), data, f.aad)
	if oerr == nil {
		if err := f.pinChunk(data[len(data)-tagSize:]); err != nil {
			return err
		}
		return f.accept(plain, atEOF)
	}
	return f.openFailed(data, atEOF)
}

// read reads the next chunk's bytes into f.buf: n of them, the last of the stream
// when atEOF. It fails when the stream's length disagrees with the manifest, or the
// stream ends where no final chunk can be.
func (f *frameReader) read() (n int, atEOF bool, err error) {
	n, err = io.ReadFull(f.r, f.buf)
	f.consumed += int64(n)
	switch {
	case err == nil:
		if f.expected >= 0 && f.consumed > f.expected {
			return 0, false, corruptf("%s is longer than the %d bytes the manifest records", f.what, f.expected)
		}
		if _, perr := f.r.Peek(1); perr == io.EOF {
			atEOF = true
		} else if perr != nil {
			return 0, false, fmt.Errorf("reading %s: %w", f.what, perr)
		}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		atEOF = true
	default:
		return 0, false, fmt.Errorf("reading %s: %w", f.what, err)
	}
	if atEOF {
		switch {
		case f.expected >= 0 && f.consumed > f.expected:
			return 0, false, corruptf("%s is %d bytes; the manifest records %d", f.what, f.consumed, f.expected)
		case f.expected >= 0 && f.consumed < f.expected:
			return 0, false, corruptf("%s is truncated: it ends after %d of the %d bytes the manifest records", f.what, f.consumed, f.expected)
		case n == 0:
			return 0, false, corruptf("%s is truncated: it ends after chunk %d without a final chunk", f.what, int64(f.counter)-1)
		case n < tagSize:
			return 0, false, corruptf("%s is truncated: chunk %d is %d bytes, shorter than its %d-byte tag", f.what, f.counter, n, tagSize)
		}
	}
	return n, atEOF, nil
}

// openFailed words why a chunk failed to open.
func (f *frameReader) openFailed(data []byte, atEOF bool) error {
	// Tell the other kind of chunk apart: a valid non-final chunk at the end means
	// chunks are missing; a valid final chunk followed by more data means data was
	// appended. Only a full-size chunk can be non-final.
	if !atEOF || len(data) == len(f.buf) {
		if _, err := f.aead.Open(f.out[:0], chunkNonce(&f.nonce, f.counter, !atEOF), data, f.aad); err == nil {
			if atEOF {
				return corruptf("%s is truncated: it ends after chunk %d, which is not the final chunk", f.what, f.counter)
			}
			return corruptf("%s has data after its final chunk %d", f.what, f.counter)
		}
	}
	if _, unencrypted := f.aead.(checksumSeal); unencrypted {
		return corruptf("%s: chunk %d failed its checksum (modified, reordered or from another object)", f.what, f.counter)
	}
	return corruptf("%s: chunk %d failed authentication (modified, reordered or from another object)", f.what, f.counter)
}

// pinChunk records or checks the tag of the chunk just opened. A chunk's tag binds
// its plaintext (GCM under the stream key; SHA-256 for unencrypted packages), so an
// equal tag means the bytes the first read verified.
func (f *frameReader) pinChunk(tag []byte) error {
	p := f.pin
	if p == nil {
		return nil
	}
	i := int(f.counter)
	if !p.check {
		p.tags = append(p.tags, [tagSize]byte(tag))
		return nil
	}
	if i >= len(p.tags) || [tagSize]byte(tag) != p.tags[i] {
		return corruptf("%s: chunk %d is not the one read before (the package changed while it was being read)", f.what, f.counter)
	}
	return nil
}

func (f *frameReader) accept(plain []byte, final bool) error {
	if p := f.pin; p != nil && p.check && final && int(f.counter)+1 != len(p.tags) {
		return corruptf("%s ends after chunk %d; it had %d chunks when read before (the package changed while it was being read)", f.what, f.counter, len(p.tags))
	}
	if final && f.expected >= 0 && f.consumed != f.expected {
		return corruptf("%s is %d bytes; the manifest records %d", f.what, f.consumed, f.expected)
	}
	f.plain = plain
	f.final = final
	f.counter++
	return nil
}

// corruptf returns an error wrapping ErrCorrupt.
func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}
