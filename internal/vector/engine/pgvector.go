package engine

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/vector"
)

// openPGVector is wired to package pgvector when it lands (issue 22, in progress).
func openPGVector(_ *pgxpool.Pool, _ string, _ vector.Spec, _ Vectors) vector.Index {
	return unavailable{}
}

type unavailable struct{ vector.Index }

func (unavailable) Search(context.Context, vector.Query) ([]vector.Hit, error) {
	return nil, errors.New("the PGVector engine is not built into this binary yet")
}
