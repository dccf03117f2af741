package embed

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Errors of a Bounded embedder.
var (
	// ErrBusy: the caller already has its share of embedding calls in flight and
	// none ended within the call timeout.
	ErrBusy = errors.New("the caller's share of embedding calls is in use")
	// ErrTimeout: the embedder did not answer one call within the call timeout.
	ErrTimeout = errors.New("the embedder did not answer in time")
)

// BoundOptions configure a Bounded embedder.
type BoundOptions struct {
	// PerCaller is how many calls one caller (see WithCaller) may have in flight at
	// once; 0 means DefaultPerCaller.
	PerCaller int
	// Timeout bounds one call to the embedder, waiting for a slot included; 0 means
	// DefaultCallTimeout.
	Timeout time.Duration
	// ChunkTexts and ChunkBytes bound the inputs of one call: a longer Embed is sent
	// as several calls, each with its own timeout. 0 means DefaultChunkTexts and
	// DefaultChunkBytes.
	ChunkTexts, ChunkBytes int
}

// Defaults of BoundOptions.
const (
	DefaultPerCaller   = 4
	DefaultCallTimeout = 10 * time.Second
	DefaultChunkTexts  = 32
	DefaultChunkBytes  = 64 << 10
)

// Bounded wraps an Embedder shared by many callers (a gateway's API keys and its
// background indexing) so that none of them can hold it for everyone: each caller has
// at most PerCaller calls in flight, and each call, of at most ChunkTexts inputs and
// ChunkBytes bytes, is given at most Timeout. A caller over its share waits for one of
// its own calls to end (never for another caller's) and fails with ErrBusy when none
// does in time; a call that takes too long fails with ErrTimeout. Either way the
// caller learns it at once, instead of queueing behind an embedder busy with one huge
// or slow input.
type Bounded struct {
	inner Embedder
	opts  BoundOptions

	mu    sync.Mutex
	slots map[string]chan struct{}
}

var _ Embedder = (*Bounded)(nil)

// NewBounded wraps inner.
func NewBounded(inner Embedder, o BoundOptions) *Bounded {
	if o.PerCaller <= 0 {
		o.PerCaller = DefaultPerCaller
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultCallTimeout
	}
	if o.ChunkTexts <= 0 {
		o.ChunkTexts = DefaultChunkTexts
	}
	if o.ChunkBytes <= 0 {
		o.ChunkBytes = DefaultChunkBytes
	}
	return &Bounded{inner: inner, opts: o, slots: map[string]chan struct{}{}}
}

type callerKey struct{}

// WithCaller names the caller whose share the embedding calls made with ctx use (an
// API key's name). Calls without a caller share the unnamed one.
func WithCaller(ctx context.Context, caller string) context.Context {
	return context.WithValue(ctx, callerKey{}, caller)
}

func callerOf(ctx context.Context) string {
	c, _ := ctx.Value(callerKey{}).(string)
	return c
}

// Model is the inner embedder's.
func (b *Bounded) Model() string { return b.inner.Model() }

// Dimension is the inner embedder's.
func (b *Bounded) Dimension() int { return b.inner.Dimension() }

// Roles is the inner embedder's.
func (b *Bounded) Roles() Roles { return b.inner.Roles() }

// Embed embeds texts in calls of at most ChunkTexts inputs and ChunkBytes bytes (one
// longer input is a call of its own), each within the caller's share and timeout.
func (b *Bounded) Embed(ctx context.Context, role Role, texts []string) ([][]float32, error) {
	out := make([][]float32, 0, len(texts))
	for start := 0; start < len(texts); {
		end, size := start, 0
		for end < len(texts) && end-start < b.opts.ChunkTexts && (end == start || size+len(texts[end]) <= b.opts.ChunkBytes) {
			size += len(texts[end])
			end++
		}
		vecs, err := b.call(ctx, role, texts[start:end])
		if err != nil {
			return nil, err
		}
		out = append(out, vecs...)
		start = end
	}
	return out, nil
}

func (b *Bounded) call(ctx context.Context, role Role, texts []string) ([][]float32, error) {
	caller := callerOf(ctx)
	cctx, cancel := context.WithTimeout(ctx, b.opts.Timeout)
	defer cancel()
	slot := b.slot(caller)
	select {
	case slot <- struct{}{}:
		defer func() { <-slot }()
	case <-cctx.Done():
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %s already has %d embedding calls in flight, none ended within %s", ErrBusy, callerName(caller), b.opts.PerCaller, b.opts.Timeout)
	}
	vecs, err := b.inner.Embed(cctx, role, texts)
	if err != nil && ctx.Err() == nil && cctx.Err() != nil {
		return nil, fmt.Errorf("%w: no answer to %d inputs within %s: %w", ErrTimeout, len(texts), b.opts.Timeout, err)
	}
	return vecs, err
}

func (b *Bounded) slot(caller string) chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.slots[caller]
	if !ok {
		s = make(chan struct{}, b.opts.PerCaller)
		b.slots[caller] = s
	}
	return s
}

func callerName(c string) string {
	if c == "" {
		return "background work"
	}
	return fmt.Sprintf("caller %q", c)
}
