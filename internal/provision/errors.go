package provision

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/minio/minio-go/v7"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/milvus"
)

// Reason classifies a failure the way a MemoryStore condition reports it. The values
// equal the API's condition reasons so the controller can pass them through.
type Reason string

// Reasons, one per kind of failure a user can act on.
const (
	ReasonUnreachable          Reason = "Unreachable"
	ReasonAuthenticationFailed Reason = "AuthenticationFailed"
	ReasonPermissionDenied     Reason = "PermissionDenied"
	ReasonDimensionMismatch    Reason = "DimensionMismatch"
	ReasonMetricMismatch       Reason = "MetricMismatch"
	ReasonTenantConflict       Reason = "TenantConflict"
	// ReasonExtensionMissing: the store's engine is PGVector and its PostgreSQL server
	// has no vector extension to create (or one too old for HNSW).
	ReasonExtensionMissing Reason = "ExtensionMissing"
	// ReasonEngineUnavailable: the store's engine needs a server its backend does not
	// declare (Milvus without backend.milvus).
	ReasonEngineUnavailable Reason = "EngineUnavailable"
	// ReasonEngineChangeRefused: the store's vectors are in one engine and its spec
	// (or backend) now names another.
	ReasonEngineChangeRefused Reason = "EngineChangeRefused"
	ReasonBucketNotFound      Reason = "BucketNotFound"
	ReasonEmbedderFailed      Reason = "EmbedderFailed"
	ReasonBackendError        Reason = "BackendError"
)

// Error is a provisioning failure with its reason. Messages name the backend and the
// object concerned, never credentials.
type Error struct {
	Reason Reason
	Err    error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Permanent reports whether retrying cannot help until something changes (the spec, a
// Secret or the backend's content), so the controller can back off instead of hammering.
func (e *Error) Permanent() bool {
	switch e.Reason {
	case ReasonDimensionMismatch, ReasonMetricMismatch, ReasonTenantConflict, ReasonExtensionMissing,
		ReasonEngineUnavailable, ReasonEngineChangeRefused:
		return true
	}
	return false
}

// ReasonOf returns the reason of err, BackendError for unclassified errors.
func ReasonOf(err error) Reason {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Reason
	}
	return ReasonBackendError
}

func fail(reason Reason, format string, args ...any) error {
	return &Error{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// Failf is a provisioning failure with its reason, for checks made outside this
// package (the controller's engine choice).
func Failf(reason Reason, format string, args ...any) error { return fail(reason, format, args...) }

// classify wraps err with the reason that best explains it; what names the backend for
// the message ("PostgreSQL 10.0.0.5:5432").
func classify(what string, err error) error {
	if err == nil {
		return nil
	}
	var pe *Error
	if errors.As(err, &pe) {
		return err
	}
	wrap := func(r Reason) error { return &Error{Reason: r, Err: fmt.Errorf("%s: %w", what, err)} }

	if errors.Is(err, vector.ErrDimensionMismatch) {
		return wrap(ReasonDimensionMismatch)
	}
	if errors.Is(err, vector.ErrMetricMismatch) {
		return wrap(ReasonMetricMismatch)
	}
	if errors.Is(err, milvus.ErrNotOwner) {
		return wrap(ReasonTenantConflict)
	}
	if r, ok := grpcReason(err); ok {
		return wrap(r)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "28P01", "28000": // invalid_password, invalid_authorization_specification
			return wrap(ReasonAuthenticationFailed)
		case "42501": // insufficient_privilege
			return wrap(ReasonPermissionDenied)
		}
		return wrap(ReasonBackendError)
	}
	var mErr minio.ErrorResponse
	if errors.As(err, &mErr) {
		switch mErr.Code {
		case "InvalidAccessKeyId", "SignatureDoesNotMatch":
			return wrap(ReasonAuthenticationFailed)
		case "AccessDenied":
			return wrap(ReasonPermissionDenied)
		case "NoSuchBucket":
			return wrap(ReasonBucketNotFound)
		}
		return wrap(ReasonBackendError)
	}
	var netErr net.Error
	var connectErr *pgconn.ConnectError
	if errors.As(err, &netErr) || errors.As(err, &connectErr) || errors.Is(err, context.DeadlineExceeded) ||
		strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "no such host") {
		return wrap(ReasonUnreachable)
	}
	return wrap(ReasonBackendError)
}

// grpcReason reads the gRPC status Milvus (its SDK) reports a refused login, a missing
// privilege or an unreachable server with: "auth check failure" (Unauthenticated),
// "PrivilegeSearch: permission deny to <user>" (PermissionDenied).
func grpcReason(err error) (Reason, bool) {
	switch status.Code(err) {
	case codes.Unauthenticated:
		return ReasonAuthenticationFailed, true
	case codes.PermissionDenied:
		return ReasonPermissionDenied, true
	case codes.Unavailable:
		return ReasonUnreachable, true
	}
	return "", false
}
