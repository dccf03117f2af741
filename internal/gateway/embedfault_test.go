package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/amemory/memory-operator/internal/embed"
)

// faultEmbedder is a fault injector, not a model: a real OpenAI-compatible
// /v1/embeddings server (httptest) that embeds as the hashing embedder does, but
//
//   - holds every request with an input containing "SLOW" until the client gives up
//     or release is closed, as a model busy with a huge input holds its callers;
//   - answers 400 to any request with an input containing "POISON", an input that
//     model cannot embed;
//   - answers 503 to everything while down is set (the model server is away);
//
// and records the longest input it received and how many SLOW requests it held at
// once.
type faultEmbedder struct {
	t       testing.TB
	srv     *httptest.Server
	release chan struct{}
	// held receives a value each time a SLOW request starts being held.
	held chan struct{}

	down atomic.Bool

	mu          sync.Mutex
	requests    int
	longest     int
	holding     int
	maxHolding  int
	inputs      int
	poisonCalls int
}

func newFaultEmbedder(t testing.TB) *faultEmbedder {
	f := &faultEmbedder{t: t, release: make(chan struct{}), held: make(chan struct{}, 1000)}
	hashing := embed.NewHashing(testDim)
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Input []string `json:"input"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		slow, poison := false, false
		f.mu.Lock()
		f.requests++
		for _, in := range req.Input {
			f.longest = max(f.longest, len(in))
			slow = slow || strings.Contains(in, "SLOW")
			poison = poison || strings.Contains(in, "POISON")
		}
		f.inputs += len(req.Input)
		if poison {
			f.poisonCalls++
		}
		f.mu.Unlock()
		if f.down.Load() {
			http.Error(w, `{"error":{"message":"model server away"}}`, http.StatusServiceUnavailable)
			return
		}
		if poison {
			http.Error(w, `{"error":{"message":"input cannot be embedded"}}`, http.StatusBadRequest)
			return
		}
		if slow {
			f.mu.Lock()
			f.holding++
			f.maxHolding = max(f.maxHolding, f.holding)
			f.mu.Unlock()
			f.held <- struct{}{}
			select {
			case <-r.Context().Done():
			case <-f.release:
			}
			f.mu.Lock()
			f.holding--
			f.mu.Unlock()
			if r.Context().Err() != nil {
				return
			}
		}
		vecs, _ := hashing.Embed(context.Background(), embed.Passage, req.Input)
		type datum struct {
			Index     int       `json:"index"`
			Embedding []float32 `json:"embedding"`
		}
		resp := struct {
			Data []datum `json:"data"`
		}{}
		for i, v := range vecs {
			resp.Data = append(resp.Data, datum{i, v})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
	}))
	t.Cleanup(func() {
		f.releaseAll()
		f.srv.Close()
	})
	return f
}

// requestCount is how many requests the server received.
func (f *faultEmbedder) requestCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests
}

// releaseAll lets every held request answer (once).
func (f *faultEmbedder) releaseAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.release:
	default:
		close(f.release)
	}
}

func (f *faultEmbedder) stats() (longest, maxHolding, poisonCalls int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.longest, f.maxHolding, f.poisonCalls
}

// use makes the gateway embed with f.
func (f *faultEmbedder) use(c *Config) {
	c.Embedder, c.EmbedderEndpoint, c.EmbeddingModel = "OpenAI", f.srv.URL, "fault-injector"
}
