package embed

import (
	"context"
	"crypto/sha256"
	_ "embed" // the calibration set
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strings"
)

// The calibration set shipped with the project: distinct texts (chat turns, facts,
// preferences, events, procedures and questions in a dozen languages, with hard
// negatives: one template, another name, day or number) and restatement pairs (the
// same text again, differing in punctuation, case, spacing or a word).
var (
	//go:embed calibration/distinct.txt
	calibrationDistinct string
	//go:embed calibration/restatements.txt
	calibrationRestatements string
)

// Bounds of a calibrated threshold.
const (
	// MinCalibratedThreshold is the lowest threshold Calibrate derives, whatever the
	// model: a model that finds every distinct text unlike every other (the hashing
	// embedder at a large dimension) still folds only texts that are nearly the same.
	MinCalibratedThreshold = 0.8
	// thresholdDecimals: the threshold is rounded up to this many decimals (up, so
	// that rounding never brings it closer to the distinct texts).
	thresholdDecimals = 4
)

// Calibration is what Calibrate measured of an embedder on the calibration set, and
// the near-duplicate threshold it derived.
type Calibration struct {
	// Model, Dimension and Roles are the embedder's.
	Model     string
	Dimension int
	Roles     Roles
	// SetDigest identifies the calibration set (the first 16 hex digits of its
	// SHA-256): a different set is a different calibration.
	SetDigest string
	// Texts and Pairs count the distinct texts and their pairs.
	Texts, Pairs int
	// DistinctMax, DistinctP99 and DistinctP999 are the cosine similarity of the
	// most similar pair of distinct texts, and the 99th and 99.9th percentiles.
	DistinctMax, DistinctP99, DistinctP999 float64
	// ClosestPair is the most similar pair of distinct texts.
	ClosestPair [2]string
	// RestatementMin and RestatementMax are the similarities of the restatement
	// pairs; RestatementsFolded of the Restatements pairs are at or above Threshold.
	RestatementMin, RestatementMax   float64
	Restatements, RestatementsFolded int
	// Threshold is the derived near-duplicate threshold: strictly above every
	// distinct pair (see Calibrate). 0 means the model cannot tell the distinct texts
	// apart from restatements at all, and near-duplicate detection must stay off.
	Threshold float64
}

// String summarises the calibration for logs and events.
func (c Calibration) String() string {
	t := fmt.Sprintf("%.4f", c.Threshold)
	if c.Threshold == 0 {
		t = "off (distinct texts are as similar as restatements)"
	}
	return fmt.Sprintf("dedup threshold %s for model %s (%s): distinct pairs max %.4f, p99.9 %.4f, p99 %.4f over %d texts; %d of %d restatements fold (similarity %.4f to %.4f)",
		t, c.Model, c.Roles, c.DistinctMax, c.DistinctP999, c.DistinctP99, c.Texts, c.RestatementsFolded, c.Restatements, c.RestatementMin, c.RestatementMax)
}

// CalibrationSetDigest identifies the calibration set this build ships.
func CalibrationSetDigest() string {
	h := sha256.Sum256([]byte(calibrationDistinct + "\x00" + calibrationRestatements))
	return hex.EncodeToString(h[:8])
}

// CalibrationSet returns the distinct texts and the restatement pairs.
func CalibrationSet() (distinct []string, restatements [][2]string) {
	distinct = setLines(calibrationDistinct)
	for _, l := range setLines(calibrationRestatements) {
		a, b, ok := strings.Cut(l, " | ")
		if !ok {
			panic("calibration set: restatement without \" | \": " + l)
		}
		restatements = append(restatements, [2]string{a, b})
	}
	return distinct, restatements
}

func setLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimRight(l, "\r"); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}

// Calibrate derives a near-duplicate threshold for e: it embeds the calibration set
// as passages (what near-duplicate detection compares), measures the cosine
// similarity of every pair of distinct texts, and sets the threshold halfway between
// the most similar distinct pair and 1:
//
//	threshold = max(MinCalibratedThreshold, ceil₄(max + (1 − max) / 2))
//
// rounded up to 4 decimals, so it is strictly above every distinct pair: no two of
// the set's distinct texts would be folded into one, and a new text must be closer to
// a memory than any two distinct texts are to each other to reinforce it. When even
// that rounds up to 1 (the model finds some distinct texts identical), the threshold
// is 0: near-duplicate detection off, never a threshold that folds distinct texts.
// It reports how many restatement pairs still fold.
//
// The same embedder gives the same calibration: the set is fixed and embedded in a
// fixed order.
func Calibrate(ctx context.Context, e Embedder) (Calibration, error) {
	distinct, restated := CalibrationSet()
	texts := slices.Clone(distinct)
	for _, p := range restated {
		texts = append(texts, p[0], p[1])
	}
	vecs, err := e.Embed(ctx, Passage, texts)
	if err != nil {
		return Calibration{}, fmt.Errorf("calibrating %s: %w", e.Model(), err)
	}
	if len(vecs) != len(texts) {
		return Calibration{}, fmt.Errorf("calibrating %s: %d vectors for %d texts", e.Model(), len(vecs), len(texts))
	}
	c := Calibration{Model: e.Model(), Dimension: e.Dimension(), Roles: e.Roles().Normalized(),
		SetDigest: CalibrationSetDigest(), Texts: len(distinct), Restatements: len(restated)}

	sims := make([]float64, 0, len(distinct)*(len(distinct)-1)/2)
	c.DistinctMax = math.Inf(-1)
	for i := range distinct {
		for j := i + 1; j < len(distinct); j++ {
			s := Cosine(vecs[i], vecs[j])
			sims = append(sims, s)
			if s > c.DistinctMax {
				c.DistinctMax, c.ClosestPair = s, [2]string{distinct[i], distinct[j]}
			}
		}
	}
	slices.Sort(sims)
	c.Pairs = len(sims)
	c.DistinctP99, c.DistinctP999 = percentile(sims, 0.99), percentile(sims, 0.999)

	c.Threshold = deriveThreshold(c.DistinctMax)
	c.RestatementMin, c.RestatementMax = math.Inf(1), math.Inf(-1)
	for k := range restated {
		s := Cosine(vecs[len(distinct)+2*k], vecs[len(distinct)+2*k+1])
		c.RestatementMin, c.RestatementMax = min(c.RestatementMin, s), max(c.RestatementMax, s)
		if c.Threshold > 0 && s >= c.Threshold {
			c.RestatementsFolded++
		}
	}
	return c, nil
}

// deriveThreshold is Calibrate's rule (see there).
func deriveThreshold(distinctMax float64) float64 {
	scale := math.Pow10(thresholdDecimals)
	t := math.Ceil((distinctMax+(1-distinctMax)/2)*scale) / scale
	if t <= distinctMax || t >= 1 || math.IsNaN(t) {
		return 0
	}
	return max(t, MinCalibratedThreshold)
}

// percentile is the q-quantile of sorted (nearest rank).
func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// Cosine is the cosine similarity of a and b (0 when either is zero).
func Cosine(a, b []float32) float64 {
	var dot, na, nb float64
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		dot, na, nb = dot+x*y, na+x*x, nb+y*y
	}
	if na == 0 || nb == 0 {
		return 0
	}
	return dot / math.Sqrt(na*nb)
}
