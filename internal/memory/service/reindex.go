package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/amemory/memory-operator/internal/embed"
	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/vector"
)

// Reindex brings the index entries of items (memories as read from the store) and
// of gone (IDs of memories no longer stored) in line with the store: a live memory's
// vector is embedded and written, an archived or gone memory's vector deleted. A
// memory whose text the input limit refuses gets no vector (as the gateway never
// indexes it); their IDs are returned.
//
// It is how a re-embed worker fills an index of another model (pgstore's index
// generations): Memory is then built over that index and model. Without recheck it
// writes once and reads nothing back, for an index nobody else writes and whose
// later changes are recorded and done again from the record; with recheck it reads
// the memories back and redoes those changed meanwhile, as every write does, for an
// index others write too (a generation that serves).
func (m *Memory) Reindex(ctx context.Context, items []memory.Item, gone []string, recheck bool) (refused []string, err error) {
	ops := make([]indexOp, 0, len(items)+len(gone))
	for _, it := range items {
		op := opFor(it.MemoryID, it)
		if op.item != nil {
			if _, err := m.embedText(op.id, *op.item); errors.Is(err, embed.ErrTextTooLong) {
				refused = append(refused, op.id)
				op = indexOp{id: op.id}
			}
		}
		ops = append(ops, op)
	}
	for _, id := range gone {
		ops = append(ops, indexOp{id: id})
	}
	write := m.apply
	if recheck {
		write = m.sync
	}
	if err := write(ctx, ops); err != nil {
		return refused, fmt.Errorf("memory service: reindex: %w", err)
	}
	return refused, nil
}

// Index is the vector index the memory layer writes and searches.
func (m *Memory) Index() vector.Index { return m.index }
