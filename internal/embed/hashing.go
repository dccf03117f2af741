package embed

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"unicode"
)

// HashingModel is the model name of the hashing embedder. The algorithm behind a
// model name never changes: a different algorithm gets a new name.
const HashingModel = "memory-operator/hashing-v1"

// Feature weights of the hashing embedder.
const (
	tokenWeight   = 1.0
	bigramWeight  = 0.5 // consecutive tokens
	cjkCharWeight = 0.5 // single CJK characters, next to their bigrams
)

// emptyFeature stands for a text without any token, so that such texts still get a
// unit vector (equal to each other, unrelated to any other text) that cosine indexes
// accept.
const emptyFeature = "\x00empty"

// Hashing is a deterministic, offline embedder ("feature hashing"). Text is lowercased
// and split into tokens: runs of letters, digits and combining marks, except that runs
// of CJK characters (Han, Hiragana, Katakana, Hangul), which are written without
// spaces, yield their overlapping character bigrams. Features are the tokens, the
// pairs of consecutive tokens and the single CJK characters; each is hashed with
// 64-bit FNV-1a into one of Dimension buckets (hash mod Dimension), with the sign
// taken from the hash's top bit. The vector is L2-normalised.
//
// The same text gives the same vector in every process and on every platform; texts
// that share words have a higher cosine similarity than unrelated texts. It captures
// no meaning beyond shared words: use a model server for semantic recall.
type Hashing struct {
	dim int
}

var _ Embedder = (*Hashing)(nil)

// NewHashing returns a hashing embedder producing dim-dimensional vectors. A dim
// below 1 makes Embed fail.
func NewHashing(dim int) *Hashing { return &Hashing{dim: dim} }

// Model returns HashingModel.
func (h *Hashing) Model() string { return HashingModel }

// Dimension returns the vector dimension.
func (h *Hashing) Dimension() int { return h.dim }

// Embed returns one unit vector per text.
func (h *Hashing) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	if h.dim < 1 {
		return nil, fmt.Errorf("hashing embedder: dimension %d must be positive", h.dim)
	}
	out := make([][]float32, len(texts))
	for i, t := range texts {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		out[i] = h.embed(t)
	}
	return out, nil
}

func (h *Hashing) embed(text string) []float32 {
	acc := make([]float64, h.dim)
	add := func(feature string, w float64) {
		f := fnv.New64a()
		_, _ = f.Write([]byte(feature))
		sum := f.Sum64()
		if sum>>63 == 1 {
			w = -w
		}
		acc[sum%uint64(h.dim)] += w
	}
	tokens, chars := tokenize(text)
	for i, t := range tokens {
		add("t:"+t, tokenWeight)
		if i > 0 {
			add("b:"+tokens[i-1]+" "+t, bigramWeight)
		}
	}
	for _, c := range chars {
		add("c:"+c, cjkCharWeight)
	}
	if len(tokens) == 0 {
		add(emptyFeature, 1)
	}
	var norm float64
	for _, x := range acc {
		norm += x * x
	}
	norm = math.Sqrt(norm)
	v := make([]float32, h.dim)
	if norm == 0 { // features cancelled out in every bucket
		v[0] = 1
		return v
	}
	for i, x := range acc {
		v[i] = float32(x / norm)
	}
	return v
}

// isCJK reports whether r belongs to a script written without spaces between words.
func isCJK(r rune) bool {
	return unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul)
}

func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)
}

// tokenize returns the token stream of text (words, and CJK character bigrams in
// place of CJK runs; a CJK run of one character is its own token) and, separately,
// the single characters of CJK runs longer than one.
func tokenize(text string) (tokens, cjkChars []string) {
	text = strings.ToLower(text)
	var word []rune
	var run []rune
	flushWord := func() {
		if len(word) > 0 {
			tokens = append(tokens, string(word))
			word = word[:0]
		}
	}
	flushRun := func() {
		switch {
		case len(run) == 1:
			tokens = append(tokens, string(run))
		case len(run) > 1:
			for i := 0; i+1 < len(run); i++ {
				tokens = append(tokens, string(run[i:i+2]))
			}
			for _, r := range run {
				cjkChars = append(cjkChars, string(r))
			}
		}
		run = run[:0]
	}
	for _, r := range text {
		switch {
		case unicode.IsMark(r) && len(run) > 0:
			run = append(run, r) // a combining mark stays with its CJK character
		case isCJK(r):
			flushWord()
			run = append(run, r)
		case isWordRune(r):
			flushRun()
			word = append(word, r)
		default:
			flushWord()
			flushRun()
		}
	}
	flushWord()
	flushRun()
	return tokens, cjkChars
}
