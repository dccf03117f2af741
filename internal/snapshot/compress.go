package snapshot

import (
	"errors"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// frameSize is the uncompressed size of the independent zstd frames a shard is cut
// into. Frames are compressed in parallel (EncodeAll is safe for concurrent use) and
// written in order; at 1 MiB the compression lost to frame boundaries is negligible
// for JSON lines, and the memory held per frame in flight is small.
const frameSize = 1 << 20

// framePool recycles frame buffers (input and output) between frames and shards.
type framePool struct{ p sync.Pool }

func (fp *framePool) get() []byte {
	if b, ok := fp.p.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, frameSize+frameSize/8)
}

func (fp *framePool) put(b []byte) {
	if cap(b) <= 4*frameSize { // an oversized output is not worth keeping
		fp.p.Put(&b)
	}
}

// frameCompressor is an io.WriteCloser that compresses its input as a sequence of
// zstd frames of frameSize bytes, each compressed in its own goroutine, and writes
// them to w in order from one output goroutine. At most inFlight frames are being
// compressed or waiting to be written; Write blocks beyond that.
type frameCompressor struct {
	enc  *zstd.Encoder
	pool *framePool
	w    io.Writer
	buf  []byte
	jobs chan *frameJob
	done chan struct{}

	mu     sync.Mutex
	err    error // first error writing to w
	closed bool
}

type frameJob struct {
	in, out []byte
	ready   chan struct{}
}

func newFrameCompressor(enc *zstd.Encoder, pool *framePool, w io.Writer, inFlight int) *frameCompressor {
	c := &frameCompressor{
		enc:  enc,
		pool: pool,
		w:    w,
		buf:  pool.get(),
		jobs: make(chan *frameJob, inFlight),
		done: make(chan struct{}),
	}
	go c.output()
	return c
}

// output writes compressed frames in order; after an error it only drains.
func (c *frameCompressor) output() {
	defer close(c.done)
	for job := range c.jobs {
		<-job.ready
		if c.failed() == nil {
			if _, err := c.w.Write(job.out); err != nil {
				c.mu.Lock()
				c.err = err
				c.mu.Unlock()
			}
		}
		c.pool.put(job.out)
	}
}

func (c *frameCompressor) failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *frameCompressor) Write(p []byte) (int, error) {
	if err := c.failed(); err != nil {
		return 0, err
	}
	if c.closed {
		return 0, errors.New("snapshot: write to a closed compressor")
	}
	n := len(p)
	for len(p) > 0 {
		k := copy(c.buf[len(c.buf):frameSize], p)
		c.buf = c.buf[:len(c.buf)+k]
		p = p[k:]
		if len(c.buf) == frameSize {
			c.submit()
		}
	}
	return n, nil
}

// submit starts compressing the filled buffer and queues it for output.
func (c *frameCompressor) submit() {
	job := &frameJob{in: c.buf, ready: make(chan struct{})}
	c.buf = c.pool.get()
	go func() {
		job.out = c.enc.EncodeAll(job.in, c.pool.get())
		c.pool.put(job.in)
		close(job.ready)
	}()
	c.jobs <- job
}

// Close compresses what is buffered, waits until every frame is written, and returns
// the first write error. It does not close w.
func (c *frameCompressor) Close() error {
	if c.closed {
		return c.failed()
	}
	c.closed = true
	if len(c.buf) > 0 {
		c.submit()
	} else {
		c.pool.put(c.buf)
	}
	c.buf = nil
	close(c.jobs)
	<-c.done
	return c.failed()
}
