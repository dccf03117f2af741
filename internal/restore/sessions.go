package restore

import (
	"context"
	"fmt"
	"time"

	"github.com/amemory/memory-operator/internal/shortterm"
	"github.com/amemory/memory-operator/internal/snapshot"
)

// sessionPackage is a package that may carry live sessions (snapshot.Reader).
type sessionPackage interface {
	SessionCount() int64
	Sessions(ctx context.Context, fn func(snapshot.Session) error) error
}

// SessionsResult counts the package's live sessions and what became of them.
type SessionsResult struct {
	// Read sessions from the package; Restored of them written into the target's
	// short-term tier.
	Read     int64 `json:"read"`
	Restored int64 `json:"restored"`
	// Existing: the target already had a session of that name (never overwritten: it
	// may be a conversation going on there). Expired: its TTL ran out by the
	// restore's time. Forgotten: a tombstone of its owner or of the session itself
	// covers its turns. Unmapped: the mapping or the denylist leaves its session or
	// its owner out.
	Existing  int64 `json:"existing,omitempty"`
	Expired   int64 `json:"expired,omitempty"`
	Forgotten int64 `json:"forgotten,omitempty"`
	Unmapped  int64 `json:"unmapped,omitempty"`
}

// restoreSessions writes the package's live sessions into o.Sessions, after the
// memories and tombstones: each mapped like a scope (the session and its owner),
// left out when a tombstone in the target (the package's were applied before) covers
// it, when the target already has a session of that name, or when it expired by now.
// A rerun writes nothing new: every session is then Existing (or Expired).
func (r *runner) restoreSessions(ctx context.Context, res *Result) error {
	sp, ok := r.o.Reader.(sessionPackage)
	if !ok || r.o.Sessions == nil || sp.SessionCount() == 0 {
		return nil
	}
	now := r.o.Now
	if now.IsZero() {
		now = time.Now()
	}
	out := &SessionsResult{}
	res.Sessions = out
	err := sp.Sessions(ctx, func(ps snapshot.Session) error {
		out.Read++
		s, keep, err := r.mapSession(ps)
		if err != nil {
			return err
		}
		if !keep {
			out.Unmapped++
			return nil
		}
		covered, err := r.coveredByTombstone(ctx, s)
		if err != nil {
			return err
		}
		if covered {
			out.Forgotten++
			return nil
		}
		if !s.LastActive.Add(r.o.Sessions.TTL()).After(now) {
			out.Expired++
			return nil
		}
		if r.o.DryRun {
			out.Restored++
			return nil
		}
		written, err := r.o.Sessions.Import(ctx, s, now)
		switch {
		case err != nil:
			return fmt.Errorf("session %s: %w", s.ID, err)
		case written:
			out.Restored++
		default:
			out.Existing++
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("restore: sessions: %w", err)
	}
	return nil
}

// mapSession maps a package session's name and owner as scopes; keep is false when
// either is denylisted or mapped away.
func (r *runner) mapSession(ps snapshot.Session) (shortterm.Session, bool, error) {
	s := shortterm.Session{ID: ps.ID, Owner: ps.Owner, LastSeq: ps.LastSeq, Promoted: ps.Promoted, LastActive: ps.LastActive,
		Turns: make([]shortterm.Turn, len(ps.Turns))}
	for i, t := range ps.Turns {
		s.Turns[i] = shortterm.Turn{Seq: t.Seq, Role: t.Role, Content: t.Content, At: t.At}
	}
	for _, name := range []*string{&s.ID, &s.Owner} {
		d, err := r.decide(*name)
		if err != nil {
			return s, false, err
		}
		if d.skip != noSkip {
			return s, false, nil
		}
		*name = d.target
	}
	return s, true, nil
}

// coveredByTombstone reports whether the target's tombstone of the session's owner,
// or of the session, was written at or after the session's first turn: what it
// held was said before that forget. (A store clears a user's sessions when it
// forgets them; a session that began after the forget is new consent.)
func (r *runner) coveredByTombstone(ctx context.Context, s shortterm.Session) (bool, error) {
	first := s.LastActive
	if len(s.Turns) > 0 {
		first = s.Turns[0].At
	}
	for _, scope := range []string{s.Owner, s.ID} {
		at, ok, err := r.o.Target.ForgottenAt(ctx, scope)
		if err != nil {
			return false, err
		}
		if ok && !at.Before(first) {
			return true, nil
		}
	}
	return false, nil
}
