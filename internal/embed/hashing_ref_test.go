package embed

import (
	"hash/fnv"
	"math"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// referenceEmbed is hashing-v1 written the plain way, as the documentation states it
// (features built as strings, hash/fnv, strings.ToLower first). The fast embedder
// must give bit-identical vectors: they are the model's contract.
func referenceEmbed(dim int, text string) []float32 {
	acc := make([]float64, dim)
	add := func(feature string, w float64) {
		f := fnv.New64a()
		_, _ = f.Write([]byte(feature))
		sum := f.Sum64()
		if sum>>63 == 1 {
			w = -w
		}
		acc[sum%uint64(dim)] += w
	}
	tokens, chars := referenceTokenize(text)
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
	v := make([]float32, dim)
	if norm == 0 {
		v[0] = 1
		return v
	}
	for i, x := range acc {
		v[i] = float32(x / norm)
	}
	return v
}

func referenceTokenize(text string) (tokens, cjkChars []string) {
	text = strings.ToLower(text)
	var word, run []rune
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
	cjk := func(r rune) bool {
		return unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul)
	}
	for _, r := range text {
		switch {
		case unicode.IsMark(r) && len(run) > 0:
			run = append(run, r)
		case cjk(r):
			flushWord()
			run = append(run, r)
		case unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
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

var hashingCorpus = []string{
	"", "a", "The user prefers dark roast coffee", "用户喜欢喝美式咖啡", "Hello, 世界和平 OK! 我 love Ünïcode 2024年",
	"İstanbul KELVIN \u212a Straße ΣΊΣΥΦΟΣ", "e\u0301 \u0301a 漢\u0301字 カタカナ ひらがな 한국어 ᄀ가",
	"bad \xff\xfe utf8 \xc3", "tabs\tand\nnewlines\r\n  ", "ﬁ ligature Ǆ titlecase ǅ", "١٢٣ arabic digits ٤",
	`{"k": "v", "n": 1.5e3}`, strings.Repeat("word ", 200), "mixed漢字and latin字",
}

func FuzzHashingMatchesReference(f *testing.F) {
	for _, s := range hashingCorpus {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		var e featureEmbedder
		for _, dim := range []int{1, 7, 64} {
			e.acc = make([]float64, dim)
			if got, want := e.embed(text), referenceEmbed(dim, text); !slices.Equal(got, want) {
				t.Fatalf("dim %d, %q: fast %v, reference %v", dim, text, got, want)
			}
		}
		gt, gc := tokenStrings(text)
		wt, wc := referenceTokenize(text)
		if !slices.Equal(gt, wt) || !slices.Equal(gc, wc) {
			t.Fatalf("%q: tokens %q %q, reference %q %q", text, gt, gc, wt, wc)
		}
	})
}

// TestHashingReusesBuffers embeds texts one after another with one embedder: what
// a previous text left in the buffers must not leak into the next.
func TestHashingReusesBuffers(t *testing.T) {
	e := featureEmbedder{acc: make([]float64, 32)}
	for range 2 {
		for _, s := range hashingCorpus {
			if got, want := e.embed(s), referenceEmbed(32, s); !slices.Equal(got, want) {
				t.Fatalf("%q: fast %v, reference %v", s, got, want)
			}
		}
	}
}

func BenchmarkHashingEmbed(b *testing.B) {
	text := strings.Repeat("The user asked where order 1042 is; the agent looked it up with lookup_order and said it ships Tuesday. ", 4)
	h := NewHashing(256)
	texts := []string{text}
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		_, _ = h.Embed(b.Context(), Passage, texts)
	}
}

func BenchmarkHashingEmbedReference(b *testing.B) {
	text := strings.Repeat("The user asked where order 1042 is; the agent looked it up with lookup_order and said it ships Tuesday. ", 4)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		_ = referenceEmbed(256, text)
	}
}
