package clients

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/amemory/memory-operator/internal/gateway"
)

// A door is one way an agent searches a scope: each returns the memory IDs it
// finds for a query, best first.
type door struct {
	name   string
	search func(t *testing.T, scope, query string) []string
}

// searchDoors are the gateway's doors that search key-less and keyed memories alike
// for key: the native search, the native recall window, and MCP's search_memories
// and recall_context (through the official Go MCP SDK's client). The LangGraph Store
// API is left out: it lists keyed items, and ranks them as LangGraph's own
// InMemoryStore does (langgraph_semantics_test.go holds it to that).
func searchDoors(t *testing.T, g *gatewayProc, key apiKey) []door {
	hc := &http.Client{Transport: bearer{key: key.plain}}
	c := mcp.NewClient(&mcp.Implementation{Name: "recall-check", Version: "v0"}, nil)
	s, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: g.url + "/mcp", HTTPClient: hc, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatalf("MCP connect: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	tool := func(t *testing.T, name string, args map[string]any) []string {
		res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil || res.IsError {
			t.Fatalf("MCP %s: %v %+v", name, err, res)
		}
		b, _ := json.Marshal(res.StructuredContent)
		var out gateway.SearchResponse
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("MCP %s structured content %s: %v", name, b, err)
		}
		return searchIDs(out.Results)
	}
	return []door{
		{"native search", func(_ *testing.T, scope, query string) []string {
			var res gateway.SearchResponse
			g.must(http.StatusOK, key.plain, "POST", "/v1/search", gateway.SearchRequest{Scope: scope, Query: query, TopK: 20}, &res)
			return searchIDs(res.Results)
		}},
		{"native recall window", func(_ *testing.T, scope, query string) []string {
			var res gateway.RecallResponse
			g.must(http.StatusOK, key.plain, "POST", "/v1/recall", gateway.RecallRequest{Scope: scope, Query: query, TopK: 20}, &res)
			ids := make([]string, len(res.Results))
			for i, r := range res.Results {
				ids[i] = r.Memory.MemoryID
			}
			return ids
		}},
		{"MCP search_memories", func(t *testing.T, scope, query string) []string {
			return tool(t, "search_memories", map[string]any{"scope": scope, "query": query, "top_k": 20})
		}},
		{"MCP recall_context", func(t *testing.T, scope, query string) []string {
			// Its turns come from an empty session, so the results are the whole search
			// (a turn is never repeated in them).
			return tool(t, "recall_context", map[string]any{"scope": scope, "query": query, "top_k": 20, "recent_turns": 1, "session_scope": emptySession})
		}},
	}
}

func searchIDs(rs []gateway.SearchResult) []string {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.Memory.MemoryID
	}
	return ids
}

// emptySession is a session scope with no memories, for recall_context's turns.
const emptySession = "session:recall-check"

type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}
