package embed

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"slices"
	"testing"

	"github.com/amemory/memory-operator/internal/vector"
)

func embedOne(t *testing.T, h *Hashing, text string) []float32 {
	t.Helper()
	v, err := h.Embed(context.Background(), Passage, []string{text})
	if err != nil {
		t.Fatal(err)
	}
	return v[0]
}

func cos(a, b []float32) float64 { return float64(vector.Dot(a, b)) } // both unit vectors

func fingerprint(v []float32) string {
	h := sha256.New()
	for _, x := range v {
		_ = binary.Write(h, binary.LittleEndian, math.Float32bits(x))
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func TestHashingGolden(t *testing.T) {
	// Vectors are part of the model's contract (hashing-v1): stored embeddings must
	// keep matching new ones across processes and releases. A change here needs a new
	// model name.
	h := NewHashing(64)
	if h.Model() != "memory-operator/hashing-v1" || h.Dimension() != 64 {
		t.Fatalf("model %q dim %d", h.Model(), h.Dimension())
	}
	for text, want := range map[string]string{
		"The user prefers dark roast coffee": "b16724851febff8e",
		"用户喜欢喝美式咖啡":                          "f5885e095d5c017b",
		"":                                   "68424b30477095d8",
	} {
		if got := fingerprint(embedOne(t, h, text)); got != want {
			t.Errorf("fingerprint(%q) = %s, want %s", text, got, want)
		}
	}
}

func TestHashingDeterministicAndNormalised(t *testing.T) {
	for _, dim := range []int{2, 7, 64, 384} {
		a, b := NewHashing(dim), NewHashing(dim)
		texts := []string{"User lives in Berlin", "用户住在柏林", "", "a"}
		va, err := a.Embed(context.Background(), Passage, texts)
		if err != nil {
			t.Fatal(err)
		}
		vb, _ := b.Embed(context.Background(), Passage, texts)
		for i := range texts {
			if len(va[i]) != dim {
				t.Fatalf("dim %d: len %d", dim, len(va[i]))
			}
			if !slices.Equal(va[i], vb[i]) {
				t.Fatalf("dim %d: %q embeds differently twice", dim, texts[i])
			}
			if n := vector.Norm(va[i]); math.Abs(n-1) > 1e-6 {
				t.Fatalf("dim %d: %q has norm %v", dim, texts[i], n)
			}
		}
	}
	if _, err := NewHashing(0).Embed(context.Background(), Passage, []string{"x"}); err == nil {
		t.Fatal("dimension 0: no error")
	}
	if v, err := NewHashing(8).Embed(context.Background(), Passage, nil); err != nil || len(v) != 0 {
		t.Fatalf("no texts: %v, %v", v, err)
	}
}

func TestHashingNormalisesCaseAndPunctuation(t *testing.T) {
	h := NewHashing(128)
	base := embedOne(t, h, "dark roast coffee")
	for _, same := range []string{"Dark Roast COFFEE", "dark, roast; coffee!", "  dark\troast\ncoffee  "} {
		if !slices.Equal(embedOne(t, h, same), base) {
			t.Errorf("%q embeds differently from %q", same, "dark roast coffee")
		}
	}
	// Word order matters through word bigrams.
	if c := cos(embedOne(t, h, "new york"), embedOne(t, h, "york new")); c >= 0.999 || c < 0.5 {
		t.Errorf("cos(new york, york new) = %v, want in [0.5, 0.999)", c)
	}
}

func TestHashingEmptyText(t *testing.T) {
	h := NewHashing(256)
	e := embedOne(t, h, "")
	for _, other := range []string{"   ", "!!! ...", "\n"} {
		if !slices.Equal(embedOne(t, h, other), e) {
			t.Errorf("%q embeds differently from the empty text", other)
		}
	}
	if c := cos(e, embedOne(t, h, "coffee")); math.Abs(c) > 0.5 {
		t.Errorf("cos(empty, coffee) = %v, want near 0", c)
	}
}

func TestHashingSimilarityOrdering(t *testing.T) {
	h := NewHashing(512)
	for _, tc := range []struct{ query, related, unrelated string }{
		{"what coffee does the user like", "the user likes dark roast coffee", "deploy the operator with helm on kubernetes"},
		{"user address Berlin", "The user's address is in Berlin, Germany", "Meeting notes from Tuesday standup"},
		{"用户喜欢喝什么咖啡", "用户喜欢喝美式咖啡", "明天下午去北京开会"},
		{"ユーザーはコーヒーが好き", "このユーザーはブラックコーヒーが好きです", "明日は東京で会議があります"},
		{"restore snapshot to new cluster", "restore the snapshot into the new cluster", "the cat sat on the mat"},
	} {
		q := embedOne(t, h, tc.query)
		rel, unrel := cos(q, embedOne(t, h, tc.related)), cos(q, embedOne(t, h, tc.unrelated))
		if rel <= unrel+0.1 {
			t.Errorf("query %q: cos(related)=%.3f not above cos(unrelated)=%.3f", tc.query, rel, unrel)
		}
	}
}

// tokenStrings returns the tokenizer's output for text as strings.
func tokenStrings(text string) (tokens, chars []string) {
	var tk tokenizer
	tk.tokenize(text)
	for _, s := range tk.tokens {
		tokens = append(tokens, string(tk.bytes(s)))
	}
	for _, s := range tk.chars {
		chars = append(chars, string(tk.bytes(s)))
	}
	return tokens, chars
}

func TestTokenize(t *testing.T) {
	tokens, chars := tokenStrings("Hello, 世界和平 OK! 我 love Ünïcode 2024年")
	wantTokens := []string{"hello", "世界", "界和", "和平", "ok", "我", "love", "ünïcode", "2024", "年"}
	wantChars := []string{"世", "界", "和", "平"}
	if !slices.Equal(tokens, wantTokens) || !slices.Equal(chars, wantChars) {
		t.Fatalf("tokenize = %q, %q; want %q, %q", tokens, chars, wantTokens, wantChars)
	}
}

func TestHashingMatchesSpecByHand(t *testing.T) {
	// "dark coffee" in 16 dimensions, computed by hand from the documented algorithm
	// (64-bit FNV-1a, bucket = hash mod 16, sign = top bit):
	//   t:dark        -> bucket 11, sign -, weight 1
	//   t:coffee      -> bucket  7, sign +, weight 1
	//   b:dark coffee -> bucket 11, sign -, weight 0.5
	// acc[7] = 1, acc[11] = -1.5, norm = sqrt(3.25).
	got := embedOne(t, NewHashing(16), "dark coffee")
	want := make([]float32, 16)
	want[7] = float32(1 / math.Sqrt(3.25))
	want[11] = float32(-1.5 / math.Sqrt(3.25))
	if !slices.Equal(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
}
