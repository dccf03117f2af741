package embed

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// stuckEmbedder is a test double for an embedder that is busy: each call waits until
// release is closed, ignoring its context as a server computing a huge input does,
// and records how many calls of each caller were in flight at once.
type stuckEmbedder struct {
	release chan struct{}
	entered chan string

	mu           sync.Mutex
	inFlight     map[string]int
	maxInFlight  map[string]int
	calls, texts int
}

func newStuck() *stuckEmbedder {
	return &stuckEmbedder{release: make(chan struct{}), entered: make(chan string, 100), inFlight: map[string]int{}, maxInFlight: map[string]int{}}
}

func (s *stuckEmbedder) Model() string  { return "stuck" }
func (s *stuckEmbedder) Dimension() int { return 2 }
func (s *stuckEmbedder) Roles() Roles   { return NoRoles }
func (s *stuckEmbedder) Embed(ctx context.Context, _ Role, texts []string) ([][]float32, error) {
	c := callerOf(ctx)
	s.mu.Lock()
	s.calls++
	s.texts += len(texts)
	s.inFlight[c]++
	s.maxInFlight[c] = max(s.maxInFlight[c], s.inFlight[c])
	s.mu.Unlock()
	s.entered <- c
	if !strings.HasPrefix(texts[0], "fast") {
		<-s.release
	}
	s.mu.Lock()
	s.inFlight[c]--
	s.mu.Unlock()
	out := make([][]float32, len(texts))
	for i := range out {
		out[i] = []float32{1, 0}
	}
	return out, nil
}

// TestBoundedShares: one caller's calls beyond its share wait for its own calls and
// fail with ErrBusy, while another caller goes straight through.
func TestBoundedShares(t *testing.T) {
	inner := newStuck()
	b := NewBounded(inner, BoundOptions{PerCaller: 2, Timeout: 200 * time.Millisecond})
	ctxA := WithCaller(context.Background(), "a")
	errs := make(chan error, 5)
	for range 5 {
		go func() {
			_, err := b.Embed(ctxA, Passage, []string{"slow"})
			errs <- err
		}()
	}
	for range 2 {
		<-inner.entered
	}
	// b's calls are not behind a's.
	if _, err := b.Embed(WithCaller(context.Background(), "b"), Passage, []string{"fast"}); err != nil {
		t.Fatalf("caller b: %v", err)
	}
	<-inner.entered
	// a's three calls beyond its share give up with ErrBusy (a's two are stuck).
	for range 3 {
		if err := <-errs; !errors.Is(err, ErrBusy) {
			t.Fatalf("a's call beyond its share: %v, want ErrBusy", err)
		}
	}
	close(inner.release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("a's call within its share: %v", err)
		}
	}
	if inner.maxInFlight["a"] != 2 {
		t.Fatalf("a had %d calls in flight at once, want its share of 2", inner.maxInFlight["a"])
	}
}

// slowEmbedder answers only when its context ends (a server that never answers).
type slowEmbedder struct{}

func (slowEmbedder) Model() string  { return "slow" }
func (slowEmbedder) Dimension() int { return 2 }
func (slowEmbedder) Roles() Roles   { return NoRoles }
func (slowEmbedder) Embed(ctx context.Context, _ Role, _ []string) ([][]float32, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestBoundedTimeout(t *testing.T) {
	b := NewBounded(slowEmbedder{}, BoundOptions{Timeout: 50 * time.Millisecond})
	_, err := b.Embed(context.Background(), Passage, []string{"x"})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v, want ErrTimeout", err)
	}
	// The caller's own deadline is the caller's, not the embedder's timeout.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Embed(ctx, Passage, []string{"x"}); !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
		t.Fatalf("canceled caller: %v", err)
	}
}

func TestBoundedChunks(t *testing.T) {
	inner := newStuck()
	close(inner.release)
	b := NewBounded(inner, BoundOptions{ChunkTexts: 4, ChunkBytes: 10})
	texts := []string{"aaaa", "bbbb", "cc", "d", "e", "f", "gggggggggggggggg", "h"}
	vecs, err := b.Embed(context.Background(), Passage, texts)
	if err != nil || len(vecs) != len(texts) {
		t.Fatalf("%d vectors, %v", len(vecs), err)
	}
	// [aaaa bbbb cc] [d e f] [gggg...] [h]: at most 4 texts and 10 bytes a call, and
	// an input longer than that alone.
	if inner.calls != 4 || inner.texts != len(texts) {
		t.Fatalf("%d calls for %d texts, want 4 calls", inner.calls, inner.texts)
	}
}
