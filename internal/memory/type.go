package memory

import "fmt"

// Type is the kind of a memory. It decides the half-life of its score and whether a
// restore brings it back (working memory is not restored by default).
type Type string

// The four memory types.
const (
	// Working is short-lived context of the current task; it usually carries a TTL.
	Working Type = "working"
	// Episodic records events: what happened, when.
	Episodic Type = "episodic"
	// Semantic holds facts and preferences.
	Semantic Type = "semantic"
	// Procedural holds learned ways of doing things.
	Procedural Type = "procedural"
)

// AllTypes returns the four memory types in a fixed order. The slice is new on every
// call, so callers may modify it.
func AllTypes() []Type {
	return []Type{Working, Episodic, Semantic, Procedural}
}

// ParseType returns the Type named by s. Only the exact lowercase names are accepted.
func ParseType(s string) (Type, error) {
	t := Type(s)
	if err := t.Validate(); err != nil {
		return "", err
	}
	return t, nil
}

// Valid reports whether t is one of the four memory types.
func (t Type) Valid() bool {
	switch t {
	case Working, Episodic, Semantic, Procedural:
		return true
	}
	return false
}

// Validate returns an error unless t is one of the four memory types.
func (t Type) Validate() error {
	if t == "" {
		return fmt.Errorf("memory type is empty (want one of working, episodic, semantic, procedural)")
	}
	if !t.Valid() {
		return fmt.Errorf("unknown memory type %q (want one of working, episodic, semantic, procedural)", string(t))
	}
	return nil
}

// Foldable reports whether near-duplicate writes of this type reinforce one memory
// instead of adding another: facts and preferences (semantic) and ways of doing
// things (procedural) restated are the same knowledge; episodes and working memory
// are events, and two events are never one because a model finds them alike.
func (t Type) Foldable() bool { return t == Semantic || t == Procedural }

// String returns the type's name.
func (t Type) String() string { return string(t) }
