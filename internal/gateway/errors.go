package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/memory/service"
)

// Machine-readable error codes, in every error response's "code" (docs/gateway.md
// lists them).
const (
	CodeUnauthenticated = "unauthenticated"   // 401: no key, or not a valid key
	CodeScopeForbidden  = "scope_forbidden"   // 403: the key does not allow the scope
	CodeReadOnly        = "read_only"         // 403: a write with a read-only key
	CodeInvalidScope    = "invalid_scope"     // 400
	CodeInvalidType     = "invalid_type"      // 400: memory type
	CodeInvalidContent  = "invalid_content"   // 400: content not an object, \u0000, ...
	CodeInvalidRequest  = "invalid_request"   // 400: any other field
	CodeInvalidJSON     = "invalid_json"      // 400
	CodeUnknownField    = "unknown_field"     // 400
	CodeBodyTooLarge    = "body_too_large"    // 413
	CodeBatchTooLarge   = "batch_too_large"   // 413
	CodeNotFound        = "not_found"         // 404
	CodeConflict        = "conflict"          // 409: memory_id used elsewhere
	CodeForgotten       = "forgotten"         // 409: the scope was forgotten after this memory was created
	CodeRateLimited     = "rate_limited"      // 429, with Retry-After
	CodeUnavailable     = "unavailable"       // 503, with Retry-After: PostgreSQL is not answering
	CodeIndexDown       = "index_unavailable" // 503, with Retry-After: search needs the vector index
	CodeEmbedderDown    = "embedder_unavailable"
	CodeInternal        = "internal"
)

// apiError is an error with its response.
type apiError struct {
	status     int
	code       string
	msg        string
	retryAfter int // seconds; 0: no header
}

func (e *apiError) Error() string { return e.msg }

func errf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, msg: fmt.Sprintf(format, args...)}
}

// ErrorBody is every error response: {"error": {"code", "message"}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the error.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// classify maps an error of the layers below to its response. Errors of the
// backends are 503 with Retry-After: the client may retry, and nothing was
// acknowledged that is not stored.
func classify(err error) *apiError {
	var ae *apiError
	var fe *memory.FieldError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &fe):
		code := CodeInvalidRequest
		switch fe.Field {
		case "scope":
			code = CodeInvalidScope
		case "memory_type":
			code = CodeInvalidType
		case "content":
			code = CodeInvalidContent
		}
		return errf(http.StatusBadRequest, code, "%s", fe.Error())
	case errors.Is(err, pgstore.ErrNotFound):
		return errf(http.StatusNotFound, CodeNotFound, "no such memory")
	case errors.Is(err, pgstore.ErrConflict):
		return errf(http.StatusConflict, CodeConflict, "%v", err)
	case errors.Is(err, pgstore.ErrForgotten):
		return errf(http.StatusConflict, CodeForgotten, "%v", err)
	case errors.Is(err, service.ErrIndexUnavailable):
		return &apiError{status: http.StatusServiceUnavailable, code: CodeIndexDown, retryAfter: 5,
			msg: "search is unavailable: the vector index is not answering (writes are still stored and indexed once it is back)"}
	case errors.Is(err, service.ErrEmbedderUnavailable):
		return &apiError{status: http.StatusServiceUnavailable, code: CodeEmbedderDown, retryAfter: 5,
			msg: "the embedding model is not answering"}
	case errors.Is(err, context.Canceled):
		return errf(499, "canceled", "request canceled")
	}
	return &apiError{status: http.StatusServiceUnavailable, code: CodeUnavailable, retryAfter: 1,
		msg: "the store's database is not answering; nothing was written that was not acknowledged"}
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	e := classify(err)
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	if e.status >= 500 {
		s.log.Warn("backend error", "path", r.URL.Path, "error", err.Error())
	}
	_ = writeJSON(w, e.status, ErrorBody{Error: ErrorDetail{Code: e.code, Message: e.msg}})
}
