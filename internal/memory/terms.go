package memory

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// MaxTermBytes is the longest term Terms returns: a longer word (a token, a hash, a
// run of letters without spaces) is cut at a character boundary, so every term fits
// a database index entry whatever the text.
const MaxTermBytes = 64

// Terms returns the index terms of a text for lexical search, in text order and with
// repeats (their count is the term's frequency):
//
//   - the text is NFKC-normalised and case-folded ("ＡＢＣ" and "ABC" are "abc");
//   - words are the runs of Unicode letters, digits and marks; anything else
//     separates them ("2024-03-05" is "2024", "03", "05"; "b12" stays one word);
//   - Chinese, Japanese and Korean (Han, Hiragana, Katakana, Hangul) are written
//     without spaces, so their runs become overlapping character bigrams
//     ("北京朝阳" is "北京", "京朝", "朝阳"); a lone such character is a term of its own;
//   - a few English function words (stopWords) are dropped;
//   - English plurals are folded by the S-stemmer (Harman, 1991): "preferences" and
//     "preference" are one term, as are "allergies" and "allergy".
//
// Query and memory texts go through the same function, so whatever it conflates it
// conflates on both sides. The result never holds an empty term.
//
// Stored postings were made by this function: a change to what it returns must ship
// with a pgstore migration that marks every scope in term_pending, so the gateway
// rebuilds them and old memories stay findable.
func Terms(text string) []string {
	text = strings.Map(foldRune, cases.Fold().String(norm.NFKC.String(text)))
	var (
		terms []string
		word  strings.Builder // the current run of non-CJK letters and digits
		cjk   []rune          // the current run of CJK characters
	)
	flushWord := func() {
		if word.Len() == 0 {
			return
		}
		if w := word.String(); !stopWords[w] {
			terms = append(terms, capTerm(stem(w)))
		}
		word.Reset()
	}
	flushCJK := func() {
		switch len(cjk) {
		case 0:
			return
		case 1:
			terms = append(terms, string(cjk))
		default:
			for i := 0; i+1 < len(cjk); i++ {
				terms = append(terms, string(cjk[i:i+2]))
			}
		}
		cjk = cjk[:0]
	}
	for _, r := range text {
		switch {
		case isCJK(r):
			flushWord()
			cjk = append(cjk, r)
		case unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			flushCJK()
			word.WriteRune(r)
		default:
			flushWord()
			flushCJK()
		}
	}
	flushWord()
	flushCJK()
	return terms
}

// foldRune finishes cases.Fold for Cherokee. Unicode folds Cherokee small letters to
// their capitals (CaseFolding.txt: AB70 → 13A0, 13F8 → 13F0), but cases.Fold lowers
// capitals and raises small letters, so folding twice undoes it ("ꮄ" → "Ꮄ" → "ꮄ")
// and a word would be one term or another depending on how it was written. Mapping
// the small letters to the capitals, as Unicode does, makes Terms a function of the
// word; TestTermsFoldEveryLetterOnce checks every letter.
func foldRune(r rune) rune {
	switch {
	case r >= 0xAB70 && r <= 0xABBF:
		return r - 0xAB70 + 0x13A0
	case r >= 0x13F8 && r <= 0x13FD:
		return r - 8
	}
	return r
}

// isCJK reports whether r is written in a script without spaces between words: Han,
// Hiragana, Katakana (with its prolonged sound mark, which Unicode files under no
// script) and Hangul.
func isCJK(r rune) bool {
	return r >= 0x2E80 && (unicode.Is(unicode.Han, r) || unicode.Is(unicode.Hiragana, r) ||
		unicode.Is(unicode.Katakana, r) || unicode.Is(unicode.Hangul, r) || r == 'ー')
}

// capTerm cuts a term to MaxTermBytes at a character boundary.
func capTerm(t string) string {
	if len(t) <= MaxTermBytes {
		return t
	}
	cut := MaxTermBytes
	for cut > 0 && !utf8.RuneStart(t[cut]) {
		cut--
	}
	return t[:cut]
}

// stem is the S-stemmer (Donna Harman, "How effective is suffixing?", JASIS 1991),
// for words of ASCII letters longer than three: the first rule that matches applies.
//
//	-ies (not -eies, -aies) → -y
//	-es  (not -aes, -ees, -oes) → -e
//	-s   (not -us, -ss) → (nothing)
//
// It only conflates singular and plural, which is what matters most when a question
// ("my coffee preferences") and a memory ("coffee preference") differ; a full Porter
// stemmer conflates more and more wrongly (the Go ports served here are unmaintained).
func stem(w string) string {
	if len(w) <= 3 || !isLowerASCII(w) {
		return w
	}
	switch {
	case strings.HasSuffix(w, "ies") && !strings.HasSuffix(w, "eies") && !strings.HasSuffix(w, "aies"):
		return w[:len(w)-3] + "y"
	case strings.HasSuffix(w, "es") && !strings.HasSuffix(w, "aes") && !strings.HasSuffix(w, "ees") && !strings.HasSuffix(w, "oes"):
		return w[:len(w)-1]
	case strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "us") && !strings.HasSuffix(w, "ss"):
		return w[:len(w)-1]
	}
	return w
}

func isLowerASCII(w string) bool {
	for i := 0; i < len(w); i++ {
		if w[i] < 'a' || w[i] > 'z' {
			return false
		}
	}
	return true
}

// stopWords are English function words, and the pieces contractions leave ("don't"
// is "don", "t"): they occur in nearly every text, so they would only cost index
// space and search time for no ranking. Kept short on purpose: "not", "no" and
// pronouns that name someone ("she") stay.
var stopWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`a an and are as at be been but by can could did do does for from
		had has have how i if in into is it its just me my of on or our so than that the their them
		then there these this those to too very was we were what when where which who whom why will
		with would you your s t d ll m re ve`) {
		m[w] = true
	}
	return m
}()
