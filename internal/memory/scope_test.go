package memory

import (
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/amemory/memory-operator/internal/vector"
)

func TestParseScope(t *testing.T) {
	long := strings.Repeat("a", MaxScopeIDLen)
	const allowed = "allowed: Unicode letters and digits, combining marks after them, and -_.@:/"
	tests := []struct {
		in      string
		want    Scope
		wantErr string
	}{
		{in: "user:1024", want: Scope{ScopeUser, "1024"}},
		{in: "session:2024-05-01_abc.def", want: Scope{ScopeSession, "2024-05-01_abc.def"}},
		{in: "agent:support-bot", want: Scope{ScopeAgent, "support-bot"}},
		{in: "user:alice@example.com", want: Scope{ScopeUser, "alice@example.com"}},
		{in: "user:tenant:42", want: Scope{ScopeUser, "tenant:42"}},
		{in: "user:" + long, want: Scope{ScopeUser, long}},

		{in: "", wantErr: "scope is empty (want <kind>:<id> with kind user, session or agent)"},
		{in: "1024", wantErr: `scope "1024" has no kind (want <kind>:<id> with kind user, session or agent)`},
		{in: "user:", wantErr: `scope "user:": scope id is empty`},
		{in: ":1024", wantErr: `scope ":1024": scope kind is empty (want user, session or agent)`},
		{in: "team:1", wantErr: `scope "team:1": unknown scope kind "team" (want user, session or agent)`},
		{in: "User:1", wantErr: `scope "User:1": unknown scope kind "User" (want user, session or agent)`},
		{in: "user:a/b", want: Scope{ScopeUser, "a/b"}},
		{in: "session:org:acme/thread/42", want: Scope{ScopeSession, "org:acme/thread/42"}},
		{in: "user:é", want: Scope{ScopeUser, "é"}},
		{in: "user:zoë-ユーザー", want: Scope{ScopeUser, "zoë-ユーザー"}},
		{in: "user:用户123", want: Scope{ScopeUser, "用户123"}},
		{in: "user:𠮷野家", want: Scope{ScopeUser, "𠮷野家"}},                                                        // a supplementary-plane Han character
		{in: "user:Ελένη.محمد", want: Scope{ScopeUser, "Ελένη.محمد"}},                                          // Greek, Arabic
		{in: "agent:हिन्दी", want: Scope{ScopeAgent, "हिन्दी"}},                                                // spacing and non-spacing marks after letters
		{in: "user:q\u0301", want: Scope{ScopeUser, "q\u0301"}},                                                // a mark no precomposed letter absorbs: NFC as it is
		{in: "user:١٢٣", want: Scope{ScopeUser, "١٢٣"}},                                                        // Arabic-Indic digits
		{in: "user:ＡＢＣ", want: Scope{ScopeUser, "ＡＢＣ"}},                                                        // full-width letters are letters (no NFKC folding)
		{in: "user:" + strings.Repeat("用", 66) + "ab", want: Scope{ScopeUser, strings.Repeat("用", 66) + "ab"}}, // 200 bytes

		{in: "user:a b", wantErr: `scope "user:a b": scope id has a disallowed character ' ' at offset 1 (` + allowed + `)`},
		{in: "user:a\tb", wantErr: `scope "user:a\tb": scope id has a disallowed character '\t' at offset 1 (` + allowed + `)`},
		{in: "user:x'", wantErr: `scope "user:x'": scope id has a disallowed character '\'' at offset 1 (` + allowed + `)`},
		{in: `user:x"`, wantErr: `scope "user:x\"": scope id has a disallowed character '"' at offset 1 (` + allowed + `)`},
		{in: `user:x\y`, wantErr: `scope "user:x\\y": scope id has a disallowed character '\\' at offset 1 (` + allowed + `)`},
		{in: `user:1" or scope != "`, wantErr: `scope "user:1\" or scope != \"": scope id has a disallowed character '"' at offset 1 (` + allowed + `)`},
		{in: "user:a*", wantErr: `scope "user:a*": scope id has a disallowed character '*' at offset 1 (` + allowed + `)`},
		{in: "user:ë%", wantErr: `scope "user:ë%": scope id has a disallowed character '%' at offset 2 (` + allowed + `)`},
		{in: "user:\xff", wantErr: `scope "user:\xff": scope id is not valid UTF-8 (byte 0xff at offset 0)`},
		{in: "user:ë\xe3\x83", wantErr: `scope "user:ë\xe3\x83": scope id is not valid UTF-8 (byte 0xe3 at offset 2)`},
		{in: "user:zoe\u0308", wantErr: "scope \"user:zoe\u0308\": scope id is not in Unicode normalization form NFC (the same id in NFC is \"zo\u00eb\")"},
		{in: "user:\u1100\u1161", wantErr: "scope \"user:\u1100\u1161\": scope id is not in Unicode normalization form NFC (the same id in NFC is \"\uac00\")"},
		{in: "user:\u0301a", wantErr: "scope \"user:\u0301a\": scope id has a combining mark U+0301 at offset 0 that follows no letter or digit (" + allowed + ")"},
		{in: "user:a-\u0301", wantErr: "scope \"user:a-\u0301\": scope id has a combining mark U+0301 at offset 2 that follows no letter or digit (" + allowed + ")"},
		{in: "user:a\u200db", wantErr: `scope "user:a\u200db": scope id has a disallowed character '\u200d' (U+200D) at offset 1 (` + allowed + `)`},
		{in: "user:a\u2028b", wantErr: `scope "user:a\u2028b": scope id has a disallowed character '\u2028' (U+2028) at offset 1 (` + allowed + `)`},
		{in: "user:a\u202eb", wantErr: `scope "user:a\u202eb": scope id has a disallowed character '\u202e' (U+202E) at offset 1 (` + allowed + `)`},
		{in: "user:\ufeffa", wantErr: `scope "user:\ufeffa": scope id has a disallowed character '\ufeff' (U+FEFF) at offset 0 (` + allowed + `)`},
		{in: "user:a\u00a0b", wantErr: `scope "user:a\u00a0b": scope id has a disallowed character '\u00a0' (U+00A0) at offset 1 (` + allowed + `)`},
		{in: "user:ë\x00", wantErr: `scope "user:ë\x00": scope id has a disallowed character '\x00' at offset 2 (` + allowed + `)`},
		{in: "user:\ufffd", wantErr: `scope "user:�": scope id has a disallowed character '�' (U+FFFD) at offset 0 (` + allowed + `)`},
		{in: "user:😀", wantErr: `scope "user:😀": scope id has a disallowed character '😀' (U+1F600) at offset 0 (` + allowed + `)`},
		{in: "user:" + long + "a", wantErr: `scope "user:` + long + `a": scope id is 201 bytes long (at most 200)`},
		{in: "user:" + strings.Repeat("用", 67), wantErr: `scope "user:` + strings.Repeat("用", 67) + `": scope id is 201 bytes long (at most 200)`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseScope(tt.in)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("ParseScope(%q) error = %v, want %q", tt.in, err, tt.wantErr)
				}
				if ValidateScope(tt.in) == nil {
					t.Fatalf("ValidateScope(%q) = nil", tt.in)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseScope(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			}
			if got.String() != tt.in {
				t.Fatalf("String() = %q, want %q", got.String(), tt.in)
			}
		})
	}
}

func TestScopeValidate(t *testing.T) {
	if err := (Scope{Kind: ScopeAgent, ID: "planner"}).Validate(); err != nil {
		t.Fatalf("valid scope: %v", err)
	}
	if err := (Scope{Kind: ScopeUser}).Validate(); err == nil || err.Error() != "scope id is empty" {
		t.Fatalf("empty id: %v", err)
	}
}

// TestNormalizeScope: a door's normalisation turns every canonically equivalent
// spelling of an id into the one valid scope, so one user never becomes two.
func TestNormalizeScope(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"user:1024", "user:1024"},
		{"user:zoe\u0308-ユーザー", "user:zo\u00eb-ユーザー"}, // decomposed ë
		{"user:zo\u00eb-ユーザー", "user:zo\u00eb-ユーザー"},  // already NFC
		{"user:\u1100\u1161\u11a8", "user:\uac01"},    // conjoining jamo: 각
		{"user:a\u0323\u0307", "user:\u1ea1\u0307"},   // marks reordered and composed: ạ̇
		{"user:a\u0307\u0323", "user:\u1ea1\u0307"},   // the same letter, marks the other way round
		{"session:\u212b/x", "session:\u00c5/x"},      // the Angstrom sign is canonically Å
		{"user:\uff21", "user:\uff21"},                // full-width A: a compatibility form, kept (NFC, not NFKC)
	} {
		got := NormalizeScope(c.in)
		if got != c.want {
			t.Errorf("NormalizeScope(%q) = %q, want %q", c.in, got, c.want)
		}
		if err := ValidateScope(got); err != nil {
			t.Errorf("NormalizeScope(%q) = %q: %v", c.in, got, err)
		}
		if c.in != c.want && ValidateScope(c.in) == nil {
			t.Errorf("ValidateScope(%q) accepts a scope that is not NFC", c.in)
		}
	}
	// NFC can lengthen a string (U+0958 has no composed form in NFC): the limit is on
	// what is stored, so a door checks the length after normalising.
	long := "user:" + strings.Repeat("\u0958", 60) // 180 bytes, 360 in NFC
	if err := ValidateScope(NormalizeScope(long)); err == nil || !strings.Contains(err.Error(), "360 bytes long") {
		t.Errorf("normalised long scope: %v", err)
	}
}

// FuzzScope holds the scope rules whatever the input: a valid scope is NFC, valid
// UTF-8, of the allowed characters only (nothing that could end a quoted literal, a
// CSV field or a log line), at most MaxScopeIDLen bytes of id, and prints back as
// parsed; normalising is idempotent and a string that normalisation changes is never
// valid as it is.
func FuzzScope(f *testing.F) {
	for _, s := range []string{"user:1024", "user:zoë-ユーザー", "user:zoe\u0308", "session:a/b:c", "user:\u0301", "user:a\u200d",
		"agent:हिन्दी", "user:\xff", `user:"`, "user:𠮷", "user:\u1100\u1161", "user:" + strings.Repeat("用", 67)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := NormalizeScope(s)
		if NormalizeScope(n) != n {
			t.Fatalf("NormalizeScope is not idempotent on %q", s)
		}
		sc, err := ParseScope(s)
		if err != nil {
			return
		}
		if n != s {
			t.Fatalf("%q is valid but not NFC (NFC: %q)", s, n)
		}
		if sc.String() != s || len(sc.ID) > MaxScopeIDLen || !utf8.ValidString(s) {
			t.Fatalf("%q parsed as %+v", s, sc)
		}
		base := false // as Scope documents: a mark follows a letter, a digit or a mark
		for i, r := range sc.ID {
			switch {
			case strings.ContainsRune("-_.@:/", r):
				base = false
			case unicode.IsLetter(r) || unicode.IsNumber(r):
				base = true
			case unicode.Is(unicode.M, r) && base:
			default:
				t.Fatalf("%q: the id holds %q (U+%04X) at %d", s, r, r, i)
			}
		}
		// Nothing in it is quoted by %q: no quote, backslash, space, control or
		// format character, so it cannot end a literal or forge a log line.
		if q := strconv.Quote(s); q != `"`+s+`"` {
			t.Fatalf("%q needs escaping: %s", s, q)
		}
		if err := vector.ValidateScope(s); err != nil {
			t.Fatalf("a valid scope is not a valid index scope: %v", err)
		}
	})
}
