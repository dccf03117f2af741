package memory

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits on what a writer may give, defined once so that every door of the gateway
// (the native API, the LangGraph Store API, MCP) refuses the same values the same way.

// MaxBaseScore is the largest base score a writer may give: importance is a number in
// [0, MaxBaseScore], the scale near-duplicate reinforcement also caps at. A larger
// score would outrank every relevance boost in search and never decay below the
// archival threshold.
const MaxBaseScore = 1.0

// MaxTTL is the longest time-to-live a write may ask for: 100 years of 365 days. It
// keeps now + TTL far inside time.Duration (about 292 years), so a TTL can never
// overflow into an expiry in the past, and inside the times PostgreSQL and JSON hold.
const MaxTTL = 100 * 365 * 24 * time.Hour

// ValidateBaseScore checks a base score a writer gives: a finite number in
// [0, MaxBaseScore].
func ValidateBaseScore(f float64) error {
	if err := validateScore(f); err != nil {
		return err
	}
	if f > MaxBaseScore {
		return fmt.Errorf("is %v (at most %v)", f, MaxBaseScore)
	}
	return nil
}

// TTL turns a time-to-live in seconds into a duration: a finite number greater than
// 0 and at most MaxTTL (in seconds), whatever unit the door takes (the native API's
// ttl_seconds, LangGraph's minutes times 60). Anything else is an error, so that no
// door turns an absurd TTL into a memory that is expired on arrival. Whether 0 or an
// absent value means "no expiry" is the door's rule, decided before calling TTL.
func TTL(seconds float64) (time.Duration, error) {
	switch {
	case math.IsNaN(seconds) || math.IsInf(seconds, 0):
		return 0, fmt.Errorf("is %v (must be a finite number of seconds)", seconds)
	case seconds <= 0:
		return 0, fmt.Errorf("is %v (must be greater than 0)", seconds)
	case seconds > MaxTTL.Seconds():
		return 0, fmt.Errorf("is %v seconds (at most %d, 100 years)", seconds, int64(MaxTTL.Seconds()))
	}
	return time.Duration(seconds * float64(time.Second)), nil
}

// ErrNUL is wrapped by CheckText for a value holding U+0000.
var ErrNUL = errors.New("contains a NUL character (U+0000), which PostgreSQL text cannot hold")

// CheckText checks a free-text value that reaches PostgreSQL as text or is compared
// with stored text (IDs, cursors, keys, namespace labels, queries, reasons): valid
// UTF-8 without NUL. Every door applies it to every such value before any query, so a
// NUL is the same 4xx everywhere and never a database error; the field's own rules (an
// ID's alphabet, a key's length) come on top.
func CheckText(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("is not valid UTF-8")
	}
	if i := strings.IndexByte(s, 0); i >= 0 {
		return fmt.Errorf("%w (at offset %d)", ErrNUL, i)
	}
	return nil
}

// ValidateKey checks a slot key, as Validate checks an item's: at most MaxKeyLen bytes
// of UTF-8 without control characters or surrounding whitespace. Lookups by key (recall
// with a key) apply it too, so a key no write can store is refused rather than sent to
// the database.
func ValidateKey(key string) error {
	if err := validateText(key, MaxKeyLen); err != nil {
		return err
	}
	if strings.TrimSpace(key) != key {
		return errors.New("has leading or trailing whitespace")
	}
	return nil
}
