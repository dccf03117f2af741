package embed

import (
	"context"
	"fmt"
	"math"
	"unicode"
	"unicode/utf8"
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

// Roles is NoRoles: the hashing embedder has no notion of roles, and Embed ignores
// its role.
func (h *Hashing) Roles() Roles { return NoRoles }

// Embed returns one unit vector per text, the same in either role.
func (h *Hashing) Embed(ctx context.Context, _ Role, texts []string) ([][]float32, error) {
	if h.dim < 1 {
		return nil, fmt.Errorf("hashing embedder: dimension %d must be positive", h.dim)
	}
	out := make([][]float32, len(texts))
	e := featureEmbedder{acc: make([]float64, h.dim)}
	for i, t := range texts {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		out[i] = e.embed(t)
	}
	return out, nil
}

// featureEmbedder embeds texts one after the other, reusing its buffers: an import
// embeds hundreds of thousands of texts, and building every feature as a string cost
// more than everything else the restore does.
type featureEmbedder struct {
	acc []float64
	tok tokenizer
}

// 64-bit FNV-1a (hash/fnv), inlined so that a feature's parts are hashed in place.
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

func fnvAdd[S string | []byte](h uint64, b S) uint64 {
	for i := range len(b) {
		h ^= uint64(b[i])
		h *= fnvPrime64
	}
	return h
}

func (e *featureEmbedder) add(sum uint64, w float64) {
	if sum>>63 == 1 {
		w = -w
	}
	e.acc[sum%uint64(len(e.acc))] += w
}

func (e *featureEmbedder) embed(text string) []float32 {
	clear(e.acc)
	tk := &e.tok
	tk.tokenize(text)
	for i, t := range tk.tokens {
		e.add(fnvAdd(fnvAdd(fnvOffset64, "t:"), tk.bytes(t)), tokenWeight)
		if i > 0 {
			sum := fnvAdd(fnvAdd(fnvOffset64, "b:"), tk.bytes(tk.tokens[i-1]))
			e.add(fnvAdd(fnvAdd(sum, " "), tk.bytes(t)), bigramWeight)
		}
	}
	for _, c := range tk.chars {
		e.add(fnvAdd(fnvAdd(fnvOffset64, "c:"), tk.bytes(c)), cjkCharWeight)
	}
	if len(tk.tokens) == 0 {
		e.add(fnvAdd(fnvOffset64, emptyFeature), 1)
	}
	var norm float64
	for _, x := range e.acc {
		norm += x * x
	}
	norm = math.Sqrt(norm)
	v := make([]float32, len(e.acc))
	if norm == 0 { // features cancelled out in every bucket
		v[0] = 1
		return v
	}
	for i, x := range e.acc {
		v[i] = float32(x / norm)
	}
	return v
}

// isCJK reports whether r belongs to a script written without spaces between words.
func isCJK(r rune) bool {
	// Hangul Jamo (U+1100) is the first block of the four scripts.
	return r >= 0x1100 && unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul)
}

func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)
}

// span is a token's bytes in tokenizer.buf.
type span struct{ start, end int32 }

// tokenizer splits a lowercased text into the token stream (words, and CJK character
// bigrams in place of CJK runs; a CJK run of one character is its own token) and,
// separately, the single characters of CJK runs longer than one. Tokens are spans of
// one buffer of lowercased UTF-8, rebuilt for every text.
type tokenizer struct {
	buf           []byte
	tokens, chars []span
	word          int   // where the current word starts in buf, or -1
	run           []int // where each rune of the current CJK run starts in buf
}

func (t *tokenizer) bytes(s span) []byte { return t.buf[s.start:s.end] }

func (t *tokenizer) flushWord() {
	if t.word >= 0 && t.word < len(t.buf) {
		t.tokens = append(t.tokens, span{int32(t.word), int32(len(t.buf))})
	}
	t.word = -1
}

func (t *tokenizer) flushRun() {
	n := len(t.run)
	end := func(i int) int32 { // the end of the run's rune i
		if i+1 < n {
			return int32(t.run[i+1])
		}
		return int32(len(t.buf))
	}
	switch {
	case n == 1:
		t.tokens = append(t.tokens, span{int32(t.run[0]), end(0)})
	case n > 1:
		for i := 0; i+1 < n; i++ {
			t.tokens = append(t.tokens, span{int32(t.run[i]), end(i + 1)})
		}
		for i := range n {
			t.chars = append(t.chars, span{int32(t.run[i]), end(i)})
		}
	}
	t.run = t.run[:0]
}

// tokenize lowercases text rune by rune, as strings.ToLower does (invalid UTF-8
// becomes U+FFFD, a separator), and classifies the lowercased runes.
func (t *tokenizer) tokenize(text string) {
	t.buf, t.tokens, t.chars, t.run, t.word = t.buf[:0], t.tokens[:0], t.chars[:0], t.run[:0], -1
	for _, r := range text {
		if r < utf8.RuneSelf { // ASCII: letters and digits make words, all else separates
			switch {
			case 'A' <= r && r <= 'Z':
				r += 'a' - 'A'
			case 'a' <= r && r <= 'z', '0' <= r && r <= '9':
			default:
				t.flushWord()
				t.flushRun()
				continue
			}
			t.flushRun()
			if t.word < 0 {
				t.word = len(t.buf)
			}
			t.buf = append(t.buf, byte(r))
			continue
		}
		r = unicode.ToLower(r)
		switch {
		case unicode.IsMark(r) && len(t.run) > 0:
			t.run = append(t.run, len(t.buf)) // a combining mark stays with its CJK character
		case isCJK(r):
			t.flushWord()
			t.run = append(t.run, len(t.buf))
		case isWordRune(r):
			t.flushRun()
			if t.word < 0 {
				t.word = len(t.buf)
			}
		default:
			t.flushWord()
			t.flushRun()
			continue
		}
		t.buf = utf8.AppendRune(t.buf, r)
	}
	t.flushWord()
	t.flushRun()
}
