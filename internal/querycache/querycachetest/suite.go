// Package querycachetest is the conformance suite every querycache.Backend passes.
package querycachetest

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/querycache"
	"github.com/amemory/memory-operator/internal/testutil"
)

// Run runs the suite; newBackend returns an empty backend of its own for each test.
func Run(t *testing.T, newBackend func(t *testing.T) querycache.Backend) {
	ctx := context.Background()
	hour := func() time.Time { return time.Now().Add(time.Hour) }
	get := func(t *testing.T, b querycache.Backend, scope, key string, version int64) ([]byte, querycache.Lookup) {
		t.Helper()
		return b.Get(ctx, scope, key, version)
	}
	expect := func(t *testing.T, b querycache.Backend, scope, key string, version int64, want querycache.Lookup, data []byte) {
		t.Helper()
		got, l := get(t, b, scope, key, version)
		if l != want || (want == querycache.Found && !bytes.Equal(got, data)) {
			t.Fatalf("Get(%q, %q, %d) = %q, %v; want %q, %v", scope, key, version, got, l, data, want)
		}
	}

	t.Run("MissingThenFound", func(t *testing.T) {
		b := newBackend(t)
		expect(t, b, "user:1", "k", 0, querycache.Missing, nil)
		b.Set(ctx, "user:1", "k", 0, []byte("zero"), hour())
		expect(t, b, "user:1", "k", 0, querycache.Found, []byte("zero"))
		expect(t, b, "user:1", "k", 0, querycache.Found, []byte("zero"))
	})

	t.Run("OlderVersionIsDropped", func(t *testing.T) {
		b := newBackend(t)
		b.Set(ctx, "user:1", "k", 3, []byte("v3"), hour())
		expect(t, b, "user:1", "k", 4, querycache.Stale, nil)
		// Dropped: not even its own version finds it again.
		expect(t, b, "user:1", "k", 3, querycache.Missing, nil)
		expect(t, b, "user:1", "k", 4, querycache.Missing, nil)
	})

	t.Run("NewerVersionStays", func(t *testing.T) {
		b := newBackend(t)
		b.Set(ctx, "user:1", "k", 5, []byte("v5"), hour())
		// A reader that read an older version misses, and leaves the newer entry.
		expect(t, b, "user:1", "k", 4, querycache.Missing, nil)
		b.Set(ctx, "user:1", "k", 4, []byte("v4"), hour())
		expect(t, b, "user:1", "k", 5, querycache.Found, []byte("v5"))
		// A newer one replaces it; so does the same version again.
		b.Set(ctx, "user:1", "k", 6, []byte("v6"), hour())
		expect(t, b, "user:1", "k", 6, querycache.Found, []byte("v6"))
		b.Set(ctx, "user:1", "k", 6, []byte("v6 again"), hour())
		expect(t, b, "user:1", "k", 6, querycache.Found, []byte("v6 again"))
	})

	t.Run("ScopesAndKeysApart", func(t *testing.T) {
		b := newBackend(t)
		// Pairs that a careless concatenation would confuse.
		b.Set(ctx, "user:1", "ab", 1, []byte("1/ab"), hour())
		b.Set(ctx, "user:1a", "b", 1, []byte("1a/b"), hour())
		b.Set(ctx, "user:2", "ab", 7, []byte("2/ab"), hour())
		expect(t, b, "user:1", "ab", 1, querycache.Found, []byte("1/ab"))
		expect(t, b, "user:1a", "b", 1, querycache.Found, []byte("1a/b"))
		expect(t, b, "user:2", "ab", 7, querycache.Found, []byte("2/ab"))
		expect(t, b, "user:1", "b", 1, querycache.Missing, nil)
		// Invalidating one scope's entry leaves the other scope's.
		expect(t, b, "user:1", "ab", 2, querycache.Stale, nil)
		expect(t, b, "user:2", "ab", 7, querycache.Found, []byte("2/ab"))
	})

	t.Run("BinaryData", func(t *testing.T) {
		b := newBackend(t)
		data := make([]byte, 256*3)
		for i := range data {
			data[i] = byte(i)
		}
		b.Set(ctx, "user:1", "k", 1, data, hour())
		expect(t, b, "user:1", "k", 1, querycache.Found, data)
		b.Set(ctx, "user:1", "empty", 1, []byte{}, hour())
		expect(t, b, "user:1", "empty", 1, querycache.Found, []byte{})
	})

	t.Run("Expiry", func(t *testing.T) {
		b := newBackend(t)
		b.Set(ctx, "user:1", "past", 1, []byte("x"), time.Now().Add(-time.Second))
		expect(t, b, "user:1", "past", 1, querycache.Missing, nil)
		b.Set(ctx, "user:1", "soon", 1, []byte("x"), time.Now().Add(200*time.Millisecond))
		b.Set(ctx, "user:1", "later", 1, []byte("y"), hour())
		testutil.Eventually(t, "the short-lived entry expires", func() (bool, error) {
			_, l := get(t, b, "user:1", "soon", 1)
			return l == querycache.Missing, nil
		})
		expect(t, b, "user:1", "later", 1, querycache.Found, []byte("y"))
	})

	t.Run("Concurrent", func(t *testing.T) {
		b := newBackend(t)
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 50 {
					key := fmt.Sprintf("k%d", i%5)
					v := int64(i / 10)
					b.Set(ctx, "user:c", key, v, fmt.Appendf(nil, "%d", v), hour())
					if data, l := b.Get(ctx, "user:c", key, v); l == querycache.Found && string(data) != fmt.Sprint(v) {
						t.Errorf("worker %d: %s at version %d holds %q", w, key, v, data)
					}
				}
			}()
		}
		wg.Wait()
		// Every key ends at the newest version written.
		for i := range 5 {
			expect(t, b, "user:c", fmt.Sprintf("k%d", i), 4, querycache.Found, []byte("4"))
		}
	})
}
