package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MCP tools of the short-term tier (sessions.go): the same calls as /v1/sessions.
type (
	mcpTurn struct {
		Role    string          `json:"role" jsonschema:"who spoke: user, assistant, tool, system…"`
		Text    string          `json:"text,omitempty" jsonschema:"the message as text; give text or content"`
		Content json.RawMessage `json:"content,omitempty" jsonschema:"the message as a JSON object; give text or content"`
	}
	mcpAppendInput struct {
		Session string    `json:"session" jsonschema:"the session (session:<id>)"`
		Owner   string    `json:"owner,omitempty" jsonschema:"whom the session belongs to (user:<id>): its turns are promoted to the owner's memories and a forget of the owner ends it"`
		Turns   []mcpTurn `json:"turns" jsonschema:"the turns to append, 1..100, in order"`
	}
	mcpSessionInput struct {
		Session string `json:"session" jsonschema:"the session (session:<id>)"`
		Last    int    `json:"last,omitempty" jsonschema:"how many of the latest turns (0 or left out: all)"`
		AsOf    string `json:"as_of,omitempty" jsonschema:"the window as it was then (RFC 3339)"`
	}
	mcpSummaryInput struct {
		Session string `json:"session" jsonschema:"the session (session:<id>)"`
		Through int64  `json:"through" jsonschema:"the number of the last turn the summary replaces"`
		Text    string `json:"text" jsonschema:"the summary"`
	}
	mcpPromoteInput struct {
		Session string `json:"session" jsonschema:"the session (session:<id>)"`
		Through int64  `json:"through,omitempty" jsonschema:"promote the turns through this number (0 or left out: all)"`
	}
	mcpEndInput struct {
		Session string `json:"session" jsonschema:"the session (session:<id>)"`
		Promote *bool  `json:"promote,omitempty" jsonschema:"keep its turns as memories first (default: the store's setting)"`
	}
)

// addSessionTools registers get_session and, for keys that may write, the tools
// that change sessions.
func (s *Server) addSessionTools(srv *mcp.Server, k *Key) {
	mcp.AddTool(srv, schemaTool[mcpSessionInput, SessionResponse](&mcp.Tool{Name: "get_session", Description: "The latest turns of a conversation (short-term memory), oldest first.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no}}),
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpSessionInput) (*mcp.CallToolResult, SessionResponse, error) {
			ctx, cancel := s.toolCtx(ctx, k)
			defer cancel()
			last, asOf, err := windowQuery(itoa(in.Last), in.AsOf)
			if err != nil {
				return nil, SessionResponse{}, toolErr(err)
			}
			out, err := s.readSession(ctx, k, in.Session, last, asOf)
			if err != nil {
				return nil, SessionResponse{}, toolErr(err)
			}
			return nil, out, nil
		})
	if k.ReadOnly {
		return
	}
	mcp.AddTool(srv, schemaTool[mcpAppendInput, AppendResponse](&mcp.Tool{Name: "append_turns", Description: "Append turns to a conversation (short-term memory, kept while the conversation is active).",
		Annotations: &mcp.ToolAnnotations{OpenWorldHint: &no}}),
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpAppendInput) (*mcp.CallToolResult, AppendResponse, error) {
			ctx, cancel := s.toolCtx(ctx, k)
			defer cancel()
			req := AppendRequest{Owner: in.Owner, Turns: make([]TurnIn, len(in.Turns))}
			for i, t := range in.Turns {
				c, err := turnContent(t.Text, t.Content)
				if err != nil {
					return nil, AppendResponse{}, err
				}
				req.Turns[i] = TurnIn{Role: t.Role, Content: JSONValue(c)}
			}
			out, err := s.appendTurns(ctx, k, in.Session, req)
			if err != nil {
				return nil, AppendResponse{}, toolErr(err)
			}
			return nil, out, nil
		})
	mcp.AddTool(srv, schemaTool[mcpSummaryInput, SummaryResponse](&mcp.Tool{Name: "summarize_session", Description: "Replace a conversation's turns through a number with a summary (the turns are kept as memories first when the store promotes at the end).",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &no}}),
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpSummaryInput) (*mcp.CallToolResult, SummaryResponse, error) {
			ctx, cancel := s.toolCtx(ctx, k)
			defer cancel()
			c, err := json.Marshal(in.Text)
			if err != nil {
				return nil, SummaryResponse{}, err
			}
			out, err := s.summarize(ctx, k, in.Session, SummaryRequest{Through: in.Through, Content: JSONValue(c)})
			if err != nil {
				return nil, SummaryResponse{}, toolErr(err)
			}
			return nil, out, nil
		})
	mcp.AddTool(srv, schemaTool[mcpPromoteInput, PromoteResponse](&mcp.Tool{Name: "promote_session", Description: "Keep a conversation's turns as episodic memories of its owner (each turn once).",
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, OpenWorldHint: &no}}),
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpPromoteInput) (*mcp.CallToolResult, PromoteResponse, error) {
			ctx, cancel := s.toolCtx(ctx, k)
			defer cancel()
			out, err := s.promote(ctx, k, in.Session, in.Through)
			if err != nil {
				return nil, PromoteResponse{}, toolErr(err)
			}
			return nil, out, nil
		})
	mcp.AddTool(srv, schemaTool[mcpEndInput, EndResponse](&mcp.Tool{Name: "end_session", Description: "End a conversation: its turns are kept as memories first unless the store promotes on request only.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &no}}),
		func(ctx context.Context, _ *mcp.CallToolRequest, in mcpEndInput) (*mcp.CallToolResult, EndResponse, error) {
			ctx, cancel := s.toolCtx(ctx, k)
			defer cancel()
			out, err := s.endSession(ctx, k, in.Session, in.Promote)
			if err != nil {
				return nil, EndResponse{}, toolErr(err)
			}
			return nil, out, nil
		})
}

// turnContent is a turn's content from MCP: text as a JSON string, or an object.
func turnContent(text string, content json.RawMessage) (json.RawMessage, error) {
	switch {
	case text != "" && len(content) > 0:
		return nil, errors.New("invalid_request: give text or content, not both")
	case text != "":
		return json.Marshal(text)
	case len(content) > 0:
		return content, nil
	}
	return nil, errors.New("invalid_request: text or content is required")
}

func itoa(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}
