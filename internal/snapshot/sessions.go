package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/amemory/memory-operator/internal/memory"
)

// Live sessions of the short-term tier, which a package may carry (a snapshot with
// includeSessions): one object of JSON lines, one session a line with all its turns,
// in increasing session order, encrypted and checksummed like a shard. They are the
// conversations in progress when the snapshot was taken; a restore brings back
// those still alive by then (their TTL counted from their last activity).

// SessionsName is the object holding a package's sessions.
const SessionsName = "sessions.jsonl.zst.sealed"

// SessionSet says where a package's sessions are (absent from the manifest when it
// carries none).
type SessionSet struct {
	Count  int64      `json:"count"`
	Object *ObjectRef `json:"object"`
}

// Session is a live session as a package carries it.
type Session struct {
	// ID is the session's scope (session:<id>); Owner whom it belongs to (a scope).
	ID    string `json:"session"`
	Owner string `json:"owner"`
	// LastSeq is the number of the last turn appended; Promoted the number through
	// which turns were offered for promotion to memories.
	LastSeq  int64 `json:"last_seq"`
	Promoted int64 `json:"promoted_through"`
	// LastActive is the session's last activity: it expires TTL after it.
	LastActive time.Time     `json:"last_active"`
	Turns      []SessionTurn `json:"turns"`
}

// SessionTurn is one turn of a session.
type SessionTurn struct {
	Seq     int64           `json:"seq"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	At      time.Time       `json:"ts"`
}

// checkSession refuses a session a restore could not write back as it was.
func checkSession(s Session, prev string) error {
	if err := memory.ValidateScope(s.ID); err != nil {
		return fmt.Errorf("session %q: %w", s.ID, err)
	}
	if prev != "" && s.ID <= prev {
		return fmt.Errorf("%w: session %q follows %q; sessions must arrive in increasing order (byte order)", ErrScopeOrder, s.ID, prev)
	}
	if err := memory.ValidateScope(s.Owner); err != nil {
		return fmt.Errorf("session %s: owner: %w", s.ID, err)
	}
	switch {
	case s.LastActive.IsZero():
		return fmt.Errorf("session %s has no last_active", s.ID)
	case s.Promoted < 0 || s.Promoted > s.LastSeq:
		return fmt.Errorf("session %s: promoted_through %d is outside 0..last_seq %d", s.ID, s.Promoted, s.LastSeq)
	}
	var last int64
	for _, t := range s.Turns {
		switch {
		case t.Seq <= last || t.Seq > s.LastSeq:
			return fmt.Errorf("session %s: turn %d is out of order or past last_seq %d", s.ID, t.Seq, s.LastSeq)
		case !utf8.ValidString(t.Role):
			return fmt.Errorf("session %s: turn %d: role is not valid UTF-8", s.ID, t.Seq)
		case !json.Valid(t.Content):
			return fmt.Errorf("session %s: turn %d: content is not valid JSON", s.ID, t.Seq)
		}
		last = t.Seq
	}
	return nil
}

// AddSession records one of the store's live sessions. Sessions must arrive in
// strictly increasing order of their IDs (byte order); they are streamed, so their
// number is not limited. A session that breaks the rules is refused and the Writer
// stays usable.
func (w *Writer) AddSession(s Session) error {
	if err := w.usable(); err != nil {
		return err
	}
	prev := ""
	if w.sessions.n > 0 {
		prev = w.lastSession
	}
	if err := checkSession(s, prev); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	s.LastActive = s.LastActive.UTC()
	for i := range s.Turns {
		s.Turns[i].At = s.Turns[i].At.UTC()
	}
	if err := w.sessions.add(s); err != nil {
		return err
	}
	w.lastSession = s.ID
	return nil
}

// appendSession renders a session as one JSON line.
func appendSession(b []byte, s Session) []byte {
	line, _ := json.Marshal(s) // checked by AddSession: valid JSON content, UTF-8 strings
	return append(b, line...)
}

// SessionCount is how many sessions the package carries.
func (r *Reader) SessionCount() int64 {
	if r.m.Sessions == nil {
		return 0
	}
	return r.m.Sessions.Count
}

// Sessions calls fn for each of the package's sessions, in increasing order, streamed
// from their object and verified like a shard (count, order, size, SHA-256; an error
// at the object's end can follow sessions already passed to fn).
func (r *Reader) Sessions(ctx context.Context, fn func(Session) error) error {
	set := r.m.Sessions
	if set == nil {
		return nil
	}
	what := "session object " + set.Object.Name
	var prev string
	var n int64
	err := r.eachLine(ctx, *set.Object, what, func(lineNo int64, line []byte) error {
		var s Session
		if err := json.Unmarshal(line, &s); err != nil {
			return corruptf("%s line %d is not a session: %v", what, lineNo, err)
		}
		if err := checkSession(s, prev); err != nil {
			return corruptf("%s line %d: %v", what, lineNo, err)
		}
		prev = s.ID
		if n++; n > set.Count {
			return corruptf("%s holds more than the %d sessions the manifest records", what, set.Count)
		}
		return fn(s)
	})
	if err != nil {
		return err
	}
	if n != set.Count {
		return corruptf("%s holds %d sessions; the manifest records %d", what, n, set.Count)
	}
	return nil
}

func (s *SessionSet) validate() error {
	switch {
	case s == nil:
		return nil
	case s.Count <= 0 || s.Object == nil:
		return errors.New("sessions: a package that carries sessions has a count and an object")
	}
	if err := validObjectName(s.Object.Name); err != nil {
		return fmt.Errorf("sessions.object: %v", err)
	}
	if s.Object.Bytes < headerSize+tagSize || !isSHA256Hex(s.Object.SHA256) {
		return fmt.Errorf("sessions.object %s has an invalid size or sha256", s.Object.Name)
	}
	return nil
}
