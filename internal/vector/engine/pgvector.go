package engine

import (
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/pgvector"
)

// openPGVector is the PGVector engine's index (its embeddings table, or a
// generation's), with v's search tuning (zero fields
// take pgvector's defaults).
func openPGVector(pool *pgxpool.Pool, schema string, spec vector.Spec, v Vectors) vector.Index {
	return pgvector.NewTable(pool, schema, v.pgvectorTable(), spec, pgvector.Params{EfSearch: v.EfSearch, ExactBelow: v.ExactBelow})
}
