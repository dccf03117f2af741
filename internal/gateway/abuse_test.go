package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/service"
)

// response is a gateway answer with its headers.
type response struct {
	status int
	header http.Header
	body   []byte
	err    ErrorBody
}

// do sends a request (body: nil, a string sent as is, or a value sent as JSON) and
// returns the whole answer.
func (e *env) do(key, method, path string, body any) response {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		rd = bytes.NewReader([]byte(mustJSON(e.t, b)))
	}
	req, err := http.NewRequest(method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("X-Api-Key", key)
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	r := response{status: resp.StatusCode, header: resp.Header}
	r.body, _ = io.ReadAll(resp.Body)
	if r.status >= 400 {
		_ = json.Unmarshal(r.body, &r.err)
	}
	return r
}

// short is a response body cut for a test message.
func short(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

// wantPermanent expects a 4xx with the code and no Retry-After: a client that honours
// Retry-After must never retry a request that cannot succeed.
func (e *env) wantPermanent(status int, code, key, method, path string, body any) response {
	e.t.Helper()
	r := e.do(key, method, path, body)
	if r.status != status || r.err.Error.Code != code || r.header.Get("Retry-After") != "" {
		e.t.Errorf("%s %s: %d %q Retry-After %q (%s); want %d %q without Retry-After",
			method, path, r.status, r.err.Error.Code, r.header.Get("Retry-After"), short(r.body), status, code)
	}
	return r
}

// TestGuaranteePermanentErrorsAre4xx: every input that cannot succeed is refused at the door
// with a 4xx and no Retry-After, on every handler of the native API and every MCP tool:
// NUL and other characters no ID can hold in ids and cursors, NUL in keys and reasons,
// a blank query. None of them reaches PostgreSQL, whose refusal would otherwise be
// answered 503 "database not answering" with Retry-After (retried forever).
func TestGuaranteePermanentErrorsAre4xx(t *testing.T) {
	k := newTestKey(t, "k", false, "user:*")
	e := newEnv(t, envOptions{keys: []testKey{k}, logs: &syncBuffer{}})
	var w WriteResponse
	e.must(201, k.plain, "POST", "/v1/memories", NewMemory{Scope: "user:1", MemoryType: memory.Semantic, Key: "k", Content: json.RawMessage(`{"a":1}`)}, &w)

	for _, c := range []struct {
		name, method, path string
		body               any
	}{
		{"get NUL id", "GET", "/v1/memories/a%00b", nil},
		{"get invalid UTF-8 id", "GET", "/v1/memories/a%ffb", nil},
		{"get overlong id", "GET", "/v1/memories/" + strings.Repeat("x", memory.MaxIDLen+1), nil},
		{"patch NUL id", "PATCH", "/v1/memories/a%00b", UpdateRequest{Source: "s"}},
		{"delete NUL id", "DELETE", "/v1/memories/a%00b", nil},
		{"list NUL cursor", "GET", "/v1/scopes/user:1/memories?after=a%00b", nil},
		{"list invalid UTF-8 cursor", "GET", "/v1/scopes/user:1/memories?after=%ff", nil},
		{"recall NUL key", "POST", "/v1/recall", `{"scope":"user:1","key":"a\u0000b"}`},
		{"forget NUL reason", "POST", "/v1/forget", `{"scope":"user:2","reason":"a\u0000b"}`},
		{"search NUL query", "POST", "/v1/search", `{"scope":"user:1","query":"a\u0000b"}`},
		{"search blank query", "POST", "/v1/search", SearchRequest{Scope: "user:1", Query: "   "}},
		{"write NUL source", "POST", "/v1/memories", `{"scope":"user:1","memory_type":"semantic","content":{"a":2},"source":"a\u0000b"}`},
		{"write NUL memory_id", "POST", "/v1/memories", `{"scope":"user:1","memory_type":"semantic","content":{"a":3},"memory_id":"a\u0000b"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			r := e.do(k.plain, c.method, c.path, c.body)
			if r.status < 400 || r.status >= 500 || r.header.Get("Retry-After") != "" {
				t.Errorf("%d Retry-After %q: %s; want a 4xx without Retry-After", r.status, r.header.Get("Retry-After"), r.body)
			}
		})
	}
	e.t = t
	// The memory is untouched and the store still answers.
	var got memory.Item
	e.must(200, k.plain, "GET", "/v1/memories/"+w.MemoryID, nil, &got)

	// MCP: the same inputs are tool errors naming a 4xx code, never "unavailable".
	s := mcpSession(t, e, k.plain)
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"get_memory", map[string]any{"memory_id": "a\x00b"}},
		{"delete_memory", map[string]any{"memory_id": "a\x00b"}},
		{"update_memory", map[string]any{"memory_id": "a\x00b", "text": "x"}},
		{"get_memories", map[string]any{"scope": "user:1", "after": "a\x00b"}},
		{"search_memories", map[string]any{"scope": "user:1", "query": ""}},
		{"search_memories", map[string]any{"scope": "user:1", "query": "  "}},
		{"search_memories", map[string]any{"scope": "user:1", "query": "a\x00b"}},
		{"delete_all_memories", map[string]any{"scope": "user:3", "reason": "a\x00b"}},
		{"add_memory", map[string]any{"scope": "user:1", "text": "x", "key": "a\x00b"}},
	} {
		res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: c.tool, Arguments: c.args})
		if err != nil {
			t.Errorf("%s %v: %v", c.tool, c.args, err)
			continue
		}
		text := toolText(res)
		if !res.IsError || !strings.HasPrefix(text, "invalid_") {
			t.Errorf("%s %q: error %v %q; want a tool error with an invalid_* code", c.tool, c.args, res.IsError, text)
		}
	}
}

// TestGuaranteeOverflowRefused: a TTL that would overflow into an expiry in the past and a base
// score above the documented cap are refused on every native route that takes them,
// and nothing is stored; the largest TTL allowed gives an expiry in the future.
func TestGuaranteeOverflowRefused(t *testing.T) {
	k := newTestKey(t, "k", false, "user:*")
	e := newEnv(t, envOptions{keys: []testKey{k}})
	mem := func(extra string) string {
		return `{"scope":"user:1","memory_type":"working","content":{"n":1}` + extra + `}`
	}
	for _, c := range []struct{ name, body string }{
		{"ttl max int64", mem(`,"ttl_seconds":9223372036854775807`)},
		{"ttl beyond MaxTTL", mem(`,"ttl_seconds":` + strconv.FormatInt(int64(memory.MaxTTL.Seconds())+1, 10))},
		{"base_score 1e308", mem(`,"base_score":1e308`)},
		{"base_score above the cap", mem(`,"base_score":1.5`)},
		{"negative base_score", mem(`,"base_score":-0.5`)},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			e.wantPermanent(400, CodeInvalidRequest, k.plain, "POST", "/v1/memories", c.body)
			e.wantPermanent(400, CodeInvalidRequest, k.plain, "POST", "/v1/memories/batch", `{"memories":[`+mem(``)+`,`+c.body+`]}`)
		})
	}
	e.t = t
	var l ListResponse
	e.must(200, k.plain, "GET", "/v1/scopes/user:1/memories", nil, &l)
	if len(l.Memories) != 0 {
		t.Fatalf("refused writes stored %d memories", len(l.Memories))
	}
	var w WriteResponse
	e.must(201, k.plain, "POST", "/v1/memories", `{"scope":"user:1","memory_type":"working","content":{"n":"longest"},"ttl_seconds":`+strconv.FormatInt(int64(memory.MaxTTL.Seconds()), 10)+`}`, &w)
	var it memory.Item
	e.must(200, k.plain, "GET", "/v1/memories/"+w.MemoryID, nil, &it)
	if it.ExpiresAt == nil || !it.ExpiresAt.After(time.Now().AddDate(99, 0, 0)) {
		t.Fatalf("the longest TTL gave expires_at %v", it.ExpiresAt)
	}
	e.wantPermanent(400, CodeInvalidRequest, k.plain, "PATCH", "/v1/memories/"+w.MemoryID, `{"base_score":2}`)
	e.wantPermanent(400, CodeInvalidRequest, k.plain, "PATCH", "/v1/memories/"+w.MemoryID, `{"base_score":`+strconv.FormatFloat(math.MaxFloat64, 'g', -1, 64)+`}`)
	e.must(200, k.plain, "PATCH", "/v1/memories/"+w.MemoryID, `{"base_score":1}`, nil)
}

// TestGuaranteeNoExistenceOracle: a key learns nothing about other scopes from a client-chosen
// memory_id. Writing an ID that another scope already uses answers exactly as writing
// an unused one (201, inserted), touches nothing of the other scope, and a retry or an
// echo of the returned ID is idempotent.
func TestGuaranteeNoExistenceOracle(t *testing.T) {
	ka := newTestKey(t, "a", false, "user:a")
	kb := newTestKey(t, "b", false, "user:b")
	e := newEnv(t, envOptions{keys: []testKey{ka, kb}})
	write := func(key, scope, id, content string) response {
		return e.do(key, "POST", "/v1/memories", NewMemory{Scope: scope, MemoryType: memory.Semantic, MemoryID: id, Content: json.RawMessage(content)})
	}
	decode := func(r response) WriteResponse {
		t.Helper()
		var w WriteResponse
		if err := json.Unmarshal(r.body, &w); err != nil {
			t.Fatalf("%d %s: %v", r.status, r.body, err)
		}
		return w
	}
	ra := write(ka.plain, "user:a", "order-42", `{"secret":"a's"}`)
	if ra.status != 201 {
		t.Fatalf("a's write: %d %s", ra.status, ra.body)
	}
	wa := decode(ra)

	used := write(kb.plain, "user:b", "order-42", `{"mine":"b's"}`)
	unused := write(kb.plain, "user:b", "order-43", `{"mine":"b's other"}`)
	if used.status != unused.status || used.status != 201 {
		t.Fatalf("b writing an ID a uses answers %d %s; an unused ID %d %s: they must be the same 201", used.status, used.body, unused.status, unused.body)
	}
	wb := decode(used)
	if wb.Outcome != "inserted" || wb.MemoryID == wa.MemoryID {
		t.Fatalf("b's write: %+v (a's memory is %s)", wb, wa.MemoryID)
	}
	for _, id := range []string{wa.MemoryID, wb.MemoryID, decode(unused).MemoryID} {
		if err := memory.ValidateID(id); err != nil {
			t.Errorf("stored ID %q: %v", id, err)
		}
	}
	// a's memory is untouched and still a's alone.
	var it memory.Item
	e.must(200, ka.plain, "GET", "/v1/memories/"+wa.MemoryID, nil, &it)
	if !jsonEq(it.Content, `{"secret":"a's"}`) || len(it.History) != 0 {
		t.Fatalf("a's memory changed: %+v", it)
	}
	e.wantError(404, CodeNotFound, kb.plain, "GET", "/v1/memories/"+wa.MemoryID, nil)
	// Retries are idempotent: the same client ID, or the ID the gateway returned.
	for _, id := range []string{"order-42", wb.MemoryID} {
		r := write(kb.plain, "user:b", id, `{"mine":"b's"}`)
		if got := decode(r); r.status != 200 || got.MemoryID != wb.MemoryID || got.Outcome != "unchanged" {
			t.Fatalf("b's retry with %q: %d %+v, want 200 unchanged %s", id, r.status, got, wb.MemoryID)
		}
	}
	// A new value under the same client ID supersedes b's own memory.
	r := write(kb.plain, "user:b", "order-42", `{"mine":"b's, changed"}`)
	if got := decode(r); r.status != 200 || got.MemoryID != wb.MemoryID || got.Outcome != "superseded" {
		t.Fatalf("b's update by client ID: %d %+v", r.status, got)
	}
	// Naming a's stored ID from b's scope makes b a memory of its own.
	r = write(kb.plain, "user:b", wa.MemoryID, `{"mine":"b's third"}`)
	if got := decode(r); r.status != 201 || got.MemoryID == wa.MemoryID {
		t.Fatalf("b naming a's stored ID: %d %+v", r.status, got)
	}
	e.must(200, ka.plain, "GET", "/v1/memories/"+wa.MemoryID, nil, &it)
	if !jsonEq(it.Content, `{"secret":"a's"}`) {
		t.Fatalf("a's memory changed: %s", it.Content)
	}
	// The longest client ID the documents allow is accepted, one more is refused.
	e.must(201, kb.plain, "POST", "/v1/memories", NewMemory{Scope: "user:b", MemoryType: memory.Semantic, MemoryID: strings.Repeat("x", MaxClientIDLen), Content: json.RawMessage(`{"n":1}`)}, nil)
	e.wantPermanent(400, CodeInvalidRequest, kb.plain, "POST", "/v1/memories", NewMemory{Scope: "user:b", MemoryType: memory.Semantic, MemoryID: strings.Repeat("x", MaxClientIDLen+1), Content: json.RawMessage(`{"n":2}`)})
}

// TestOpenAPIBoundsAreTheLimits: the bounds the OpenAPI document gives are the ones
// internal/memory defines.
func TestOpenAPIBoundsAreTheLimits(t *testing.T) {
	doc, err := BuildOpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		schema, field string
		min, max      float64
	}{
		{"NewMemory", "base_score", 0, memory.MaxBaseScore},
		{"UpdateRequest", "base_score", 0, memory.MaxBaseScore},
		{"NewMemory", "ttl_seconds", 1, memory.MaxTTL.Seconds()},
	} {
		p := doc.Components.Schemas[c.schema].Value.Properties[c.field].Value
		if p.Min == nil || p.Max == nil || *p.Min != c.min || *p.Max != c.max {
			t.Errorf("%s.%s: bounds %v..%v, want %v..%v", c.schema, c.field, p.Min, p.Max, c.min, c.max)
		}
	}
}

// TestGuaranteeClassifyNamesTheDependency: each failure is answered with the code of what
// failed, 4xx ones without Retry-After, and an error of no dependency is a 500, never
// "the database is not answering".
func TestGuaranteeClassifyNamesTheDependency(t *testing.T) {
	for _, c := range []struct {
		name       string
		err        error
		status     int
		code       string
		retryAfter bool
	}{
		{"field", fmt.Errorf("write: %w", &memory.FieldError{Field: "content", Reason: "bad"}), 400, CodeInvalidContent, false},
		{"text too long", fmt.Errorf("write: item 0: %w", &embed.TextTooLongError{ID: "m", Bytes: 10, Max: 5}), 413, CodeTextTooLong, false},
		{"value the database refused", fmt.Errorf("pgstore: get: %w", &pgconn.PgError{Code: "22021", Message: "invalid byte sequence"}), 400, CodeInvalidRequest, false},
		{"embedder share", fmt.Errorf("%w: %w", service.ErrEmbedderUnavailable, embed.ErrBusy), 429, CodeRateLimited, true},
		{"embedder", fmt.Errorf("search: %w: %w", service.ErrEmbedderUnavailable, embed.ErrTimeout), 503, CodeEmbedderDown, true},
		{"index", fmt.Errorf("search: %w: x", service.ErrIndexUnavailable), 503, CodeIndexDown, true},
		{"database connection", fmt.Errorf("pgstore: put: %w", &net.OpError{Op: "read", Err: errors.New("connection reset")}), 503, CodeDatabaseDown, true},
		{"database shutting down", fmt.Errorf("pgstore: put: %w", &pgconn.PgError{Code: "57P01"}), 503, CodeDatabaseDown, true},
		{"database privilege", fmt.Errorf("pgstore: put: %w", &pgconn.PgError{Code: "42501"}), 500, CodeInternal, false},
		{"out of time", fmt.Errorf("write: %w", context.DeadlineExceeded), 503, CodeTimeout, true},
		{"a bug", errors.New("memories m kept changing while being indexed"), 500, CodeInternal, false},
	} {
		e := classify(c.err)
		if e.status != c.status || e.code != c.code || (e.retryAfter > 0) != c.retryAfter {
			t.Errorf("%s: %d %s retry-after %d, want %d %s retry-after %v", c.name, e.status, e.code, e.retryAfter, c.status, c.code, c.retryAfter)
		}
	}
}

// TestGuaranteeClientDatesAtTheDoor: a client may date what it remembers
// (created_at), back as far as it likes, never more than the tolerated skew ahead of
// the server's clock: a memory dated 2099 is refused naming the field, and nothing is
// stored. A back-dated memory written after its scope was forgotten is stored (the
// server's clock recorded it after the tombstone), so the user can come back at once.
func TestGuaranteeClientDatesAtTheDoor(t *testing.T) {
	k := newTestKey(t, "k", false, "user:*")
	e := newEnv(t, envOptions{keys: []testKey{k}})
	mem := func(created string) string {
		return `{"scope":"user:dated","memory_type":"episodic","content":{"said":"` + created + `"},"created_at":"` + created + `"}`
	}
	for _, ahead := range []string{"2099-01-01T00:00:00Z", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)} {
		r := e.wantPermanent(400, CodeInvalidRequest, k.plain, "POST", "/v1/memories", mem(ahead))
		if !strings.Contains(r.err.Error.Message, "created_at") || !strings.Contains(r.err.Error.Message, "after the server's clock") {
			t.Errorf("refusal of %s: %s", ahead, r.err.Error.Message)
		}
		e.wantPermanent(400, CodeInvalidRequest, k.plain, "POST", "/v1/memories/batch", `{"memories":[`+mem("2020-01-01T00:00:00Z")+`,`+mem(ahead)+`]}`)
	}
	var l ListResponse
	e.must(200, k.plain, "GET", "/v1/scopes/user:dated/memories", nil, &l)
	if len(l.Memories) != 0 {
		t.Fatalf("refused writes stored %d memories", len(l.Memories))
	}
	// Within the skew (a client whose clock runs a minute fast): stored as dated.
	var w WriteResponse
	soon := time.Now().Add(time.Minute).UTC().Truncate(time.Second)
	e.must(201, k.plain, "POST", "/v1/memories", mem(soon.Format(time.RFC3339)), &w)
	var it memory.Item
	e.must(200, k.plain, "GET", "/v1/memories/"+w.MemoryID, nil, &it)
	if !it.CreatedAt.Equal(soon) || it.RecordedAt.IsZero() || it.RecordedAt.After(time.Now()) {
		t.Fatalf("stored %+v", it)
	}
	// Forgotten, then back at once with a memory dated years before the forget.
	e.must(200, k.plain, "POST", "/v1/forget", `{"scope":"user:dated","reason":"asked"}`, nil)
	e.must(201, k.plain, "POST", "/v1/memories", mem("2020-01-01T00:00:00Z"), &w)
	e.must(200, k.plain, "GET", "/v1/memories/"+w.MemoryID, nil, &it)
	if !it.CreatedAt.Equal(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("the memory after the forget: %+v", it)
	}
}
