package main

import (
	"math"
	"slices"
	"testing"

	"github.com/amemory/memory-operator/hack/recallcorpus"
)

// TestScore: recall@k counts evidence units (any turn of a unit finds it), averaged
// over questions; hit@5 needs one unit in the top 5; a missing ranking scores 0.
func TestScore(t *testing.T) {
	c := &recallcorpus.Corpus{Questions: []recallcorpus.Question{
		{ID: "q1", Evidence: [][]string{{"a", "a2"}}},                    // a restatement: a2 finds it too
		{ID: "q2", Evidence: [][]string{{"b"}, {"c"}}},                   // two units
		{ID: "q3", Evidence: [][]string{{"d"}}},                          // not found
		{ID: "q4", Evidence: [][]string{{"e"}}, Kinds: []string{"rare"}}, // no ranking at all
	}}
	rk := ranking{
		"q1": {"x", "a2"},
		"q2": {"b", "x", "x", "x", "x", "x", "c"},
		"q3": {"x", "y"},
	}
	s := score(c, rk, nil)
	want := recallScore{r1: (0 + 0.5 + 0 + 0) / 4, r5: (1 + 0.5 + 0 + 0) / 4, r10: 2.0 / 4, hit5: 2.0 / 4, n: 4}
	if math.Abs(s.r1-want.r1) > 1e-9 || math.Abs(s.r5-want.r5) > 1e-9 || math.Abs(s.r10-want.r10) > 1e-9 || math.Abs(s.hit5-want.hit5) > 1e-9 || s.n != want.n {
		t.Errorf("score = %+v, want %+v", s, want)
	}
	if s := score(c, rk, hasKind("rare")); s.n != 1 || s.r10 != 0 {
		t.Errorf("score of the rare questions = %+v, want one question at 0", s)
	}
}

// TestFuse: reciprocal-rank fusion adds 1/(60+rank) over both lists, so a turn both
// rank well beats one ranked first by one list only; ties keep the dense order.
func TestFuse(t *testing.T) {
	dense := ranking{"q": {"a", "b", "c"}}
	lexical := ranking{"q": {"d", "b", "a"}}
	got := fuse(dense, lexical)["q"]
	// a: 1/61+1/63, b: 2/62, d: 1/61, c: 1/63. b and a tie closely; a's sum is larger.
	if want := []string{"a", "b", "d", "c"}; !slices.Equal(got, want) {
		t.Errorf("fuse = %v, want %v", got, want)
	}
	// Exact ties (x and y each first in one list) keep the dense list's turn first.
	if got := fuse(ranking{"q": {"x"}}, ranking{"q": {"y"}})["q"]; !slices.Equal(got, []string{"x", "y"}) {
		t.Errorf("tied fuse = %v, want [x y]", got)
	}
	// A question only the dense list answers keeps its ranking.
	if got := fuse(ranking{"q": {"x", "z"}}, ranking{})["q"]; !slices.Equal(got, []string{"x", "z"}) {
		t.Errorf("fuse with no lexical ranking = %v", got)
	}
}
