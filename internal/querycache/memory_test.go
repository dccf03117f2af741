package querycache_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/querycache"
	"github.com/amemory/memory-operator/internal/querycache/querycachetest"
)

func TestMemoryConformance(t *testing.T) {
	querycachetest.Run(t, func(*testing.T) querycache.Backend { return querycache.NewMemory(0, nil) })
}

// TestMemoryBoundedByBytes: the entries never count for more than the bound; the
// least recently used go first, and an entry larger than the bound is not kept.
func TestMemoryBoundedByBytes(t *testing.T) {
	ctx := context.Background()
	m := querycache.NewMemory(10_000, nil)
	until := time.Now().Add(time.Hour)
	data := make([]byte, 1000)
	for i := range 9 {
		m.Set(ctx, "user:1", fmt.Sprint(i), 1, data, until)
	}
	if m.Len() != 8 || m.Bytes() > 10_000 {
		t.Fatalf("%d entries, %d bytes; want 8 within 10,000", m.Len(), m.Bytes())
	}
	// 0 went first; reading 1 makes 2 the next to go.
	if _, l := m.Get(ctx, "user:1", "0", 1); l != querycache.Missing {
		t.Fatalf("the oldest entry is still there: %v", l)
	}
	if _, l := m.Get(ctx, "user:1", "1", 1); l != querycache.Found {
		t.Fatalf("entry 1: %v", l)
	}
	m.Set(ctx, "user:1", "9", 1, data, until)
	if _, l := m.Get(ctx, "user:1", "2", 1); l != querycache.Missing {
		t.Fatalf("entry 2 outlived a more recently used one: %v", l)
	}
	if _, l := m.Get(ctx, "user:1", "1", 1); l != querycache.Found {
		t.Fatalf("entry 1, recently used, was evicted: %v", l)
	}
	// Replacing an entry counts its size once.
	before := m.Bytes()
	m.Set(ctx, "user:1", "9", 2, data, until)
	if m.Bytes() != before {
		t.Fatalf("replacing an entry changed the bytes from %d to %d", before, m.Bytes())
	}
	m.Set(ctx, "user:1", "huge", 1, make([]byte, 20_000), until)
	if _, l := m.Get(ctx, "user:1", "huge", 1); l != querycache.Missing || m.Bytes() > 10_000 {
		t.Fatalf("an entry over the bound: %v, %d bytes", l, m.Bytes())
	}
}
