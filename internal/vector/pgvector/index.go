package pgvector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/vector"
)

const (
	insufficientPrivilege = "42501"
	uniqueViolation       = "23505"
	// rowsPerInsert is the number of rows of one multi-row INSERT (4 parameters each).
	rowsPerInsert = 500
	// copyThreshold is the batch size from which Upsert goes through COPY.
	copyThreshold = 1000
	// fetchChunk is the number of IDs of one Fetch or ScoreIDs statement.
	fetchChunk = 5000
)

// Index is a vector.Index on the embeddings table of one schema, for the store's
// agent and worker roles (it needs only SELECT, INSERT, UPDATE and DELETE on the
// table, USAGE on the extension's schema, and for large upserts TEMPORARY, without
// which it falls back to INSERTs). It is safe for concurrent use.
type Index struct {
	pool   *pgxpool.Pool
	schema string
	name   string // the table's bare name
	table  string // sanitized, schema-qualified
	spec   vector.Spec
	params Params

	mu  sync.Mutex
	sql *statements // built once the extension's schema is known

	// insertsMet is set once a COPY of new entries met existing rows (insertNew).
	insertsMet atomic.Bool
	sizes      sizeCache
	// efs remembers, per scope and types, the ef_search a raised HNSW walk needed,
	// so the next search of that scope starts there instead of walking twice.
	efs   sizeCache
	paths pathCounts
}

var (
	_ vector.Index  = (*Index)(nil)
	_ vector.Scorer = (*Index)(nil)
)

// New returns an index on schema's embeddings table (see Ensure), with p's zero
// fields defaulted. It does not query: the extension's schema is looked up on first
// use.
func New(pool *pgxpool.Pool, schema string, spec vector.Spec, p Params) *Index {
	return NewTable(pool, schema, Table, spec, p)
}

// NewTable returns an index on another table of schema shaped like embeddings: an
// index generation's (EnsureTable). It does not query.
func NewTable(pool *pgxpool.Pool, schema, table string, spec vector.Spec, p Params) *Index {
	return &Index{pool: pool, schema: schema, name: table, table: pgx.Identifier{schema, table}.Sanitize(), spec: spec, params: p.WithDefaults()}
}

// Spec reports the index's dimension and metric.
func (ix *Index) Spec() vector.Spec { return ix.spec }

// Schema is the PostgreSQL schema the index lives in.
func (ix *Index) Schema() string { return ix.schema }

// Params are the index's parameters, defaults filled in.
func (ix *Index) Params() Params { return ix.params }

// statements are the index's SQL, which names the extension's schema.
type statements struct {
	vectorType string // <ext>.vector
	// exact, ann, count and score have a variant without ([0]) and with ([1]) a
	// filter on memory types ($3).
	exact, ann, count, score [2]string
	fetch                    string
	tmpTable                 string
	onConflict               string
}

func (ix *Index) statements(ctx context.Context) (*statements, error) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.sql != nil {
		return ix.sql, nil
	}
	ext, err := FindExtension(ctx, ix.pool)
	if err != nil {
		return nil, err
	}
	e := pgx.Identifier{ext.Schema}.Sanitize()
	_, op := opClass(ix.spec.Metric)
	dist := ` OPERATOR(` + e + `.` + op + `) $2::` + e + `.vector`
	s := &statements{vectorType: e + ".vector"}
	for i, types := range []string{"", ` AND memory_type = ANY($3::text[])`} {
		// The cast to real[] is outside the LIMIT: inside, the planner computes it for
		// every row of the scope before sorting (3x the cost of the search at 10k rows).
		s.exact[i] = `SELECT b.memory_id, b.embedding::real[] FROM (SELECT s.memory_id, s.embedding FROM (SELECT memory_id, embedding FROM ` +
			ix.table + ` WHERE scope = $1` + types + ` OFFSET 0) s ORDER BY s.embedding` + dist + `, s.memory_id LIMIT $` + fmt.Sprint(3+i) + `) b`
		s.ann[i] = `SELECT memory_id, embedding::real[] FROM ` + ix.table +
			` WHERE scope = $1` + types + ` ORDER BY embedding` + dist + ` LIMIT $` + fmt.Sprint(3+i)
		s.count[i] = `SELECT count(*) FROM (SELECT FROM ` + ix.table + ` WHERE scope = $1` +
			strings.ReplaceAll(types, "$3", "$2") + ` LIMIT $` + fmt.Sprint(2+i) + `) s`
		s.score[i] = `SELECT memory_id, embedding::real[] FROM ` + ix.table +
			` WHERE memory_id = ANY($2::text[]) AND scope = $1` + types
	}
	s.fetch = `SELECT memory_id, embedding::real[] FROM ` + ix.table + ` WHERE memory_id = ANY($1::text[])`
	s.tmpTable = `CREATE TEMPORARY TABLE ` + tmpTable + ` (memory_id text NOT NULL, scope text NOT NULL, memory_type text NOT NULL, embedding ` +
		s.vectorType + ` NOT NULL) ON COMMIT DROP`
	// Rows that already hold the same values are not rewritten (nor their index
	// entries). The columns are NOT NULL, so <> is IS DISTINCT FROM; the vector's =
	// is the extension's, named with its schema.
	s.onConflict = ` ON CONFLICT (memory_id) DO UPDATE
	SET scope = EXCLUDED.scope, memory_type = EXCLUDED.memory_type, embedding = EXCLUDED.embedding
	WHERE v.scope <> EXCLUDED.scope OR v.memory_type <> EXCLUDED.memory_type OR NOT (v.embedding OPERATOR(` + e + `.=) EXCLUDED.embedding)`
	ix.sql = s
	return s, nil
}

const tmpTable = "memory_operator_embeddings_upsert"

// Upsert writes entries by memory_id in one transaction: all or nothing. Batches of
// fewer than 1000 entries use multi-row INSERT ... ON CONFLICT DO UPDATE; larger ones
// COPY (binary), straight into the table while the entries are new (a restore into an
// empty store), else into a temporary table first (or INSERTs when the role may not
// create temporary tables). Rows that already hold the same values are not rewritten.
func (ix *Index) Upsert(ctx context.Context, entries []vector.Entry) error {
	if err := vector.ValidateEntries(ix.spec, entries); err != nil {
		return fmt.Errorf("upsert vectors into %s: %w", ix.table, err)
	}
	if len(entries) == 0 {
		return nil
	}
	// The statements first: the first call reads the extension's schema on a
	// connection of its own, which must not wait behind the transaction's.
	s, err := ix.statements(ctx)
	if err != nil {
		return fmt.Errorf("upsert vectors into %s: %w", ix.table, err)
	}
	err = pgx.BeginFunc(ctx, ix.pool, func(tx pgx.Tx) error { return ix.upsert(ctx, tx, s, entries) })
	if err != nil {
		return fmt.Errorf("upsert vectors into %s: %w", ix.table, err)
	}
	return nil
}

// UpsertTx is Upsert inside tx, a transaction of the store's own database (the
// vectors table is in its schema): a writer commits memories and their vectors
// together.
func (ix *Index) UpsertTx(ctx context.Context, tx pgx.Tx, entries []vector.Entry) error {
	if err := vector.ValidateEntries(ix.spec, entries); err != nil {
		return fmt.Errorf("upsert vectors into %s: %w", ix.table, err)
	}
	if len(entries) == 0 {
		return nil
	}
	s, err := ix.statements(ctx)
	if err == nil {
		err = ix.upsert(ctx, tx, s, entries)
	}
	if err != nil {
		return fmt.Errorf("upsert vectors into %s: %w", ix.table, err)
	}
	return nil
}

func (ix *Index) upsert(ctx context.Context, tx pgx.Tx, s *statements, entries []vector.Entry) error {
	// Rows are locked in memory_id order, so writers of overlapping batches wait for
	// each other instead of deadlocking.
	entries = slices.SortedFunc(slices.Values(entries), func(a, b vector.Entry) int { return strings.Compare(a.ID, b.ID) })
	if len(entries) >= copyThreshold {
		done, err := ix.insertNew(ctx, tx, entries)
		if done || err != nil {
			return err
		}
		done, err = ix.upsertCopy(ctx, tx, s, entries)
		if done || err != nil {
			return err
		}
	}
	return ix.upsertInsert(ctx, tx, s, entries)
}

func (ix *Index) upsertInsert(ctx context.Context, tx pgx.Tx, s *statements, entries []vector.Entry) error {
	for start := 0; start < len(entries); start += rowsPerInsert {
		chunk := entries[start:min(start+rowsPerInsert, len(entries))]
		var sql strings.Builder
		sql.WriteString(`INSERT INTO ` + ix.table + ` AS v (memory_id, scope, memory_type, embedding) VALUES `)
		args := make([]any, 0, 4*len(chunk))
		for i, e := range chunk {
			if i > 0 {
				sql.WriteByte(',')
			}
			n := 4 * i
			fmt.Fprintf(&sql, "($%d, $%d, $%d, $%d::%s)", n+1, n+2, n+3, n+4, s.vectorType)
			args = append(args, e.ID, e.Scope, e.Type, TextVector(vector.Prepare(ix.spec.Metric, e.Vector)))
		}
		sql.WriteString(s.onConflict)
		if _, err := tx.Exec(ctx, sql.String(), args...); err != nil {
			return err
		}
	}
	return nil
}

var copyCols = []string{"memory_id", "scope", "memory_type", "embedding"}

// copyRows are entries as COPY rows of copyCols, the vector in binary.
func (ix *Index) copyRows(entries []vector.Entry) pgx.CopyFromSource {
	return pgx.CopyFromSlice(len(entries), func(i int) ([]any, error) {
		e := entries[i]
		return []any{e.ID, e.Scope, e.Type, binaryVector(vector.Prepare(ix.spec.Metric, e.Vector))}, nil
	})
}

// insertNew writes entries that have no row yet with a plain COPY into the table.
// When some entry has a row the COPY fails on the primary key and is rolled back to
// its savepoint: it reports done=false, having changed nothing, and the Index stops
// trying (a rerun would fail every batch).
func (ix *Index) insertNew(ctx context.Context, tx pgx.Tx, entries []vector.Entry) (done bool, err error) {
	if ix.insertsMet.Load() {
		return false, nil
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return false, err
	}
	_, err = sp.CopyFrom(ctx, pgx.Identifier{ix.schema, ix.name}, copyCols, ix.copyRows(entries))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == uniqueViolation {
		ix.insertsMet.Store(true)
		return false, sp.Rollback(ctx)
	}
	if err != nil {
		return false, err
	}
	return true, sp.Commit(ctx) // releases the savepoint
}

// upsertCopy writes entries through COPY into a temporary table, then one INSERT ...
// ON CONFLICT. It reports done=false, having changed nothing, when the role may not
// create temporary tables.
func (ix *Index) upsertCopy(ctx context.Context, tx pgx.Tx, s *statements, entries []vector.Entry) (done bool, err error) {
	sp, err := tx.Begin(ctx) // savepoint: a refused CREATE must not abort tx
	if err != nil {
		return false, err
	}
	_, err = sp.Exec(ctx, s.tmpTable)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == insufficientPrivilege {
		return false, sp.Rollback(ctx)
	}
	if err != nil {
		return false, err
	}
	if err := sp.Commit(ctx); err != nil {
		return false, err
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{tmpTable}, copyCols, ix.copyRows(entries)); err != nil {
		return false, err
	}
	_, err = tx.Exec(ctx, `INSERT INTO `+ix.table+` AS v (memory_id, scope, memory_type, embedding)
		SELECT memory_id, scope, memory_type, embedding FROM `+tmpTable+` ORDER BY memory_id`+s.onConflict)
	return err == nil, err
}

// Delete removes entries by memory_id; missing IDs are ignored.
func (ix *Index) Delete(ctx context.Context, ids []string) error {
	for _, id := range ids {
		if err := vector.ValidateID(id); err != nil {
			return fmt.Errorf("delete vectors from %s: %w", ix.table, err)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := ix.pool.Exec(ctx, `DELETE FROM `+ix.table+` WHERE memory_id = ANY($1::text[])`, ids); err != nil {
		return fmt.Errorf("delete vectors from %s: %w", ix.table, err)
	}
	return nil
}

// DeleteScope removes every entry of the scope.
func (ix *Index) DeleteScope(ctx context.Context, scope string) error {
	if err := vector.ValidateScope(scope); err != nil {
		return fmt.Errorf("delete scope from %s: %w", ix.table, err)
	}
	if _, err := ix.pool.Exec(ctx, `DELETE FROM `+ix.table+` WHERE scope = $1`, scope); err != nil {
		return fmt.Errorf("delete scope %s from %s: %w", scope, ix.table, err)
	}
	return nil
}

// Fetch returns the stored vectors of the given IDs (missing IDs are absent from the
// map). With COSINE the vectors come back normalised, as they were stored. Snapshots
// use it to export the embeddings.
func (ix *Index) Fetch(ctx context.Context, ids []string) (map[string][]float32, error) {
	for _, id := range ids {
		if err := vector.ValidateID(id); err != nil {
			return nil, fmt.Errorf("fetch vectors from %s: %w", ix.table, err)
		}
	}
	out := make(map[string][]float32, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	s, err := ix.statements(ctx)
	if err != nil {
		return nil, fmt.Errorf("fetch vectors from %s: %w", ix.table, err)
	}
	for start := 0; start < len(ids); start += fetchChunk {
		err := ix.eachRow(ctx, func(id string, v []float32) {
			out[id] = append([]float32(nil), v...)
		}, s.fetch, ids[start:min(start+fetchChunk, len(ids))])
		if err != nil {
			return nil, fmt.Errorf("fetch vectors from %s: %w", ix.table, err)
		}
	}
	return out, nil
}

// ScoreIDs scores the given entries of q.Scope (and q.Types) as Search does, ranked
// by vector.RankHits.
func (ix *Index) ScoreIDs(ctx context.Context, q vector.Query, ids []string) ([]vector.Hit, error) {
	if err := vector.ValidateScoreQuery(ix.spec, q, ids); err != nil {
		return nil, fmt.Errorf("score vectors in %s: %w", ix.table, err)
	}
	if len(ids) == 0 {
		return []vector.Hit{}, nil
	}
	s, err := ix.statements(ctx)
	if err != nil {
		return nil, fmt.Errorf("score vectors in %s: %w", ix.table, err)
	}
	query := vector.Prepare(ix.spec.Metric, q.Vector)
	var hits []vector.Hit
	collect := func(id string, v []float32) {
		hits = append(hits, vector.Hit{ID: id, Score: score(ix.spec.Metric, v, query)})
	}
	for start := 0; start < len(ids); start += fetchChunk {
		args := []any{q.Scope, ids[start:min(start+fetchChunk, len(ids))]}
		sql := s.score[0]
		if len(q.Types) > 0 {
			sql = s.score[1]
			args = append(args, q.Types)
		}
		if err := ix.eachRow(ctx, collect, sql, args...); err != nil {
			return nil, fmt.Errorf("score vectors in %s: %w", ix.table, err)
		}
	}
	return vector.RankHits(hits, q.K), nil
}

// eachRow runs a query of (memory_id, embedding::real[]) rows and calls fn with each,
// the vector valid only during the call.
func (ix *Index) eachRow(ctx context.Context, fn func(id string, v []float32), sql string, args ...any) error {
	rows, err := ix.pool.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	return readRows(rows, ix.spec.Dimension, fn)
}

// readRows reads (memory_id, embedding::real[]) rows, each vector of dim components.
func readRows(rows pgx.Rows, dim int, fn func(id string, v []float32)) error {
	defer rows.Close()
	var (
		vec []float32
		err error
	)
	for rows.Next() {
		raw := rows.RawValues()
		id := string(raw[0])
		if rows.FieldDescriptions()[1].Format == pgtype.BinaryFormatCode {
			vec, err = decodeReals(vec, raw[1])
		} else {
			err = rows.Scan(nil, &vec)
		}
		if err != nil {
			return fmt.Errorf("vector of %s: %w", id, err)
		}
		if len(vec) != dim {
			return vector.DimensionError("stored vector of "+id, dim, len(vec))
		}
		fn(id, vec)
	}
	return rows.Err()
}

// DropSearchIndex drops the HNSW index, for a bulk load into a store nobody searches
// yet (a restore into a new store): COPY into the bare table and BuildSearchIndex
// after cost a fraction of inserting into the graph. Searches stay correct meanwhile
// (every one is exact), only slower; Ensure (every reconcile) builds a missing index
// again. The role needs EXECUTE on DropIndexFunction (the worker role has it).
func (ix *Index) DropSearchIndex(ctx context.Context) error {
	drop, _ := TableFunctions(ix.name)
	if _, err := ix.pool.Exec(ctx, `SELECT `+pgx.Identifier{ix.schema, drop}.Sanitize()+`()`); err != nil {
		return fmt.Errorf("drop the HNSW index of %s: %w", ix.table, err)
	}
	return nil
}

// SearchIndexDeferred reports since when a bulk load has held the HNSW index back
// ("" when it is in place or was never dropped by DropSearchIndex).
func (ix *Index) SearchIndexDeferred(ctx context.Context) (string, error) {
	return searchIndexDeferred(ctx, ix.pool, ix.schema, ix.name)
}

// BuildSearchIndex builds the HNSW index unless it exists, with maintenanceWorkMem
// (a PostgreSQL size such as "1GB"; empty keeps the server's) as the build's memory:
// pgvector builds fast only while the graph fits in it (about 1.1 KiB per vector of
// 384 dimensions at m = 16, plus the vectors). It holds a SHARE lock on the table
// (reads go on, writes wait) for the build, minutes at a million vectors.
func (ix *Index) BuildSearchIndex(ctx context.Context, maintenanceWorkMem string) error {
	_, build := TableFunctions(ix.name)
	err := pgx.BeginFunc(ctx, ix.pool, func(tx pgx.Tx) error {
		if maintenanceWorkMem != "" {
			if _, err := tx.Exec(ctx, `SELECT set_config('maintenance_work_mem', $1, true)`, maintenanceWorkMem); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `SELECT `+pgx.Identifier{ix.schema, build}.Sanitize()+`()`)
		return err
	})
	if err != nil {
		return fmt.Errorf("build the HNSW index of %s: %w", ix.table, err)
	}
	return nil
}
