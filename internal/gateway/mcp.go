package gateway

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
)

// MCP at /mcp (streamable HTTP, stateless), with the tool names memory MCP servers
// converged on (mem0-mcp). Each API key gets its own MCP server whose tools are bound
// to the key: a read-only key's server has no write tools, and every tool checks the
// scope it is given against the key.

// MCP tool inputs and outputs. The JSON schemas the tools advertise are inferred from
// these types (jsonschema tags give the descriptions).
type (
	mcpAddInput struct {
		Scope      string          `json:"scope,omitempty" jsonschema:"scope of the memory (user:<id>, session:<id> or agent:<id>); may be left out when the key allows exactly one scope"`
		Text       string          `json:"text,omitempty" jsonschema:"the memory as text (stored as {\"text\": ...}); give text or content"`
		Content    json.RawMessage `json:"content,omitempty" jsonschema:"the memory as a JSON object; give text or content"`
		MemoryType string          `json:"memory_type,omitempty" jsonschema:"working, episodic, semantic (default) or procedural"`
		Key        string          `json:"key,omitempty" jsonschema:"optional slot name: a later memory with the same key replaces this one (history kept)"`
	}
	mcpSearchInput struct {
		Scope         string   `json:"scope,omitempty" jsonschema:"scope to search in; may be left out when the key allows exactly one scope"`
		Query         string   `json:"query" jsonschema:"what to look for"`
		Types         []string `json:"types,omitempty" jsonschema:"memory types to search (default: all)"`
		TopK          int      `json:"top_k,omitempty" jsonschema:"how many results, 1..100 (default 10)"`
		Mode          string   `json:"mode,omitempty" jsonschema:"hybrid (default: meaning and words), dense (meaning only) or lexical (words only)"`
		MinSimilarity *float64 `json:"min_similarity,omitempty" jsonschema:"leave out results less similar than this"`
	}
	mcpRecallInput struct {
		Scope        string   `json:"scope,omitempty" jsonschema:"scope to search in; may be left out when the key allows exactly one scope"`
		Query        string   `json:"query" jsonschema:"what to look for"`
		SessionScope string   `json:"session_scope,omitempty" jsonschema:"scope of the conversation whose latest turns to return (default: scope)"`
		RecentTurns  int      `json:"recent_turns,omitempty" jsonschema:"how many of the latest working and episodic memories to return raw, 1..100 (default 5)"`
		Types        []string `json:"types,omitempty" jsonschema:"memory types to search (default: all)"`
		TopK         int      `json:"top_k,omitempty" jsonschema:"how many search results besides the turns, 1..100 (default 10)"`
		Mode         string   `json:"mode,omitempty" jsonschema:"hybrid (default), dense or lexical"`
	}
	mcpWindow struct {
		Recent  []memory.Item  `json:"recent"`
		Results []SearchResult `json:"results"`
	}
	mcpListInput struct {
		Scope string   `json:"scope,omitempty" jsonschema:"scope to list; may be left out when the key allows exactly one scope"`
		Types []string `json:"types,omitempty"`
		Limit int      `json:"limit,omitempty" jsonschema:"page size, 1..1000 (default 100)"`
		After string   `json:"after,omitempty" jsonschema:"next_after of the previous page"`
	}
	mcpIDInput struct {
		MemoryID string `json:"memory_id"`
	}
	mcpUpdateInput struct {
		MemoryID string          `json:"memory_id"`
		Text     string          `json:"text,omitempty" jsonschema:"new text (stored as {\"text\": ...}); give text or content"`
		Content  json.RawMessage `json:"content,omitempty" jsonschema:"new content, a JSON object"`
	}
	mcpForgetInput struct {
		Scope  string `json:"scope,omitempty" jsonschema:"scope to forget; may be left out when the key allows exactly one scope"`
		Reason string `json:"reason,omitempty"`
	}
	mcpMemories struct {
		Memories  []memory.Item `json:"memories"`
		NextAfter string        `json:"next_after,omitempty"`
	}
	mcpDeleted struct {
		Deleted string `json:"deleted"`
	}
)

type keyCtx struct{}

func (s *Server) mcpRoutes() {
	var servers sync.Map // *Key -> *mcp.Server; a reload makes new *Key values
	h := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		k, _ := r.Context().Value(keyCtx{}).(*Key)
		if k == nil {
			return nil
		}
		if srv, ok := servers.Load(k); ok {
			return srv.(*mcp.Server)
		}
		srv, _ := servers.LoadOrStore(k, s.mcpServer(k))
		return srv.(*mcp.Server)
	}, &mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true, MaxRequestBodyBytes: s.cfg.MaxBodyBytes})
	s.route("/mcp", false, func(w http.ResponseWriter, r *http.Request, k *Key) error {
		return s.serveMCP(w, r.WithContext(context.WithValue(r.Context(), keyCtx{}, k)), h)
	})
}

// jsonrpcCall is what serveMCP reads of a JSON-RPC message.
type jsonrpcCall struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
}

// Answers serveMCP gives itself (JSON-RPC error codes of the server range).
const (
	mcpCodeTimeout = -32001 // the request did not finish within its deadline
)

// serveMCP serves one /mcp request through the SDK's handler, holding it to what
// every door promises:
//
//   - ping is answered (an empty result), whatever protocol version the client
//     negotiated: the MCP base protocol requires it, and the SDK refuses it from
//     clients on the sessionless protocol (2026-07-28);
//   - a call always gets an answer: tools run under a deadline a little shorter than
//     the request's (see toolCtx), and a call the SDK leaves without a response
//     body (the request's deadline passed) is answered with a JSON-RPC error.
func (s *Server) serveMCP(w http.ResponseWriter, r *http.Request, h http.Handler) error {
	var call jsonrpcCall
	if r.Method == http.MethodPost {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				return errf(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "request body is larger than %d bytes", tooLarge.Limit)
			}
			return errf(http.StatusBadRequest, CodeInvalidRequest, "request body: %v", err)
		}
		_ = json.Unmarshal(body, &call) // anything else (a batch, not JSON) is the SDK's to answer
		if call.Method == "ping" && len(call.ID) > 0 {
			return writeJSON(w, http.StatusOK, map[string]any{"jsonrpc": "2.0", "id": call.ID, "result": struct{}{}})
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	rec := &bufferedResponse{header: w.Header()}
	h.ServeHTTP(rec, r)
	if len(call.ID) > 0 && rec.body.Len() == 0 && (rec.code == 0 || rec.code == http.StatusOK) {
		s.metrics.mcpUnanswered.Inc()
		w.Header().Del("Content-Length")
		return writeJSON(w, http.StatusOK, map[string]any{"jsonrpc": "2.0", "id": call.ID, "error": map[string]any{
			"code": mcpCodeTimeout, "message": "timeout: the request did not finish within " + s.cfg.RequestTimeout.String()}})
	}
	if rec.code == 0 {
		rec.code = http.StatusOK
	}
	w.WriteHeader(rec.code)
	_, _ = w.Write(rec.body.Bytes())
	return nil
}

// bufferedResponse holds the SDK's response until it is complete (the handler
// answers JSON, never a stream), so that serveMCP can see whether it is empty.
type bufferedResponse struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }
func (b *bufferedResponse) WriteHeader(code int) {
	if b.code == 0 {
		b.code = code
	}
}
func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.code == 0 {
		b.code = http.StatusOK
	}
	return b.body.Write(p)
}

// toolCtx is the context a tool of k's server runs with. The SDK gives tools a
// context of their own, not the request's, so the key's embedder share and the
// request deadline are set here again; the deadline is a little shorter than the
// request's, so the tool's answer (an error, if it ran out of time) is written before
// the request ends.
func (s *Server) toolCtx(ctx context.Context, k *Key) (context.Context, context.CancelFunc) {
	budget := s.cfg.RequestTimeout - min(time.Second, s.cfg.RequestTimeout/10)
	return context.WithTimeout(embed.WithCaller(ctx, k.Name), budget)
}

// defaultScope is the scope a tool call uses when it names none: the key's only
// scope, when it allows exactly one.
func defaultScope(k *Key, scope string) string {
	if scope == "" && len(k.scopes) == 1 && memory.ValidateScope(k.scopes[0]) == nil {
		return k.scopes[0]
	}
	return scope
}

// toolErr turns an API error into the tool's error text.
func toolErr(err error) error {
	e := classify(err)
	return fmt.Errorf("%s: %s", e.code, e.msg)
}

func contentOf(text string, content json.RawMessage) (json.RawMessage, error) {
	switch {
	case text != "" && len(content) > 0:
		return nil, errors.New("invalid_request: give text or content, not both")
	case text != "":
		b, err := json.Marshal(map[string]string{"text": text})
		return b, err
	case len(content) > 0:
		return content, nil
	}
	return nil, errors.New("invalid_request: text or content is required")
}

func (s *Server) mcpServer(k *Key) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "memory-gateway", Version: "v1"}, &mcp.ServerOptions{
		Instructions: "Long-term memory for this agent. Every call names a scope (user:<id>, session:<id>, agent:<id>); this key may use: " + fmt.Sprint(k.scopes),
	})
	s.addReadTools(srv, k)
	if !k.ReadOnly {
		s.addWriteTools(srv, k)
	}
	s.addSessionTools(srv, k)
	return srv
}

var yes, no = true, false

// defaultRecentTurns is how many turns recall_context returns unless told (seed 000,
// 4.4: "the last 5 turns raw").
const defaultRecentTurns = 5

// mcpTypeSchemas fixes what the SDK's schema inference gets wrong for us: memory
// content (json.RawMessage) is a JSON object, not an array of bytes.
// A turn's content (JSONValue) is any JSON value.
var mcpTypeSchemas = map[reflect.Type]*jsonschema.Schema{reflect.TypeFor[json.RawMessage](): {Type: "object"},
	reflect.TypeFor[JSONValue](): {Description: "any JSON value"}}

// schemaTool sets t's input and output schemas from In and Out.
func schemaTool[In, Out any](t *mcp.Tool) *mcp.Tool {
	opts := &jsonschema.ForOptions{TypeSchemas: mcpTypeSchemas}
	in, err := jsonschema.For[In](opts)
	if err != nil {
		panic(fmt.Sprintf("gateway: MCP tool %s input schema: %v", t.Name, err))
	}
	out, err := jsonschema.For[Out](opts)
	if err != nil {
		panic(fmt.Sprintf("gateway: MCP tool %s output schema: %v", t.Name, err))
	}
	t.InputSchema, t.OutputSchema = in, out
	return t
}

// addRecallTool registers recall_context: a recall window (see Server.window).
func (s *Server) addRecallTool(srv *mcp.Server, k *Key) {
	mcp.AddTool(srv, schemaTool[mcpRecallInput, mcpWindow](&mcp.Tool{Name: "recall_context", Description: "The latest turns of a conversation, raw, plus what a search finds for the query (never repeating a turn): the context to answer with.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no}}),
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpRecallInput) (*mcp.CallToolResult, mcpWindow, error) {
			ctx, cancel := s.toolCtx(ctx, k)
			defer cancel()
			scope := defaultScope(k, in.Scope)
			session := cmp.Or(in.SessionScope, scope)
			types, err := parseTypes(in.Types)
			if err == nil {
				err = checkScope(k, &scope)
			}
			if err == nil {
				err = checkScope(k, &session)
			}
			if err == nil {
				err = checkQuery(in.Query)
			}
			q := searchQuery{scope: scope, query: in.Query, mode: in.Mode, types: types, topK: in.TopK}
			if err == nil {
				err = q.check()
			}
			if err != nil {
				return nil, mcpWindow{}, toolErr(err)
			}
			recent, res, err := s.window(ctx, q, session, cmp.Or(in.RecentTurns, defaultRecentTurns))
			if err != nil {
				return nil, mcpWindow{}, toolErr(err)
			}
			if recent == nil {
				recent = []memory.Item{}
			}
			return nil, mcpWindow{Recent: recent, Results: res}, nil
		})
}

// addReadTools registers the tools every key gets.
func (s *Server) addReadTools(srv *mcp.Server, k *Key) {
	mcp.AddTool(srv, schemaTool[mcpSearchInput, SearchResponse](&mcp.Tool{Name: "search_memories", Description: "Search memories of one scope by meaning and by words; best first, each result saying why.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no}}),
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpSearchInput) (*mcp.CallToolResult, SearchResponse, error) {
			ctx, cancel := s.toolCtx(ctx, k)
			defer cancel()
			scope := defaultScope(k, in.Scope)
			types, err := parseTypes(in.Types)
			if err == nil {
				err = checkScope(k, &scope)
			}
			if err == nil {
				err = checkQuery(in.Query)
			}
			if err != nil {
				return nil, SearchResponse{}, toolErr(err)
			}
			q := searchQuery{scope: scope, query: in.Query, mode: in.Mode, types: types, topK: in.TopK, minSimilarity: in.MinSimilarity}
			if err := q.check(); err != nil {
				return nil, SearchResponse{}, toolErr(err)
			}
			res, err := s.searchScope(ctx, q)
			if err != nil {
				return nil, SearchResponse{}, toolErr(err)
			}
			return nil, SearchResponse{Results: res}, nil
		})
	s.addRecallTool(srv, k)
	mcp.AddTool(srv, schemaTool[mcpListInput, mcpMemories](&mcp.Tool{Name: "get_memories", Description: "List the memories of one scope, a page at a time.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no}}),
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpListInput) (*mcp.CallToolResult, mcpMemories, error) {
			ctx, cancel := s.toolCtx(ctx, k)
			defer cancel()
			scope := defaultScope(k, in.Scope)
			types, err := parseTypes(in.Types)
			if err == nil {
				err = checkScope(k, &scope)
			}
			if err != nil {
				return nil, mcpMemories{}, toolErr(err)
			}
			limit := in.Limit
			if limit == 0 {
				limit = 100
			}
			if limit < 1 || limit > pgstore.MaxListLimit {
				return nil, mcpMemories{}, errors.New("invalid_request: limit must be in [1, 1000]")
			}
			if in.After != "" {
				if err := checkID("after", in.After); err != nil {
					return nil, mcpMemories{}, toolErr(err)
				}
			}
			items, err := s.mem.Store().List(ctx, pgstore.ListQuery{Scope: scope, Types: types, After: in.After, Limit: limit})
			if err != nil {
				return nil, mcpMemories{}, toolErr(err)
			}
			out := mcpMemories{Memories: items}
			if out.Memories == nil {
				out.Memories = []memory.Item{}
			}
			if len(items) == limit {
				out.NextAfter = items[len(items)-1].MemoryID
			}
			return nil, out, nil
		})
	mcp.AddTool(srv, schemaTool[mcpIDInput, memory.Item](&mcp.Tool{Name: "get_memory", Description: "Get one memory by its memory_id.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no}}),
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpIDInput) (*mcp.CallToolResult, memory.Item, error) {
			ctx, cancel := s.toolCtx(ctx, k)
			defer cancel()
			it, err := s.visible(ctx, k, in.MemoryID)
			if err != nil {
				return nil, memory.Item{}, toolErr(err)
			}
			return nil, it, nil
		})
}

// addWriteTools registers the tools of keys that may write.
func (s *Server) addWriteTools(srv *mcp.Server, k *Key) {
	mcp.AddTool(srv, schemaTool[mcpAddInput, WriteResponse](&mcp.Tool{Name: "add_memory", Description: "Remember something about a user, session or agent.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &no, IdempotentHint: true, OpenWorldHint: &no}}),
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpAddInput) (*mcp.CallToolResult, WriteResponse, error) {
			ctx, cancel := s.toolCtx(ctx, k)
			defer cancel()
			content, err := contentOf(in.Text, in.Content)
			if err != nil {
				return nil, WriteResponse{}, err
			}
			typ := memory.Type(in.MemoryType)
			if typ == "" {
				typ = memory.Semantic
			}
			items, err := s.newItems(k, []NewMemory{{Scope: defaultScope(k, in.Scope), MemoryType: typ, Key: in.Key, Content: content, Source: "mcp"}})
			if err != nil {
				return nil, WriteResponse{}, toolErr(err)
			}
			res, err := s.write(ctx, items)
			if err != nil {
				return nil, WriteResponse{}, toolErr(err)
			}
			return nil, res[0], nil
		})
	mcp.AddTool(srv, schemaTool[mcpUpdateInput, memory.Item](&mcp.Tool{Name: "update_memory", Description: "Replace a memory's content; the old value is kept in its history.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no}}),
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpUpdateInput) (*mcp.CallToolResult, memory.Item, error) {
			ctx, cancel := s.toolCtx(ctx, k)
			defer cancel()
			content, err := contentOf(in.Text, in.Content)
			if err != nil {
				return nil, memory.Item{}, err
			}
			it, err := s.update(ctx, k, in.MemoryID, UpdateRequest{Content: content})
			if err != nil {
				return nil, memory.Item{}, toolErr(err)
			}
			return nil, it, nil
		})
	mcp.AddTool(srv, schemaTool[mcpIDInput, mcpDeleted](&mcp.Tool{Name: "delete_memory", Description: "Delete one memory by its memory_id.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no}}),
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpIDInput) (*mcp.CallToolResult, mcpDeleted, error) {
			ctx, cancel := s.toolCtx(ctx, k)
			defer cancel()
			if _, err := s.visible(ctx, k, in.MemoryID); err != nil {
				return nil, mcpDeleted{}, toolErr(err)
			}
			if _, err := s.mem.Delete(ctx, in.MemoryID, "gateway key "+k.Name); err != nil {
				return nil, mcpDeleted{}, toolErr(err)
			}
			return nil, mcpDeleted{Deleted: in.MemoryID}, nil
		})
	mcp.AddTool(srv, schemaTool[mcpForgetInput, ForgetResponse](&mcp.Tool{Name: "delete_all_memories", Description: "Forget a whole scope: every memory of it is deleted and never restored.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no}}),
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpForgetInput) (*mcp.CallToolResult, ForgetResponse, error) {
			ctx, cancel := s.toolCtx(ctx, k)
			defer cancel()
			scope := defaultScope(k, in.Scope)
			err := checkScope(k, &scope)
			if err == nil {
				err = checkReason(in.Reason)
			}
			if err != nil {
				return nil, ForgetResponse{}, toolErr(err)
			}
			res, err := s.forgetScope(ctx, k, scope, in.Reason)
			if err != nil {
				return nil, ForgetResponse{}, toolErr(err)
			}
			return nil, ForgetResponse{Scope: scope, Deleted: res.Deleted, ForgottenAt: res.ForgottenAt}, nil
		})
}
