package memory

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// ScopeKind says who a memory belongs to.
type ScopeKind string

// The scope kinds.
const (
	// ScopeUser is one end user: "user:<id>".
	ScopeUser ScopeKind = "user"
	// ScopeSession is one conversation: "session:<id>".
	ScopeSession ScopeKind = "session"
	// ScopeAgent is shared by every instance of one agent type: "agent:<type>".
	ScopeAgent ScopeKind = "agent"
)

// MaxScopeIDLen is the longest scope ID accepted, in bytes of UTF-8 (of its NFC form).
const MaxScopeIDLen = 200

// Scope is the owner of a memory, written "<kind>:<id>".
//
// The ID is made of Unicode letters (L*) and numbers (N*), combining marks (M*) that
// follow a letter, number or another mark (so "zoë" may arrive decomposed, as e +
// U+0308), and the ASCII characters -_.@:/. It is in Unicode normalization form NFC,
// so that one user never becomes two: every door (the gateway, the importers, scope
// maps, namespace rules) normalises what it receives with NormalizeScope, and
// Validate refuses a scope that is not NFC, so every stored scope is. Nothing else is
// folded: case, compatibility forms (NFKC) and invisible differences are the
// source's own distinctions and are kept.
//
// Whitespace, quotes, backslashes, control and format characters are never part of an
// ID. Where a scope lands it is still escaped or encoded for that place (SQL
// parameters, the Milvus filter expression, CSV maps, logs with %q), never relied on
// being ASCII.
type Scope struct {
	Kind ScopeKind
	ID   string
}

// NormalizeScope returns s in Unicode normalization form NFC: what a door does with
// a scope (or a part of one: a user id, a thread id, a namespace label) before it
// validates it. A valid scope is returned unchanged, an ASCII string too.
func NormalizeScope(s string) string {
	if isASCII(s) {
		return s // ASCII is always NFC; the common case allocates nothing
	}
	return norm.NFC.String(s)
}

// ParseScope parses "<kind>:<id>", e.g. "user:1024". The kind is one of user, session,
// agent; the ID is 1..MaxScopeIDLen bytes as Scope describes (it may itself contain
// colons: the kind ends at the first one). It does not normalise: see NormalizeScope.
func ParseScope(s string) (Scope, error) {
	kind, id, ok := strings.Cut(s, ":")
	if !ok {
		if s == "" {
			return Scope{}, fmt.Errorf("scope is empty (want <kind>:<id> with kind user, session or agent)")
		}
		return Scope{}, fmt.Errorf("scope %q has no kind (want <kind>:<id> with kind user, session or agent)", s)
	}
	sc := Scope{Kind: ScopeKind(kind), ID: id}
	if err := sc.Validate(); err != nil {
		return Scope{}, fmt.Errorf("scope %q: %w", s, err)
	}
	return sc, nil
}

// ValidateScope returns an error unless s is a valid scope string.
func ValidateScope(s string) error {
	_, err := ParseScope(s)
	return err
}

// scopeIDAllowed says what an ID may hold, in error messages.
const scopeIDAllowed = "allowed: Unicode letters and digits, combining marks after them, and -_.@:/"

// Validate checks the kind and the ID.
func (s Scope) Validate() error {
	switch s.Kind {
	case ScopeUser, ScopeSession, ScopeAgent:
	case "":
		return fmt.Errorf("scope kind is empty (want user, session or agent)")
	default:
		return fmt.Errorf("unknown scope kind %q (want user, session or agent)", string(s.Kind))
	}
	if s.ID == "" {
		return fmt.Errorf("scope id is empty")
	}
	if len(s.ID) > MaxScopeIDLen {
		return fmt.Errorf("scope id is %d bytes long (at most %d)", len(s.ID), MaxScopeIDLen)
	}
	return validateScopeID(s.ID)
}

// validateScopeID checks the characters of an ID and that it is NFC.
func validateScopeID(id string) error {
	ascii := true
	for i := 0; i < len(id); i++ {
		if c := id[i]; c >= utf8.RuneSelf {
			ascii = false
			break
		} else if !scopeIDASCII(c) {
			return fmt.Errorf("scope id has a disallowed character %q at offset %d (%s)", rune(c), i, scopeIDAllowed)
		}
	}
	if ascii {
		return nil // ASCII is NFC: the common case needs no tables
	}
	base := false // the previous rune can carry a combining mark
	for i := 0; i < len(id); {
		r, size := utf8.DecodeRuneInString(id[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return fmt.Errorf("scope id is not valid UTF-8 (byte %#x at offset %d)", id[i], i)
		case r < utf8.RuneSelf:
			if !scopeIDASCII(byte(r)) {
				return fmt.Errorf("scope id has a disallowed character %q at offset %d (%s)", r, i, scopeIDAllowed)
			}
			base = isASCIIAlnum(byte(r))
		case unicode.In(r, unicode.L, unicode.N):
			base = true
		case unicode.Is(unicode.M, r):
			if !base {
				return fmt.Errorf("scope id has a combining mark U+%04X at offset %d that follows no letter or digit (%s)", r, i, scopeIDAllowed)
			}
		default:
			return fmt.Errorf("scope id has a disallowed character %q (U+%04X) at offset %d (%s)", r, r, i, scopeIDAllowed)
		}
		i += size
	}
	if !norm.NFC.IsNormalString(id) {
		return fmt.Errorf("scope id is not in Unicode normalization form NFC (the same id in NFC is %q)", norm.NFC.String(id))
	}
	return nil
}

// String returns "<kind>:<id>".
func (s Scope) String() string { return string(s.Kind) + ":" + s.ID }

// scopeIDASCII is the ASCII part of the ID alphabet.
func scopeIDASCII(c byte) bool {
	return isASCIIAlnum(c) || c == '-' || c == '_' || c == '.' || c == '@' || c == ':' || c == '/'
}

func isASCIIAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
