package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/klauspost/compress/zstd"
)

func TestFrameCompressorRoundTrip(t *testing.T) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(3))
	if err != nil {
		t.Fatal(err)
	}
	var pool framePool
	var in bytes.Buffer
	for i := 0; in.Len() < 5*frameSize+frameSize/2; i++ {
		fmt.Fprintf(&in, `{"line":%d,"text":"%x"}`+"\n", i, i*7919)
	}
	for _, size := range []int{0, 1, frameSize, in.Len()} {
		var out bytes.Buffer
		c := newFrameCompressor(enc, &pool, &out, 3)
		data := in.Bytes()[:size]
		for rest := data; len(rest) > 0; {
			n := min(len(rest), 1+len(rest)%99991)
			if _, err := c.Write(rest[:n]); err != nil {
				t.Fatal(err)
			}
			rest = rest[n:]
		}
		if err := c.Close(); err != nil || c.Close() != nil {
			t.Fatalf("Close: %v", err)
		}
		dec, err := zstd.NewReader(bytes.NewReader(out.Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(dec)
		dec.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%d bytes: decoded %d bytes, err %v", size, len(got), err)
		}
		if _, err := c.Write([]byte("x")); err == nil {
			t.Fatal("Write after Close succeeded")
		}
	}
}

type failingWriter struct{ after int }

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.after--; f.after < 0 {
		return 0, errors.New("sink failed")
	}
	return len(p), nil
}

func TestFrameCompressorReportsWriteErrors(t *testing.T) {
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	var pool framePool
	c := newFrameCompressor(enc, &pool, &failingWriter{after: 1}, 2)
	chunk := bytes.Repeat([]byte("abcdefgh"), frameSize/8)
	var werr error
	for i := 0; i < 50 && werr == nil; i++ {
		_, werr = c.Write(chunk)
	}
	if err := c.Close(); err == nil || err.Error() != "sink failed" {
		t.Fatalf("Close: %v (last Write: %v)", err, werr)
	}
}
