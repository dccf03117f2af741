package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3gen"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/shortterm"
)

// The OpenAPI document of the native API and the LangGraph Store API is generated
// from the Go types the handlers decode and encode, so it cannot drift from them;
// docs/gateway-openapi.json is a copy a test keeps current, and the tests validate
// live requests and responses against it.

// OpenAPIDocument is the document served at /openapi.json.
var OpenAPIDocument = mustOpenAPI()

func mustOpenAPI() []byte {
	doc, err := BuildOpenAPI()
	if err != nil {
		panic("gateway: building the OpenAPI document: " + err.Error())
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		panic("gateway: encoding the OpenAPI document: " + err.Error())
	}
	return append(b, '\n')
}

var (
	rawMessageType = reflect.TypeFor[json.RawMessage]()
	jsonValueType  = reflect.TypeFor[JSONValue]()
	timeType       = reflect.TypeFor[time.Time]()
	memoryTypeType = reflect.TypeFor[memory.Type]()
)

// customize shapes generated schemas: JSON objects for raw content, the memory type
// enum, required fields (those without omitempty), no unknown fields, and the bounds
// a field's `openapi:"minimum=…,maximum=…"` tag gives, or its `openapi:"enum=a|b"`.
func customize(_ string, t reflect.Type, tag reflect.StructTag, s *openapi3.Schema) error {
	if err := bounds(tag.Get("openapi"), s); err != nil {
		return err
	}
	switch {
	case t == rawMessageType:
		*s = *openapi3.NewObjectSchema()
		s.Description = "a JSON object"
	case t == jsonValueType:
		*s = openapi3.Schema{Description: "any JSON value", Nullable: true}
		return nil
	case t == memoryTypeType:
		s.Enum = []any{"working", "episodic", "semantic", "procedural"}
	case t.Kind() == reflect.Struct && t != timeType:
		s.AdditionalProperties = openapi3.AdditionalProperties{Has: new(bool)}
		var req []string
		for i := range t.NumField() {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" || strings.Contains(opts, "omitempty") {
				continue
			}
			req = append(req, name)
		}
		s.Required = req
	}
	if t.Kind() == reflect.Slice && t != rawMessageType && t != jsonValueType {
		s.Nullable = false
	}
	return nil
}

// bounds applies "minimum=0,maximum=1" (or "enum=a|b|c") to s.
func bounds(spec string, s *openapi3.Schema) error {
	if spec == "" {
		return nil
	}
	if v, ok := strings.CutPrefix(spec, "enum="); ok {
		for _, e := range strings.Split(v, "|") {
			s.Enum = append(s.Enum, e)
		}
		return nil
	}
	for _, part := range strings.Split(spec, ",") {
		k, v, _ := strings.Cut(part, "=")
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("openapi tag %q: %w", spec, err)
		}
		switch k {
		case "minimum":
			s.Min = &f
		case "maximum":
			s.Max = &f
		default:
			return fmt.Errorf("openapi tag %q: unknown bound %q", spec, k)
		}
	}
	return nil
}

// BuildOpenAPI returns the gateway's OpenAPI document.
func BuildOpenAPI() (*openapi3.T, error) {
	schemas := openapi3.Schemas{}
	gen := openapi3gen.NewGenerator(openapi3gen.SchemaCustomizer(customize),
		openapi3gen.CreateComponentSchemas(openapi3gen.ExportComponentSchemasOptions{ExportComponentSchemas: true, ExportTopLevelSchema: true}),
		openapi3gen.CreateTypeNameGenerator(func(t reflect.Type) string {
			if n := t.Name(); n != "" {
				if t == reflect.TypeFor[memory.Item]() {
					return "Memory"
				}
				if rest, ok := strings.CutPrefix(n, "lg"); ok {
					return "LangGraph" + rest
				}
				return strings.ToUpper(n[:1]) + n[1:]
			}
			return ""
		}))
	ref := func(v any) (*openapi3.SchemaRef, error) { return gen.NewSchemaRefForValue(v, schemas) }

	doc := &openapi3.T{
		OpenAPI: "3.0.3",
		Info: &openapi3.Info{Title: "memory-operator gateway", Version: "v1",
			Description: "The memory API of one MemoryStore. Every call is authenticated with an API key " +
				"(x-api-key, or Authorization: Bearer) and confined to the scopes the key allows."},
		Paths:      openapi3.NewPaths(),
		Components: &openapi3.Components{Schemas: schemas, SecuritySchemes: openapi3.SecuritySchemes{}},
		Security:   openapi3.SecurityRequirements{{"apiKey": {}}, {"bearer": {}}},
	}
	doc.Components.SecuritySchemes["apiKey"] = &openapi3.SecuritySchemeRef{Value: openapi3.NewSecurityScheme().WithType("apiKey").WithIn("header").WithName("x-api-key")}
	doc.Components.SecuritySchemes["bearer"] = &openapi3.SecuritySchemeRef{Value: openapi3.NewJWTSecurityScheme().WithBearerFormat("opaque")}

	errRef, err := ref(ErrorBody{})
	if err != nil {
		return nil, err
	}
	type op struct {
		method, path, id, summary string
		req                       any
		ok                        int
		resp                      any // nil: no body
		params                    openapi3.Parameters
	}
	pathParam := func(name, desc string) *openapi3.ParameterRef {
		return &openapi3.ParameterRef{Value: openapi3.NewPathParameter(name).WithSchema(openapi3.NewStringSchema()).WithDescription(desc)}
	}
	query := func(name, desc string, s *openapi3.Schema) *openapi3.ParameterRef {
		return &openapi3.ParameterRef{Value: openapi3.NewQueryParameter(name).WithSchema(s).WithDescription(desc)}
	}
	required := func(p *openapi3.ParameterRef) *openapi3.ParameterRef { p.Value.Required = true; return p }
	ops := []op{
		{"GET", "/v1/whoami", "whoami", "The caller's key: its name, scopes and whether it is read-only.", nil, 200, WhoAmI{}, nil},
		{"GET", "/v1/stats", "stats", "How the gateway's tiers are doing: the query cache's counters and hit rate (while it is on) and where sessions are kept.", nil, 200, StatsResponse{}, nil},
		{"POST", "/v1/memories", "remember", "Remember one memory (201 when new, 200 otherwise).", NewMemory{}, 201, WriteResponse{}, nil},
		{"POST", "/v1/memories/batch", "rememberBatch", "Remember up to 1000 memories, in order.", BatchRequest{}, 200, BatchResponse{}, nil},
		{"GET", "/v1/memories/{id}", "getMemory", "Get one memory.", nil, 200, memory.Item{}, openapi3.Parameters{pathParam("id", "memory_id")}},
		{"PATCH", "/v1/memories/{id}", "updateMemory", "Change a memory; its previous value goes to its history.", UpdateRequest{}, 200, memory.Item{}, openapi3.Parameters{pathParam("id", "memory_id")}},
		{"DELETE", "/v1/memories/{id}", "deleteMemory", "Delete one memory.", nil, 204, nil, openapi3.Parameters{pathParam("id", "memory_id")}},
		{"GET", "/v1/scopes/{scope}/memories", "listScope", "List a scope's live memories in memory_id order, a page at a time.", nil, 200, ListResponse{},
			openapi3.Parameters{pathParam("scope", "user:<id>, session:<id> or agent:<id>"),
				query("limit", "page size, 1..1000 (default 100)", openapi3.NewIntegerSchema().WithMin(1).WithMax(1000)),
				query("after", "next_after of the previous page", openapi3.NewStringSchema()),
				query("type", "memory type (repeat for several)", openapi3.NewStringSchema().WithEnum("working", "episodic", "semantic", "procedural"))}},
		{"POST", "/v1/search", "search", "Search within one scope by meaning (dense) and by words (lexical, BM25), fused by reciprocal rank; the top_k best, each saying why.", SearchRequest{}, 200, SearchResponse{}, nil},
		{"POST", "/v1/recall", "recall", "Rank a scope's memories by effective score (optionally one type or key), or search them with a query; with recent_turns, also a session's latest turns (a recall window).", RecallRequest{}, 200, RecallResponse{}, nil},
		{"POST", "/v1/forget", "forget", "Forget a scope: delete its memories, record a tombstone (never restored) and an audit record.", ForgetRequest{}, 200, ForgetResponse{}, nil},
		{"GET", "/v1/index/pending", "listPendingIndex", "List the index work the background indexer still owes, parked work (failed for good) included, in memory_id order.", nil, 200, PendingResponse{},
			openapi3.Parameters{query("scope", "the scope whose work to list; may be left out by a key allowed every scope", openapi3.NewStringSchema()),
				query("parked", "only parked work", openapi3.NewBoolSchema()),
				query("limit", "page size, 1..1000 (default 100)", openapi3.NewIntegerSchema().WithMin(1).WithMax(1000)),
				query("after", "next_after of the previous page", openapi3.NewStringSchema())}},
		{"POST", "/v1/index/retry", "retryParkedIndex", "Put parked index work back in the queue, once what made it fail is fixed.", RetryRequest{}, 200, RetryResponse{}, nil},
		{"POST", "/v1/sessions/{session}/turns", "appendTurns", "Append turns to a session (short-term memory; created by its first append); activity keeps it alive for the store's session TTL.", AppendRequest{}, 201, AppendResponse{},
			openapi3.Parameters{pathParam("session", "session:<id>")}},
		{"GET", "/v1/sessions/{session}", "readSession", "A session's latest turns, oldest first (counts as activity).", nil, 200, SessionResponse{},
			openapi3.Parameters{pathParam("session", "session:<id>"),
				query("last", "how many of the latest turns (0 or left out: all)", openapi3.NewIntegerSchema().WithMin(0).WithMax(float64(shortterm.DefaultMaxTurns))),
				query("as_of", "the window as it was then (RFC 3339)", openapi3.NewDateTimeSchema())}},
		{"POST", "/v1/sessions/{session}/summary", "summarizeSession", "Replace the turns through a number with a summary turn.", SummaryRequest{}, 200, SummaryResponse{},
			openapi3.Parameters{pathParam("session", "session:<id>")}},
		{"POST", "/v1/sessions/{session}/promote", "promoteSession", "Keep a session's turns as episodic memories of its owner (each turn once).", PromoteRequest{}, 200, PromoteResponse{},
			openapi3.Parameters{pathParam("session", "session:<id>")}},
		{"DELETE", "/v1/sessions/{session}", "endSession", "End a session; its turns are promoted first unless the store promotes on request only (promote overrides).", nil, 200, EndResponse{},
			openapi3.Parameters{pathParam("session", "session:<id>"), query("promote", "promote its turns first (default: the store's setting)", openapi3.NewBoolSchema())}},
		{"PUT", "/store/items", "lgPutItem", "LangGraph Store API: put an item.", lgPut{}, 204, nil, nil},
		{"GET", "/store/items", "lgGetItem", "LangGraph Store API: get an item.", nil, 200, lgItem{},
			openapi3.Parameters{required(query("namespace", "dot-joined namespace (or repeated)", openapi3.NewStringSchema())),
				required(query("key", "item key", openapi3.NewStringSchema())),
				query("refresh_ttl", "accepted, ignored", openapi3.NewBoolSchema())}},
		{"DELETE", "/store/items", "lgDeleteItem", "LangGraph Store API: delete an item.", lgDelete{}, 204, nil, nil},
		{"POST", "/store/items/search", "lgSearchItems", "LangGraph Store API: search items under a namespace prefix.", lgSearch{}, 200, lgSearchResponse{}, nil},
		{"POST", "/store/namespaces", "lgListNamespaces", "LangGraph Store API: list namespaces.", lgListNamespaces{}, 200, lgNamespacesResponse{}, nil},
	}
	for _, o := range ops {
		operation := openapi3.NewOperation()
		operation.OperationID, operation.Summary = o.id, o.summary
		operation.Parameters = o.params
		if o.req != nil {
			r, err := ref(o.req)
			if err != nil {
				return nil, err
			}
			operation.RequestBody = &openapi3.RequestBodyRef{Value: openapi3.NewRequestBody().WithRequired(true).WithJSONSchemaRef(r)}
		}
		resp := openapi3.NewResponse().WithDescription(http.StatusText(o.ok))
		if o.resp != nil {
			r, err := ref(o.resp)
			if err != nil {
				return nil, err
			}
			resp.WithJSONSchemaRef(r)
		}
		operation.Responses = openapi3.NewResponses(openapi3.WithStatus(o.ok, &openapi3.ResponseRef{Value: resp}))
		if o.id == "remember" {
			again, _ := ref(WriteResponse{})
			operation.Responses.Set("200", &openapi3.ResponseRef{Value: openapi3.NewResponse().WithDescription("already stored, or reinforced").WithJSONSchemaRef(again)})
		}
		operation.Responses.Set("default", &openapi3.ResponseRef{Value: openapi3.NewResponse().
			WithDescription("an error: code is machine-readable (docs/gateway.md)").WithJSONSchemaRef(errRef)})
		doc.AddOperation(o.path, o.method, operation)
	}
	return doc, nil
}

// Response envelopes of the LangGraph API.
type (
	lgSearchResponse struct {
		Items []lgItem `json:"items"`
	}
	lgNamespacesResponse struct {
		Namespaces [][]string `json:"namespaces"`
	}
)
