package querycache

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// DefaultMaxBytes bounds the in-process backend when NewMemory is given 0: about
// 1,500 results of ten memories of a kilobyte each, well inside the gateway's
// memory budget.
const DefaultMaxBytes = 16 << 20

// entryOverhead is what an entry costs beyond its data, scope and key: the LRU's
// list element and map slot, the entry struct, the string headers.
const entryOverhead = 160

// Memory is the in-process backend: a least-recently-used list bounded by the bytes
// of its entries (golang-lru's simplelru, whose single lock is no bottleneck next to
// the database round trip every lookup also makes). Entries of older versions and
// expired ones go when a lookup meets them or when the LRU evicts them.
type Memory struct {
	now func() time.Time

	mu       sync.Mutex
	lru      *simplelru.LRU[memKey, *memEntry]
	bytes    int64
	maxBytes int64
}

type memKey struct{ scope, key string }

type memEntry struct {
	version int64
	data    []byte
	until   time.Time
	size    int64
}

// NewMemory returns an in-process backend holding at most maxBytes of entries (0:
// DefaultMaxBytes). now is its clock (nil: time.Now).
func NewMemory(maxBytes int64, now func() time.Time) *Memory {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	if now == nil {
		now = time.Now
	}
	m := &Memory{now: now, maxBytes: maxBytes}
	// Bounded by bytes below, not by count.
	m.lru, _ = simplelru.NewLRU[memKey, *memEntry](math.MaxInt, func(_ memKey, e *memEntry) { m.bytes -= e.size })
	return m
}

// Get implements Backend.
func (m *Memory) Get(_ context.Context, scope, key string, version int64) ([]byte, Lookup) {
	k := memKey{scope, key}
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.lru.Peek(k)
	switch {
	case !ok:
		return nil, Missing
	case e.version < version:
		m.lru.Remove(k)
		return nil, Stale
	case e.version > version:
		return nil, Missing
	case !m.now().Before(e.until):
		m.lru.Remove(k)
		return nil, Missing
	}
	m.lru.Get(k) // now the most recently used
	return e.data, Found
}

// Set implements Backend.
func (m *Memory) Set(_ context.Context, scope, key string, version int64, data []byte, expiresAt time.Time) {
	k := memKey{scope, key}
	size := int64(len(data)+len(scope)+len(key)) + entryOverhead
	if size > m.maxBytes || !m.now().Before(expiresAt) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.lru.Peek(k); ok {
		if old.version > version {
			return
		}
		m.lru.Remove(k)
	}
	m.lru.Add(k, &memEntry{version: version, data: data, until: expiresAt, size: size})
	m.bytes += size
	for m.bytes > m.maxBytes {
		m.lru.RemoveOldest()
	}
}

// Len is the number of entries held; Bytes what they count for against the bound.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lru.Len()
}

// Bytes is what the entries held count for against the bound.
func (m *Memory) Bytes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bytes
}
