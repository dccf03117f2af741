package vectortest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/amemory/memory-operator/internal/vector"
)

// testScoreIDs: ScoreIDs scores exactly the given entries of the scope (and types),
// whatever else the index holds: another scope's IDs, unknown IDs and repeats are
// left out, K truncates, ties go by ID, and the scores are those Search reports.
func testScoreIDs(t *testing.T, h Harness) {
	for _, metric := range []vector.Metric{vector.Cosine, vector.L2} {
		t.Run(string(metric), func(t *testing.T) {
			spec := vector.Spec{Dimension: 8, Metric: metric}
			idx := h.New(t, spec)
			sc, ok := idx.(vector.Scorer)
			if !ok {
				t.Fatalf("%T does not implement vector.Scorer", idx)
			}
			rng := rand.New(rand.NewPCG(7, uint64(len(metric))))
			const n = 2300 // more IDs than one Milvus expression takes
			entries := make([]vector.Entry, n)
			for i := range entries {
				v := make([]float32, spec.Dimension)
				for j := range v {
					v[j] = float32(rng.NormFloat64())
				}
				entries[i] = vector.Entry{ID: fmt.Sprintf("mem-%04d", i), Scope: []string{"user:x", "user:y"}[i%2],
					Type: []string{"semantic", "episodic"}[(i/2)%2], Vector: v}
			}
			// Two entries with the same vector: a tie, ranked by ID.
			entries[4].Vector, entries[2].Vector = slices.Clone(entries[0].Vector), slices.Clone(entries[0].Vector)
			upsert(t, idx, entries...)
			qv := make([]float32, spec.Dimension)
			for j := range qv {
				qv[j] = float32(rng.NormFloat64())
			}
			score := func(q vector.Query, ids []string) []vector.Hit {
				t.Helper()
				hits, err := sc.ScoreIDs(context.Background(), q, ids)
				if err != nil {
					t.Fatalf("ScoreIDs: %v", err)
				}
				return hits
			}
			// Every third entry of both scopes, an unknown ID and repeats.
			var chosenIDs []string
			chosen := map[string]bool{}
			for i := 0; i < n; i += 3 {
				chosenIDs = append(chosenIDs, entries[i].ID)
				chosen[entries[i].ID] = true
			}
			chosenIDs = append(chosenIDs, "no-such-id", entries[0].ID, entries[3].ID)
			want := func(types []string, k int) []vector.Hit {
				var pick []vector.Entry
				for _, en := range entries {
					if chosen[en.ID] && (len(types) == 0 || slices.Contains(types, en.Type)) {
						pick = append(pick, en)
					}
				}
				return vector.RankHits(bruteForce(spec, pick, "user:x", qv, len(pick)), k)
			}
			got := score(vector.Query{Scope: "user:x", Vector: qv}, chosenIDs)
			expectHits(t, got, ids(want(nil, 0)), scores(want(nil, 0)))
			for _, hit := range got {
				if entries[mustIndex(t, hit.ID)].Scope != "user:x" {
					t.Fatalf("hit %s is not an entry of user:x", hit.ID)
				}
			}
			expectHits(t, score(vector.Query{Scope: "user:x", Vector: qv, K: 5}, chosenIDs), ids(want(nil, 5)), scores(want(nil, 5)))
			expectHits(t, score(vector.Query{Scope: "user:x", Types: []string{"episodic"}, Vector: qv, K: 0}, chosenIDs),
				ids(want([]string{"episodic"}, 0)), scores(want([]string{"episodic"}, 0)))
			// The tie: mem-0000 before mem-0004 (mem-0002 was not chosen).
			tie := score(vector.Query{Scope: "user:x", Vector: entries[0].Vector}, []string{"mem-0004", "mem-0000", "mem-0002"})
			if len(tie) != 3 || tie[0].ID != "mem-0000" || tie[1].ID != "mem-0002" || tie[2].ID != "mem-0004" {
				t.Errorf("a tie of three: %v, want mem-0000, mem-0002, mem-0004", tie)
			}
			if got := score(vector.Query{Scope: "user:x", Vector: qv}, nil); len(got) != 0 {
				t.Errorf("no IDs: %v", got)
			}
			// The scores are Search's: the best of all IDs of a scope is Search's top.
			var all []string
			for _, en := range entries {
				all = append(all, en.ID)
			}
			top := search(t, idx, vector.Query{Scope: "user:y", Vector: qv, K: 10})
			expectHits(t, score(vector.Query{Scope: "user:y", Vector: qv, K: 10}, all), ids(top), scores(top))
			checkScoreIDsRefuses(t, sc, qv)
		})
	}
}

// checkScoreIDsRefuses: ScoreIDs validates its query and IDs as Search does.
func checkScoreIDsRefuses(t *testing.T, sc vector.Scorer, qv []float32) {
	t.Helper()
	for _, bad := range []struct {
		q   vector.Query
		ids []string
	}{
		{vector.Query{Scope: "", Vector: qv}, []string{"mem-0000"}},
		{vector.Query{Scope: "user:x", Vector: qv, K: -1}, []string{"mem-0000"}},
		{vector.Query{Scope: "user:x", Vector: qv[:3]}, []string{"mem-0000"}},
		{vector.Query{Scope: "user:x", Vector: qv}, []string{`a"b`}},
	} {
		if _, err := sc.ScoreIDs(context.Background(), bad.q, bad.ids); err == nil {
			t.Errorf("ScoreIDs(%+v, %q) accepted", bad.q, bad.ids)
		}
	}
}

func mustIndex(t *testing.T, id string) int {
	t.Helper()
	var i int
	if _, err := fmt.Sscanf(id, "mem-%04d", &i); err != nil {
		t.Fatalf("unexpected id %q", id)
	}
	return i
}
