package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
)

// TestSearchModesSayWhy: each mode searches its channels and every result says
// which found it, at which rank; a lexical search never embeds the query (no
// similarity), a min_similarity leaves out what is less similar whichever channel
// found it, and a bad mode is the caller's error.
func TestSearchModesSayWhy(t *testing.T) {
	k := newTestKey(t, "k", false, "user:*")
	e := newEnv(t, envOptions{keys: []testKey{k}})
	ids := map[string]string{}
	for name, text := range map[string]string{
		"order":  "the parcel with tracking number ZX-48213 left the warehouse",
		"coffee": "prefers hot coffee in the morning",
		"tea":    "drinks green tea after lunch",
	} {
		var w WriteResponse
		e.must(201, k.plain, "POST", "/v1/memories", NewMemory{Scope: "user:1", MemoryType: memory.Episodic,
			Content: json.RawMessage(`{"text":` + mustJSON(t, text) + `}`)}, &w)
		ids[name] = w.MemoryID
	}
	search := func(req SearchRequest) []SearchResult {
		t.Helper()
		var res SearchResponse
		e.must(200, k.plain, "POST", "/v1/search", req, &res)
		return res.Results
	}

	lex := search(SearchRequest{Scope: "user:1", Query: "ZX-48213", Mode: "lexical"})
	if len(lex) != 1 || lex[0].Memory.MemoryID != ids["order"] {
		t.Fatalf("lexical search for the tracking number: %s", mustJSON(t, lex))
	}
	if w := lex[0].Why; !slices.Equal(w.Channels, []string{"lexical"}) || w.LexicalRank != 1 || w.DenseRank != 0 || w.LexicalScore <= 0 || w.MatchedTerms < 1 || lex[0].Similarity != nil {
		t.Errorf("lexical result's why: %s", mustJSON(t, lex[0]))
	}

	dense := search(SearchRequest{Scope: "user:1", Query: "hot coffee", Mode: "dense"})
	if len(dense) != 3 || dense[0].Memory.MemoryID != ids["coffee"] {
		t.Fatalf("dense search: %s", mustJSON(t, dense))
	}
	for i, r := range dense {
		if !slices.Equal(r.Why.Channels, []string{"dense"}) || r.Why.DenseRank != i+1 || r.Why.LexicalRank != 0 || r.Similarity == nil {
			t.Errorf("dense result %d's why: %s", i, mustJSON(t, r))
		}
	}

	hybrid := search(SearchRequest{Scope: "user:1", Query: "hot coffee"})
	if len(hybrid) != 3 || hybrid[0].Memory.MemoryID != ids["coffee"] || !slices.Equal(hybrid[0].Why.Channels, []string{"dense", "lexical"}) {
		t.Fatalf("hybrid search: %s", mustJSON(t, hybrid))
	}
	for i, r := range hybrid {
		if r.Similarity == nil || r.Relevance <= 0 || r.Score < r.Relevance || r.Score > r.Relevance*1.01+1e-12 {
			t.Errorf("hybrid result %d: similarity, relevance and score: %s", i, mustJSON(t, r))
		}
		if i > 0 && r.Score > hybrid[i-1].Score {
			t.Errorf("hybrid results are not best first by score: %s", mustJSON(t, hybrid))
		}
	}

	floor := float64(*hybrid[0].Similarity) - 1e-6
	if got := search(SearchRequest{Scope: "user:1", Query: "hot coffee", MinSimilarity: &floor}); len(got) != 1 || got[0].Memory.MemoryID != ids["coffee"] {
		t.Errorf("min_similarity %v: %s", floor, mustJSON(t, got))
	}
	if got := search(SearchRequest{Scope: "user:1", Query: "ZX-48213", Mode: "lexical", MinSimilarity: &floor}); len(got) != 0 {
		t.Errorf("lexical search with min_similarity %v kept a less similar memory: %s", floor, mustJSON(t, got))
	}
	e.wantError(http.StatusBadRequest, CodeInvalidRequest, k.plain, "POST", "/v1/search", SearchRequest{Scope: "user:1", Query: "x", Mode: "fuzzy"})
}

// TestRecallWindow: recall returns a session's latest turns raw, oldest first, and
// search results that never repeat them, still top_k of them; a session scope is
// checked against the key like any scope.
func TestRecallWindow(t *testing.T) {
	k := newTestKey(t, "k", false, "user:1", "session:s1")
	e := newEnv(t, envOptions{keys: []testKey{k}})
	start := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	write := func(scope string, typ memory.Type, text string, at time.Time) string {
		var w WriteResponse
		e.must(201, k.plain, "POST", "/v1/memories", NewMemory{Scope: scope, MemoryType: typ, CreatedAt: &at,
			Content: json.RawMessage(`{"text":` + mustJSON(t, text) + `}`)}, &w)
		return w.MemoryID
	}
	turns := []string{
		write("session:s1", memory.Episodic, "user asked about the delivery of order 5531", start),
		write("session:s1", memory.Working, "agent said order 5531 ships tomorrow", start.Add(time.Minute)),
		write("session:s1", memory.Episodic, "user asked to deliver order 5531 after six", start.Add(2*time.Minute)),
	}
	write("session:s1", memory.Semantic, "order 5531 is a birthday present", start.Add(3*time.Minute)) // a fact, not a turn
	fact := write("user:1", memory.Semantic, "the user works until six, deliver order 5531 after six", start)
	other := write("user:1", memory.Semantic, "order 5531 goes to the office address", start)

	var res RecallResponse
	e.must(200, k.plain, "POST", "/v1/recall", RecallRequest{Scope: "session:s1", Query: "when to deliver order 5531", RecentTurns: 2, TopK: 2}, &res)
	var recent []string
	for _, m := range res.Recent {
		recent = append(recent, m.MemoryID)
	}
	if !slices.Equal(recent, turns[1:]) {
		t.Fatalf("recent turns = %v, want the last two, oldest first: %v", recent, turns[1:])
	}
	if len(res.Results) != 2 {
		t.Fatalf("results = %s; want top_k 2 besides the turns", mustJSON(t, res.Results))
	}
	for _, r := range res.Results {
		if slices.Contains(turns[1:], r.Memory.MemoryID) || r.Why == nil || len(r.Why.Channels) == 0 {
			t.Errorf("result %s repeats a turn or says no why", mustJSON(t, r))
		}
	}

	// The user's memories with the session's turns.
	res = RecallResponse{}
	e.must(200, k.plain, "POST", "/v1/recall", RecallRequest{Scope: "user:1", SessionScope: "session:s1", Query: "deliver order 5531", RecentTurns: 5}, &res)
	if len(res.Recent) != 3 || len(res.Results) != 2 {
		t.Fatalf("user recall with the session's turns: %s", mustJSON(t, res))
	}
	for _, r := range res.Results {
		if r.Memory.MemoryID != fact && r.Memory.MemoryID != other {
			t.Errorf("result %s is not a memory of user:1", mustJSON(t, r))
		}
	}

	// Without a query, the ranking by effective score, still without the turns.
	res = RecallResponse{}
	e.must(200, k.plain, "POST", "/v1/recall", RecallRequest{Scope: "session:s1", RecentTurns: 1, Limit: 10}, &res)
	if len(res.Recent) != 1 || res.Recent[0].MemoryID != turns[2] || len(res.Results) != 3 {
		t.Fatalf("recall without a query: %s", mustJSON(t, res))
	}
	for _, r := range res.Results {
		if r.Memory.MemoryID == turns[2] || r.Why != nil {
			t.Errorf("recall without a query: %s", mustJSON(t, r))
		}
	}

	for name, req := range map[string]RecallRequest{
		"session_scope without recent_turns": {Scope: "user:1", SessionScope: "session:s1"},
		"key with a query":                   {Scope: "user:1", Query: "x", Key: "k"},
		"top_k without a query":              {Scope: "user:1", TopK: 3},
		"too many turns":                     {Scope: "user:1", RecentTurns: 101},
	} {
		t.Run(name, func(*testing.T) {
			e.wantError(http.StatusBadRequest, CodeInvalidRequest, k.plain, "POST", "/v1/recall", req)
		})
	}
	e.wantError(http.StatusForbidden, CodeScopeForbidden, k.plain, "POST", "/v1/recall", RecallRequest{Scope: "user:1", SessionScope: "session:other", RecentTurns: 2, Query: "x"})
}

// TestGuaranteeRelevanceDecidesThroughTheGateway: through the native API, an old,
// unimportant memory that says what was asked comes first, ahead of fresh, important
// ones that do not. The gateway's ranking before multiplied the similarity by the
// effective score and buried it (decayed to nothing after two years).
func TestGuaranteeRelevanceDecidesThroughTheGateway(t *testing.T) {
	k := newTestKey(t, "k", false, "user:*")
	e := newEnv(t, envOptions{keys: []testKey{k}})
	write := func(text string, base float64, at time.Time) string {
		var w WriteResponse
		e.must(201, k.plain, "POST", "/v1/memories", NewMemory{Scope: "user:1", MemoryType: memory.Episodic, CreatedAt: &at, BaseScore: &base,
			Content: json.RawMessage(`{"text":` + mustJSON(t, text) + `}`)}, &w)
		return w.MemoryID
	}
	old := write("we moved the kayak trip to the lake district in september", 0.05, time.Now().Add(-2*365*24*time.Hour))
	for i := range 12 {
		write(fmt.Sprintf("fresh chat %d about the weather and the trip home", i), 1, time.Now().Add(-time.Minute))
	}
	for _, mode := range []string{"", "dense", "lexical"} {
		var res SearchResponse
		e.must(200, k.plain, "POST", "/v1/search", SearchRequest{Scope: "user:1", Query: "kayak trip lake district", Mode: mode, TopK: 5}, &res)
		if len(res.Results) == 0 || res.Results[0].Memory.MemoryID != old {
			t.Errorf("mode %q: results %s; want the old relevant memory %s first", mode, mustJSON(t, res.Results), old)
		}
	}
}
