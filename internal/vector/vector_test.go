package vector

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/amemory/memory-operator/internal/memory"
)

func TestParseMetric(t *testing.T) {
	for in, want := range map[string]Metric{"cosine": Cosine, "COSINE": Cosine, " l2 ": L2, "Ip": IP} {
		if got, err := ParseMetric(in); err != nil || got != want {
			t.Errorf("ParseMetric(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "HAMMING", "dot"} {
		if _, err := ParseMetric(bad); err == nil {
			t.Errorf("ParseMetric(%q): no error", bad)
		}
	}
}

func TestSpecValidate(t *testing.T) {
	for _, ok := range []Spec{{2, Cosine}, {32768, L2}, {384, IP}} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
	for _, bad := range []Spec{{1, Cosine}, {32769, L2}, {0, IP}, {8, ""}, {8, "cos"}} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

func TestValidateScope(t *testing.T) {
	for _, ok := range []string{"user:1024", "session:abc-DEF_1.2", "agent:planner", "user:a@b.c", strings.Repeat("x", MaxScopeLen),
		"user:ü", "a/b", "user:zoë-ユーザー", "user:用户123", "session:org/thread:42", "user:𠮷", "agent:हिन्दी", strings.Repeat("用", MaxScopeLen/3)} {
		if err := ValidateScope(ok); err != nil {
			t.Errorf("ValidateScope(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "user 1", `user:"1"`, "user:1'", `a\b`, "a\nb", "a*", "user:%", strings.Repeat("x", MaxScopeLen+1),
		"user:\xff", "user:\xe3\x83", "user:a\u200db", "user:a\u2028b", "user:\u202e1", "user:\ufeff", "user:\u00a0", "user:😀", "user:\x00",
		strings.Repeat("用", MaxScopeLen/3+1)} {
		if err := ValidateScope(bad); err == nil {
			t.Errorf("ValidateScope(%q): no error", bad)
		}
	}
}

func TestNormalizePrepareScore(t *testing.T) {
	v := []float32{3, 4}
	n := Normalize(v)
	if n[0] != 0.6 || n[1] != 0.8 || v[0] != 3 {
		t.Fatalf("Normalize(%v) = %v (input must stay unchanged)", v, n)
	}
	if z := Normalize([]float32{0, 0}); z[0] != 0 || z[1] != 0 {
		t.Fatalf("Normalize(0) = %v", z)
	}
	if p := Prepare(L2, v); p[0] != 3 || p[1] != 4 {
		t.Fatalf("Prepare(L2) = %v, want a copy", p)
	}
	a, b := Prepare(Cosine, []float32{1, 0}), Prepare(Cosine, []float32{5, 5})
	if s := Score(Cosine, a, b); math.Abs(float64(s)-1/math.Sqrt2) > 1e-6 {
		t.Fatalf("cosine score %v", s)
	}
	if s := Score(L2, []float32{0, 0}, []float32{3, 4}); s != -5 {
		t.Fatalf("L2 score %v, want -5", s)
	}
	if s := Score(IP, []float32{1, 2}, []float32{3, 4}); s != 11 {
		t.Fatalf("IP score %v, want 11", s)
	}
}

func TestValidateEntriesAndQuery(t *testing.T) {
	spec := Spec{Dimension: 2, Metric: L2}
	err := ValidateEntries(spec, []Entry{{ID: "a", Scope: "user:1", Type: "semantic", Vector: []float32{1, 2, 3}}})
	if !errors.Is(err, ErrDimensionMismatch) || !strings.Contains(err.Error(), "dimension 3, expected 2") {
		t.Fatalf("err = %v", err)
	}
	if err := ValidateEntries(spec, []Entry{{ID: "a", Scope: "user:1", Type: "semantic", Vector: []float32{0, 0}}}); err != nil {
		t.Fatalf("zero vector under L2: %v", err)
	}
	if err := ValidateQuery(spec, Query{Scope: "user:1", Types: []string{"semantic"}, Vector: []float32{1, 2}, K: 1}); err != nil {
		t.Fatal(err)
	}
	if err := ValidateQuery(spec, Query{Vector: []float32{1, 2}, K: 1}); err == nil || !strings.Contains(err.Error(), "scope is required") {
		t.Fatalf("empty scope: %v", err)
	}
}

// A memory the model accepts can always be indexed: the ID limits agree.
func TestIDLimitMatchesTheMemoryModel(t *testing.T) {
	if MaxIDLen != memory.MaxIDLen {
		t.Fatalf("vector.MaxIDLen %d, memory.MaxIDLen %d", MaxIDLen, memory.MaxIDLen)
	}
}
