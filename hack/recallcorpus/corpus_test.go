package recallcorpus

import (
	"encoding/json"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"
)

func TestDeterministic(t *testing.T) {
	a, b := Generate(Options{Seed: 7}), Generate(Options{Seed: 7})
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave two corpora")
	}
	if c := Generate(Options{Seed: 8}); reflect.DeepEqual(a.Turns, c.Turns) {
		t.Fatal("another seed gave the same corpus")
	}
}

// TestShape checks what the benchmark relies on: evidence exists in the question's
// scope, turns are unique within their scope and dated inside the corpus's period,
// every kind of question and every type of memory is there, and the default size is
// the one the benchmark's time budget assumes.
func TestShape(t *testing.T) {
	c := Generate(Options{Seed: 0})
	byID := map[string]Turn{}
	texts := map[string]bool{}
	types := map[string]int{}
	langs := map[string]int{}
	for _, tr := range c.Turns {
		if _, dup := byID[tr.ID]; dup {
			t.Fatalf("turn id %s twice", tr.ID)
		}
		byID[tr.ID] = tr
		if texts[tr.Scope+"\x00"+tr.Text] {
			t.Errorf("%s says %q twice", tr.Scope, tr.Text)
		}
		texts[tr.Scope+"\x00"+tr.Text] = true
		if tr.At.Before(Start) || !tr.At.Before(End) {
			t.Errorf("%s dated %s, outside the corpus's period", tr.ID, tr.At)
		}
		if strings.ContainsAny(tr.Text, "{}") {
			t.Errorf("%s: unfilled placeholder in %q", tr.ID, tr.Text)
		}
		types[tr.Type]++
		langs[tr.Lang]++
	}
	kinds := map[string]int{}
	for _, q := range c.Questions {
		if strings.ContainsAny(q.Query, "{}!") {
			t.Errorf("%s: unfilled placeholder in %q", q.ID, q.Query)
		}
		if len(q.Evidence) == 0 {
			t.Errorf("%s has no evidence", q.ID)
		}
		for _, unit := range q.Evidence {
			for _, id := range unit {
				ev, ok := byID[id]
				if !ok || ev.Scope != q.Scope {
					t.Errorf("%s: evidence %s not in its scope %s", q.ID, id, q.Scope)
				}
				if strings.Contains(ev.Text, q.Query) || strings.Contains(q.Query, ev.Text) {
					t.Errorf("%s: %q and its evidence %q are one another's substring", q.ID, q.Query, ev.Text)
				}
				if n := sharedRun(stripValues(q.Query), stripValues(ev.Text)); n >= 4 {
					t.Errorf("%s: %q shares %d words in a row with its evidence %q", q.ID, q.Query, n, ev.Text)
				}
			}
		}
		for _, k := range q.Kinds {
			kinds[k]++
		}
	}
	for _, k := range []string{"paraphrase", "rare", "updated", "old", "multi", "crosslingual"} {
		if kinds[k] < 5 {
			t.Errorf("%d questions of kind %s, want at least 5 (%v)", kinds[k], k, kinds)
		}
	}
	for _, ty := range []string{Episodic, Semantic, Procedural} {
		if types[ty] == 0 {
			t.Errorf("no %s memories (%v)", ty, types)
		}
	}
	if n := len(c.Turns); n < 800 || n > 1600 {
		t.Errorf("%d turns at the default size, want 800..1600 (the benchmark's time budget)", n)
	}
	if n := len(c.Questions); n < 200 || n > 500 {
		t.Errorf("%d questions at the default size, want 200..500", n)
	}
	t.Logf("%d turns %v %v, %d questions %v", len(c.Turns), types, langs, len(c.Questions), kinds)
}

// TestUpdatedIsNewest: an updated fact's evidence is its newest statement.
func TestUpdatedIsNewest(t *testing.T) {
	c := Generate(Options{Seed: 3})
	byID := map[string]Turn{}
	for _, tr := range c.Turns {
		byID[tr.ID] = tr
	}
	for _, q := range c.Questions {
		if !hasKind(q, "updated") {
			continue
		}
		ev := byID[q.Evidence[0][0]]
		base := strings.TrimSuffix(ev.Fact, "#updated")
		for _, tr := range c.Turns {
			if tr.Scope == ev.Scope && tr.Fact == base && !tr.At.Before(ev.At) {
				t.Errorf("%s: %q is not older than the update %q", q.ID, tr.Text, ev.Text)
			}
		}
	}
}

func TestScale(t *testing.T) {
	sessions := SessionsFor(1, 1000)
	c := Generate(Options{Seed: 1, Speakers: 4, Sessions: sessions})
	per := map[string]int{}
	for _, tr := range c.Turns {
		per[tr.Scope]++
	}
	for s, n := range per {
		if n < 900 || n > 1100 {
			t.Errorf("%s: %d turns at SessionsFor(1000) = %d sessions, want about 1,000", s, n, sessions)
		}
	}
	if _, err := json.Marshal(c); err != nil {
		t.Fatal(err)
	}
}

func hasKind(q Question, k string) bool {
	for _, x := range q.Kinds {
		if x == k {
			return true
		}
	}
	return false
}

// sharedRun is the longest run of words (CJK characters count as words) a and b share.
func sharedRun(a, b string) int {
	wa, wb := words(a), words(b)
	best := 0
	for i := range wa {
		for j := range wb {
			n := 0
			for i+n < len(wa) && j+n < len(wb) && wa[i+n] == wb[j+n] {
				n++
			}
			best = max(best, n)
		}
	}
	return best
}

func words(s string) []string {
	var out []string
	var cur []rune
	flush := func() {
		if len(cur) > 0 {
			out = append(out, strings.ToLower(string(cur)))
			cur = nil
		}
	}
	for _, r := range s {
		switch {
		case unicode.Is(unicode.Han, r):
			flush()
			out = append(out, string(r))
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			cur = append(cur, r)
		default:
			flush()
		}
	}
	flush()
	return out
}

// stripValues removes the names, places, dates and numbers a question may name from s:
// what is left is the wording, which a question must not copy.
func stripValues(s string) string {
	var vals []string
	for _, pool := range []texts{jobs, allergens, petKinds, petNames, siblings, firstNames, farCities, coffees, hobbies, partners,
		gifts, shops, restaurants, dishes, surnames, times, hotels, projects, bills, activities} {
		for _, l := range pool {
			vals = append(vals, l...)
		}
	}
	for _, pool := range []map[string][]pair{items, doctors, bodyParts} {
		for _, l := range pool {
			for _, p := range l {
				vals = append(vals, p.a, p.b)
			}
		}
	}
	for _, l := range cities {
		for _, c := range l {
			vals = append(vals, c.name)
			vals = append(vals, c.districts...)
		}
	}
	// Longest first, so a value containing another goes whole.
	sort.Slice(vals, func(i, j int) bool { return len(vals[i]) > len(vals[j]) })
	for _, v := range vals {
		s = strings.ReplaceAll(s, v, " ")
	}
	return rareToken.ReplaceAllString(s, " ")
}

var rareToken = regexp.MustCompile(`[A-Z][0-9]{5}|€[0-9.]+|[0-9]+元|[0-9]+月[0-9]+日|(January|February|March|April|May|June|July|August|September|October|November|December) [0-9]+`)
