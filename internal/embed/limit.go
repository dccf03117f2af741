package embed

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Overflow is what a Limit does with a text longer than its MaxInputBytes.
type Overflow string

// The overflow policies.
const (
	// Truncate embeds the text's first MaxInputBytes bytes, cut back to the last
	// whole UTF-8 character. Only the vector sees the shorter text: the memory itself
	// is stored whole.
	Truncate Overflow = "Truncate"
	// Refuse refuses the text with a *TextTooLongError.
	Refuse Overflow = "Refuse"
)

// DefaultMaxInputBytes is the limit a store gets when it declares none: well past the
// context window of the usual embedding models (multilingual-e5 reads 512 tokens,
// about 2 KB of text), small enough that one text costs an embedder on a CPU seconds,
// not minutes.
const DefaultMaxInputBytes = 8192

// ErrTextTooLong is wrapped by every *TextTooLongError (errors.Is).
var ErrTextTooLong = errors.New("text too long for the embedder")

// TextTooLongError is Limit.Prepare's refusal: the text of the input named ID was
// Bytes bytes long, over the limit Max. It names the input and sizes only, never the
// text.
type TextTooLongError struct {
	// ID names the input: a memory_id, or "query" for a search.
	ID         string
	Bytes, Max int
}

func (e *TextTooLongError) Error() string {
	return fmt.Sprintf("the text of %s for the embedder is %d bytes, over the store's limit of %d", e.ID, e.Bytes, e.Max)
}

// Is makes errors.Is(err, ErrTextTooLong) hold.
func (e *TextTooLongError) Is(target error) bool { return target == ErrTextTooLong }

// Limit bounds the text of one input sent to an embedder: a memory's embedding text
// or a search query. It is a store's setting (a MemoryStore's spec.embedder), applied
// by every path that embeds for the store (the gateway's writes, searches and
// background indexing; a restore's re-embedding and its dry run), so that a legal but
// huge text can never hold the embedder for minutes.
//
// The zero Limit is no limit.
type Limit struct {
	// MaxInputBytes is the largest text, in bytes of UTF-8, sent as is; 0 means no
	// limit.
	MaxInputBytes int
	// Overflow says what Prepare does with a longer text; "" means Refuse.
	Overflow Overflow
}

// Validate checks the limit's fields.
func (l Limit) Validate() error {
	if l.MaxInputBytes < 0 {
		return fmt.Errorf("embedder input limit %d is negative", l.MaxInputBytes)
	}
	if _, err := ParseOverflow(string(l.Overflow)); err != nil && l.Overflow != "" {
		return err
	}
	return nil
}

// ParseOverflow parses "Truncate" or "Refuse".
func ParseOverflow(s string) (Overflow, error) {
	switch o := Overflow(s); o {
	case Truncate, Refuse:
		return o, nil
	}
	return "", fmt.Errorf("embedder overflow %q: want Truncate or Refuse", s)
}

// Prepare returns the text to send to the embedder for the input named id (a
// memory_id, or "query"):
//
//   - text itself when it fits (len(text) <= MaxInputBytes, or no limit);
//   - with Truncate, text's first MaxInputBytes bytes, cut back to the last whole
//     UTF-8 character (so the result is valid UTF-8 whenever text is, and never
//     longer than MaxInputBytes), and truncated true;
//   - with Refuse (or no policy), a *TextTooLongError naming id and the sizes, which
//     wraps ErrTextTooLong.
//
// It is deterministic: the same text and limit always give the same result, so a
// memory re-embedded later (background indexing, a restore) gets the same vector.
func (l Limit) Prepare(id, text string) (prepared string, truncated bool, err error) {
	if l.MaxInputBytes <= 0 || len(text) <= l.MaxInputBytes {
		return text, false, nil
	}
	if l.Overflow != Truncate {
		return "", false, &TextTooLongError{ID: id, Bytes: len(text), Max: l.MaxInputBytes}
	}
	// text[cut] is the first byte left out: while it continues a character, leave
	// out that character's first bytes too (at most utf8.UTFMax-1 of them).
	cut := l.MaxInputBytes
	for i := 0; i < utf8.UTFMax-1 && cut > 0 && !utf8.RuneStart(text[cut]); i++ {
		cut--
	}
	return text[:cut], true, nil
}
