package embed

import (
	"context"
	"strings"
	"testing"
	"time"
)

// countingEmbedder records the size of every call.
type countingEmbedder struct {
	Embedder
	calls []int
}

func (c *countingEmbedder) Embed(ctx context.Context, role Role, texts []string) ([][]float32, error) {
	c.calls = append(c.calls, len(texts))
	return c.Embedder.Embed(ctx, role, texts)
}

func TestPacedSplitsCallsAndCounts(t *testing.T) {
	inner := &countingEmbedder{Embedder: NewHashing(16)}
	p := NewPaced(inner, 0, 4)
	texts := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}
	vecs, err := p.Embed(context.Background(), Passage, texts)
	if err != nil || len(vecs) != len(texts) {
		t.Fatalf("Embed = %d vectors, %v", len(vecs), err)
	}
	want, _ := NewHashing(16).Embed(context.Background(), Passage, texts)
	for i := range vecs {
		for j := range vecs[i] {
			if vecs[i][j] != want[i][j] {
				t.Fatalf("vector %d differs from the inner embedder's", i)
			}
		}
	}
	if got := inner.calls; len(got) != 3 || got[0] != 4 || got[1] != 4 || got[2] != 2 {
		t.Fatalf("calls = %v, want [4 4 2]", got)
	}
	if p.Texts() != 10 {
		t.Fatalf("Texts = %d, want 10", p.Texts())
	}
}

// A limited pace makes a caller wait: a budget far below the time the texts need at
// that pace ends the call with the context's error instead of a burst through.
func TestPacedHoldsTheRate(t *testing.T) {
	p := NewPaced(NewHashing(16), 10, 5) // 10 texts a second
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	// 5 come at once (the burst), the next 25 need 2.5 s at 10/s.
	_, err := p.Embed(ctx, Passage, make([]string, 30))
	// (x/time/rate refuses at once a wait it knows would outlast the deadline.)
	if err == nil || !strings.Contains(err.Error(), "rate limit") {
		t.Fatalf("Embed of 30 texts at 10/s within 300 ms: %v, want the rate limit's refusal", err)
	}
	if p.Texts() > 10 {
		t.Fatalf("%d texts embedded within 300 ms at 10/s (burst 5)", p.Texts())
	}
}
