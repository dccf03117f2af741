package pgstore

// TEMPORARY (lead's stub until the lexical index lands from h21-lexical): the
// interface service codes against. Deleted at that merge.

import (
	"context"
	"time"

	"github.com/amemory/memory-operator/internal/memory"
)

type LexicalQuery struct {
	Scope string
	Types []memory.Type
	Text  string
	K     int
	Now   time.Time
}

type LexicalHit struct {
	MemoryID string
	Score    float64
	Matched  int
}

func (s *Store) LexicalSearch(ctx context.Context, q LexicalQuery) ([]LexicalHit, error) {
	return []LexicalHit{}, nil
}
