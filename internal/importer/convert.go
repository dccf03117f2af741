package importer

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/amemory/memory-operator/internal/jsonscan"
	"github.com/amemory/memory-operator/internal/memory"
)

// Thread is one conversation as a source holds it: its latest state and what is
// known about it. Readers fill it; Rules turn it into memories.
type Thread struct {
	ID string
	// Metadata is the thread's (latest checkpoint's) metadata: LangGraph copies the
	// run's configurable and metadata keys into it (a user_id among them).
	Metadata map[string]any
	// FirstActivity and LastActivity bound the thread in time (zero when unknown).
	FirstActivity, LastActivity time.Time
	// Messages are the thread's messages in order, each a LangChain message dict
	// (model_dump(): type, content, tool_calls, tool_call_id, name, id, ...).
	Messages []map[string]any
	// MessageTimes, when the source dates its messages (Letta), holds each message's
	// time (zero when unknown), parallel to Messages; a turn is then dated by its
	// last dated message instead of the thread's last activity.
	MessageTimes []time.Time
	// Errored: the thread's last step ended in an error (LangGraph's __error__ write).
	Errored bool
	// Unsupported, when set, is why the thread cannot be read (it wraps
	// ErrUnsupported); the thread is counted, never imported.
	Unsupported error

	// encoded holds the messages as the reader found them, when it left decoding
	// to the import (decode); fetch reads them, when the reader left them in the
	// source (for a thread the rules would leave out anyway).
	encoded *encodedMessages
	fetch   func(context.Context) (*encodedMessages, error)
	// pending are the latest checkpoint's pending writes to the messages channel, in
	// the order LangGraph applies them: what tasks of the interrupted (or failed)
	// superstep wrote before it stopped, which get_state() shows (see mergePending).
	pending []encodedMessages
	// channels are the thread's state channels beyond messages (channels.go).
	channels []encodedChannel
}

// add appends a message dated at (zero when the source does not date it), widening the
// thread's activity to it.
func (t *Thread) add(m map[string]any, at time.Time) {
	if !at.IsZero() {
		if t.FirstActivity.IsZero() || at.Before(t.FirstActivity) {
			t.FirstActivity = at
		}
		if at.After(t.LastActivity) {
			t.LastActivity = at
		}
	}
	t.Messages = append(t.Messages, m)
	t.MessageTimes = append(t.MessageTimes, at)
}

// readSourceFile reads a source file whole, refusing one over limit bytes; what names
// the source in errors.
func readSourceFile(what, path string, limit int64) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s: %s is %d bytes, over the %d-byte limit", what, path, st.Size(), limit)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return b, nil
}

// encodedMessages is a messages channel value as stored: its serializer's type and bytes.
type encodedMessages struct {
	typ  string
	blob []byte
}

// decode decodes the messages a reader left encoded, reading them first when the
// reader left them in the source. Only reading them can fail the import; what they
// hold is judged per thread (Unsupported). forImport leaves out of each message what
// the conversion never keeps (its provider's metadata, see decodeJSONPlus); Threads
// gives the messages whole.
func (t *Thread) decode(ctx context.Context, forImport bool) error {
	if t.fetch != nil {
		e, err := t.fetch(ctx)
		if err != nil {
			return err
		}
		t.encoded, t.fetch = e, nil
	}
	if t.encoded != nil {
		t.Messages, t.Unsupported = decodeMessages(t.encoded.typ, t.encoded.blob, forImport)
		t.encoded = nil
	}
	if len(t.pending) > 0 && t.Unsupported == nil {
		t.Messages, t.Unsupported = mergePending(t.Messages, t.pending, forImport)
		t.pending = nil
	}
	return nil
}

// Rules say how threads become memories (MemoryRestore spec.source.importFrom).
type Rules struct {
	// UserFrom names where a thread's user comes from: a metadata key (UserMetadataKey)
	// and/or a regular expression on the thread id whose group "user" (or first group)
	// is the user (UserPattern). The metadata key wins when both give one.
	UserMetadataKey string
	UserPattern     *regexp.Regexp
	// ScopeTemplate makes a thread's scope from {user} and {thread}: "user:{user}" by
	// default. A thread whose template needs a user it does not have is skipped as
	// having no user.
	ScopeTemplate string
	// InactiveAfter > 0 leaves out threads whose last activity is older than this.
	InactiveAfter time.Duration
	// SkipZombies leaves out threads with no agent reply, or that ended in an error.
	SkipZombies bool
	// KeepWorking also imports the raw messages of threads active within
	// WorkingWindow as working memories of session:{thread}.
	KeepWorking   bool
	WorkingWindow time.Duration
	// Source is the provenance recorded on every memory ("langgraph-checkpoint-postgres@3.2.0").
	Source string
	// Now is the clock ages are measured to.
	Now time.Time
	// BaseScore of imported memories (0: 0.5).
	BaseScore float64
	// StateChannels map state channels beyond messages to memories (channels.go).
	StateChannels []StateChannel
}

// Outcome is what happened to one thread.
type Outcome string

// Thread outcomes, as status counts them.
const (
	Imported     Outcome = "imported"
	SkipInactive Outcome = "inactive"
	SkipZombie   Outcome = "zombie"
	SkipNoUser   Outcome = "noUser"
	Unsupported  Outcome = "unsupported"
	SkipEmpty    Outcome = "empty"
)

// Result is one thread's conversion.
type Result struct {
	Outcome Outcome
	Items   []memory.Item
	// Problem explains a skipped or unsupported thread (no content, ever).
	Problem string
	// Messages is how many of the thread's messages an imported thread had.
	Messages int
	// Keyed are the memories of the thread's mapped state channels: ImportLangGraph
	// keeps, per scope and key, the most recently active thread's.
	Keyed []memory.Item
	// LeftOutChannels names the state channels an imported thread holds that no rule
	// maps.
	LeftOutChannels []string
}

// DefaultScopeTemplate puts a thread's memories in its user's scope.
const DefaultScopeTemplate = "user:{user}"

// Convert turns one thread into memories: each user turn, with the agent's replies
// and tool calls and results up to the next user turn, becomes one episodic memory
// whose content keeps every message structured (tool calls and their arguments as
// JSON, list-shaped content as lists, never stringified); optionally the raw messages
// of a recent thread become working memories of its session.
func (r Rules) Convert(t Thread) Result {
	// The checks that need no messages come first (NeedsMessages is their negation):
	// a reader may leave the messages of a thread they exclude undecoded.
	if t.Unsupported != nil {
		return Result{Outcome: Unsupported, Problem: fmt.Sprintf("thread %s: %v", shown(t.ID), t.Unsupported)}
	}
	// A thread idle beyond the window counts as inactive, whatever else it is.
	if r.inactive(t) {
		return Result{Outcome: SkipInactive, Problem: fmt.Sprintf("thread %s: last active %s", shown(t.ID), t.LastActivity.UTC().Format(time.RFC3339))}
	}
	if r.SkipZombies && t.Errored {
		return Result{Outcome: SkipZombie, Problem: fmt.Sprintf("thread %s: its last step ended in an error", shown(t.ID))}
	}
	if len(t.Messages) == 0 && !t.Errored {
		return Result{Outcome: SkipEmpty, Problem: fmt.Sprintf("thread %s has no messages", shown(t.ID))}
	}
	if r.SkipZombies {
		if why := zombie(t); why != "" {
			return Result{Outcome: SkipZombie, Problem: fmt.Sprintf("thread %s: %s", shown(t.ID), why)}
		}
	}
	user := r.user(t)
	tmpl := r.ScopeTemplate
	if tmpl == "" {
		tmpl = DefaultScopeTemplate
	}
	if strings.Contains(tmpl, "{user}") && user == "" {
		return Result{Outcome: SkipNoUser, Problem: fmt.Sprintf("thread %s: no user id in metadata or thread id", shown(t.ID))}
	}
	// The scope is NFC-normalised (memory.NormalizeScope) as a whole: a source may
	// spell one user's id composed in one thread and decomposed in another.
	scope := memory.NormalizeScope(strings.NewReplacer("{user}", user, "{thread}", t.ID).Replace(tmpl))
	if err := memory.ValidateScope(scope); err != nil {
		return Result{Outcome: SkipNoUser, Problem: fmt.Sprintf("thread %s: scope %q: %v", shown(t.ID), scope, err)}
	}
	items, err := r.turns(t, scope)
	if err != nil {
		return Result{Outcome: Unsupported, Problem: fmt.Sprintf("thread %s: %v", shown(t.ID), err)}
	}
	if r.KeepWorking && (r.WorkingWindow <= 0 || r.Now.Sub(t.LastActivity) <= r.WorkingWindow) {
		w, err := r.working(t)
		if err != nil {
			return Result{Outcome: Unsupported, Problem: fmt.Sprintf("thread %s: %v", shown(t.ID), err)}
		}
		items = append(items, w...)
	}
	keyed, leftOut, err := r.channelMemories(t, scope)
	if err != nil {
		return Result{Outcome: Unsupported, Problem: fmt.Sprintf("thread %s: %v", shown(t.ID), err)}
	}
	return Result{Outcome: Imported, Items: items, Messages: len(t.Messages), Keyed: keyed, LeftOutChannels: leftOut}
}

func (r Rules) inactive(t Thread) bool {
	return r.InactiveAfter > 0 && !t.LastActivity.IsZero() && r.Now.Sub(t.LastActivity) > r.InactiveAfter
}

// NeedsMessages reports whether Convert would look at the thread's messages: a thread
// it leaves out on what is known without them (an error, inactivity) need not be
// decoded.
func (r Rules) NeedsMessages(t Thread) bool {
	return t.Unsupported == nil && (!r.SkipZombies || !t.Errored) && !r.inactive(t)
}

// shown is an id from a source as a message shows it: as it is when it prints as
// itself, else quoted, since it may hold anything (a line break in a thread id would
// forge a line of the import's log or status).
func shown(id string) string {
	if q := strconv.Quote(id); q[1:len(q)-1] != id || strings.ContainsRune(id, ' ') || id == "" {
		return q
	}
	return id
}

// zombie says why a thread is a zombie session ("" if it is not): it ended in an
// error, or the agent never replied.
func zombie(t Thread) string {
	if t.Errored {
		return "its last step ended in an error"
	}
	for _, m := range t.Messages {
		if m["type"] == "ai" {
			return ""
		}
	}
	return "the agent never replied"
}

// user is the thread's user id, NFC-normalised (memory.NormalizeScope): from the
// metadata key, else the pattern's group on the thread id (matched in NFC, so a
// pattern written with "ë" matches an id that spells it decomposed).
func (r Rules) user(t Thread) string {
	return memory.NormalizeScope(r.rawUser(t))
}

func (r Rules) rawUser(t Thread) string {
	if r.UserMetadataKey != "" {
		switch v := t.Metadata[r.UserMetadataKey].(type) {
		case string:
			if v != "" {
				return v
			}
		case int64, uint64, float64, json.Number:
			return fmt.Sprint(v)
		}
	}
	if r.UserPattern != nil {
		m := r.UserPattern.FindStringSubmatch(memory.NormalizeScope(t.ID))
		if m == nil {
			return ""
		}
		if i := r.UserPattern.SubexpIndex("user"); i > 0 {
			return m[i]
		}
		if len(m) > 1 {
			return m[1]
		}
	}
	return ""
}

// turns splits the messages at each user message.
func (r Rules) turns(t Thread, scope string) ([]memory.Item, error) {
	var (
		items []memory.Item
		cur   []map[string]any
		curAt time.Time // the turn's last dated message
		n     int
	)
	flush := func() error {
		if len(cur) == 0 {
			return nil
		}
		dated := t
		if !curAt.IsZero() {
			dated.LastActivity = curAt
		}
		content, ok := appendTurn(nil, t.ID, n, cur)
		if !ok {
			msgs := make([]any, 0, len(cur))
			for _, m := range cur {
				msgs = append(msgs, messageContent(m))
			}
			var err error
			if content, err = marshalJSON(map[string]any{"thread_id": t.ID, "turn": n, "messages": msgs}); err != nil {
				return err
			}
		}
		items = append(items, r.item(deterministicID("lg", t.ID, fmt.Sprint(n)), memory.Episodic, scope, content, dated))
		n++
		cur, curAt = nil, time.Time{}
		return nil
	}
	for i, m := range t.Messages {
		switch m["type"] {
		case "system", "remove":
			continue // a prompt, not memory; removals are already applied
		case "human":
			if err := flush(); err != nil {
				return nil, err
			}
		}
		cur = append(cur, m)
		if i < len(t.MessageTimes) && t.MessageTimes[i].After(curAt) {
			curAt = t.MessageTimes[i]
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return items, nil
}

// working imports the raw messages of a recent thread as working memory.
func (r Rules) working(t Thread) ([]memory.Item, error) {
	scope := memory.NormalizeScope("session:" + t.ID)
	if err := memory.ValidateScope(scope); err != nil {
		return nil, fmt.Errorf("working memory scope: %w", err)
	}
	var items []memory.Item
	for i, m := range t.Messages {
		if m["type"] == "system" || m["type"] == "remove" {
			continue
		}
		content, ok := appendWorking(nil, t.ID, i, m)
		if !ok {
			var err error
			if content, err = marshalJSON(map[string]any{"thread_id": t.ID, "index": i, "message": messageContent(m)}); err != nil {
				return nil, err
			}
		}
		items = append(items, r.item(deterministicID("lgw", t.ID, fmt.Sprint(i)), memory.Working, scope, content, t))
	}
	return items, nil
}

// marshalJSON is json.Marshal of a decoded tree, without reflection when it can
// (jsonscan.AppendMarshal writes the same bytes).
func marshalJSON(v any) ([]byte, error) {
	if b, ok := jsonscan.AppendMarshal(nil, v); ok {
		return b, nil
	}
	return json.Marshal(v)
}

func (r Rules) item(id string, typ memory.Type, scope string, content []byte, t Thread) memory.Item {
	at := t.LastActivity
	if at.IsZero() {
		at = r.Now
	}
	base := r.BaseScore
	if base == 0 {
		base = 0.5
	}
	return memory.Item{MemoryID: id, MemoryType: typ, Scope: scope, Content: content, Source: r.Source,
		BaseScore: base, CreatedAt: at.UTC(), UpdatedAt: at.UTC()}
}

// roles maps LangChain message types to the roles agents and models use.
var roles = map[string]string{"human": "user", "ai": "assistant", "tool": "tool", "system": "system", "function": "function", "chat": "chat"}

// messageContent keeps what a message means and drops what only its provider needed
// (response_metadata, usage): role, content as it was (a string or a list of content
// blocks), tool calls with their arguments as JSON objects, a tool result's call id,
// name and status, the message id, and its additional_kwargs (an app's own data,
// Pydantic objects as their fields) but the provider's raw tool calls.
func messageContent(m map[string]any) map[string]any {
	typ, _ := m["type"].(string)
	role := roles[typ]
	if role == "" {
		role = typ
	}
	out := map[string]any{"role": role, "content": m["content"]}
	if kw, has := keptKwargs(m); has {
		out["additional_kwargs"] = kw
	}
	for _, k := range []string{"id", "name", "tool_call_id", "status", "artifact"} {
		if v, ok := m[k]; ok && v != nil && v != "" {
			out[k] = v
		}
	}
	if calls, has := toolCalls(m); has {
		out["tool_calls"] = calls
	}
	if tc, ok := m["invalid_tool_calls"].([]any); ok && len(tc) > 0 {
		out["invalid_tool_calls"] = tc
	}
	return out
}

// keptKwargs is a message's additional_kwargs as messageContent keeps them: without
// the provider's raw tool calls (kept as tool_calls) and keys whose value is null.
func keptKwargs(m map[string]any) (map[string]any, bool) {
	ak, _ := m["additional_kwargs"].(map[string]any)
	var out map[string]any
	for k, v := range ak {
		if k == "tool_calls" || v == nil {
			continue
		}
		if out == nil {
			out = make(map[string]any, len(ak))
		}
		out[k] = v
	}
	return out, out != nil
}

// toolCalls are a message's tool calls as messageContent keeps them: LangChain's
// (name, arguments as an object, id), or else the provider-raw OpenAI ones
// (additional_kwargs.tool_calls), whose arguments are a JSON string: parsed, never
// kept stringified.
func toolCalls(m map[string]any) ([]any, bool) {
	if tc, ok := m["tool_calls"].([]any); ok && len(tc) > 0 {
		calls := make([]any, 0, len(tc))
		for _, c := range tc {
			cm, ok := c.(map[string]any)
			if !ok {
				continue
			}
			call := map[string]any{"name": cm["name"], "args": cm["args"]}
			if id, ok := cm["id"]; ok && id != nil {
				call["id"] = id
			}
			calls = append(calls, call)
		}
		return calls, true
	}
	if ak, ok := m["additional_kwargs"].(map[string]any); ok {
		if raw, ok := ak["tool_calls"].([]any); ok && len(raw) > 0 {
			return openAIToolCalls(raw), true
		}
	}
	return nil, false
}

func openAIToolCalls(raw []any) []any {
	calls := make([]any, 0, len(raw))
	for _, c := range raw {
		cm, ok := c.(map[string]any)
		if !ok {
			continue
		}
		fn, _ := cm["function"].(map[string]any)
		call := map[string]any{"id": cm["id"]}
		if fn != nil {
			call["name"] = fn["name"]
			var args any
			if s, ok := fn["arguments"].(string); ok && json.Unmarshal([]byte(s), &args) == nil {
				call["args"] = args
			} else {
				call["args"] = fn["arguments"]
			}
		}
		calls = append(calls, call)
	}
	return calls
}

var idBase32 = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

// deterministicID is a memory ID derived from where the memory came from, so a
// rerun of the same import produces the same memories (and the restore engine's
// idempotency holds).
func deterministicID(kind string, parts ...string) string {
	h := sha256.New()
	h.Write([]byte(kind))
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	return kind + "-" + idBase32.EncodeToString(h.Sum(nil)[:20])
}

// decodeLegacyJSON reads the pre-msgpack "json" serializer's values: LangChain
// constructor envelopes ({"lc":1,"type":"constructor","id":[...,"AIMessage"],
// "kwargs":{...}}) become the message dicts msgpack gives.
func decodeLegacyJSON(b []byte) (any, error) {
	var v any
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("legacy json value: %w", err)
	}
	return unwrapLC(v, 0)
}

var lcMessageTypes = map[string]string{"HumanMessage": "human", "AIMessage": "ai", "ToolMessage": "tool", "SystemMessage": "system",
	"FunctionMessage": "function", "ChatMessage": "chat", "RemoveMessage": "remove",
	"HumanMessageChunk": "human", "AIMessageChunk": "ai", "ToolMessageChunk": "tool", "SystemMessageChunk": "system"}

func unwrapLC(v any, depth int) (any, error) {
	if depth > maxDepth {
		return nil, errors.New("legacy json value nested too deep")
	}
	switch x := v.(type) {
	case []any:
		for i := range x {
			u, err := unwrapLC(x[i], depth+1)
			if err != nil {
				return nil, err
			}
			x[i] = u
		}
		return x, nil
	case map[string]any:
		if x["lc"] != nil && x["type"] == "constructor" {
			ids, _ := x["id"].([]any)
			kwargs, _ := x["kwargs"].(map[string]any)
			if kwargs == nil {
				kwargs = map[string]any{}
			}
			out, err := unwrapLC(kwargs, depth+1)
			if err != nil {
				return nil, err
			}
			if len(ids) > 0 {
				if cls, _ := ids[len(ids)-1].(string); lcMessageTypes[cls] != "" {
					out.(map[string]any)["type"] = lcMessageTypes[cls]
				}
			}
			return out, nil
		}
		if x["lc"] != nil && x["type"] == "not_implemented" {
			return nil, unsupported("a value LangChain could not serialize (not_implemented)")
		}
		for k, e := range x {
			u, err := unwrapLC(e, depth+1)
			if err != nil {
				return nil, err
			}
			x[k] = u
		}
		return x, nil
	}
	return v, nil
}
