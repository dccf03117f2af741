package memory

import (
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestTerms(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"english", "The user prefers oat milk in the morning", []string{"user", "prefer", "oat", "milk", "morning"}},
		{"repeats kept", "tea, tea and more tea", []string{"tea", "tea", "more", "tea"}},
		{"plurals", "coffee preferences; coffee preference", []string{"coffee", "preference", "coffee", "preference"}},
		{"ies plural", "allergies allergy", []string{"allergy", "allergy"}},
		{"s-stemmer exceptions", "bus glass species", []string{"bus", "glass", "specy"}},
		{"contractions", "I don't know it's Anna's", []string{"don", "know", "anna"}},
		{"numbers and dates", "invoice #4711 due 2024-03-05, b12", []string{"invoice", "4711", "due", "2024", "03", "05", "b12"}},
		{"decimals", "score 0.85", []string{"score", "0", "85"}},
		{"nfkc full width", "ＡＢＣ １２３", []string{"abc", "123"}},
		{"case folding", "Straße STRASSE ΣΊΣΥΦΟΣ", []string{"strasse", "strasse", "σίσυφοσ"}},
		{"chinese bigrams", "我住在北京朝阳区", []string{"我住", "住在", "在北", "北京", "京朝", "朝阳", "阳区"}},
		{"lone han", "我 is here", []string{"我", "here"}},
		{"japanese", "東京タワーに行きました", []string{"東京", "京タ", "タワ", "ワー", "ーに", "に行", "行き", "きま", "まし", "した"}},
		{"korean", "서울에 살아요", []string{"서울", "울에", "살아", "아요"}},
		{"mixed scripts", "Anna住在Berlin市", []string{"anna", "住在", "berlin", "市"}},
		{"embedding text", "address.city: Berlin\ntext: 喜欢咖啡", []string{"address", "city", "berlin", "text", "喜欢", "欢咖", "咖啡"}},
		{"combining marks", "cafe\u0301 naïve", []string{"café", "naïve"}},
		{"only stopwords", "the of and to is a", nil},
		{"empty", "", nil},
		{"punctuation", "—!?…", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Terms(tc.text); !slices.Equal(got, tc.want) {
				t.Errorf("Terms(%q) = %q, want %q", tc.text, got, tc.want)
			}
		})
	}
}

// The S-stemmer is what lets a question in the plural find a memory in the singular
// (and back); without it these pairs share no term.
func TestTermsConflatePlurals(t *testing.T) {
	for _, pair := range [][2]string{
		{"what are my coffee preferences", "coffee preference: oat milk"},
		{"which cities did I visit", "visited the city of Lyon"},
		{"food allergy", "allergies: peanuts"},
		{"my dogs", "a dog named Rex"},
	} {
		q, d := Terms(pair[0]), Terms(pair[1])
		shared := 0
		for _, term := range q {
			if slices.Contains(d, term) && term != "coffee" && term != "food" {
				shared++
			}
		}
		if shared == 0 {
			t.Errorf("%q %q and %q %q share no term but the plural one", pair[0], q, pair[1], d)
		}
	}
}

func TestTermsLongWordIsCut(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes
	got := Terms(long + " x")
	if len(got) != 2 || len(got[0]) > MaxTermBytes || !utf8.ValidString(got[0]) || !strings.HasPrefix(long, got[0]) {
		t.Fatalf("Terms of a 200-byte word = %q", got)
	}
}

// TestTermsFoldEveryLetterOnce: a folded letter folds to itself, for every letter
// Unicode has, so a word is one term however it is cased or how often it was folded.
func TestTermsFoldEveryLetterOnce(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if !unicode.IsLetter(r) {
			continue
		}
		once := Terms(string(r))
		if twice := Terms(strings.Join(once, " ")); !slices.Equal(once, twice) {
			t.Errorf("%U %q: Terms gives %q, and Terms of that gives %q", r, r, once, twice)
		}
	}
}

func FuzzTerms(f *testing.F) {
	for _, s := range []string{"", "The user prefers oat milk", "我住在北京朝阳区", "ＡＢＣ", "2024-03-05", "\xff\xfe", "ﷺ", "ß", strings.Repeat("ﷺ", 40)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		terms := Terms(s)
		for _, term := range terms {
			if term == "" || len(term) > MaxTermBytes || !utf8.ValidString(term) {
				t.Fatalf("Terms(%q) has term %q", s, term)
			}
		}
		// Normalisation is idempotent: the terms of the terms are the terms (CJK
		// bigrams aside, which pair characters across the joins).
		if !strings.ContainsFunc(s, isCJK) {
			again := Terms(strings.Join(terms, " "))
			if !slices.Equal(again, restem(terms)) {
				t.Fatalf("Terms(%q) = %q, but Terms of its join = %q", s, terms, again)
			}
		}
	})
}

// restem is what Terms gives for terms already once stemmed and cut: stemming again
// may strip one more "s" ("glasses" → "glasse" → "glasse"; "sss" rules aside).
func restem(terms []string) []string {
	out := make([]string, 0, len(terms))
	for _, t := range terms {
		if s := capTerm(stem(t)); !stopWords[s] {
			out = append(out, s)
		}
	}
	return out
}
