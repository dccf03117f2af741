package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/testutil"
)

var testKey = Key([]byte("snapshot-test-key-0123456789abcd"))

// newBucket creates a bucket of its own on the test MinIO, emptied and removed when
// the test ends.
func newBucket(t testing.TB) *MinioObjects {
	t.Helper()
	cfg := testutil.S3Config(t)
	c, err := minio.New(cfg.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	bucket := testutil.UniqueName("snap-")
	ctx := context.Background()
	if err := c.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("creating bucket %s: %v", bucket, err)
	}
	obj := NewMinioObjects(c, bucket)
	t.Cleanup(func() {
		for o := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
			if o.Err == nil {
				_ = c.RemoveObject(ctx, bucket, o.Key, minio.RemoveObjectOptions{})
			}
		}
		for u := range c.ListIncompleteUploads(ctx, bucket, "", true) {
			if u.Err == nil {
				_ = c.RemoveIncompleteUpload(ctx, bucket, u.Key)
			}
		}
		_ = c.RemoveBucket(ctx, bucket)
	})
	return obj
}

// genOptions shape generated items.
type genOptions struct {
	items, scopes int
	dim           int // embedding dimension, 0 for none
	seed          uint64
}

var words = []string{"café", "naïve", "北京", "東京タワー", "Zürich", "straße", "😀 emoji", "<html> & \"quotes\"", "tab\tnew\nline", "plain", "\u2028sep", "ünïcödé"}

// genItems returns deterministic items of every type, sorted by scope (byte order),
// with unicode content, keys, history, expiry and, when dim > 0, embeddings on most.
func genItems(o genOptions) []memory.Item {
	r := rand.New(rand.NewPCG(o.seed, 42))
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	types := memory.AllTypes()
	kinds := []string{"agent", "session", "user"}
	items := make([]memory.Item, 0, o.items)
	for i := 0; i < o.items; i++ {
		s := i * o.scopes / o.items                                             // scope index, non-decreasing in i
		scope := fmt.Sprintf("%s:%06d", kinds[min(2, s*3/max(1, o.scopes))], s) // sorted: agent < session < user
		created := base.Add(time.Duration(i) * time.Second).Add(time.Duration(r.IntN(1e9)))
		content, _ := json.Marshal(map[string]any{
			"text":  words[r.IntN(len(words))] + " " + words[r.IntN(len(words))],
			"n":     r.IntN(1000),
			"score": float64(r.IntN(1000)) / 8,
			"tags":  []string{words[r.IntN(len(words))], "t"},
			"nested": map[string]any{
				"ok": r.IntN(2) == 0, "nil": nil,
			},
		})
		it := memory.Item{
			MemoryID:   fmt.Sprintf("m%08d", i),
			MemoryType: types[r.IntN(len(types))],
			Scope:      scope,
			Content:    content,
			Source:     "langgraph@0.2",
			BaseScore:  float64(r.IntN(100)) / 100,
			CreatedAt:  created,
			UpdatedAt:  created.Add(time.Minute),
		}
		if r.IntN(3) == 0 {
			it.Key = fmt.Sprintf("preference.%d", r.IntN(5))
			old, _ := json.Marshal(map[string]string{"old": words[r.IntN(len(words))]})
			it.History = []memory.Revision{{
				Content: old, Source: "import", BaseScore: 0.5,
				UpdatedAt: created.Add(-time.Hour), SupersededAt: created,
			}}
		}
		if it.MemoryType == memory.Working {
			exp := created.Add(24 * time.Hour)
			it.ExpiresAt = &exp
		}
		if r.IntN(10) == 0 {
			arch := created.Add(48 * time.Hour)
			it.ArchivedAt = &arch
		}
		if o.dim > 0 && r.IntN(5) != 0 {
			it.Embedding = make([]float32, o.dim)
			for j := range it.Embedding {
				it.Embedding[j] = r.Float32()*2 - 1
			}
			it.Embedding[0] = 1e-7 // exercises exponent formatting
		}
		items = append(items, it)
	}
	return items
}

// writePackage writes items as a package and returns its manifest.
func writePackage(t testing.TB, obj Objects, o WriterOptions, items []memory.Item, tombstones []memory.Tombstone) *Manifest {
	t.Helper()
	ctx := context.Background()
	w, err := NewWriter(ctx, obj, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if err := w.Add(ctx, it); err != nil {
			t.Fatal(err)
		}
	}
	for _, tb := range sortedTombstones(tombstones) {
		if err := w.AddTombstone(tb); err != nil {
			t.Fatal(err)
		}
	}
	m, err := w.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func readItems(t testing.TB, r *Reader) []memory.Item {
	t.Helper()
	var got []memory.Item
	if err := r.Items(context.Background(), func(it memory.Item) error {
		got = append(got, it)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// sameItems reports the first difference between two item lists.
func sameItems(t testing.TB, got, want []memory.Item) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("read %d items, wrote %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			g, _ := json.Marshal(got[i])
			w, _ := json.Marshal(want[i])
			t.Fatalf("item %d differs:\n got %s\nwant %s", i, g, w)
		}
	}
}

// getObject and putObject edit stored objects for tamper tests.
func getObject(t testing.TB, obj Objects, name string) []byte {
	t.Helper()
	rc, err := obj.Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func putObject(t testing.TB, obj Objects, name string, b []byte) {
	t.Helper()
	if _, err := obj.Put(context.Background(), name, bytes.NewReader(b)); err != nil {
		t.Fatal(err)
	}
}

func listNames(t testing.TB, obj Objects, prefix string) []string {
	t.Helper()
	names, err := obj.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	for i := range names {
		names[i] = strings.TrimPrefix(names[i], prefix)
	}
	return names
}

// faultObjects wraps Objects to inject failures into Put.
type faultObjects struct {
	Objects
	mu sync.Mutex
	// onPut, when set, may replace the reader (to fail or cancel mid-stream) or fail
	// the Put outright.
	onPut func(name string, r io.Reader) (io.Reader, error)
}

func (f *faultObjects) Put(ctx context.Context, name string, r io.Reader) (int64, error) {
	f.mu.Lock()
	hook := f.onPut
	f.mu.Unlock()
	if hook != nil {
		var err error
		if r, err = hook(name, r); err != nil {
			return 0, err
		}
	}
	return f.Objects.Put(ctx, name, r)
}

// afterBytes calls fn once, after n bytes have been read through it.
type afterBytes struct {
	r    io.Reader
	n    int64
	fn   func()
	once sync.Once
}

func (a *afterBytes) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	a.n -= int64(n)
	if a.n <= 0 {
		a.once.Do(a.fn)
	}
	return n, err
}

// sortedTombstones returns a copy of ts in scope order, as AddTombstone takes them.
func sortedTombstones(ts []memory.Tombstone) []memory.Tombstone {
	out := slices.Clone(ts)
	slices.SortFunc(out, func(a, b memory.Tombstone) int { return strings.Compare(a.Scope, b.Scope) })
	return out
}
