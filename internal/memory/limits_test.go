package memory

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestValidateBaseScore(t *testing.T) {
	for _, ok := range []float64{0, 0.5, MaxBaseScore} {
		if err := ValidateBaseScore(ok); err != nil {
			t.Errorf("ValidateBaseScore(%v) = %v", ok, err)
		}
	}
	for _, bad := range []float64{-0.1, 1.0000001, 2, 1e308, math.Inf(1), math.NaN()} {
		if err := ValidateBaseScore(bad); err == nil {
			t.Errorf("ValidateBaseScore(%v) accepted", bad)
		}
	}
}

// TestTTLNeverOverflows: every TTL is either refused or ends after now, also the ones
// that overflow a time.Duration (the native API's largest int64, LangGraph's 1e300
// minutes).
func TestTTLNeverOverflows(t *testing.T) {
	now := time.Now()
	for _, secs := range []float64{1, 60, MaxTTL.Seconds()} {
		d, err := TTL(secs)
		if err != nil || !now.Add(d).After(now) {
			t.Errorf("TTL(%v) = %v, %v", secs, d, err)
		}
	}
	if d, _ := TTL(MaxTTL.Seconds()); d != MaxTTL {
		t.Errorf("TTL(MaxTTL) = %v, want %v", d, MaxTTL)
	}
	for _, secs := range []float64{0, -1, MaxTTL.Seconds() + 1, float64(math.MaxInt64), 1e300 * 60, math.Inf(1), math.NaN()} {
		if d, err := TTL(secs); err == nil {
			t.Errorf("TTL(%v) = %v (expires %v), want an error", secs, d, now.Add(d))
		}
	}
}

func TestCheckText(t *testing.T) {
	for _, ok := range []string{"", "user:1", "zoë ユーザー", "line\nbreak"} {
		if err := CheckText(ok); err != nil {
			t.Errorf("CheckText(%q) = %v", ok, err)
		}
	}
	if err := CheckText("a\x00b"); !errors.Is(err, ErrNUL) {
		t.Errorf("CheckText with NUL = %v, want ErrNUL", err)
	}
	if err := CheckText("a\xffb"); err == nil {
		t.Error("CheckText accepted invalid UTF-8")
	}
}

func TestValidateKey(t *testing.T) {
	for _, bad := range []string{"a\x00b", " a", "a\tb", string(make([]byte, MaxKeyLen+1))} {
		if err := ValidateKey(bad); err == nil {
			t.Errorf("ValidateKey(%q) accepted", bad)
		}
	}
	if err := ValidateKey("preference.coffee"); err != nil {
		t.Error(err)
	}
}
