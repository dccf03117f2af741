package embed

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestCalibrationSet checks the set itself: a few hundred distinct texts, none
// repeated (not even up to case, spacing and punctuation), in many scripts, and
// restatement pairs of two different texts.
func TestCalibrationSet(t *testing.T) {
	distinct, restated := CalibrationSet()
	if len(distinct) < 250 || len(restated) < 20 {
		t.Fatalf("%d distinct texts and %d restatements: the set is too small", len(distinct), len(restated))
	}
	seen := map[string]string{}
	scripts := map[string]bool{}
	for _, d := range distinct {
		if !utf8.ValidString(d) {
			t.Errorf("%q is not UTF-8", d)
		}
		k := squash(d)
		if prev, dup := seen[k]; dup {
			t.Errorf("%q repeats %q", d, prev)
		}
		seen[k] = d
		for _, r := range d {
			switch {
			case r >= 0x4E00 && r <= 0x9FFF:
				scripts["han"] = true
			case r >= 0x3040 && r <= 0x30FF:
				scripts["kana"] = true
			case r >= 0xAC00 && r <= 0xD7AF:
				scripts["hangul"] = true
			case r >= 0x0400 && r <= 0x04FF:
				scripts["cyrillic"] = true
			case r >= 'a' && r <= 'z':
				scripts["latin"] = true
			}
		}
	}
	if len(scripts) < 5 {
		t.Errorf("scripts %v: want Latin, Han, kana, Hangul and Cyrillic", scripts)
	}
	for _, p := range restated {
		if p[0] == p[1] {
			t.Errorf("restatement %q is the same text twice", p[0])
		}
	}
}

// squash is a text with case, spaces and punctuation dropped.
func squash(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if !strings.ContainsRune(" .,!?;:'\"¿¡。，！？、", r) {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestCalibrateHashing calibrates the hashing embedder: the threshold is strictly
// above every distinct pair, at least MinCalibratedThreshold, the same on a second
// run, and the restatements that differ only in case and punctuation (identical
// features for the hashing embedder) fold.
func TestCalibrateHashing(t *testing.T) {
	for _, dim := range []int{384, 1024} {
		h := NewHashing(dim)
		c, err := Calibrate(context.Background(), h)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("hashing, dimension %d: %s; closest pair %q / %q", dim, c, c.ClosestPair[0], c.ClosestPair[1])
		if c.Threshold <= c.DistinctMax || c.Threshold < MinCalibratedThreshold || c.Threshold >= 1 {
			t.Errorf("dimension %d: threshold %v, distinct max %v: want above it, at least %v, below 1", dim, c.Threshold, c.DistinctMax, MinCalibratedThreshold)
		}
		if c.DistinctP99 > c.DistinctP999 || c.DistinctP999 > c.DistinctMax || c.Pairs != c.Texts*(c.Texts-1)/2 {
			t.Errorf("dimension %d: percentiles %v <= %v <= %v or pairs %d wrong", dim, c.DistinctP99, c.DistinctP999, c.DistinctMax, c.Pairs)
		}
		if c.RestatementsFolded == 0 || c.RestatementMax < 0.999 {
			t.Errorf("dimension %d: %d restatements fold, max %v: case and punctuation must not matter to the hashing embedder", dim, c.RestatementsFolded, c.RestatementMax)
		}
		again, err := Calibrate(context.Background(), h)
		if err != nil || again != c {
			t.Errorf("dimension %d: a second calibration gave %+v, %v; want %+v", dim, again, err, c)
		}
		if c.Model != HashingModel || c.Roles != NoRoles || c.Dimension != dim || c.SetDigest != CalibrationSetDigest() {
			t.Errorf("calibration names %s %v %d %s", c.Model, c.Roles, c.Dimension, c.SetDigest)
		}
	}
}

// TestDeriveThreshold pins the rule at its edges.
func TestDeriveThreshold(t *testing.T) {
	for _, tc := range []struct{ max, want float64 }{
		{0.2, MinCalibratedThreshold}, // floor
		{0.9, 0.95},
		{0.93, 0.965},
		{0.95001, 0.9751}, // rounded up, never down
		{0.9997, 0.9999},  // still strictly above
		{0.9999, 0},       // halfway rounds up to 1: off
		{0.99995, 0},      // cannot be above and below 1 at 4 decimals: off
		{1, 0},
		{1.0000001, 0},
	} {
		if got := deriveThreshold(tc.max); got != tc.want && !(tc.want != 0 && got-tc.want < 1e-12 && tc.want-got < 1e-12) {
			t.Errorf("deriveThreshold(%v) = %v, want %v", tc.max, got, tc.want)
		}
		if got := deriveThreshold(tc.max); got != 0 && got <= tc.max {
			t.Errorf("deriveThreshold(%v) = %v is not above it", tc.max, got)
		}
	}
}

// TestCalibrateFailingEmbedder: an embedder that fails gives no calibration.
func TestCalibrateFailingEmbedder(t *testing.T) {
	if _, err := Calibrate(context.Background(), NewHashing(0)); err == nil {
		t.Fatal("a failing embedder calibrated")
	}
}
