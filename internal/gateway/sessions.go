package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/amemory/memory-operator/internal/memory/service"
	"github.com/amemory/memory-operator/internal/shortterm"
)

// The short-term tier's API: sessions of turns that live while the conversation is
// active (see package shortterm), on Redis when the store declares it and on the
// store's PostgreSQL otherwise, with one behaviour. A session is a scope
// (session:<id>): a key reads and writes the sessions its scopes allow, and a
// session with an owner (user:<id>) only when it allows the owner too. A session's
// turns become episodic memories of its owner when promoted (service.Sessions).

// EnvRedisPassword is the password of the store's Redis user (its Secret's
// "redis-password").
const EnvRedisPassword = "MEMORY_REDIS_PASSWORD"

// Promotion policies of the short-term tier.
const (
	// PromoteOnEnd promotes a session's turns when it ends, before a summary
	// replaces them, and before it expires: nothing dies with the TTL. The default.
	PromoteOnEnd = "OnEnd"
	// PromoteOnRequest promotes only when asked (POST /v1/sessions/{session}/promote).
	PromoteOnRequest = "OnRequest"
)

// sweepEvery is how often the gateway sweeps idle sessions (variable: tests).
var sweepEvery = 15 * time.Second

// ShortTerm configures the short-term tier.
type ShortTerm struct {
	// SessionTTL is how long a session lives without activity (0: 30 minutes).
	SessionTTL time.Duration
	// SessionMaxTurns is how many turns a session may hold (0: 2000).
	SessionMaxTurns int
	// Promote is PromoteOnEnd ("" too) or PromoteOnRequest.
	Promote string
	// RedisAddress (host:port), when set, keeps sessions in Redis as RedisUser
	// (password in EnvRedisPassword), under the keys of RedisTenant
	// (mem:<tenant>:*); otherwise they are in the store's PostgreSQL.
	RedisAddress, RedisUser, RedisTenant string
}

// Register adds the flags of the short-term tier.
func (c *ShortTerm) Register(fs *flag.FlagSet) {
	fs.DurationVar(&c.SessionTTL, "session-ttl", shortterm.DefaultTTL, "how long a session lives without activity")
	fs.IntVar(&c.SessionMaxTurns, "session-max-turns", shortterm.DefaultMaxTurns, "most turns a session may hold")
	fs.StringVar(&c.Promote, "promote", PromoteOnEnd, "when a session's turns become episodic memories: OnEnd (at its end, before a summary replaces them and before it expires) or OnRequest")
	fs.StringVar(&c.RedisAddress, "redis-address", "", "Redis host:port of the short-term tier (empty: the store's PostgreSQL)")
	fs.StringVar(&c.RedisUser, "redis-user", "", "the store's Redis user (password in "+EnvRedisPassword+")")
	fs.StringVar(&c.RedisTenant, "redis-tenant", "", "the store's Redis key prefix is mem:<tenant>:")
}

// Args renders c as the flags Register parses (unset values left out).
func (c ShortTerm) Args() []string {
	var args []string
	if c.SessionTTL > 0 {
		args = append(args, "--session-ttl="+c.SessionTTL.String())
	}
	if c.SessionMaxTurns > 0 {
		args = append(args, "--session-max-turns="+strconv.Itoa(c.SessionMaxTurns))
	}
	if c.Promote != "" {
		args = append(args, "--promote="+c.Promote)
	}
	for _, f := range [][2]string{{"redis-address", c.RedisAddress}, {"redis-user", c.RedisUser}, {"redis-tenant", c.RedisTenant}} {
		if f[1] != "" {
			args = append(args, "--"+f[0]+"="+f[1])
		}
	}
	return args
}

// Validate checks the short-term settings.
func (c ShortTerm) Validate() error {
	switch {
	case c.Promote != "" && c.Promote != PromoteOnEnd && c.Promote != PromoteOnRequest:
		return fmt.Errorf("--promote %q: want %s or %s", c.Promote, PromoteOnEnd, PromoteOnRequest)
	case c.SessionTTL < 0 || (c.SessionTTL > 0 && c.SessionTTL < 10*time.Second):
		return fmt.Errorf("--session-ttl %s: at least 10s", c.SessionTTL)
	case c.SessionMaxTurns < 0:
		return errors.New("--session-max-turns must be positive")
	case c.RedisAddress != "" && c.RedisTenant == "":
		return errors.New("--redis-address needs --redis-tenant (the store's key prefix)")
	case c.RedisAddress == "" && (c.RedisUser != "" || c.RedisTenant != ""):
		return errors.New("--redis-user and --redis-tenant need --redis-address")
	}
	return nil
}

// Options are the backend options of c.
func (c ShortTerm) Options() shortterm.Options {
	return shortterm.Options{TTL: c.SessionTTL, MaxTurns: c.SessionMaxTurns}.WithDefaults()
}

// Session API bodies.
type (
	// TurnIn is a turn to append.
	TurnIn struct {
		Role string `json:"role"`
		// Content is the message: any JSON value.
		Content JSONValue `json:"content"`
	}
	// AppendRequest appends turns to a session (created by its first append).
	AppendRequest struct {
		// Owner is whom the session belongs to (user:<id>); its turns are promoted
		// into the owner's memories and a forget of the owner ends it. Default: the
		// session itself. A session keeps the owner of its first append.
		Owner string   `json:"owner,omitempty"`
		Turns []TurnIn `json:"turns"`
	}
	// TurnOut is a stored turn: its number in the session, from 1.
	TurnOut struct {
		Seq     int64     `json:"seq"`
		Role    string    `json:"role"`
		Content JSONValue `json:"content"`
		At      time.Time `json:"ts"`
	}
	// AppendResponse is the turns appended, numbered.
	AppendResponse struct {
		Session   string    `json:"session"`
		Turns     []TurnOut `json:"turns"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	// SessionResponse is a session with its latest turns, oldest first.
	SessionResponse struct {
		Session string `json:"session"`
		Owner   string `json:"owner"`
		LastSeq int64  `json:"last_seq"`
		// PromotedThrough is the number of the last turn promoted to memory.
		PromotedThrough int64     `json:"promoted_through"`
		ExpiresAt       time.Time `json:"expires_at"`
		Turns           []TurnOut `json:"turns"`
	}
	// SummaryRequest replaces the turns numbered through Through with a summary
	// (role "summary"), which takes the number and time of the last one.
	SummaryRequest struct {
		Through int64     `json:"through" openapi:"minimum=1"`
		Content JSONValue `json:"content"`
	}
	// SummaryResponse says how many turns the summary replaced.
	SummaryResponse struct {
		Replaced int `json:"replaced"`
	}
	// PromoteRequest promotes the turns through Through (0 or left out: all).
	PromoteRequest struct {
		Through int64 `json:"through,omitempty" openapi:"minimum=0"`
	}
	// PromoteResponse says how many turns became memories.
	PromoteResponse struct {
		Promoted int `json:"promoted"`
	}
	// EndResponse is an ended session: how many turns it held and how many were
	// promoted by the end.
	EndResponse struct {
		Session  string `json:"session"`
		Turns    int    `json:"turns"`
		Promoted int    `json:"promoted"`
	}
)

// JSONValue is any JSON value (a turn's content), kept as given.
type JSONValue json.RawMessage

// MarshalJSON writes the value as is.
func (v JSONValue) MarshalJSON() ([]byte, error) {
	if len(v) == 0 {
		return []byte("null"), nil
	}
	return v, nil
}

// UnmarshalJSON keeps a copy of the value.
func (v *JSONValue) UnmarshalJSON(b []byte) error {
	*v = append((*v)[:0], b...)
	return nil
}

func turnsOut(ts []shortterm.Turn) []TurnOut {
	out := make([]TurnOut, len(ts))
	for i, t := range ts {
		out[i] = TurnOut{Seq: t.Seq, Role: t.Role, Content: JSONValue(t.Content), At: t.At}
	}
	return out
}

func (s *Server) sessionRoutes() {
	s.route("POST /v1/sessions/{session}/turns", true, func(w http.ResponseWriter, r *http.Request, k *Key) error {
		var req AppendRequest
		if err := decode(r, &req); err != nil {
			return err
		}
		out, err := s.appendTurns(r.Context(), k, r.PathValue("session"), req)
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusCreated, out)
	})
	s.route("GET /v1/sessions/{session}", false, func(w http.ResponseWriter, r *http.Request, k *Key) error {
		q := r.URL.Query()
		last, asOf, err := windowQuery(q.Get("last"), q.Get("as_of"))
		if err != nil {
			return err
		}
		out, err := s.readSession(r.Context(), k, r.PathValue("session"), last, asOf)
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, out)
	})
	s.route("POST /v1/sessions/{session}/summary", true, func(w http.ResponseWriter, r *http.Request, k *Key) error {
		var req SummaryRequest
		if err := decode(r, &req); err != nil {
			return err
		}
		out, err := s.summarize(r.Context(), k, r.PathValue("session"), req)
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, out)
	})
	s.route("POST /v1/sessions/{session}/promote", true, func(w http.ResponseWriter, r *http.Request, k *Key) error {
		var req PromoteRequest
		if err := decode(r, &req); err != nil {
			return err
		}
		out, err := s.promote(r.Context(), k, r.PathValue("session"), req.Through)
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, out)
	})
	s.route("DELETE /v1/sessions/{session}", true, func(w http.ResponseWriter, r *http.Request, k *Key) error {
		var promote *bool
		if v := r.URL.Query().Get("promote"); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return errf(http.StatusBadRequest, CodeInvalidRequest, "promote must be true or false")
			}
			promote = &b
		}
		out, err := s.endSession(r.Context(), k, r.PathValue("session"), promote)
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, out)
	})
}

// windowQuery parses last and as_of.
func windowQuery(lastArg, asOfArg string) (int, time.Time, error) {
	var last int
	var asOf time.Time
	if lastArg != "" {
		n, err := strconv.Atoi(lastArg)
		if err != nil || n < 0 || n > shortterm.DefaultMaxTurns {
			return 0, asOf, errf(http.StatusBadRequest, CodeInvalidRequest, "last must be in [0, %d] (0: all)", shortterm.DefaultMaxTurns)
		}
		last = n
	}
	if asOfArg != "" {
		t, err := time.Parse(time.RFC3339Nano, asOfArg)
		if err != nil {
			return 0, asOf, errf(http.StatusBadRequest, CodeInvalidRequest, "as_of must be an RFC 3339 time")
		}
		asOf = t
	}
	return last, asOf, nil
}

// checkSession checks a session name against the key.
func checkSession(k *Key, session *string) error {
	if err := checkScope(k, session); err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.code == CodeInvalidScope {
			ae.msg = "session: " + ae.msg
		}
		return err
	}
	return nil
}

// visibleSession reads a session (without counting it as activity) and checks that
// the key may see its owner: a session of an owner the key does not allow is, to
// that key, no session at all.
func (s *Server) visibleSession(ctx context.Context, k *Key, session string) (shortterm.Session, error) {
	sess, err := s.sessions.Window(ctx, shortterm.WindowQuery{Session: session, Last: 1, Now: time.Now()})
	if err != nil {
		return sess, err
	}
	if !k.Allows(sess.Owner) {
		return sess, shortterm.ErrNotFound
	}
	return sess, nil
}

func (s *Server) appendTurns(ctx context.Context, k *Key, session string, req AppendRequest) (AppendResponse, error) {
	if err := checkSession(k, &session); err != nil {
		return AppendResponse{}, err
	}
	if req.Owner != "" {
		if err := checkScope(k, &req.Owner); err != nil {
			return AppendResponse{}, err
		}
	}
	a := shortterm.Append{Session: session, Owner: req.Owner, Now: time.Now(), Turns: make([]shortterm.NewTurn, len(req.Turns))}
	for i, t := range req.Turns {
		a.Turns[i] = shortterm.NewTurn{Role: t.Role, Content: json.RawMessage(t.Content)}
	}
	if err := a.Validate(); err != nil {
		return AppendResponse{}, errf(http.StatusBadRequest, CodeInvalidRequest, "%v", err)
	}
	if req.Owner == "" {
		// Joining the session as it is: only one whose owner the key may use.
		sess, err := s.sessions.Window(ctx, shortterm.WindowQuery{Session: session, Last: 1, Now: a.Now})
		switch {
		case err == nil && !k.Allows(sess.Owner):
			return AppendResponse{}, errf(http.StatusConflict, CodeConflict, "the session belongs to another owner")
		case err != nil && !errors.Is(err, shortterm.ErrNotFound):
			return AppendResponse{}, err
		}
	}
	turns, err := s.sessions.Append(ctx, a)
	if err != nil {
		return AppendResponse{}, err
	}
	return AppendResponse{Session: session, Turns: turnsOut(turns), ExpiresAt: a.Now.Add(s.sessions.Backend().TTL()).UTC()}, nil
}

func (s *Server) readSession(ctx context.Context, k *Key, session string, last int, asOf time.Time) (SessionResponse, error) {
	if err := checkSession(k, &session); err != nil {
		return SessionResponse{}, err
	}
	sess, err := s.sessions.Window(ctx, shortterm.WindowQuery{Session: session, Last: last, AsOf: asOf, Touch: true, Now: time.Now()})
	if err != nil {
		return SessionResponse{}, err
	}
	if !k.Allows(sess.Owner) {
		return SessionResponse{}, shortterm.ErrNotFound
	}
	return SessionResponse{Session: sess.ID, Owner: sess.Owner, LastSeq: sess.LastSeq, PromotedThrough: sess.Promoted,
		ExpiresAt: sess.ExpiresAt(s.sessions.Backend().TTL()).UTC(), Turns: turnsOut(sess.Turns)}, nil
}

func (s *Server) summarize(ctx context.Context, k *Key, session string, req SummaryRequest) (SummaryResponse, error) {
	if err := checkSession(k, &session); err != nil {
		return SummaryResponse{}, err
	}
	sum := shortterm.Summary{Session: session, Through: req.Through, Content: json.RawMessage(req.Content), Now: time.Now()}
	if err := sum.Validate(); err != nil {
		return SummaryResponse{}, errf(http.StatusBadRequest, CodeInvalidRequest, "%v", err)
	}
	if _, err := s.visibleSession(ctx, k, session); err != nil {
		return SummaryResponse{}, err
	}
	replaced, err := s.sessions.Summarize(ctx, sum)
	if err != nil {
		return SummaryResponse{}, err
	}
	return SummaryResponse{Replaced: len(replaced)}, nil
}

func (s *Server) promote(ctx context.Context, k *Key, session string, through int64) (PromoteResponse, error) {
	if err := checkSession(k, &session); err != nil {
		return PromoteResponse{}, err
	}
	if through < 0 {
		return PromoteResponse{}, errf(http.StatusBadRequest, CodeInvalidRequest, "through must be at least 0 (0: all)")
	}
	if _, err := s.visibleSession(ctx, k, session); err != nil {
		return PromoteResponse{}, err
	}
	n, err := s.sessions.Promote(ctx, session, through)
	return PromoteResponse{Promoted: n}, err
}

func (s *Server) endSession(ctx context.Context, k *Key, session string, promote *bool) (EndResponse, error) {
	if err := checkSession(k, &session); err != nil {
		return EndResponse{}, err
	}
	if _, err := s.visibleSession(ctx, k, session); err != nil {
		return EndResponse{}, err
	}
	p := s.cfg.Promote == PromoteOnEnd
	if promote != nil {
		p = *promote
	}
	ended, err := s.sessions.End(ctx, session, p)
	if err != nil {
		return EndResponse{}, err
	}
	return EndResponse{Session: session, Turns: len(ended.Session.Turns), Promoted: ended.Promoted}, nil
}

// UseShortTerm puts the short-term tier on st (the gateway starts on the store's
// PostgreSQL; Open moves it to Redis when the store declares it).
func (s *Server) UseShortTerm(st shortterm.Store) {
	s.sessions = service.NewSessions(st, s.mem, service.SessionOptions{
		PromoteOnEnd: s.cfg.Promote == PromoteOnEnd})
}

// Sessions is the short-term tier (its sweeper runs in Gateway.Background).
func (s *Server) Sessions() *service.Sessions { return s.sessions }
