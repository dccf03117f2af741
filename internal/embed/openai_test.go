package embed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/vector"
)

// fakeModelServer is a FAKE model server: an httptest server speaking the
// OpenAI-compatible /v1/embeddings protocol, with no model behind it. Real model
// servers cannot run in these tests; this one checks the shape of every request and
// answers with vectors derived from the input text, so the client's batching,
// ordering, retry and error handling can be asserted exactly.
type fakeModelServer struct {
	t        *testing.T
	srv      *httptest.Server
	wantPath string
	wantKey  string // "" means no Authorization header may be sent
	dim      int

	mu       sync.Mutex
	batches  [][]string
	requests int
	// respond, when set, handles request number n (from 1) instead of the default.
	respond func(n int, w http.ResponseWriter, inputs []string) bool
	reverse bool // answer data in reverse order
}

func newFakeModelServer(t *testing.T, wantPath string, dim int) *fakeModelServer {
	f := &fakeModelServer{t: t, wantPath: wantPath, dim: dim}
	f.srv = httptest.NewServer(http.HandlerFunc(f.handle))
	t.Cleanup(f.srv.Close)
	return f
}

// fakeVector is what the fake server returns for a text: [len(text), 1, 2, ...].
func fakeVector(text string, dim int) []float32 {
	v := make([]float32, dim)
	v[0] = float32(len(text))
	for i := 1; i < dim; i++ {
		v[i] = float32(i)
	}
	return v
}

func (f *fakeModelServer) handle(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests++
	n := f.requests
	f.mu.Unlock()
	if r.Method != http.MethodPost || r.URL.Path != f.wantPath {
		f.t.Errorf("fake model server: %s %s, want POST %s", r.Method, r.URL.Path, f.wantPath)
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		f.t.Errorf("fake model server: Content-Type %q", ct)
	}
	auth := r.Header.Get("Authorization")
	if f.wantKey == "" && auth != "" {
		f.t.Errorf("fake model server: unexpected Authorization header %q", auth)
	}
	if f.wantKey != "" && auth != "Bearer "+f.wantKey {
		f.t.Errorf("fake model server: Authorization %q, want Bearer <key>", auth)
	}
	raw, _ := io.ReadAll(r.Body)
	var req map[string]any
	if err := json.Unmarshal(raw, &req); err != nil {
		f.t.Errorf("fake model server: body %s: %v", raw, err)
		return
	}
	if len(req) != 2 || req["model"] != "test-model" {
		f.t.Errorf("fake model server: body %s, want exactly model and input", raw)
	}
	var inputs []string
	for _, in := range req["input"].([]any) {
		inputs = append(inputs, in.(string))
	}
	f.mu.Lock()
	f.batches = append(f.batches, inputs)
	f.mu.Unlock()
	if f.respond != nil && f.respond(n, w, inputs) {
		return
	}
	type item struct {
		Object    string    `json:"object"`
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	}
	data := make([]item, len(inputs))
	for i, in := range inputs {
		data[i] = item{"embedding", i, fakeVector(in, f.dim)}
	}
	if f.reverse {
		slices.Reverse(data)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "model": "test-model", "data": data})
}

// count is the number of requests received so far.
func (f *fakeModelServer) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests
}

// sent is the input lists of the requests received so far.
func (f *fakeModelServer) sent() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.batches)
}

func newClient(t *testing.T, f *fakeModelServer, base string, cfg Config) *OpenAI {
	t.Helper()
	cfg.BaseURL = f.srv.URL + base
	cfg.Model = "test-model"
	if cfg.Dimension == 0 {
		cfg.Dimension = f.dim
	}
	if cfg.RetryBackoff == 0 {
		cfg.RetryBackoff = time.Millisecond
	}
	c, err := NewOpenAI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestOpenAIRequestShapeAndBaseURLs(t *testing.T) {
	for _, tc := range []struct{ base, path string }{
		{"", "/v1/embeddings"},
		{"/", "/v1/embeddings"},
		{"/v1", "/v1/embeddings"},
		{"/v1/", "/v1/embeddings"},
		{"/proxy/openai", "/proxy/openai/v1/embeddings"},
	} {
		t.Run(tc.base, func(t *testing.T) {
			f := newFakeModelServer(t, tc.path, 3)
			f.wantKey = "sk-test-123"
			c := newClient(t, f, tc.base, Config{APIKey: "sk-test-123"})
			got, err := c.Embed(context.Background(), Passage, []string{"ab", "c"})
			if err != nil {
				t.Fatal(err)
			}
			if want := [][]float32{{2, 1, 2}, {1, 1, 2}}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("embeddings %v, want %v", got, want)
			}
			if fmt.Sprint(f.sent()) != "[[ab c]]" {
				t.Fatalf("requests %q", f.sent())
			}
			if c.Model() != "test-model" || c.Dimension() != 3 {
				t.Fatalf("Model %q Dimension %d", c.Model(), c.Dimension())
			}
		})
	}
}

func TestOpenAINoKeyNoAuthorization(t *testing.T) {
	f := newFakeModelServer(t, "/v1/embeddings", 2)
	c := newClient(t, f, "", Config{})
	if _, err := c.Embed(context.Background(), Passage, []string{"x"}); err != nil {
		t.Fatal(err)
	}
	if f.count() != 1 {
		t.Fatalf("%d requests", f.count())
	}
}

func TestOpenAIBatchesInOrder(t *testing.T) {
	f := newFakeModelServer(t, "/v1/embeddings", 2)
	c := newClient(t, f, "/v1", Config{BatchSize: 2})
	texts := []string{"a", "bb", "ccc", "dddd", "eeeee"}
	got, err := c.Embed(context.Background(), Passage, texts)
	if err != nil {
		t.Fatal(err)
	}
	if want := "[[a bb] [ccc dddd] [eeeee]]"; fmt.Sprint(f.sent()) != want {
		t.Fatalf("batches %q, want %s", f.sent(), want)
	}
	for i, v := range got {
		if v[0] != float32(i+1) {
			t.Fatalf("embedding %d = %v, want the one of %q", i, v, texts[i])
		}
	}
	if got, err := c.Embed(context.Background(), Passage, nil); err != nil || len(got) != 0 || f.count() != 3 {
		t.Fatalf("no texts: %v, %v, %d requests", got, err, f.count())
	}
}

func TestOpenAIReordersByIndex(t *testing.T) {
	f := newFakeModelServer(t, "/v1/embeddings", 2)
	f.reverse = true
	c := newClient(t, f, "", Config{})
	got, err := c.Embed(context.Background(), Passage, []string{"a", "bbb", "cc"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "[[1 1] [3 1] [2 1]]"; fmt.Sprint(got) != want {
		t.Fatalf("embeddings %v, want %s", got, want)
	}
}

func TestOpenAIDimensionMismatch(t *testing.T) {
	f := newFakeModelServer(t, "/v1/embeddings", 3)
	c := newClient(t, f, "", Config{Dimension: 4})
	_, err := c.Embed(context.Background(), Passage, []string{"a"})
	if !errors.Is(err, vector.ErrDimensionMismatch) {
		t.Fatalf("err = %v, want ErrDimensionMismatch", err)
	}
	if !strings.Contains(err.Error(), "dimension 3, expected 4") || !strings.Contains(err.Error(), "test-model") {
		t.Fatalf("error %q does not name expected and got dimensions and the model", err)
	}
}

func TestOpenAIMalformedResponses(t *testing.T) {
	for name, body := range map[string]string{
		"too few":      `{"data":[{"index":0,"embedding":[1,2]}]}`,
		"repeated":     `{"data":[{"index":0,"embedding":[1,2]},{"index":0,"embedding":[1,2]}]}`,
		"out of range": `{"data":[{"index":0,"embedding":[1,2]},{"index":5,"embedding":[1,2]}]}`,
		"not json":     `<html>`,
	} {
		t.Run(name, func(t *testing.T) {
			f := newFakeModelServer(t, "/v1/embeddings", 2)
			f.respond = func(_ int, w http.ResponseWriter, _ []string) bool {
				_, _ = io.WriteString(w, body)
				return true
			}
			c := newClient(t, f, "", Config{})
			if got, err := c.Embed(context.Background(), Passage, []string{"a", "b"}); err == nil {
				t.Fatalf("no error, got %v", got)
			}
			if f.count() != 1 {
				t.Fatalf("%d requests, want 1 (no retry)", f.count())
			}
		})
	}
}

func TestOpenAIRetriesThenSucceeds(t *testing.T) {
	f := newFakeModelServer(t, "/v1/embeddings", 2)
	f.respond = func(n int, w http.ResponseWriter, _ []string) bool {
		switch n {
		case 1:
			http.Error(w, "model loading", http.StatusServiceUnavailable)
		case 2:
			http.Error(w, "slow down", http.StatusTooManyRequests)
		default:
			return false
		}
		return true
	}
	c := newClient(t, f, "", Config{})
	got, err := c.Embed(context.Background(), Passage, []string{"abc"})
	if err != nil {
		t.Fatal(err)
	}
	if f.count() != 3 || fmt.Sprint(got) != "[[3 1]]" {
		t.Fatalf("%d requests, result %v; want 3 requests, [[3 1]]", f.count(), got)
	}
	if fmt.Sprint(f.sent()) != "[[abc] [abc] [abc]]" {
		t.Fatalf("retries sent %q", f.sent())
	}
}

func TestOpenAIGivesUpAfterMaxRetries(t *testing.T) {
	f := newFakeModelServer(t, "/v1/embeddings", 2)
	f.respond = func(_ int, w http.ResponseWriter, _ []string) bool {
		http.Error(w, "upstream broken", http.StatusBadGateway)
		return true
	}
	c := newClient(t, f, "", Config{MaxRetries: 2})
	_, err := c.Embed(context.Background(), Passage, []string{"x"})
	if err == nil || !strings.Contains(err.Error(), "502") || !strings.Contains(err.Error(), "upstream broken") || !strings.Contains(err.Error(), "after 3 attempts") {
		t.Fatalf("err = %v", err)
	}
	if f.count() != 3 {
		t.Fatalf("%d requests, want 3", f.count())
	}
}

func TestOpenAIUnauthorizedDoesNotLeakKey(t *testing.T) {
	const key = "sk-live-SECRET-0123456789"
	f := newFakeModelServer(t, "/v1/embeddings", 2)
	f.wantKey = key
	f.respond = func(_ int, w http.ResponseWriter, _ []string) bool {
		// Some servers echo the key they rejected.
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s","type":"invalid_request_error"}}`, key)
		return true
	}
	c := newClient(t, f, "", Config{APIKey: key})
	_, err := c.Embed(context.Background(), Passage, []string{"x"})
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if strings.Contains(msg, key) || strings.Contains(msg, "SECRET") {
		t.Fatalf("error leaks the API key: %s", msg)
	}
	if !strings.Contains(msg, "401") || !strings.Contains(msg, "Incorrect API key provided") {
		t.Fatalf("error lacks status or body excerpt: %s", msg)
	}
	if f.count() != 1 {
		t.Fatalf("%d requests, want 1 (401 is not retried)", f.count())
	}
}

// cancelAfterResponse is a transport that cancels a context once the first response
// has arrived, so the client sees the failure and then the end of its context while
// waiting to retry.
type cancelAfterResponse struct {
	cancel context.CancelFunc
}

func (c cancelAfterResponse) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := http.DefaultTransport.RoundTrip(r)
	c.cancel()
	return res, err
}

func TestOpenAIStopsRetryingWhenContextEnds(t *testing.T) {
	f := newFakeModelServer(t, "/v1/embeddings", 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.respond = func(_ int, w http.ResponseWriter, _ []string) bool {
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return true
	}
	c := newClient(t, f, "", Config{RetryBackoff: time.Hour, HTTPClient: &http.Client{Transport: cancelAfterResponse{cancel}}})
	_, err := c.Embed(ctx, Passage, []string{"x"})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "503") {
		t.Fatalf("err = %v, want the 503 and context.Canceled", err)
	}
	if f.count() != 1 {
		t.Fatalf("%d requests, want 1", f.count())
	}
}

func TestOpenAIConfigValidation(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no model":     {BaseURL: "http://x", Dimension: 3},
		"no dimension": {BaseURL: "http://x", Model: "m"},
		"no url":       {Model: "m", Dimension: 3},
		"relative url": {BaseURL: "tei:8080", Model: "m", Dimension: 3},
		"ftp url":      {BaseURL: "ftp://x", Model: "m", Dimension: 3},
	} {
		if _, err := NewOpenAI(cfg); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	c, err := NewOpenAI(Config{BaseURL: "https://user:pw@api.example.com/v1/", Model: "m", Dimension: 3})
	if err != nil {
		t.Fatal(err)
	}
	if c.Endpoint() != "https://user:xxxxx@api.example.com/v1/embeddings" {
		t.Fatalf("endpoint %q", c.Endpoint())
	}
}

func TestParseRetryAfter(t *testing.T) {
	for in, want := range map[string]time.Duration{"": 0, "3": 3 * time.Second, " 1 ": time.Second, "-1": 0, "Wed, 21 Oct 2015 07:28:00 GMT": 0} {
		if got := parseRetryAfter(in); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}
