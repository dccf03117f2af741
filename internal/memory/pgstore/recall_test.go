package pgstore

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
)

func TestRecall(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	hl := memory.DefaultHalfLives()

	items := []memory.Item{
		item("sem-fresh", "user:a", memory.Semantic, "name", `{"name":"Ana"}`, 0.9, 0),              // 0.9
		item("work-6h", "user:a", memory.Working, "", `{"task":"draft"}`, 1.0, 6*time.Hour),         // 0.5
		item("epi-30d", "user:a", memory.Episodic, "", `{"trip":"Lisbon"}`, 0.8, 30*day),            // 0.4
		item("sem-tie-new", "user:a", memory.Semantic, "", `{"likes":"tea"}`, 0.4, 0),               // 0.4, newer than epi-30d
		item("proc-365d", "user:a", memory.Procedural, "", `{"how":"deploy"}`, 0.6, 365*day),        // 0.3
		item("tie-b", "user:a", memory.Semantic, "", `{"t":"b"}`, 0.3, 0),                           // 0.3, newer than proc-365d
		item("tie-a", "user:a", memory.Semantic, "", `{"t":"a"}`, 0.3, 0),                           // 0.3, same time as tie-b: by id
		item("sem-180d", "user:a", memory.Semantic, "", `{"color":"green"}`, 0.5, 180*day),          // 0.25
		item("work-10d", "user:a", memory.Working, "", `{"task":"old"}`, 1.0, 10*day),               // 2^-40
		item("work-ancient", "user:a", memory.Working, "", `{"task":"ancient"}`, 1.0, 3000*day),     // 2^-12000: 0, no underflow error
		item("tiny-base", "user:a", memory.Episodic, "", `{"tiny":true}`, 1e-300, 900*day),          // 1e-300 * 2^-30 underflows: 0
		item("zero-base", "user:a", memory.Semantic, "", `{"zero":true}`, 0, 0),                     // 0
		item("future", "user:a", memory.Episodic, "", `{"clock":"skew"}`, 0.35, -time.Hour),         // age < 0 counts as 0: 0.35
		item("archived", "user:a", memory.Semantic, "", `{"archived":true}`, 1, 0),                  // excluded
		item("expired-now", "user:a", memory.Working, "", `{"expired":true}`, 1, 0),                 // expires_at = now: excluded
		item("expires-soon", "user:a", memory.Working, "", `{"expires":"soon"}`, 0.45, time.Second), // expires now+1s: included
		item("other-user", "user:b", memory.Semantic, "name", `{"name":"Bo"}`, 1, 0),                // another tenant
		item("other-user-2", "user:b", memory.Semantic, "", `{"trip":"Lisbon"}`, 0.95, 0),           // another tenant
		item("prefix-user", "user:aa", memory.Semantic, "", `{"name":"Aa"}`, 1, 0),                  // a scope with user:a as prefix
	}
	items[13].ArchivedAt = ptr(now.Add(-time.Hour))
	items[14].ExpiresAt = ptr(now)
	items[15].ExpiresAt = ptr(now.Add(time.Second))
	for _, it := range items {
		mustPut(t, s, it, Inserted)
	}
	byID := map[string]memory.Item{}
	for _, it := range items {
		byID[it.MemoryID] = it
	}

	wantAll := []string{"sem-fresh", "work-6h", "expires-soon", "sem-tie-new", "epi-30d", "future",
		"tie-a", "tie-b", "proc-365d", "sem-180d", "work-10d", "zero-base", "tiny-base", "work-ancient"}
	// With equal scores (0), ties fall to updated_at desc: zero-base (now), tiny-base (-900d), work-ancient (-3000d).

	tests := []struct {
		name string
		q    RecallQuery
		want []string
	}{
		{"all", RecallQuery{Scope: "user:a", Now: now}, wantAll},
		{"default half-lives when nil", RecallQuery{Scope: "user:a", Now: now, HalfLives: nil}, wantAll},
		{"limit", RecallQuery{Scope: "user:a", Now: now, Limit: 3}, wantAll[:3]},
		{"types", RecallQuery{Scope: "user:a", Now: now, Types: []memory.Type{memory.Working}},
			[]string{"work-6h", "expires-soon", "work-10d", "work-ancient"}},
		{"two types", RecallQuery{Scope: "user:a", Now: now, Types: []memory.Type{memory.Procedural, memory.Episodic}},
			[]string{"epi-30d", "future", "proc-365d", "tiny-base"}},
		{"min score", RecallQuery{Scope: "user:a", Now: now, MinScore: 0.4},
			[]string{"sem-fresh", "work-6h", "expires-soon", "sem-tie-new", "epi-30d"}},
		{"no decay with an empty map", RecallQuery{Scope: "user:a", Now: now, HalfLives: memory.HalfLives{}, Limit: 6},
			// base scores; the three 1.0 ties by updated_at, newest first
			[]string{"work-6h", "work-10d", "work-ancient", "sem-fresh", "epi-30d", "proc-365d"}},
		{"later now: expires-soon has expired", RecallQuery{Scope: "user:a", Now: now.Add(time.Second), Types: []memory.Type{memory.Working}},
			[]string{"work-6h", "work-10d", "work-ancient"}},
		{"other tenant sees only its own", RecallQuery{Scope: "user:b", Now: now}, []string{"other-user", "other-user-2"}},
		{"exact scope, not prefix", RecallQuery{Scope: "user:aa", Now: now}, []string{"prefix-user"}},
		{"unknown scope", RecallQuery{Scope: "user:nobody", Now: now}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Recall(ctx, tt.q)
			if err != nil {
				t.Fatal(err)
			}
			gotIDs := make([]string, len(got))
			for i, g := range got {
				gotIDs[i] = g.MemoryID
				if g.Scope != tt.q.Scope {
					t.Fatalf("recall of %s returned %s from scope %s", tt.q.Scope, g.MemoryID, g.Scope)
				}
			}
			if strings.Join(gotIDs, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("order:\n got %v\nwant %v", gotIDs, tt.want)
			}
			h := tt.q.HalfLives
			if h == nil {
				h = hl
			}
			at := tt.q.Now
			for _, g := range got {
				want := h.Score(byID[g.MemoryID], at)
				if !closeScore(g.Score, want) {
					t.Errorf("%s: score %g, want %g (Go)", g.MemoryID, g.Score, want)
				}
			}
		})
	}

	// Exact values at half-life points.
	got, err := s.Recall(ctx, RecallQuery{Scope: "user:a", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	exact := map[string]float64{"sem-fresh": 0.9, "work-6h": 0.5, "epi-30d": 0.4, "sem-tie-new": 0.4, "proc-365d": 0.3,
		"sem-180d": 0.25, "work-10d": math.Pow(2, -40), "future": 0.35, "zero-base": 0, "tiny-base": 0, "work-ancient": 0}
	for _, g := range got {
		if want, ok := exact[g.MemoryID]; ok && !closeScore(g.Score, want) {
			t.Errorf("%s: score %g, want %g", g.MemoryID, g.Score, want)
		}
	}
	// The recalled item is the whole memory.
	assertItemsEqual(t, []memory.Item{got[0].Item}, []memory.Item{byID["sem-fresh"]})

	for _, q := range []RecallQuery{{}, {Scope: "user"}, {Scope: "user:a' OR '1'='1"}, {Scope: "user:a", Types: []memory.Type{"long"}}} {
		if _, err := s.Recall(ctx, q); err == nil {
			t.Errorf("Recall(%+v) succeeded, want an error", q)
		}
	}
}

// closeScore compares scores computed by PostgreSQL and Go (pow may differ in the
// last bits); tiny values that Go keeps and SQL flushes to zero compare equal.
func closeScore(a, b float64) bool {
	if math.Abs(a-b) <= 1e-300 {
		return true
	}
	return math.Abs(a-b) <= 1e-12*math.Max(math.Abs(a), math.Abs(b))
}
