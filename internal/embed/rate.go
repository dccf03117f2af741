package embed

import (
	"context"
	"fmt"
	"sync/atomic"

	"golang.org/x/time/rate"
)

// Paced wraps an Embedder for a bulk job (re-embedding a whole store) that must not
// take the embedding server from the agents who share it: it embeds at most
// PerSecond texts a second, on average, in calls of at most Burst texts. It also
// counts the texts it embedded.
type Paced struct {
	inner   Embedder
	limiter *rate.Limiter
	burst   int
	texts   atomic.Int64
}

var _ Embedder = (*Paced)(nil)

// NewPaced wraps inner; perSecond <= 0 means no limit (the count is still kept).
// burst is the most texts one call sends (at least 1).
func NewPaced(inner Embedder, perSecond float64, burst int) *Paced {
	burst = max(burst, 1)
	limit := rate.Limit(perSecond)
	if perSecond <= 0 {
		limit = rate.Inf
	}
	return &Paced{inner: inner, limiter: rate.NewLimiter(limit, burst), burst: burst}
}

// Embed waits for the texts' turn, then embeds them, burst texts per call.
func (p *Paced) Embed(ctx context.Context, role Role, texts []string) ([][]float32, error) {
	out := make([][]float32, 0, len(texts))
	for start := 0; start < len(texts); start += p.burst {
		chunk := texts[start:min(start+p.burst, len(texts))]
		if err := p.limiter.WaitN(ctx, len(chunk)); err != nil {
			return nil, fmt.Errorf("waiting for the embedding rate limit: %w", err)
		}
		vecs, err := p.inner.Embed(ctx, role, chunk)
		if err != nil {
			return nil, err
		}
		if len(vecs) != len(chunk) {
			return nil, fmt.Errorf("embedding with %s: got %d vectors for %d texts", p.inner.Model(), len(vecs), len(chunk))
		}
		p.texts.Add(int64(len(chunk)))
		out = append(out, vecs...)
	}
	return out, nil
}

// Texts is how many texts Embed embedded so far.
func (p *Paced) Texts() int64 { return p.texts.Load() }

// Model is the inner embedder's.
func (p *Paced) Model() string { return p.inner.Model() }

// Dimension is the inner embedder's.
func (p *Paced) Dimension() int { return p.inner.Dimension() }

// Roles is the inner embedder's.
func (p *Paced) Roles() Roles { return p.inner.Roles() }
