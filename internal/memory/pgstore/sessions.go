package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/amemory/memory-operator/internal/shortterm"
)

// Sessions is the short-term tier of a store without Redis: the sessions and
// session_turns tables (migration 11), with the behaviour of the Redis backend
// (shortterm's conformance suite runs both). Each call is one transaction; the
// session's row is locked for the calls that change it, so concurrent appends number
// their turns one after the other.
//
// Expiry is kept by time: a session whose expires_at passed is invisible to every
// call and replaced by the next append of its name, and Purge deletes what is left.
// Times come from the callers (Now), who pass their clock; calls that take none use
// this process's, the same clock.
type Sessions struct {
	s    *Store
	opts shortterm.Options
	// sessions, turns are the tables' quoted names.
	sessions, turns string
}

var _ shortterm.Store = (*Sessions)(nil)

// Sessions returns the store's short-term tier on PostgreSQL.
func (s *Store) Sessions(opts shortterm.Options) *Sessions {
	q := func(table string) string { return pgx.Identifier{s.schema, table}.Sanitize() }
	return &Sessions{s: s, opts: opts.WithDefaults(), sessions: q("sessions"), turns: q("session_turns")}
}

// TTL is how long a session lives without activity.
func (ss *Sessions) TTL() time.Duration { return ss.opts.TTL }

// Append adds turns to a session.
func (ss *Sessions) Append(ctx context.Context, a shortterm.Append) ([]shortterm.Turn, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	now := shortterm.Instant(a.Now)
	owner := a.Owner
	if owner == "" {
		owner = a.Session
	}
	contents := make([]string, len(a.Turns))
	roles := make([]string, len(a.Turns))
	for i, t := range a.Turns {
		c, err := shortterm.Compact(t.Content)
		if err != nil {
			return nil, err
		}
		contents[i], roles[i] = string(c), t.Role
	}
	var out []shortterm.Turn
	err := pgx.BeginFunc(ctx, ss.s.pool, func(tx pgx.Tx) error {
		// What is left of an expired session of this name goes: the append starts a
		// new one, as it would in Redis.
		if _, err := tx.Exec(ctx, `DELETE FROM `+ss.sessions+` WHERE session = $1 AND expires_at <= $2`, a.Session, now); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+ss.sessions+` (session, owner, active_at, expires_at) VALUES ($1, $2, $3, $3)
			ON CONFLICT (session) DO NOTHING`, a.Session, owner, now); err != nil {
			return err
		}
		var have string
		var seq, count int64
		if err := tx.QueryRow(ctx, `SELECT s.owner, s.seq, (SELECT count(*) FROM `+ss.turns+` t WHERE t.session = s.session)
			FROM `+ss.sessions+` s WHERE s.session = $1 FOR UPDATE`, a.Session).Scan(&have, &seq, &count); err != nil {
			return err
		}
		switch {
		case a.Owner != "" && have != a.Owner:
			return fmt.Errorf("%w: %s belongs to %s", shortterm.ErrOwner, a.Session, have)
		case count+int64(len(a.Turns)) > int64(ss.opts.MaxTurns):
			return fmt.Errorf("%w: %s holds %d", shortterm.ErrSessionFull, a.Session, ss.opts.MaxTurns)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+ss.turns+` (session, seq, role, content, at)
			SELECT $1, $2 + n, r, c, $5 FROM unnest($3::text[], $4::text[]) WITH ORDINALITY AS u(r, c, n)`,
			a.Session, seq, roles, contents, now); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE `+ss.sessions+` SET seq = $2, active_at = $3, expires_at = $4 WHERE session = $1`,
			a.Session, seq+int64(len(a.Turns)), now, now.Add(ss.opts.TTL)); err != nil {
			return err
		}
		out = make([]shortterm.Turn, len(a.Turns))
		for i := range a.Turns {
			out[i] = shortterm.Turn{Seq: seq + int64(i) + 1, Role: roles[i], Content: []byte(contents[i]), At: now}
		}
		return nil
	})
	if err != nil {
		return nil, ss.fail("append", err)
	}
	return out, nil
}

// Window returns a session with its latest turns.
func (ss *Sessions) Window(ctx context.Context, q shortterm.WindowQuery) (shortterm.Session, error) {
	if err := shortterm.ValidateSession(q.Session); err != nil {
		return shortterm.Session{}, err
	}
	now := shortterm.Instant(q.Now)
	var sess shortterm.Session
	err := pgx.BeginFunc(ctx, ss.s.pool, func(tx pgx.Tx) error {
		var err error
		if q.Touch {
			sess, err = ss.scanSession(tx.QueryRow(ctx, `UPDATE `+ss.sessions+` SET active_at = $2, expires_at = $3
				WHERE session = $1 AND expires_at > $2 RETURNING session, owner, seq, promoted, active_at`, q.Session, now, now.Add(ss.opts.TTL)))
		} else {
			sess, err = ss.scanSession(tx.QueryRow(ctx, `SELECT session, owner, seq, promoted, active_at FROM `+ss.sessions+`
				WHERE session = $1 AND expires_at > $2`, q.Session, now))
		}
		if err != nil {
			return err
		}
		where, args := `session = $1`, []any{q.Session}
		if !q.AsOf.IsZero() {
			args = append(args, q.AsOf)
			where += ` AND at <= $2`
		}
		limit := ``
		if q.Last > 0 {
			args = append(args, q.Last)
			limit = fmt.Sprintf(` LIMIT $%d`, len(args))
		}
		sess.Turns, err = ss.readTurns(ctx, tx, `SELECT seq, role, content, at FROM `+ss.turns+` WHERE `+where+` ORDER BY seq DESC`+limit, args...)
		slices.Reverse(sess.Turns)
		return err
	})
	if err != nil {
		return shortterm.Session{}, ss.fail("window", notFound(err, q.Session))
	}
	return sess, nil
}

// Summarize replaces turns through a number with a summary turn.
func (ss *Sessions) Summarize(ctx context.Context, sum shortterm.Summary) ([]shortterm.Turn, error) {
	if err := sum.Validate(); err != nil {
		return nil, err
	}
	content, err := shortterm.Compact(sum.Content)
	if err != nil {
		return nil, err
	}
	now := shortterm.Instant(sum.Now)
	var gone []shortterm.Turn
	err = pgx.BeginFunc(ctx, ss.s.pool, func(tx pgx.Tx) error {
		var seq int64
		if err := tx.QueryRow(ctx, `SELECT seq FROM `+ss.sessions+` WHERE session = $1 AND expires_at > $2 FOR UPDATE`,
			sum.Session, now).Scan(&seq); err != nil {
			return notFound(err, sum.Session)
		}
		if sum.Through > seq {
			return fmt.Errorf("%w: %s ends at turn %d", shortterm.ErrPastLast, sum.Session, seq)
		}
		var err error
		gone, err = ss.readTurns(ctx, tx, `DELETE FROM `+ss.turns+` WHERE session = $1 AND seq <= $2 RETURNING seq, role, content, at`,
			sum.Session, sum.Through)
		if err != nil {
			return err
		}
		if len(gone) == 0 {
			return fmt.Errorf("%w: %s has no turns up to that number", shortterm.ErrNothing, sum.Session)
		}
		slices.SortFunc(gone, func(a, b shortterm.Turn) int { return int(a.Seq - b.Seq) })
		// The summary takes the number and time of the last turn it replaced.
		last := gone[len(gone)-1]
		if _, err := tx.Exec(ctx, `INSERT INTO `+ss.turns+` (session, seq, role, content, at) VALUES ($1, $2, $3, $4, $5)`,
			sum.Session, last.Seq, shortterm.RoleSummary, string(content), last.At); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE `+ss.sessions+` SET active_at = $2, expires_at = $3 WHERE session = $1`, sum.Session, now, now.Add(ss.opts.TTL))
		return err
	})
	if err != nil {
		return nil, ss.fail("summarize", err)
	}
	return gone, nil
}

// End removes a session and returns it with its turns.
func (ss *Sessions) End(ctx context.Context, session string) (shortterm.Session, error) {
	if err := shortterm.ValidateSession(session); err != nil {
		return shortterm.Session{}, err
	}
	var sess shortterm.Session
	err := pgx.BeginFunc(ctx, ss.s.pool, func(tx pgx.Tx) error {
		var expires time.Time
		var err error
		sess, err = ss.scanSession(tx.QueryRow(ctx, `SELECT session, owner, seq, promoted, active_at, expires_at FROM `+ss.sessions+`
			WHERE session = $1 FOR UPDATE`, session), &expires)
		if err != nil {
			return notFound(err, session)
		}
		if !expires.After(time.Now()) {
			return fmt.Errorf("%w: %s", shortterm.ErrNotFound, session) // expired: Purge's to delete
		}
		if sess.Turns, err = ss.readTurns(ctx, tx, `SELECT seq, role, content, at FROM `+ss.turns+` WHERE session = $1 ORDER BY seq`, session); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM `+ss.sessions+` WHERE session = $1`, session) // the turns go with it
		return err
	})
	if err != nil {
		return shortterm.Session{}, ss.fail("end", err)
	}
	return sess, nil
}

// ForgetOwner removes every session of owner and says how many still lived.
func (ss *Sessions) ForgetOwner(ctx context.Context, owner string) (int, error) {
	var n int
	err := ss.s.pool.QueryRow(ctx, `WITH gone AS (DELETE FROM `+ss.sessions+` WHERE owner = $1 RETURNING expires_at)
		SELECT count(*) FILTER (WHERE expires_at > $2) FROM gone`, owner, time.Now()).Scan(&n)
	if err != nil {
		return 0, ss.fail("forget", err)
	}
	return n, nil
}

// Idle lists sessions idle since before with turns not offered for promotion.
func (ss *Sessions) Idle(ctx context.Context, before time.Time, limit int) ([]shortterm.Session, error) {
	rows, err := ss.s.pool.Query(ctx, `SELECT session, owner, seq, promoted, active_at FROM `+ss.sessions+`
		WHERE promoted < seq AND active_at < $1 AND expires_at > $2 ORDER BY active_at, session LIMIT $3`,
		shortterm.Instant(before), time.Now(), max(limit, 1))
	if err != nil {
		return nil, ss.fail("idle", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (shortterm.Session, error) { return ss.scanSession(r) })
	if err != nil {
		return nil, ss.fail("idle", err)
	}
	return out, nil
}

// MarkPromoted records that turns through a number were offered for promotion.
func (ss *Sessions) MarkPromoted(ctx context.Context, session string, through int64) error {
	_, err := ss.s.pool.Exec(ctx, `UPDATE `+ss.sessions+` SET promoted = least(greatest(promoted, $2), seq) WHERE session = $1`, session, through)
	return ss.fail("mark promoted", err)
}

// Purge deletes the sessions that expired by now, with their turns.
func (ss *Sessions) Purge(ctx context.Context, now time.Time) (int, error) {
	tag, err := ss.s.pool.Exec(ctx, `DELETE FROM `+ss.sessions+` WHERE expires_at <= $1`, shortterm.Instant(now))
	if err != nil {
		return 0, ss.fail("purge", err)
	}
	return int(tag.RowsAffected()), nil
}

// Export calls fn for each session live at now, in order of ID, a page at a time:
// each page is read in one repeatable-read transaction (its sessions and turns as of
// one instant), and fn runs between pages' transactions.
func (ss *Sessions) Export(ctx context.Context, now time.Time, fn func(shortterm.Session) error) error {
	at := shortterm.Instant(now)
	after := "" // before every session ID (in "C" order, the empty string is first)
	for {
		var page []shortterm.Session
		var done bool
		err := pgx.BeginTxFunc(ctx, ss.s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			page, done = nil, false
			rows, err := tx.Query(ctx, `SELECT session, owner, seq, promoted, active_at FROM `+ss.sessions+`
				WHERE session > $1 AND expires_at > $2 ORDER BY session LIMIT $3`, after, at, shortterm.ExportPage)
			if err != nil {
				return err
			}
			page, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (shortterm.Session, error) { return ss.scanSession(r) })
			if err != nil {
				return err
			}
			done = len(page) < shortterm.ExportPage
			if len(page) == 0 {
				return nil
			}
			ids := make([]string, len(page))
			for i, p := range page {
				ids[i] = p.ID
			}
			// The turns in order of session and number, read until the page's bytes
			// reach the budget at the end of a session: the page ends there.
			rows, err = tx.Query(ctx, `SELECT session, seq, role, content, at FROM `+ss.turns+`
				WHERE session = ANY($1) ORDER BY session, seq`, ids)
			if err != nil {
				return err
			}
			defer rows.Close()
			i, bytes := 0, 0
			for rows.Next() {
				var id, content string
				var t shortterm.Turn
				if err := rows.Scan(&id, &t.Seq, &t.Role, &content, &t.At); err != nil {
					return err
				}
				for i < len(page) && page[i].ID != id {
					// page[i] is complete: the page may end with it.
					i++
					if bytes >= shortterm.ExportPageBytes {
						page, done = page[:i], false
						return nil
					}
				}
				if i == len(page) {
					return fmt.Errorf("turns of session %s out of order", id)
				}
				t.Content, t.At = []byte(content), t.At.UTC()
				page[i].Turns = append(page[i].Turns, t)
				bytes += len(content)
			}
			return rows.Err()
		})
		if err != nil {
			return ss.fail("export", err)
		}
		for _, sess := range page {
			if err := fn(sess); err != nil {
				return fmt.Errorf("shortterm: export of %s: %w", sess.ID, err)
			}
		}
		if done || len(page) == 0 {
			return nil
		}
		after = page[len(page)-1].ID
	}
}

// Import writes a session whole unless one of its ID lives or it expired by now.
func (ss *Sessions) Import(ctx context.Context, sess shortterm.Session, now time.Time) (bool, error) {
	if err := sess.ValidateImport(ss.opts.MaxTurns); err != nil {
		return false, err
	}
	at := shortterm.Instant(now)
	active := shortterm.Instant(sess.LastActive)
	expires := active.Add(ss.opts.TTL)
	if !expires.After(at) {
		return false, nil
	}
	owner := sess.Owner
	if owner == "" {
		owner = sess.ID
	}
	n := len(sess.Turns)
	seqs, roles, contents, times := make([]int64, n), make([]string, n), make([]string, n), make([]time.Time, n)
	for i, t := range sess.Turns {
		c, err := shortterm.Compact(t.Content)
		if err != nil {
			return false, err
		}
		seqs[i], roles[i], contents[i], times[i] = t.Seq, t.Role, string(c), shortterm.Instant(t.At)
	}
	wrote := false
	err := pgx.BeginFunc(ctx, ss.s.pool, func(tx pgx.Tx) error {
		// What is left of an expired session of this name goes, as for an append.
		if _, err := tx.Exec(ctx, `DELETE FROM `+ss.sessions+` WHERE session = $1 AND expires_at <= $2`, sess.ID, at); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `INSERT INTO `+ss.sessions+` (session, owner, seq, promoted, active_at, expires_at)
			VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (session) DO NOTHING`, sess.ID, owner, sess.LastSeq, sess.Promoted, active, expires)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+ss.turns+` (session, seq, role, content, at)
			SELECT $1, s, r, c, a FROM unnest($2::bigint[], $3::text[], $4::text[], $5::timestamptz[]) AS u(s, r, c, a)`,
			sess.ID, seqs, roles, contents, times); err != nil {
			return err
		}
		wrote = true
		return nil
	})
	if err != nil {
		return false, ss.fail("import", err)
	}
	return wrote, nil
}

// scanSession reads session, owner, seq, promoted, active_at and any further
// columns into more.
func (ss *Sessions) scanSession(row pgx.Row, more ...any) (shortterm.Session, error) {
	var s shortterm.Session
	err := row.Scan(append([]any{&s.ID, &s.Owner, &s.LastSeq, &s.Promoted, &s.LastActive}, more...)...)
	s.LastActive = s.LastActive.UTC()
	return s, err
}

func (ss *Sessions) readTurns(ctx context.Context, tx pgx.Tx, sql string, args ...any) ([]shortterm.Turn, error) {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (shortterm.Turn, error) {
		var t shortterm.Turn
		var content string
		err := r.Scan(&t.Seq, &t.Role, &content, &t.At)
		t.Content, t.At = []byte(content), t.At.UTC()
		return t, err
	})
}

// notFound turns "no row" into the package's ErrNotFound.
func notFound(err error, session string) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %s", shortterm.ErrNotFound, session)
	}
	return err
}

func (ss *Sessions) fail(op string, err error) error {
	if err == nil {
		return nil
	}
	for _, known := range []error{shortterm.ErrNotFound, shortterm.ErrOwner, shortterm.ErrSessionFull, shortterm.ErrNothing, shortterm.ErrPastLast} {
		if errors.Is(err, known) {
			return err
		}
	}
	return fmt.Errorf("pgstore: sessions: %s: %w", op, err)
}
