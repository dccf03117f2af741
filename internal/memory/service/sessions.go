package service

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/shortterm"
)

// Sessions is a store's short-term tier (package shortterm: Redis or PostgreSQL)
// joined to its long-term memory: turns of a session become episodic memories of the
// session's owner when promoted, on request, when the session ends, and before it
// expires (Sweep), so that nothing worth keeping dies with the TTL.
//
// Promotion and forgetting never resurrect a forgotten user:
//   - a forget clears the short-term tier first (ClearScope), then the long-term
//     store (Memory.Forget), so no turn of the forgotten user is read after the
//     tombstone's time;
//   - a promotion takes the server's clock before it reads the turns and writes the
//     memories as copies read then (memory.Item.RecordedAt): a forget whose
//     tombstone is at or after that time refuses them (pgstore.ErrForgotten), and
//     one committed before the write deletes them.
//
// Promotion is idempotent: a turn's memory holds the session and the turn's number,
// so promoting it twice (a retry, two gateway replicas sweeping) stores it once (an
// exact duplicate of an episode is Unchanged).
type Sessions struct {
	st   shortterm.Store
	mem  *Memory
	opts SessionOptions
	// afterRead, set by tests, runs between a promotion's read and its write.
	afterRead func()
}

// SessionOptions configure Sessions.
type SessionOptions struct {
	// PromoteOnEnd promotes a session's turns when it ends: by End, and before it
	// expires (Sweep). Off, turns are promoted only on request (Promote).
	PromoteOnEnd bool
	// PromoteLead is how long before its expiry an idle session is promoted by
	// Sweep (0: DefaultPromoteLead, at most half the TTL).
	PromoteLead time.Duration
}

// DefaultPromoteLead is how long before its expiry Sweep promotes an idle session.
const DefaultPromoteLead = 5 * time.Minute

// promoteChunk is how many turns one write promotes (a turn holds up to 64 KiB).
const promoteChunk = 100

// SourceSession is the source of a promoted turn's memory.
const SourceSession = "session"

// NewSessions joins a short-term backend to a store's memory.
func NewSessions(st shortterm.Store, mem *Memory, opts SessionOptions) *Sessions {
	ttl := st.TTL()
	if opts.PromoteLead <= 0 {
		opts.PromoteLead = DefaultPromoteLead
	}
	opts.PromoteLead = min(opts.PromoteLead, ttl/2)
	return &Sessions{st: st, mem: mem, opts: opts}
}

// Backend is the short-term store.
func (s *Sessions) Backend() shortterm.Store { return s.st }

// Append adds turns to a session.
func (s *Sessions) Append(ctx context.Context, a shortterm.Append) ([]shortterm.Turn, error) {
	return s.st.Append(ctx, a)
}

// Window reads a session's latest turns.
func (s *Sessions) Window(ctx context.Context, q shortterm.WindowQuery) (shortterm.Session, error) {
	return s.st.Window(ctx, q)
}

// Summarize replaces a session's turns through sum.Through with a summary. With
// PromoteOnEnd the turns it replaces are promoted first: a summary never drops a turn
// that was not kept.
func (s *Sessions) Summarize(ctx context.Context, sum shortterm.Summary) ([]shortterm.Turn, error) {
	if err := sum.Validate(); err != nil {
		return nil, err
	}
	if s.opts.PromoteOnEnd {
		// A summary the backend would refuse promotes nothing either.
		sess, err := s.st.Window(ctx, shortterm.WindowQuery{Session: sum.Session, Last: 1, Now: time.Now()})
		if err != nil {
			return nil, err
		}
		if sum.Through > sess.LastSeq {
			return nil, fmt.Errorf("%w: %s ends at turn %d", shortterm.ErrPastLast, sum.Session, sess.LastSeq)
		}
		if _, err := s.Promote(ctx, sum.Session, sum.Through); err != nil {
			return nil, err
		}
	}
	return s.st.Summarize(ctx, sum)
}

// Ended is what End did.
type Ended struct {
	Session shortterm.Session
	// Promoted is how many turns End promoted (PromoteOnEnd, or promote asked).
	Promoted int
}

// End ends a session. With promote (the caller's choice, PromoteOnEnd by default)
// its turns are promoted before it is removed, and any appended meanwhile after.
func (s *Sessions) End(ctx context.Context, session string, promote bool) (Ended, error) {
	var out Ended
	if promote {
		n, err := s.Promote(ctx, session, 0)
		if err != nil {
			return out, err
		}
		out.Promoted = n
	}
	sess, err := s.st.End(ctx, session)
	if err != nil {
		return out, err
	}
	out.Session = sess
	if promote {
		// Turns appended between the promotion and the end.
		var late []shortterm.Turn
		for _, t := range sess.Turns {
			if t.Seq > sess.Promoted {
				late = append(late, t)
			}
		}
		if len(late) > 0 {
			readAt, err := s.mem.Store().ServerTime(ctx)
			if err == nil {
				err = s.write(ctx, sess, late, readAt)
			}
			if err != nil {
				return out, fmt.Errorf("sessions: %s ended; %d turns appended while it was promoted were not kept: %w", session, len(late), err)
			}
			out.Promoted += len(late)
		}
	}
	return out, nil
}

// Promote writes a session's turns numbered through through (0: all) that were not
// promoted before as episodic memories of its owner, and records them promoted. It
// returns how many it wrote (a turn already stored counts: promotion is idempotent).
// A session whose owner was forgotten after its turns were read promotes nothing.
func (s *Sessions) Promote(ctx context.Context, session string, through int64) (int, error) {
	// The clock first: the turns read below are copies as of readAt.
	readAt, err := s.mem.Store().ServerTime(ctx)
	if err != nil {
		return 0, fmt.Errorf("sessions: promote %s: %w", session, err)
	}
	sess, err := s.st.Window(ctx, shortterm.WindowQuery{Session: session, Now: time.Now()})
	if err != nil {
		return 0, err
	}
	if through <= 0 || through > sess.LastSeq {
		through = sess.LastSeq
	}
	var turns []shortterm.Turn
	for _, t := range sess.Turns {
		if t.Seq > sess.Promoted && t.Seq <= through {
			turns = append(turns, t)
		}
	}
	if len(turns) == 0 {
		return 0, nil
	}
	if s.afterRead != nil {
		s.afterRead()
	}
	n := len(turns)
	if err := s.write(ctx, sess, turns, readAt); errors.Is(err, pgstore.ErrForgotten) {
		// The owner was forgotten since the turns were read (a restore's tombstone;
		// a forget through the gateway clears the sessions first): nothing is kept,
		// and the sweep does not come back to them.
		n = 0
	} else if err != nil {
		return 0, err
	}
	return n, s.st.MarkPromoted(ctx, session, through)
}

// write stores turns of sess as episodic memories, copies read at readAt.
func (s *Sessions) write(ctx context.Context, sess shortterm.Session, turns []shortterm.Turn, readAt time.Time) error {
	for start := 0; start < len(turns); start += promoteChunk {
		chunk := turns[start:min(start+promoteChunk, len(turns))]
		items := make([]memory.Item, len(chunk))
		for i, t := range chunk {
			it, err := TurnMemory(sess, t)
			if err != nil {
				return err
			}
			it.RecordedAt = readAt
			items[i] = it
		}
		if _, err := s.mem.Write(ctx, items, WriteOptions{}); err != nil {
			return fmt.Errorf("sessions: promote %s: %w", sess.ID, err)
		}
	}
	return nil
}

// TurnContent is a promoted turn's memory content.
type TurnContent struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Session string          `json:"session"`
	Seq     int64           `json:"seq"`
}

// TurnMemory is the episodic memory a turn of sess is promoted to: in the session's
// owner's scope, dated by the turn's time.
func TurnMemory(sess shortterm.Session, t shortterm.Turn) (memory.Item, error) {
	content, err := json.Marshal(TurnContent{Role: t.Role, Content: t.Content, Session: sess.ID, Seq: t.Seq})
	if err != nil {
		return memory.Item{}, err
	}
	owner := sess.Owner
	if owner == "" {
		owner = sess.ID
	}
	return memory.Item{MemoryType: memory.Episodic, Scope: owner, Content: content, Source: SourceSession,
		BaseScore: 1, CreatedAt: t.At, UpdatedAt: t.At}, nil
}

// ClearScope removes the sessions a forget of scope must remove: those it owns, and
// the session of that name. Call it before the long-term forget (see Sessions).
func (s *Sessions) ClearScope(ctx context.Context, scope string) (int, error) {
	n, err := s.st.ForgetOwner(ctx, scope)
	if err != nil {
		return 0, err
	}
	if _, err := s.st.End(ctx, scope); err == nil {
		n++
	} else if !errors.Is(err, shortterm.ErrNotFound) {
		return n, err
	}
	return n, nil
}

// SweepResult counts what a sweep did.
type SweepResult struct {
	Promoted, Sessions, Purged int
	// Failed counts sessions whose promotion failed (the error says the first).
	Failed int
}

// Sweep promotes the turns of sessions idle for their TTL less the lead (with
// PromoteOnEnd), then purges expired sessions where the backend does not expire
// them itself. Run it periodically; concurrent sweeps (replicas) are harmless.
func (s *Sessions) Sweep(ctx context.Context, now time.Time) (SweepResult, error) {
	var res SweepResult
	var firstErr error
	if s.opts.PromoteOnEnd {
		before := now.Add(-(s.st.TTL() - s.opts.PromoteLead))
		for {
			idle, err := s.st.Idle(ctx, before, 100)
			if err != nil {
				return res, err
			}
			progress := false
			for _, sess := range idle {
				n, err := s.Promote(ctx, sess.ID, sess.LastSeq)
				switch {
				case errors.Is(err, shortterm.ErrNotFound):
					continue // ended or expired meanwhile
				case err != nil:
					// One session that cannot be promoted (a turn the store's embedder
					// limit refuses) must not hold back the others: reported, retried
					// at the next sweep.
					res.Failed++
					firstErr = cmp.Or(firstErr, fmt.Errorf("sessions: promote %s: %w", sess.ID, err))
					if ctx.Err() != nil {
						return res, firstErr
					}
					continue
				}
				res.Promoted += n
				res.Sessions++
				progress = true
			}
			if len(idle) < 100 || !progress {
				break
			}
		}
	}
	n, err := s.st.Purge(ctx, now)
	res.Purged = n
	return res, cmp.Or(firstErr, err)
}
