package pgstore

import (
	"testing"

	"github.com/amemory/memory-operator/internal/shortterm"
	"github.com/amemory/memory-operator/internal/shortterm/shorttermtest"
)

// TestSessionsConformance holds the short-term tier on PostgreSQL to the suite the
// Redis backend passes.
func TestSessionsConformance(t *testing.T) {
	shorttermtest.Run(t, func(t *testing.T, opts shortterm.Options) shortterm.Store {
		s, _ := newStore(t)
		return s.Sessions(opts)
	})
}
