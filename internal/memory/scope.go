package memory

import (
	"fmt"
	"strings"
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

// MaxScopeIDLen is the longest scope ID accepted, in bytes.
const MaxScopeIDLen = 200

// Scope is the owner of a memory, written "<kind>:<id>".
//
// Scope strings end up in vector-store filter expressions, SQL parameters and object
// keys, so the ID is limited to ASCII letters, digits and "-_.@:"; whitespace, quotes
// and backslashes are never accepted.
type Scope struct {
	Kind ScopeKind
	ID   string
}

// ParseScope parses "<kind>:<id>", e.g. "user:1024". The kind is one of user, session,
// agent; the ID is 1..MaxScopeIDLen characters from [A-Za-z0-9-_.@:] (it may itself
// contain colons: the kind ends at the first one).
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
		return fmt.Errorf("scope id is %d characters long (at most %d)", len(s.ID), MaxScopeIDLen)
	}
	for i, r := range s.ID {
		if !scopeIDRune(r) {
			return fmt.Errorf("scope id has a disallowed character %q at offset %d (allowed: letters, digits and -_.@:)", r, i)
		}
	}
	return nil
}

// String returns "<kind>:<id>".
func (s Scope) String() string { return string(s.Kind) + ":" + s.ID }

func scopeIDRune(r rune) bool {
	return r < 0x80 && scopeIDChar(byte(r))
}

func scopeIDChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	case c == '-', c == '_', c == '.', c == '@', c == ':':
		return true
	}
	return false
}
