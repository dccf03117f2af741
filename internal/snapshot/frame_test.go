package snapshot

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

const testChunk = MinChunkSize

var frameTestKey = Key([]byte("frame-test-key-0123456789abcdef!"))

// sealed returns data as a sealed stream named name.
func sealed(t *testing.T, seal sealKind, data []byte, name string) []byte {
	t.Helper()
	var out bytes.Buffer
	sw, err := newSealWriter(&out, newStreamHeader(seal, testChunk, [16]byte{7}), &frameTestKey, name)
	if err != nil {
		t.Fatal(err)
	}
	// Odd write sizes exercise the chunk buffering.
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 1+len(rest)%777)
		if _, err := sw.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	if err := sw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// unseal opens a sealed stream; expected is the size the manifest would record.
func unseal(stream []byte, name string, expected int64) ([]byte, error) {
	br := bufio.NewReader(bytes.NewReader(stream))
	header := make([]byte, headerSize)
	if _, err := io.ReadFull(br, header); err != nil {
		return nil, err
	}
	h, err := parseHeader(header)
	if err != nil {
		return nil, err
	}
	aead, err := streamAEAD(h, &frameTestKey)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(newFrameReader(br, h, header, aead, name, "stream "+name, expected))
}

func testData(n int) []byte {
	r := rand.New(rand.NewPCG(1, uint64(n)))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func chunkSpan(i int) (int, int) {
	start := headerSize + i*(testChunk+tagSize)
	return start, start + testChunk + tagSize
}

func TestSealedStreamRoundTrip(t *testing.T) {
	for _, seal := range []sealKind{sealAESGCM, sealChecksum} {
		for _, n := range []int{0, 1, testChunk - 1, testChunk, testChunk + 1, 3 * testChunk, 3*testChunk + 5} {
			data := testData(n)
			s := sealed(t, seal, data, "shards/000001")
			chunks := max(1, (n+testChunk-1)/testChunk)
			if want := headerSize + n + chunks*tagSize; len(s) != want {
				t.Errorf("%v, %d bytes: stream is %d bytes, want %d", seal, n, len(s), want)
			}
			for _, expected := range []int64{int64(len(s)), -1} {
				got, err := unseal(s, "shards/000001", expected)
				if err != nil || !bytes.Equal(got, data) {
					t.Errorf("%v, %d bytes, expected size %d: err %v, equal %v", seal, n, expected, err, bytes.Equal(got, data))
				}
			}
			if seal == sealAESGCM && n > 16 && bytes.Contains(s, data[:16]) {
				t.Errorf("encrypted stream contains plaintext")
			}
		}
	}
}

func TestSealedStreamRefusesTampering(t *testing.T) {
	data := testData(4*testChunk + 100) // chunks 0..3 full, chunk 4 final with 100 bytes
	name := "shards/000002"
	for _, seal := range []sealKind{sealAESGCM, sealChecksum} {
		good := sealed(t, seal, data, name)
		size := int64(len(good))
		failed := "failed authentication"
		if seal == sealChecksum {
			failed = "failed its checksum"
		}
		c1s, c1e := chunkSpan(1)
		c2s, c2e := chunkSpan(2)
		_, c3e := chunkSpan(3)
		cases := []struct {
			name     string
			stream   []byte
			expected int64
			want     string
		}{
			{"flipped byte in chunk 2", flip(good, c2s+10), size, "stream " + name + ": chunk 2 " + failed},
			{"flipped tag of final chunk", flip(good, len(good)-1), size, "chunk 4 " + failed},
			{"truncated mid-chunk", good[:c2s+50], size, "is truncated: it ends after " + strconv.Itoa(c2s+50) + " of the " + strconv.Itoa(len(good)) + " bytes"},
			{"truncated mid-chunk, size unknown", good[:c2s+50], -1, "chunk 2 " + failed},
			{"final chunk dropped", good[:c3e], size, "is truncated"},
			{"final chunk dropped, size unknown", good[:c3e], -1, "is truncated: it ends after chunk 3, which is not the final chunk"},
			{"only the header", good[:headerSize], -1, "is truncated: it ends after chunk -1 without a final chunk"},
			{"tag cut short", good[:c1e+5], -1, "chunk 2 is 5 bytes, shorter than its 16-byte tag"},
			{"chunk 1 dropped", cat(good[:c1s], good[c1e:]), size, "chunk 1 " + failed},
			{"chunks 1 and 2 swapped", cat(good[:c1s], good[c2s:c2e], good[c1s:c1e], good[c2e:]), size, "chunk 1 " + failed},
			{"byte appended", cat(good, []byte("x")), size, "is " + strconv.Itoa(len(good)+1) + " bytes; the manifest records " + strconv.Itoa(len(good))},
			{"byte appended, size unknown", cat(good, []byte("x")), -1, "chunk 4 " + failed},
			{"chunk appended", cat(good, bytes.Repeat([]byte("x"), testChunk)), size, "is longer than the " + strconv.Itoa(len(good)) + " bytes the manifest records"},
			{"final chunk repeated, size unknown", cat(good, good[c3e:]), -1, "chunk 4 " + failed},
		}
		for _, tc := range cases {
			_, err := unseal(tc.stream, name, tc.expected)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v, %s: got %v, want ErrCorrupt containing %q", seal, tc.name, err, tc.want)
			}
		}
		// A full final chunk followed by anything is recognised as such.
		full := sealed(t, seal, data[:2*testChunk], name)
		_, c1e = chunkSpan(1)
		if _, err := unseal(cat(full, full[c1s:c1e]), name, -1); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "has data after its final chunk 1") {
			t.Errorf("%v, final chunk repeated: got %v", seal, err)
		}
		// The name is authenticated: the same bytes under another name are refused.
		if _, err := unseal(good, "shards/000003", size); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "chunk 0 "+failed) {
			t.Errorf("%v, renamed: got %v", seal, err)
		}
	}
}

func TestSealedStreamWrongKey(t *testing.T) {
	s := sealed(t, sealAESGCM, testData(100), "a")
	other := frameTestKey
	other[0] ^= 1
	br := bufio.NewReader(bytes.NewReader(s))
	header := make([]byte, headerSize)
	_, _ = io.ReadFull(br, header)
	h, _ := parseHeader(header)
	aead, _ := streamAEAD(h, &other)
	_, err := io.ReadAll(newFrameReader(br, h, header, aead, "a", "stream a", int64(len(s))))
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "chunk 0 failed authentication") {
		t.Fatalf("got %v", err)
	}
}

func TestParseHeader(t *testing.T) {
	good := newStreamHeader(sealAESGCM, DefaultChunkSize, [16]byte{1}).marshal()
	h, err := parseHeader(good)
	if err != nil || h.ChunkSize != DefaultChunkSize || h.Seal != sealAESGCM || h.PackageID != [16]byte{1} {
		t.Fatalf("parseHeader = %+v, %v", h, err)
	}
	edit := func(i int, v byte) []byte { b := bytes.Clone(good); b[i] = v; return b }
	for name, tc := range map[string]struct {
		b    []byte
		want string
	}{
		"magic":    {edit(0, 'M'), "magic"},
		"version":  {edit(8, 2), "framing version 2"},
		"seal":     {edit(9, 7), "unknown seal kind 7"},
		"reserved": {edit(10, 1), "reserved"},
		"chunk":    {edit(12, 0xFF), "chunk size"},
		"short":    {good[:10], "header is 10 bytes"},
	} {
		if _, err := parseHeader(tc.b); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", name, err, tc.want)
		}
	}
}

func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 0x01
	return c
}

func cat(parts ...[]byte) []byte {
	return bytes.Join(parts, nil)
}
