package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/memory/pgstore"
	"github.com/amemory/memory-operator/internal/memory/service"
	"github.com/amemory/memory-operator/internal/shortterm"
)

// Machine-readable error codes, in every error response's "code" (docs/gateway.md
// lists them). A 4xx is permanent (the same request fails again) and never carries
// Retry-After; a 503 names the dependency that failed and always carries it.
const (
	CodeUnauthenticated = "unauthenticated" // 401: no key, or not a valid key
	CodeScopeForbidden  = "scope_forbidden" // 403: the key does not allow the scope
	CodeReadOnly        = "read_only"       // 403: a write with a read-only key
	CodeInvalidScope    = "invalid_scope"   // 400
	CodeInvalidType     = "invalid_type"    // 400: memory type
	CodeInvalidContent  = "invalid_content" // 400: content not an object, \u0000, ...
	CodeInvalidRequest  = "invalid_request" // 400: any other field
	CodeInvalidJSON     = "invalid_json"    // 400
	CodeUnknownField    = "unknown_field"   // 400
	CodeBodyTooLarge    = "body_too_large"  // 413
	CodeBatchTooLarge   = "batch_too_large" // 413
	CodeTextTooLong     = "text_too_long"   // 413: a text over the store's embedder input limit (overflow Refuse)
	CodeNotFound        = "not_found"       // 404
	CodeConflict        = "conflict"        // 409: memory_id used by another memory of the scope
	CodeForgotten       = "forgotten"       // 409: the scope was forgotten after this memory was created
	CodeSessionFull     = "session_full"    // 409: the session holds as many turns as it may
	CodeRateLimited     = "rate_limited"    // 429, with Retry-After: the key's rate, or its share of the embedder
	// 503, with Retry-After: which dependency failed.
	CodeDatabaseDown  = "database_unavailable"   // PostgreSQL is not answering
	CodeIndexDown     = "index_unavailable"      // search needs the vector index
	CodeEmbedderDown  = "embedder_unavailable"   // the embedding model is not answering in time
	CodeTimeout       = "timeout"                // the request's time ran out
	CodeShortTermDown = "short_term_unavailable" // the short-term tier (Redis) is not answering
	CodeInternal      = "internal"               // 500: a bug; the log has the error
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

// classify maps an error of the layers below to its response. Input the layers
// below refuse is a 4xx; a failed dependency is a 503 with Retry-After that names it
// (the client may retry, and nothing was acknowledged that is not stored); anything
// else is a 500, never blamed on a dependency that did not fail.
func classify(err error) *apiError {
	var ae *apiError
	var fe *memory.FieldError
	var tl *embed.TextTooLongError
	var pe *pgconn.PgError
	unavailable := func(code string, retryAfter int, msg string) *apiError {
		return &apiError{status: http.StatusServiceUnavailable, code: code, retryAfter: retryAfter, msg: msg}
	}
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &fe):
		code := CodeInvalidRequest
		switch fe.Field {
		case "scope":
			code = CodeInvalidScope
		case "memory_type", "types":
			code = CodeInvalidType
		case "content":
			code = CodeInvalidContent
		}
		return errf(http.StatusBadRequest, code, "%s", fe.Error())
	case errors.As(err, &tl):
		return errf(http.StatusRequestEntityTooLarge, CodeTextTooLong,
			"%v (the store's spec.embedder.maxInputBytes; with spec.embedder.overflow Truncate the first %d bytes are embedded instead)", err, tl.Max)
	case classifySession(err) != nil:
		return classifySession(err)
	case errors.Is(err, pgstore.ErrNotFound):
		return errf(http.StatusNotFound, CodeNotFound, "no such memory")
	case errors.Is(err, pgstore.ErrConflict):
		return errf(http.StatusConflict, CodeConflict, "memory_id already names another memory of this scope (one with a different key)")
	case errors.Is(err, pgstore.ErrForgotten):
		return errf(http.StatusConflict, CodeForgotten, "%v", err)
	case errors.Is(err, embed.ErrBusy):
		return &apiError{status: http.StatusTooManyRequests, code: CodeRateLimited, retryAfter: 1,
			msg: "this key already has its share of embedding calls in flight; retry after one ends"}
	case errors.Is(err, service.ErrEmbedderUnavailable):
		return unavailable(CodeEmbedderDown, 5, "the embedding model is not answering: "+embedCause(err))
	case errors.Is(err, service.ErrIndexUnavailable):
		return unavailable(CodeIndexDown, 5, "search is unavailable: the vector index is not answering (writes are still stored and indexed once it is back)")
	case errors.Is(err, context.Canceled):
		return errf(499, "canceled", "request canceled")
	case errors.Is(err, errRequestTime):
		return unavailable(CodeTimeout, 1, "the request did not finish in time (the store's database was still at work on it); nothing was written that was not acknowledged")
	case errors.As(err, &pe):
		return classifyPg(pe)
	case fromDatabase(err):
		return unavailable(CodeDatabaseDown, 1, "the store's database is not answering; nothing was written that was not acknowledged")
	case errors.Is(err, context.DeadlineExceeded):
		return unavailable(CodeTimeout, 1, "the request did not finish in time; nothing was written that was not acknowledged")
	}
	return errf(http.StatusInternalServerError, CodeInternal, "internal error (the gateway's log has it)")
}

// classifySession maps the short-term tier's errors (nil: not one of them).
func classifySession(err error) *apiError {
	switch {
	case errors.Is(err, shortterm.ErrNotFound):
		return errf(http.StatusNotFound, CodeNotFound, "no such session (it may have expired)")
	case errors.Is(err, shortterm.ErrOwner):
		return errf(http.StatusConflict, CodeConflict, "the session belongs to another owner")
	case errors.Is(err, shortterm.ErrSessionFull):
		return errf(http.StatusConflict, CodeSessionFull, "%v", shortterm.ErrSessionFull)
	case errors.Is(err, shortterm.ErrNothing):
		return errf(http.StatusBadRequest, CodeInvalidRequest, "through is before the session's first turn: nothing to summarize")
	case errors.Is(err, shortterm.ErrPastLast):
		return errf(http.StatusBadRequest, CodeInvalidRequest, "through is past the session's last turn")
	case errors.Is(err, shortterm.ErrUnavailable):
		return &apiError{status: http.StatusServiceUnavailable, code: CodeShortTermDown, retryAfter: 1,
			msg: "the short-term store (Redis) is not answering; long-term memory is not affected"}
	}
	return nil
}

// embedCause is what a client may read of an embedder failure: that it took too
// long, or that it failed, without the model server's own words.
func embedCause(err error) string {
	if errors.Is(err, embed.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		return "it did not answer in time"
	}
	return "it failed"
}

// classifyPg maps an error PostgreSQL answered with. Values it refuses are the
// request's (class 22, data exception): 400, though the door should have refused
// them first (the log says so). Lost connections, resource limits, shutdowns and
// lock conflicts are the database's (503); anything else (a privilege, a missing
// table) is a fault of the deployment: 500.
func classifyPg(pe *pgconn.PgError) *apiError {
	switch class := pe.Code[:min(2, len(pe.Code))]; class {
	case "22":
		return errf(http.StatusBadRequest, CodeInvalidRequest, "a value of the request cannot be stored (SQLSTATE %s)", pe.Code)
	case "08", "40", "53", "55", "57", "58":
		return &apiError{status: http.StatusServiceUnavailable, code: CodeDatabaseDown, retryAfter: 1,
			msg: "the store's database is not answering (SQLSTATE " + pe.Code + "); nothing was written that was not acknowledged"}
	}
	return errf(http.StatusInternalServerError, CodeInternal, "internal error: the database refused the gateway's statement (SQLSTATE %s)", pe.Code)
}

// fromDatabase reports whether err came from the PostgreSQL driver or its
// connections: a pgx, pgconn or pool error anywhere in its tree (the driver's own
// error types, most of them unexported), a closed connection or transaction, or a
// network failure.
func fromDatabase(err error) bool {
	var opErr *net.OpError // not net.Error: context.DeadlineExceeded is one too
	if pgconn.Timeout(err) || errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, pgx.ErrTxClosed) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &opErr) {
		return true
	}
	var found bool
	walkErrors(err, func(e error) {
		t := reflect.TypeOf(e)
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if strings.HasPrefix(t.PkgPath(), "github.com/jackc/") {
			found = true
		}
	})
	return found
}

// walkErrors calls f on err and every error it wraps.
func walkErrors(err error, f func(error)) {
	if err == nil {
		return
	}
	f(err)
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		walkErrors(u.Unwrap(), f)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			walkErrors(e, f)
		}
	}
}

// errRequestTime is the cause of a request's context when its own time
// (--request-timeout) ran out.
var errRequestTime = errors.New("the request's time ran out")

// inTime marks the error of a request whose own time ran out, so that classify
// calls what followed from it a timeout: a statement cancelled mid-way (often one
// waiting for other writers of the same scopes) is not a database that stopped
// answering.
func inTime(ctx context.Context, err error) error {
	if err != nil && errors.Is(context.Cause(ctx), errRequestTime) && !errors.Is(err, errRequestTime) {
		return fmt.Errorf("%w (%w)", err, errRequestTime)
	}
	return err
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	e := classify(err)
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	switch {
	case e.status >= 500:
		s.log.Warn("backend error", "path", r.URL.Path, "code", e.code, "error", err.Error())
	case errors.As(err, new(*pgconn.PgError)):
		// The database refused a value the door should have refused first (its
		// message may quote the value: only the code is logged).
		s.log.Warn("input refused by the database, not at the door", "path", r.URL.Path, "error", e.msg)
	}
	_ = writeJSON(w, e.status, ErrorBody{Error: ErrorDetail{Code: e.code, Message: e.msg}})
}
