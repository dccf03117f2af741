package snapshot

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/amemory/memory-operator/internal/memory"
)

// benchSource produces n items on the fly (so the benchmark's own memory does not hide
// the writer's), spread over n/20 scopes in order, cycling through a pool of
// pre-generated contents.
type benchSource struct {
	n, scopes int
	pool      []memory.Item
}

// The pool holds 16384 items with varied text (about 10 MiB of JSON), more than the
// zstd window, so compression sees realistic data rather than repeats.
func newBenchSource(n, dim int) *benchSource {
	r := rand.New(rand.NewPCG(7, 7))
	vocab := make([]string, 4000)
	for i := range vocab {
		w := make([]byte, 2+r.IntN(9))
		for j := range w {
			w[j] = byte('a' + r.IntN(26))
		}
		vocab[i] = string(w)
	}
	pool := genItems(genOptions{items: 16384, scopes: 1, dim: dim, seed: 99})
	for i := range pool {
		words := make([]string, 20+r.IntN(60))
		for j := range words {
			words[j] = vocab[int(math.Sqrt(float64(r.IntN(len(vocab)*len(vocab)))))] // skewed like text
		}
		pool[i].Content, _ = json.Marshal(map[string]any{
			"text":       strings.Join(words, " "),
			"confidence": r.Float64(),
			"turn":       r.IntN(500),
			"entities":   []string{vocab[r.IntN(len(vocab))], vocab[r.IntN(len(vocab))]},
		})
	}
	return &benchSource{n: n, scopes: max(1, n/20), pool: pool}
}

func (s *benchSource) item(i int) memory.Item {
	it := s.pool[i%len(s.pool)]
	it.MemoryID = "m" + strconv.Itoa(100000000+i)
	it.Scope = "user:" + strconv.Itoa(100000000+i*s.scopes/s.n)
	return it
}

func benchItems(b *testing.B) int {
	if v := os.Getenv("SNAPSHOT_BENCH_ITEMS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatal(err)
		}
		return n
	}
	return 200_000
}

// BenchmarkWrite writes a package of SNAPSHOT_BENCH_ITEMS (default 200k) generated
// items to MinIO per operation and reports items/s, raw JSON MB/s and stored bytes.
// "reference" is JSON lines through zstd level 1 into io.Discard in-process: the
// floor for an export that serialises and compresses the same items.
func BenchmarkWrite(b *testing.B) {
	n := benchItems(b)
	for _, bc := range []struct {
		name      string
		encrypted bool
		dim       int
	}{
		{"encrypted", true, 0},
		{"unencrypted", false, 0},
		{"encrypted-embeddings-384", true, 384},
	} {
		b.Run(bc.name, func(b *testing.B) {
			obj := newBucket(b)
			src := newBenchSource(n, bc.dim)
			ctx := context.Background()
			var stored, raw int64
			run := 0
			for b.Loop() {
				run++
				opts := WriterOptions{Prefix: fmt.Sprintf("bench/%d", run), Now: time.Now}
				if bc.encrypted {
					k := testKey
					opts.Key = &k
				} else {
					opts.Unencrypted = true
				}
				if bc.dim > 0 {
					opts.Selection.IncludeEmbeddings = true
					opts.Embedding = &EmbeddingInfo{Model: "bench", Dimension: bc.dim}
				}
				w, err := NewWriter(ctx, obj, opts)
				if err != nil {
					b.Fatal(err)
				}
				for i := 0; i < n; i++ {
					if err := w.Add(ctx, src.item(i)); err != nil {
						b.Fatal(err)
					}
				}
				m, err := w.Close(ctx)
				if err != nil {
					b.Fatal(err)
				}
				stored = m.StoredBytes()
				raw = 0
				for _, s := range m.Shards {
					raw += s.RawBytes
				}
			}
			b.SetBytes(raw)
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "items/s")
			b.ReportMetric(float64(stored), "stored-B/op")
			b.ReportMetric(float64(raw)/float64(stored), "ratio")
		})
	}
	b.Run("reference-json-zstd1-discard", func(b *testing.B) {
		src := newBenchSource(n, 0)
		enc, err := zstd.NewWriter(io.Discard, zstd.WithEncoderLevel(zstd.SpeedFastest))
		if err != nil {
			b.Fatal(err)
		}
		var raw int64
		for b.Loop() {
			cw := &countWriter{w: enc}
			enc.Reset(io.Discard)
			je := json.NewEncoder(cw)
			je.SetEscapeHTML(false)
			for i := 0; i < n; i++ {
				it := src.item(i)
				if err := je.Encode(&it); err != nil {
					b.Fatal(err)
				}
			}
			if err := enc.Close(); err != nil {
				b.Fatal(err)
			}
			raw = cw.n
		}
		b.SetBytes(raw)
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "items/s")
	})
}

// BenchmarkVerify reads back and verifies a package of SNAPSHOT_BENCH_ITEMS items.
func BenchmarkVerify(b *testing.B) {
	n := benchItems(b)
	obj := newBucket(b)
	ctx := context.Background()
	src := newBenchSource(n, 0)
	k := testKey
	w, err := NewWriter(ctx, obj, WriterOptions{Prefix: "verify", Key: &k})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := w.Add(ctx, src.item(i)); err != nil {
			b.Fatal(err)
		}
	}
	m, err := w.Close(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var raw int64
	for _, s := range m.Shards {
		raw += s.RawBytes
	}
	r, err := Open(ctx, obj, "verify", &k)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := r.Verify(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(raw)
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "items/s")
}

// BenchmarkScan reads back a package of SNAPSHOT_BENCH_ITEMS small memories (a few
// words each, 20 per scope) as a restore's verifying pass does: with one goroutine,
// and with a worker per CPU decoding and validating lines.
func BenchmarkScan(b *testing.B) {
	n := benchItems(b)
	obj := newBucket(b)
	ctx := context.Background()
	words := strings.Fields("coffee tea oat milk berlin munich jazz running allergy peanuts invoice refund delivery address")
	r := rand.New(rand.NewPCG(1, 2))
	k := testKey
	w, err := NewWriter(ctx, obj, WriterOptions{Prefix: "scan", Key: &k})
	if err != nil {
		b.Fatal(err)
	}
	at := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		var text strings.Builder
		for range 6 + r.IntN(10) {
			text.WriteString(words[r.IntN(len(words))] + " ")
		}
		c, _ := json.Marshal(map[string]any{"text": text.String(), "turn": r.IntN(500)})
		it := memory.Item{MemoryID: "m" + strconv.Itoa(100000000+i), MemoryType: memory.Semantic,
			Scope: "user:" + strconv.Itoa(10000000+i/20), Content: c, Source: "bench@1", BaseScore: 0.5, CreatedAt: at, UpdatedAt: at}
		if err := w.Add(ctx, it); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := w.Close(ctx); err != nil {
		b.Fatal(err)
	}
	rd, err := Open(ctx, obj, "scan", &k)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		f    ScanFuncs
	}{
		{"one", ScanFuncs{}},
		{"parallel-validate", ScanFuncs{Workers: runtime.GOMAXPROCS(0), Check: func(it *memory.Item) error { _ = it.Validate(); return nil }}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if err := rd.Scan(ctx, bc.f); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "items/s")
		})
	}
}
