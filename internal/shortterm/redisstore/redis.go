// Package redisstore keeps a store's short-term sessions in Redis (seed 003, section
// 4): a list per session of JSON turns, expiring a TTL after the session's last
// activity. Every call is one Lua script, so a call is atomic against every other.
//
// Keys, all under the store's prefix (mem:<tenant>:, the only keys the store's Redis
// user may touch):
//
//	<prefix>t:<session>  list: the turns, oldest first, each a JSON object
//	<prefix>s:<session>  hash: owner, seq (last turn's number), promoted, active (ms)
//	<prefix>o:<owner>    set: the sessions of an owner (a forget removes them all)
//	<prefix>idle         sorted set: session by last activity, while turns remain
//	                     unoffered for promotion
//	<prefix>sessions     sorted set: every session, all of score 0 (in order of ID,
//	                     the pages of Export)
//	<prefix>expiry       sorted set: session by when it expires (the caller's clock)
//
// The first three expire with the session (every activity sets their TTL again); the
// sorted sets have no TTL: Purge drops the members of sessions that expired (found by
// <prefix>expiry), and Idle and Export the ones they come across. Scripts name keys
// they compute (the owner's set, the indexes), so this needs a single Redis, not a
// Redis Cluster.
package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/amemory/memory-operator/internal/shortterm"
)

// Store is a Redis short-term store.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
	opts   shortterm.Options
}

var _ shortterm.Store = (*Store)(nil)

// Prefix is the key prefix of a store's tenant: every key of the store starts with
// it, and the store's Redis user may touch no other (~<prefix>*).
func Prefix(tenant string) string { return "mem:" + tenant + ":" }

// New returns a store over rdb with the keys of tenant.
func New(rdb redis.UniversalClient, tenant string, opts shortterm.Options) *Store {
	return &Store{rdb: rdb, prefix: Prefix(tenant), opts: opts.WithDefaults()}
}

// TTL is how long a session lives without activity.
func (s *Store) TTL() time.Duration { return s.opts.TTL }

func (s *Store) turnsKey(session string) string { return s.prefix + "t:" + session }
func (s *Store) metaKey(session string) string  { return s.prefix + "s:" + session }
func (s *Store) idleKey() string                { return s.prefix + "idle" }

// touch (Lua) sets the TTL of a session's keys and its owner's set again and moves
// the session in the idle set and the indexes; the caller has read the owner.
const touchLua = `
local function touch(turns, meta, idle, session, owner, ttl, now, prefix)
	redis.call('ZADD', prefix .. 'sessions', 0, session)
	redis.call('ZADD', prefix .. 'expiry', string.format('%d', tonumber(now) + tonumber(ttl)), session)
	redis.call('PEXPIRE', turns, ttl)
	redis.call('PEXPIRE', meta, ttl)
	local okey = prefix .. 'o:' .. owner
	redis.call('SADD', okey, session)
	if redis.call('PTTL', okey) < tonumber(ttl) then redis.call('PEXPIRE', okey, ttl) end
	redis.call('HSET', meta, 'active', now)
	local seq = tonumber(redis.call('HGET', meta, 'seq') or '0')
	local promoted = tonumber(redis.call('HGET', meta, 'promoted') or '0')
	if promoted < seq then redis.call('ZADD', idle, now, session) end
end
`

// appendScript: KEYS turns, meta, idle; ARGV session, owner (empty: the session's,
// or the session itself for a new one), ttl ms, now ms, max turns, prefix, then the
// turns' JSON without the opening brace. It numbers the turns and returns them.
var appendScript = redis.NewScript(touchLua + `
local owner = redis.call('HGET', KEYS[2], 'owner')
if owner then
	if ARGV[2] ~= '' and owner ~= ARGV[2] then return redis.error_reply('OWNER ' .. owner) end
elseif ARGV[2] ~= '' then
	owner = ARGV[2]
else
	owner = ARGV[1]
end
local n = #ARGV - 6
if redis.call('LLEN', KEYS[1]) + n > tonumber(ARGV[5]) then return redis.error_reply('FULL') end
local seq = tonumber(redis.call('HGET', KEYS[2], 'seq') or '0')
local out = {}
for i = 1, n do
	seq = seq + 1
	local t = '{"seq":' .. string.format('%d', seq) .. ',' .. ARGV[6 + i]
	redis.call('RPUSH', KEYS[1], t)
	out[i] = t
end
redis.call('HSET', KEYS[2], 'owner', owner, 'seq', string.format('%d', seq))
if not redis.call('HGET', KEYS[2], 'promoted') then redis.call('HSET', KEYS[2], 'promoted', '0') end
touch(KEYS[1], KEYS[2], KEYS[3], ARGV[1], owner, ARGV[3], ARGV[4], ARGV[6])
return out
`)

// windowScript: KEYS turns, meta, idle; ARGV session, touch (0/1), ttl ms, now ms,
// prefix, last (0: all). It returns owner, seq, promoted, active, then the turns.
var windowScript = redis.NewScript(touchLua + `
local m = redis.call('HMGET', KEYS[2], 'owner', 'seq', 'promoted', 'active')
if not m[1] then return false end
if ARGV[2] == '1' then
	touch(KEYS[1], KEYS[2], KEYS[3], ARGV[1], m[1], ARGV[3], ARGV[4], ARGV[5])
	m[4] = ARGV[4]
end
local from = 0
if tonumber(ARGV[6]) > 0 then from = -tonumber(ARGV[6]) end
local out = {m[1], m[2], m[3], m[4]}
for _, t in ipairs(redis.call('LRANGE', KEYS[1], from, -1)) do out[#out + 1] = t end
return out
`)

// summarizeScript: KEYS turns, meta, idle; ARGV session, through, the summary's
// JSON without the opening brace and up to "ts": (the script adds it), ttl ms, now
// ms, prefix. It returns the replaced turns.
var summarizeScript = redis.NewScript(touchLua + `
local m = redis.call('HMGET', KEYS[2], 'owner', 'seq')
if not m[1] then return redis.error_reply('NOTFOUND') end
local through = tonumber(ARGV[2])
if through > tonumber(m[2]) then return redis.error_reply('PAST ' .. m[2]) end
local all = redis.call('LRANGE', KEYS[1], 0, -1)
local gone = {}
for _, t in ipairs(all) do
	local seq = tonumber(string.match(t, '^{"seq":(%d+),'))
	if seq > through then break end
	gone[#gone + 1] = t
end
if #gone == 0 then return redis.error_reply('NOTHING') end
redis.call('LTRIM', KEYS[1], #gone, -1)
-- The summary takes the number and time of the last turn it replaced, so that turns
-- stay in order of number and time, and a window as of a time sees it where its
-- turns were.
local ts = string.match(gone[#gone], '"ts":("[^"]*")}$')
redis.call('LPUSH', KEYS[1], '{"seq":' .. string.format('%d', through) .. ',' .. ARGV[3] .. ts .. '}')
touch(KEYS[1], KEYS[2], KEYS[3], ARGV[1], m[1], ARGV[4], ARGV[5], ARGV[6])
return gone
`)

// endScript: KEYS turns, meta, idle; ARGV session, prefix. It removes the session
// and returns owner, seq, promoted, active, then the turns.
var endScript = redis.NewScript(`
local m = redis.call('HMGET', KEYS[2], 'owner', 'seq', 'promoted', 'active')
if not m[1] then return false end
local out = {m[1], m[2], m[3], m[4]}
for _, t in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do out[#out + 1] = t end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', ARGV[2] .. 'sessions', ARGV[1])
redis.call('ZREM', ARGV[2] .. 'expiry', ARGV[1])
redis.call('SREM', ARGV[2] .. 'o:' .. m[1], ARGV[1])
return out
`)

// forgetScript: KEYS the owner's set, idle; ARGV prefix. It removes every session of
// the owner and returns how many still lived.
var forgetScript = redis.NewScript(`
local n = 0
for _, session in ipairs(redis.call('SMEMBERS', KEYS[1])) do
	n = n + redis.call('DEL', ARGV[1] .. 's:' .. session)
	redis.call('DEL', ARGV[1] .. 't:' .. session)
	redis.call('ZREM', KEYS[2], session)
	redis.call('ZREM', ARGV[1] .. 'sessions', session)
	redis.call('ZREM', ARGV[1] .. 'expiry', session)
end
redis.call('DEL', KEYS[1])
return n
`)

// idleScript: KEYS idle; ARGV before ms, limit, prefix. It returns, per session idle
// since before with turns not offered for promotion, its id, owner, seq, promoted and
// active; members whose session expired or was offered in full leave the set.
var idleScript = redis.NewScript(`
local out = {}
local found = 0
local limit = tonumber(ARGV[2])
for _, session in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1], 'LIMIT', 0, 4 * limit)) do
	local m = redis.call('HMGET', ARGV[3] .. 's:' .. session, 'owner', 'seq', 'promoted', 'active')
	if not m[1] then
		redis.call('ZREM', KEYS[1], session)
		redis.call('ZREM', ARGV[3] .. 'sessions', session)
		redis.call('ZREM', ARGV[3] .. 'expiry', session)
	elseif tonumber(m[3]) >= tonumber(m[2]) then
		redis.call('ZREM', KEYS[1], session)
	elseif found < limit then
		found = found + 1
		for _, v in ipairs({session, m[1], m[2], m[3], m[4]}) do out[#out + 1] = v end
	end
end
return out
`)

// markScript: KEYS meta, idle; ARGV session, through.
var markScript = redis.NewScript(`
local m = redis.call('HMGET', KEYS[1], 'seq', 'promoted')
if not m[1] then return 0 end
local through = math.min(tonumber(ARGV[2]), tonumber(m[1]))
if through > tonumber(m[2]) then redis.call('HSET', KEYS[1], 'promoted', string.format('%d', through)) end
if through >= tonumber(m[1]) then redis.call('ZREM', KEYS[2], ARGV[1]) end
return 1
`)

// purgeScript: KEYS expiry, sessions, idle; ARGV now ms, limit, prefix, ttl ms. It
// drops from the sorted sets the sessions <prefix>expiry says expired by now and
// that Redis expired (their meta is gone); one still there (a caller's clock ahead
// of Redis's) is filed again at now plus what it has left. It returns how many it
// looked at and how many it dropped.
var purgeScript = redis.NewScript(`
local n = 0
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, session in ipairs(due) do
	local meta = ARGV[3] .. 's:' .. session
	if redis.call('HGET', meta, 'owner') then
		local left = redis.call('PTTL', meta)
		if left < 1 then left = tonumber(ARGV[4]) end
		redis.call('ZADD', KEYS[1], string.format('%d', tonumber(ARGV[1]) + left), session)
	else
		redis.call('ZREM', KEYS[1], session)
		redis.call('ZREM', KEYS[2], session)
		redis.call('ZREM', KEYS[3], session)
		n = n + 1
	end
end
return {#due, n}
`)

// exportScript: KEYS sessions; ARGV after (the last session of the previous page,
// empty for the first), limit, byte budget, now ms, ttl ms, prefix. It reads the
// sessions after after in order of ID, up to limit of them or until their turns
// reach the budget (one at least), and returns the last session it looked at, 1 when
// no session follows (else 0), then per session live at now its id, owner, seq,
// promoted, active, its number of turns and the turns. Members whose session expired
// leave the indexes.
var exportScript = redis.NewScript(`
local first = '-'
if ARGV[1] ~= '' then first = '(' .. ARGV[1] end
local limit = tonumber(ARGV[2])
local budget, now, ttl = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local ids = redis.call('ZRANGEBYLEX', KEYS[1], first, '+', 'LIMIT', 0, limit)
local out = {ARGV[1], '1'}
if #ids >= limit then out[2] = '0' end
local bytes = 0
for _, session in ipairs(ids) do
	if bytes >= budget then
		out[2] = '0'
		break
	end
	out[1] = session
	local m = redis.call('HMGET', ARGV[6] .. 's:' .. session, 'owner', 'seq', 'promoted', 'active')
	if not m[1] then
		redis.call('ZREM', KEYS[1], session)
		redis.call('ZREM', ARGV[6] .. 'expiry', session)
	elseif tonumber(m[4] or '0') + ttl > now then
		local turns = redis.call('LRANGE', ARGV[6] .. 't:' .. session, 0, -1)
		for _, v in ipairs({session, m[1], m[2], m[3], m[4], string.format('%d', #turns)}) do out[#out + 1] = v end
		for _, t in ipairs(turns) do
			out[#out + 1] = t
			bytes = bytes + #t
		end
	end
end
return out
`)

// importScript: KEYS turns, meta, idle; ARGV session, owner, seq, promoted, active
// ms, ttl left ms, expiry ms, prefix, then the turns' JSON. It writes the session
// unless one of its ID exists, and returns 1 when it wrote it, else 0.
var importScript = redis.NewScript(`
if redis.call('HGET', KEYS[2], 'owner') then return 0 end
redis.call('DEL', KEYS[1])
for i = 9, #ARGV do redis.call('RPUSH', KEYS[1], ARGV[i]) end
redis.call('HSET', KEYS[2], 'owner', ARGV[2], 'seq', ARGV[3], 'promoted', ARGV[4], 'active', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
redis.call('PEXPIRE', KEYS[2], ARGV[6])
local okey = ARGV[8] .. 'o:' .. ARGV[2]
redis.call('SADD', okey, ARGV[1])
if redis.call('PTTL', okey) < tonumber(ARGV[6]) then redis.call('PEXPIRE', okey, ARGV[6]) end
if tonumber(ARGV[4]) < tonumber(ARGV[3]) then
	redis.call('ZADD', KEYS[3], ARGV[5], ARGV[1])
else
	redis.call('ZREM', KEYS[3], ARGV[1])
end
redis.call('ZADD', ARGV[8] .. 'sessions', 0, ARGV[1])
redis.call('ZADD', ARGV[8] .. 'expiry', ARGV[7], ARGV[1])
return 1
`)

func (s *Store) keys(session string) []string {
	return []string{s.turnsKey(session), s.metaKey(session), s.idleKey()}
}

func ms(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }
func msDur(d time.Duration) string {
	return strconv.FormatInt(max(d.Milliseconds(), 1), 10)
}

// turnBody is a turn's JSON after its opening brace and seq: the scripts put
// `{"seq":N,` before it.
func turnBody(role string, content json.RawMessage, at time.Time) (string, error) {
	c, err := shortterm.Compact(content)
	if err != nil {
		return "", err
	}
	r, err := json.Marshal(role)
	if err != nil {
		return "", err
	}
	ts, err := json.Marshal(shortterm.Instant(at))
	if err != nil {
		return "", err
	}
	return `"role":` + string(r) + `,"content":` + string(c) + `,"ts":` + string(ts) + `}`, nil
}

// Append adds turns to a session.
func (s *Store) Append(ctx context.Context, a shortterm.Append) ([]shortterm.Turn, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	args := []any{a.Session, a.Owner, msDur(s.opts.TTL), ms(a.Now), s.opts.MaxTurns, s.prefix}
	for _, t := range a.Turns {
		body, err := turnBody(t.Role, t.Content, a.Now)
		if err != nil {
			return nil, err
		}
		args = append(args, body)
	}
	raw, err := appendScript.Run(ctx, s.rdb, s.keys(a.Session), args...).StringSlice()
	if err != nil {
		return nil, s.fail("append", a.Session, err)
	}
	return decodeTurns(raw)
}

// Window returns a session with its latest turns.
func (s *Store) Window(ctx context.Context, q shortterm.WindowQuery) (shortterm.Session, error) {
	if err := shortterm.ValidateSession(q.Session); err != nil {
		return shortterm.Session{}, err
	}
	touch := "0"
	if q.Touch {
		touch = "1"
	}
	last := q.Last
	if !q.AsOf.IsZero() {
		last = 0 // the latest turns before AsOf: read them all, cut below
	}
	raw, err := windowScript.Run(ctx, s.rdb, s.keys(q.Session), q.Session, touch, msDur(s.opts.TTL), ms(q.Now), s.prefix, last).StringSlice()
	if errors.Is(err, redis.Nil) {
		return shortterm.Session{}, fmt.Errorf("%w: %s", shortterm.ErrNotFound, q.Session)
	}
	if err != nil {
		return shortterm.Session{}, s.fail("window", q.Session, err)
	}
	sess, err := decodeSession(q.Session, raw)
	if err != nil {
		return shortterm.Session{}, err
	}
	sess.Turns = shortterm.Cut(sess.Turns, q.Last, q.AsOf)
	return sess, nil
}

// Summarize replaces turns through a number with a summary turn.
func (s *Store) Summarize(ctx context.Context, sum shortterm.Summary) ([]shortterm.Turn, error) {
	if err := sum.Validate(); err != nil {
		return nil, err
	}
	body, err := turnBody(shortterm.RoleSummary, sum.Content, sum.Now)
	if err != nil {
		return nil, err
	}
	body = body[:strings.LastIndex(body, `"ts":`)+len(`"ts":`)]
	raw, err := summarizeScript.Run(ctx, s.rdb, s.keys(sum.Session), sum.Session, sum.Through, body, msDur(s.opts.TTL), ms(sum.Now), s.prefix).StringSlice()
	if err != nil {
		return nil, s.fail("summarize", sum.Session, err)
	}
	return decodeTurns(raw)
}

// End removes a session and returns it.
func (s *Store) End(ctx context.Context, session string) (shortterm.Session, error) {
	if err := shortterm.ValidateSession(session); err != nil {
		return shortterm.Session{}, err
	}
	raw, err := endScript.Run(ctx, s.rdb, s.keys(session), session, s.prefix).StringSlice()
	if errors.Is(err, redis.Nil) {
		return shortterm.Session{}, fmt.Errorf("%w: %s", shortterm.ErrNotFound, session)
	}
	if err != nil {
		return shortterm.Session{}, s.fail("end", session, err)
	}
	return decodeSession(session, raw)
}

// ForgetOwner removes every session of owner.
func (s *Store) ForgetOwner(ctx context.Context, owner string) (int, error) {
	n, err := forgetScript.Run(ctx, s.rdb, []string{s.prefix + "o:" + owner, s.idleKey()}, s.prefix).Int()
	if err != nil {
		return 0, s.fail("forget", owner, err)
	}
	return n, nil
}

// Idle lists sessions idle since before with turns not offered for promotion.
func (s *Store) Idle(ctx context.Context, before time.Time, limit int) ([]shortterm.Session, error) {
	raw, err := idleScript.Run(ctx, s.rdb, []string{s.idleKey()}, ms(before), max(limit, 1), s.prefix).StringSlice()
	if err != nil {
		return nil, s.fail("idle", "", err)
	}
	var out []shortterm.Session
	for i := 0; i+5 <= len(raw); i += 5 {
		sess, err := decodeSession(raw[i], raw[i+1:i+5])
		if err != nil {
			return nil, err
		}
		out = append(out, sess)
	}
	return out, nil
}

// MarkPromoted records that turns through a number were offered for promotion.
func (s *Store) MarkPromoted(ctx context.Context, session string, through int64) error {
	err := markScript.Run(ctx, s.rdb, []string{s.metaKey(session), s.idleKey()}, session, through).Err()
	return s.fail("mark promoted", session, err)
}

// purgePage is how many expired sessions one purge script looks at.
const purgePage = 500

// Purge drops from the sorted sets the sessions that expired by now (Redis expired
// their keys itself) and says how many.
func (s *Store) Purge(ctx context.Context, now time.Time) (int, error) {
	keys := []string{s.prefix + "expiry", s.prefix + "sessions", s.idleKey()}
	total := 0
	for {
		res, err := purgeScript.Run(ctx, s.rdb, keys, ms(now), purgePage, s.prefix, msDur(s.opts.TTL)).Int64Slice()
		if err != nil {
			return total, s.fail("purge", "", err)
		}
		if len(res) != 2 {
			return total, fmt.Errorf("shortterm: redis purge answered %v", res)
		}
		total += int(res[1])
		if res[0] < purgePage {
			return total, nil
		}
	}
}

// Export calls fn for each session live at now, in order of ID, a page at a time.
func (s *Store) Export(ctx context.Context, now time.Time, fn func(shortterm.Session) error) error {
	after := ""
	for {
		raw, err := exportScript.Run(ctx, s.rdb, []string{s.prefix + "sessions"}, after, shortterm.ExportPage,
			shortterm.ExportPageBytes, ms(now), msDur(s.opts.TTL), s.prefix).StringSlice()
		if err != nil {
			return s.fail("export", "", err)
		}
		if len(raw) < 2 {
			return fmt.Errorf("shortterm: redis export answered %d fields", len(raw))
		}
		next, done := raw[0], raw[1] == "1"
		for i := 2; i < len(raw); {
			if i+6 > len(raw) {
				return fmt.Errorf("shortterm: redis export answered a short session at field %d", i)
			}
			n, err := strconv.Atoi(raw[i+5])
			if err != nil || n < 0 || i+6+n > len(raw) {
				return fmt.Errorf("shortterm: redis export answered %q turns for session %s", raw[i+5], raw[i])
			}
			sess, err := decodeSession(raw[i], append(raw[i+1:i+5:i+5], raw[i+6:i+6+n]...))
			if err != nil {
				return err
			}
			if err := fn(sess); err != nil {
				return fmt.Errorf("shortterm: export of %s: %w", sess.ID, err)
			}
			i += 6 + n
		}
		if done {
			return nil
		}
		if next == after {
			return fmt.Errorf("shortterm: redis export made no progress after %q", after)
		}
		after = next
	}
}

// Import writes a session whole unless one of its ID exists or it expired by now.
func (s *Store) Import(ctx context.Context, sess shortterm.Session, now time.Time) (bool, error) {
	if err := sess.ValidateImport(s.opts.MaxTurns); err != nil {
		return false, err
	}
	owner := cmpOr(sess.Owner, sess.ID)
	active := shortterm.Instant(sess.LastActive)
	expiry := active.Add(s.opts.TTL)
	left := expiry.UnixMilli() - now.UnixMilli()
	if left <= 0 {
		return false, nil
	}
	args := []any{sess.ID, owner, sess.LastSeq, sess.Promoted, ms(active), left, ms(expiry), s.prefix}
	for _, t := range sess.Turns {
		body, err := turnBody(t.Role, t.Content, t.At)
		if err != nil {
			return false, err
		}
		args = append(args, `{"seq":`+strconv.FormatInt(t.Seq, 10)+`,`+body)
	}
	n, err := importScript.Run(ctx, s.rdb, s.keys(sess.ID), args...).Int()
	if err != nil {
		return false, s.fail("import", sess.ID, err)
	}
	return n == 1, nil
}

// fail words a script's error: the scripts' own replies become the package's
// errors, and a connection failure ErrUnavailable.
func (s *Store) fail(op, session string, err error) error {
	if err == nil {
		return nil
	}
	// A script's error_reply of one word comes back as "ERR <word>".
	msg := strings.TrimPrefix(err.Error(), "ERR ")
	switch {
	case strings.HasPrefix(msg, "OWNER "):
		return fmt.Errorf("%w: %s belongs to %s", shortterm.ErrOwner, session, strings.TrimPrefix(msg, "OWNER "))
	case msg == "FULL":
		return fmt.Errorf("%w: %s holds %d", shortterm.ErrSessionFull, session, s.opts.MaxTurns)
	case msg == "NOTFOUND":
		return fmt.Errorf("%w: %s", shortterm.ErrNotFound, session)
	case msg == "NOTHING":
		return fmt.Errorf("%w: %s has no turns up to that number", shortterm.ErrNothing, session)
	case strings.HasPrefix(msg, "PAST "):
		return fmt.Errorf("%w: %s ends at turn %s", shortterm.ErrPastLast, session, strings.TrimPrefix(msg, "PAST "))
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, redis.ErrClosed) || errors.Is(err, context.DeadlineExceeded) ||
		strings.HasPrefix(msg, "LOADING") || strings.HasPrefix(msg, "BUSY") || strings.Contains(msg, "connection") {
		return fmt.Errorf("%w: %s: %w", shortterm.ErrUnavailable, op, err)
	}
	return fmt.Errorf("shortterm: redis %s: %w", op, err)
}

func decodeTurns(raw []string) ([]shortterm.Turn, error) {
	out := make([]shortterm.Turn, 0, len(raw))
	for _, r := range raw {
		var t shortterm.Turn
		if err := json.Unmarshal([]byte(r), &t); err != nil {
			return nil, fmt.Errorf("shortterm: a stored turn is not JSON: %w", err)
		}
		out = append(out, t)
	}
	return out, nil
}

// decodeSession reads owner, seq, promoted and active, then the turns.
func decodeSession(id string, raw []string) (shortterm.Session, error) {
	if len(raw) < 4 {
		return shortterm.Session{}, fmt.Errorf("shortterm: redis answered %d fields for session %s", len(raw), id)
	}
	sess := shortterm.Session{ID: id, Owner: raw[0]}
	var active int64
	for i, p := range []*int64{&sess.LastSeq, &sess.Promoted, &active} {
		v, err := strconv.ParseInt(cmpOr(raw[i+1], "0"), 10, 64)
		if err != nil {
			return shortterm.Session{}, fmt.Errorf("shortterm: session %s holds %q: %w", id, raw[i+1], err)
		}
		*p = v
	}
	sess.LastActive = time.UnixMilli(active).UTC()
	turns, err := decodeTurns(raw[4:])
	if err != nil {
		return shortterm.Session{}, err
	}
	sess.Turns = turns
	return sess, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
