package gateway

import (
	"net/http"
	"strconv"
	"time"

	"github.com/amemory/memory-operator/internal/memory/pgstore"
)

// The pending index work of the store, through the native API: what the background
// indexer still owes the vector index, and what it parked because it kept failing
// (the dead letters). A key sees the work of the scopes it allows: one scope at a
// time, or the whole store for a key allowed every scope ("*").

// PendingWork is one memory's pending index work.
type PendingWork struct {
	MemoryID string `json:"memory_id"`
	// Scope is the memory's scope; empty when the memory is no longer stored (the
	// work deletes its vector).
	Scope      string    `json:"scope,omitempty"`
	EnqueuedAt time.Time `json:"enqueued_at"`
	// Attempts failed so far, and why the last one did (never memory content).
	Attempts  int    `json:"attempts"`
	LastError string `json:"last_error,omitempty"`
	// Parked: failed for good; never tried again until retried (POST
	// /v1/index/retry) or the memory is written again.
	Parked bool `json:"parked"`
	// NextAttemptAt is when it is tried next (absent when parked).
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
}

// PendingResponse is a page of pending index work, in memory_id order.
type PendingResponse struct {
	Pending []PendingWork `json:"pending"`
	// NextAfter is the cursor of the next page ("" when this is the last).
	NextAfter string `json:"next_after"`
}

// RetryRequest puts parked index work back in the queue.
type RetryRequest struct {
	// Scope limits the retry to one scope's memories; it may be left out by a key
	// allowed every scope, to retry the whole store's parked work.
	Scope string `json:"scope,omitempty"`
	// MemoryIDs limits it to these memories (default: all parked work in reach).
	MemoryIDs []string `json:"memory_ids,omitempty"`
}

// RetryResponse says how much parked work was re-queued.
type RetryResponse struct {
	Requeued int64 `json:"requeued"`
}

// pendingScope is the scope a pending-work call is confined to: the one named, or
// "" (the whole store) for a key allowed every scope.
func pendingScope(k *Key, scope string) (string, error) {
	if scope == "" && k.AllowsAll() {
		return "", nil
	}
	if err := checkScope(k, &scope); err != nil {
		if scope == "" {
			e := err.(*apiError)
			e.msg = "scope is required: only a key allowed every scope (\"*\") sees the whole store's pending work"
		}
		return "", err
	}
	return scope, nil
}

func (s *Server) listPending(w http.ResponseWriter, r *http.Request, k *Key) error {
	q := r.URL.Query()
	scope, err := pendingScope(k, q.Get("scope"))
	if err != nil {
		return err
	}
	limit, after, err := pageQuery(q)
	if err != nil {
		return err
	}
	parked := false
	if v := q.Get("parked"); v != "" {
		if parked, err = strconv.ParseBool(v); err != nil {
			return errf(http.StatusBadRequest, CodeInvalidRequest, "parked must be true or false")
		}
	}
	entries, err := s.mem.PendingWork(r.Context(), pgstore.PendingQuery{Scope: scope, ParkedOnly: parked, After: after, Limit: limit})
	if err != nil {
		return err
	}
	resp := PendingResponse{Pending: make([]PendingWork, len(entries))}
	for i, e := range entries {
		resp.Pending[i] = PendingWork{MemoryID: e.MemoryID, Scope: e.Scope, EnqueuedAt: e.EnqueuedAt, Attempts: e.Attempts,
			LastError: e.LastError, Parked: e.Parked, NextAttemptAt: e.NextAttemptAt}
	}
	if len(entries) == limit {
		resp.NextAfter = entries[len(entries)-1].MemoryID
	}
	return writeJSON(w, http.StatusOK, resp)
}

func (s *Server) retryPending(w http.ResponseWriter, r *http.Request, k *Key) error {
	var req RetryRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	scope, err := pendingScope(k, req.Scope)
	if err != nil {
		return err
	}
	if len(req.MemoryIDs) > pgstore.MaxListLimit {
		return errf(http.StatusRequestEntityTooLarge, CodeBatchTooLarge, "at most %d memory_ids at once", pgstore.MaxListLimit)
	}
	for i, id := range req.MemoryIDs {
		if err := checkID("memory_ids["+strconv.Itoa(i)+"]", id); err != nil {
			return err
		}
	}
	n, err := s.mem.RetryParked(r.Context(), scope, req.MemoryIDs)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, RetryResponse{Requeued: n})
}
