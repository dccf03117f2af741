// Package shortterm is a store's short-term tier: sessions, each an ordered list of
// turns (a message and who said it) that lives while the session is active and
// expires a set time after its last activity (seed 003, section 4: a Redis list per
// session, JSON messages, 30 minutes without activity and it is gone).
//
// One behaviour, two backends: Redis when the store declares it (package redisstore)
// and PostgreSQL otherwise (pgstore's sessions.go). The conformance suite in
// shorttermtest holds both to the same rules:
//
//   - a turn is numbered (Seq) in its session from 1 on, in the order appended, and
//     keeps its number for as long as it lives;
//   - appending or reading (with Touch) is activity: the session expires TTL after
//     the last of them, and once expired no call sees it again;
//   - a session belongs to one owner (a user scope, or the session itself): a forget
//     of the owner removes all of its sessions;
//   - a summary turn may replace the turns up to a number; what it replaced is
//     returned to the caller, which may keep it as episodic memory;
//   - the turns of a session idle for long enough are offered for promotion before
//     they expire (Idle, then MarkPromoted), so that what is worth keeping is kept;
//   - the live sessions can be exported whole (Export, for a snapshot) and written
//     back as they were (Import, for a restore), never over a session that exists.
//
// Turns are JSON, never a language's serialisation (seed 003, section 8, pit 2).
package shortterm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/amemory/memory-operator/internal/memory"
)

// Defaults of a store's short-term tier.
const (
	// DefaultTTL: a session expires 30 minutes after its last activity (seed 003).
	DefaultTTL = 30 * time.Minute
	// DefaultMaxTurns is how many turns a session may hold. An append past it is
	// refused (ErrSessionFull), never trimmed: a summary makes room.
	DefaultMaxTurns = 2000
	// MaxTurnBytes bounds one turn's content (its JSON).
	MaxTurnBytes = 64 << 10
	// MaxRoleBytes bounds a turn's role.
	MaxRoleBytes = 64
	// MaxAppend is the most turns one append may add.
	MaxAppend = 100
	// ExportPage is how many sessions one page of an export reads at most, and
	// ExportPageBytes about how many bytes of turns (a page holds one session at
	// least, whatever its size).
	ExportPage      = 100
	ExportPageBytes = 4 << 20
)

// RoleSummary is the role of a turn that replaced earlier ones (Summarize).
const RoleSummary = "summary"

// Errors every backend returns, wrapped with what it knows.
var (
	// ErrNotFound: no such session, or it expired.
	ErrNotFound = errors.New("no such session (it may have expired)")
	// ErrSessionFull: the append would take the session past its MaxTurns.
	ErrSessionFull = errors.New("the session holds as many turns as it may (summarize or end it)")
	// ErrOwner: the session exists with another owner.
	ErrOwner = errors.New("the session belongs to another owner")
	// ErrNothing: a summary would replace no turn (through is before the first).
	ErrNothing = errors.New("no turns to summarize")
	// ErrPastLast: a summary through a turn the session does not have yet.
	ErrPastLast = errors.New("through is past the session's last turn")
	// ErrUnavailable: the backend did not answer (Redis down or too slow).
	ErrUnavailable = errors.New("the short-term store is not answering")
)

// NewTurn is a turn to append.
type NewTurn struct {
	Role string `json:"role"`
	// Content is the message: any JSON value (a string, or an object such as
	// {"text": ..., "tool_calls": [...]}).
	Content json.RawMessage `json:"content"`
}

// Turn is a stored turn.
type Turn struct {
	Seq     int64           `json:"seq"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	At      time.Time       `json:"ts"`
}

// Session is a session's state and (for reads) its turns.
type Session struct {
	ID    string
	Owner string
	// LastSeq is the number of the last turn appended (0: none yet).
	LastSeq int64
	// Promoted is the number through which turns were offered for promotion.
	Promoted   int64
	LastActive time.Time
	Turns      []Turn
}

// ExpiresAt is when s expires without further activity.
func (s Session) ExpiresAt(ttl time.Duration) time.Time { return s.LastActive.Add(ttl) }

// Append adds turns to a session.
type Append struct {
	Session string
	// Owner is who the session belongs to: a scope (user:<id>). A session keeps the
	// owner of its first append; an append without one joins the session as it is
	// (a new session without one belongs to itself).
	Owner string
	Turns []NewTurn
	Now   time.Time
}

// WindowQuery reads a session's latest turns.
type WindowQuery struct {
	Session string
	// Last is how many turns at most (the latest ones); 0: all.
	Last int
	// AsOf, when set, reads the window as it was then: only turns appended at or
	// before it.
	AsOf time.Time
	// Touch counts the read as activity (an agent reading its context); the
	// promotion sweep reads without it.
	Touch bool
	Now   time.Time
}

// Summary replaces a session's turns numbered through Through with one turn of role
// RoleSummary before the turns that follow. The summary takes the number and time
// of the last turn it replaced, so turns stay in order of both, and a window as of a
// time sees the summary where its turns were.
type Summary struct {
	Session string
	Through int64
	Content json.RawMessage
	Now     time.Time
}

// Store is a short-term backend. Every call is atomic: a concurrent call sees a
// session before or after it, never between.
type Store interface {
	// Append appends turns and returns them numbered.
	Append(ctx context.Context, a Append) ([]Turn, error)
	// Window returns the session with its latest turns (oldest first).
	Window(ctx context.Context, q WindowQuery) (Session, error)
	// Summarize replaces turns with a summary and returns the turns it replaced.
	Summarize(ctx context.Context, s Summary) ([]Turn, error)
	// End removes a session and returns it with all its turns.
	End(ctx context.Context, session string) (Session, error)
	// ForgetOwner removes every session of owner and says how many there were.
	ForgetOwner(ctx context.Context, owner string) (int, error)
	// Idle lists sessions, without their turns, whose last activity is before
	// before and whose turns were not all offered for promotion, oldest first.
	Idle(ctx context.Context, before time.Time, limit int) ([]Session, error)
	// MarkPromoted records that a session's turns through seq were offered for
	// promotion; a session that ended or expired meanwhile is no error.
	MarkPromoted(ctx context.Context, session string, through int64) error
	// Purge removes the sessions that expired by now, where the backend does not
	// expire them itself, and says how many; a backend that expires them itself
	// drops what its indexes keep of them and counts those.
	Purge(ctx context.Context, now time.Time) (int, error)
	// Export calls fn once per session live at now, in order of session ID, with
	// all its turns (oldest first), its owner, LastSeq, Promoted and LastActive. It
	// reads the sessions a page at a time (each page as of one instant), so a
	// session that ends or expires meanwhile is left out or passed as it was, never
	// an error. An error of fn stops it and is returned (wrapped).
	Export(ctx context.Context, now time.Time, fn func(Session) error) error
	// Import writes a session whole, as Export gave it: the same turns (numbers,
	// roles, contents, times), owner, LastSeq, Promoted and LastActive, which sets
	// its expiry (LastActive + TTL). It writes nothing and returns false when a
	// session of that ID exists (an import never overwrites a conversation, and a
	// second import of the same session is a no-op) or when the session expired by
	// now; true when it wrote it. Input that ValidateImport refuses is an error.
	Import(ctx context.Context, s Session, now time.Time) (bool, error)
	// TTL is how long a session lives without activity.
	TTL() time.Duration
}

// Options configure a backend.
type Options struct {
	TTL      time.Duration
	MaxTurns int
}

// WithDefaults fills unset options.
func (o Options) WithDefaults() Options {
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.MaxTurns <= 0 {
		o.MaxTurns = DefaultMaxTurns
	}
	return o
}

// ValidateSession checks a session identifier: a scope (session:<id> usually).
func ValidateSession(id string) error {
	if err := memory.ValidateScope(id); err != nil {
		return fmt.Errorf("session: %w", err)
	}
	return nil
}

// Validate checks an append before any backend sees it.
func (a Append) Validate() error {
	if err := ValidateSession(a.Session); err != nil {
		return err
	}
	if a.Owner != "" {
		if err := memory.ValidateScope(a.Owner); err != nil {
			return fmt.Errorf("owner: %w", err)
		}
	}
	switch {
	case len(a.Turns) == 0:
		return errors.New("turns is empty")
	case len(a.Turns) > MaxAppend:
		return fmt.Errorf("an append holds at most %d turns, got %d", MaxAppend, len(a.Turns))
	}
	for i, t := range a.Turns {
		if err := checkTurn(t.Role, t.Content); err != nil {
			return fmt.Errorf("turns[%d]: %w", i, err)
		}
		if t.Role == RoleSummary {
			return fmt.Errorf("turns[%d]: role %q is the summary's (summarize instead)", i, RoleSummary)
		}
	}
	return nil
}

// ValidateImport checks a session to import into a backend holding at most maxTurns
// turns a session: its ID and owner are scopes (no owner: the session itself, as for
// an append), it has a LastActive, at least one turn and at most maxTurns
// (ErrSessionFull), numbered from 1 and increasing, none past LastSeq; Promoted is
// between 0 and LastSeq; every turn has a role, a time, and content of valid JSON
// within the limits of an append (a summary's role included).
func (s Session) ValidateImport(maxTurns int) error {
	if err := ValidateSession(s.ID); err != nil {
		return err
	}
	if s.Owner != "" {
		if err := memory.ValidateScope(s.Owner); err != nil {
			return fmt.Errorf("owner: %w", err)
		}
	}
	switch {
	case s.LastActive.IsZero():
		return errors.New("last active is not set")
	case len(s.Turns) == 0:
		return errors.New("turns is empty (a session holds at least one turn)")
	case maxTurns > 0 && len(s.Turns) > maxTurns:
		return fmt.Errorf("%w: %s has %d turns, the store holds %d a session", ErrSessionFull, s.ID, len(s.Turns), maxTurns)
	case s.Promoted < 0 || s.Promoted > s.LastSeq:
		return fmt.Errorf("promoted is %d (from 0 to last seq %d)", s.Promoted, s.LastSeq)
	}
	var prev int64
	for i, t := range s.Turns {
		switch {
		case t.Seq <= prev:
			return fmt.Errorf("turns[%d]: seq %d after %d (turns are numbered from 1, increasing)", i, t.Seq, prev)
		case t.Seq > s.LastSeq:
			return fmt.Errorf("turns[%d]: seq %d is past last seq %d", i, t.Seq, s.LastSeq)
		case t.At.IsZero():
			return fmt.Errorf("turns[%d]: its time is not set", i)
		}
		if err := checkTurn(t.Role, t.Content); err != nil {
			return fmt.Errorf("turns[%d]: %w", i, err)
		}
		prev = t.Seq
	}
	return nil
}

// Validate checks a summary.
func (s Summary) Validate() error {
	if err := ValidateSession(s.Session); err != nil {
		return err
	}
	if s.Through < 1 {
		return fmt.Errorf("through is %d (the number of a turn, from 1)", s.Through)
	}
	return checkTurn(RoleSummary, s.Content)
}

func checkTurn(role string, content json.RawMessage) error {
	switch {
	case role == "":
		return errors.New("role is empty")
	case len(role) > MaxRoleBytes:
		return fmt.Errorf("role is %d bytes (at most %d)", len(role), MaxRoleBytes)
	case !utf8.ValidString(role):
		return errors.New("role is not valid UTF-8")
	case len(content) == 0:
		return errors.New("content is empty")
	case len(content) > MaxTurnBytes:
		return fmt.Errorf("content is %d bytes (at most %d)", len(content), MaxTurnBytes)
	case !json.Valid(content):
		return errors.New("content is not valid JSON")
	}
	for _, r := range role {
		if r < 0x20 {
			return errors.New("role holds a control character")
		}
	}
	// Stored as JSON text in both backends, byte for byte: any valid UTF-8 JSON.
	if err := memory.CheckText(string(content)); err != nil {
		return fmt.Errorf("content %w", err)
	}
	return nil
}

// Compact returns content as compact JSON, the form every backend stores.
func Compact(content json.RawMessage) (json.RawMessage, error) {
	var b bytes.Buffer
	if err := json.Compact(&b, content); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Cut keeps the turns of a window: those appended at or before asOf (when set), then
// the last of them (0: all). turns are in order.
func Cut(turns []Turn, last int, asOf time.Time) []Turn {
	if !asOf.IsZero() {
		kept := turns[:0:0]
		for _, t := range turns {
			if !t.At.After(asOf) {
				kept = append(kept, t)
			}
		}
		turns = kept
	}
	if last > 0 && len(turns) > last {
		turns = turns[len(turns)-last:]
	}
	return turns
}

// Instant is a time as the backends keep it: UTC, to the millisecond (Redis keeps
// milliseconds), so that both return the same times.
func Instant(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }
