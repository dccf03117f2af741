// Package pgindex implements vector.Index inside the store's PostgreSQL schema, with
// plain SQL and no extension: the embedded default for stores without Milvus.
//
// It uses two tables the store's migrations create:
//
//	vectors(memory_id text primary key, scope text not null, memory_type text not null,
//	        embedding bytea not null,   -- storage.go
//	        xact xid8)                  -- the transaction that last wrote the row
//	-- indexed on (scope, memory_type, xact)
//	store_meta(key text primary key, value text not null)
//
// Search narrows to one scope (and optionally types) through the (scope, memory_type)
// index and ranks the candidates in SQL, so cost grows with the size of a scope, not
// of the store. That is the trade-off of the embedded mode: a scope with very many
// memories wants Milvus.
package pgindex

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/vector"
)

// Table is the table of a store's schema that holds its vectors (generation 1's).
const Table = "vectors"

// Keys in store_meta.
const (
	MetaDimension = "vector.dimension"
	MetaMetric    = "vector.metric"
)

// insufficientPrivilege is SQLSTATE 42501.
const (
	insufficientPrivilege = "42501"
	uniqueViolation       = "23505"
)

const (
	// rowsPerInsert is the number of rows of one multi-row INSERT (4 parameters each).
	rowsPerInsert = 500
	// copyThreshold is the batch size from which Upsert goes through COPY into a
	// temporary table instead of multi-row INSERTs.
	copyThreshold = 1000
)

// Ensure records the index spec in the schema's store_meta on the first call and
// checks it on later calls: another dimension gives a wrapped
// vector.ErrDimensionMismatch, another metric a wrapped vector.ErrMetricMismatch, and
// nothing is changed. On the first call it also refuses a vectors table that already
// holds vectors of another dimension.
func Ensure(ctx context.Context, pool *pgxpool.Pool, schema string, spec vector.Spec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	vectors := pgx.Identifier{schema, "vectors"}.Sanitize()
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		recorded, err := RecordSpec(ctx, tx, schema, spec)
		if err != nil {
			return err
		}
		if recorded {
			// The spec was just recorded: vectors written before must agree with it.
			var other int
			err := tx.QueryRow(ctx, `SELECT octet_length(embedding) FROM `+vectors+` WHERE octet_length(embedding) <> $1 LIMIT 1`, storedBytes(spec.Dimension)).Scan(&other)
			switch {
			case err == nil:
				return vector.DimensionError("vectors in store "+schema, spec.Dimension, other/4)
			case !errors.Is(err, pgx.ErrNoRows):
				return fmt.Errorf("check existing vectors in %s: %w", vectors, err)
			}
		}
		return nil
	})
}

// EnsureTable creates table in schema, shaped and indexed like the vectors table and
// with its scope-version triggers, unless it exists: the table of an index generation
// (pgstore's generations.go), whose spec is the generation's rather than
// store_meta's. It runs as the schema's owner (the operator's admin); an existing
// table holding vectors of another dimension is refused (wrapping
// vector.ErrDimensionMismatch), never changed.
func EnsureTable(ctx context.Context, admin *pgxpool.Pool, schema, table string, spec vector.Spec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	if table == Table {
		return fmt.Errorf("pgindex: %q is the store's own vectors table", table)
	}
	t := pgx.Identifier{schema, table}.Sanitize()
	return pgx.BeginFunc(ctx, admin, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, t).Scan(&exists); err != nil {
			return err
		}
		if exists {
			var other int
			err := tx.QueryRow(ctx, `SELECT octet_length(embedding) FROM `+t+` WHERE octet_length(embedding) <> $1 LIMIT 1`, storedBytes(spec.Dimension)).Scan(&other)
			switch {
			case err == nil:
				return vector.DimensionError("vectors in "+t, spec.Dimension, other/4)
			case !errors.Is(err, pgx.ErrNoRows):
				return fmt.Errorf("check existing vectors in %s: %w", t, err)
			}
			return nil
		}
		stmts := []string{
			`CREATE TABLE ` + t + ` (LIKE ` + pgx.Identifier{schema, Table}.Sanitize() + ` INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING INDEXES INCLUDING STORAGE)`,
		}
		for _, ev := range []struct{ event, ref string }{
			{"INSERT", "NEW TABLE AS changed"},
			{"UPDATE", "OLD TABLE AS changed_old NEW TABLE AS changed"},
			{"DELETE", "OLD TABLE AS changed"},
		} {
			fn := "scope_versions_note"
			if ev.event == "UPDATE" {
				fn = "scope_versions_note_update"
			}
			stmts = append(stmts, `CREATE TRIGGER `+pgx.Identifier{table + "_scope_versions_" + strings.ToLower(ev.event[:3])}.Sanitize()+
				` AFTER `+ev.event+` ON `+t+` REFERENCING `+ev.ref+` FOR EACH STATEMENT EXECUTE FUNCTION `+pgx.Identifier{schema, fn}.Sanitize()+`()`)
		}
		// LIKE copies xact's default, not the trigger that keeps it on updates.
		stmts = append(stmts, `CREATE TRIGGER `+pgx.Identifier{table + "_xact"}.Sanitize()+` BEFORE UPDATE ON `+t+
			` FOR EACH ROW EXECUTE FUNCTION `+pgx.Identifier{schema, "vectors_xact"}.Sanitize()+`()`)
		for _, q := range stmts {
			if _, err := tx.Exec(ctx, q); err != nil {
				return fmt.Errorf("creating %s: %w", t, err)
			}
		}
		return nil
	})
}

// DropTable drops an index generation's table, if it exists (as the schema's owner).
// The store's own vectors table is never dropped.
func DropTable(ctx context.Context, admin *pgxpool.Pool, schema, table string) error {
	if table == Table {
		return fmt.Errorf("pgindex: %q is the store's own vectors table", table)
	}
	if _, err := admin.Exec(ctx, `DROP TABLE IF EXISTS `+pgx.Identifier{schema, table}.Sanitize()); err != nil {
		return fmt.Errorf("dropping %s.%s: %w", schema, table, err)
	}
	return nil
}

// ReplaceSpec records spec in schema's store_meta in place of the one recorded: the
// shape of the serving index after an embedding switch (as the schema's owner).
func ReplaceSpec(ctx context.Context, admin *pgxpool.Pool, schema string, spec vector.Spec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	meta := pgx.Identifier{schema, "store_meta"}.Sanitize()
	_, err := admin.Exec(ctx, `INSERT INTO `+meta+` (key, value) VALUES ($1, $2), ($3, $4)
		ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`,
		MetaDimension, strconv.Itoa(spec.Dimension), MetaMetric, string(spec.Metric))
	if err != nil {
		return fmt.Errorf("recording the vector spec of %s: %w", schema, err)
	}
	return nil
}

// RecordSpec records spec in schema's store_meta unless a spec is recorded there,
// then checks the recorded one against spec: another dimension gives a wrapped
// vector.ErrDimensionMismatch, another metric a wrapped vector.ErrMetricMismatch (the
// caller's transaction then rolls back, changing nothing). recorded reports whether
// this call wrote the spec. Every engine of a store keeps its spec this way.
func RecordSpec(ctx context.Context, tx pgx.Tx, schema string, spec vector.Spec) (recorded bool, err error) {
	meta := pgx.Identifier{schema, "store_meta"}.Sanitize()
	tag, err := tx.Exec(ctx, `INSERT INTO `+meta+` (key, value) VALUES ($1, $2), ($3, $4) ON CONFLICT (key) DO NOTHING`,
		MetaDimension, strconv.Itoa(spec.Dimension), MetaMetric, string(spec.Metric))
	if err != nil {
		return false, fmt.Errorf("record vector spec in %s: %w", meta, err)
	}
	var dimText, metricText string
	err = tx.QueryRow(ctx, `SELECT
		(SELECT value FROM `+meta+` WHERE key = $1),
		(SELECT value FROM `+meta+` WHERE key = $2)`, MetaDimension, MetaMetric).Scan(&dimText, &metricText)
	if err != nil {
		return false, fmt.Errorf("read vector spec from %s: %w", meta, err)
	}
	dim, err := strconv.Atoi(dimText)
	if err != nil {
		return false, fmt.Errorf("%s: %s is %q, not a number", meta, MetaDimension, dimText)
	}
	if dim != spec.Dimension {
		return false, vector.DimensionError("vector store "+schema, spec.Dimension, dim)
	}
	if !strings.EqualFold(metricText, string(spec.Metric)) {
		return false, fmt.Errorf("%w: vector store %s uses metric %s, expected %s", vector.ErrMetricMismatch, schema, metricText, spec.Metric)
	}
	return tag.RowsAffected() > 0, nil
}

// Index is a vector.Index on the vectors table of one schema. It is safe for
// concurrent use.
type Index struct {
	pool   *pgxpool.Pool
	schema string
	name   string // the table's bare name
	table  string // sanitized, schema-qualified
	spec   vector.Spec
	// insertsMet is set once a COPY of new entries met existing rows (insertNew).
	insertsMet atomic.Bool
}

var (
	_ vector.Index         = (*Index)(nil)
	_ vector.ChangeTracker = (*Index)(nil)
)

// New returns an index on schema's vectors table (see Ensure). It does not query.
func New(pool *pgxpool.Pool, schema string, spec vector.Spec) *Index {
	return NewTable(pool, schema, Table, spec)
}

// NewTable returns an index on another table of schema shaped like vectors: an
// index generation's (EnsureTable). It does not query.
func NewTable(pool *pgxpool.Pool, schema, table string, spec vector.Spec) *Index {
	return &Index{pool: pool, schema: schema, name: table, table: pgx.Identifier{schema, table}.Sanitize(), spec: spec}
}

// Spec reports the index's dimension and metric.
func (ix *Index) Spec() vector.Spec { return ix.spec }

// Schema is the PostgreSQL schema the index lives in.
func (ix *Index) Schema() string { return ix.schema }

// Upsert writes entries by memory_id in one transaction: all or nothing. Batches of
// fewer than 1000 entries use multi-row INSERT ... ON CONFLICT DO UPDATE, larger ones
// COPY into a temporary table first (or INSERTs too when the role may not create
// temporary tables). Rows that already hold the same values are not rewritten.
func (ix *Index) Upsert(ctx context.Context, entries []vector.Entry) error {
	if err := vector.ValidateEntries(ix.spec, entries); err != nil {
		return fmt.Errorf("upsert vectors into %s: %w", ix.table, err)
	}
	if len(entries) == 0 {
		return nil
	}
	err := pgx.BeginFunc(ctx, ix.pool, func(tx pgx.Tx) error { return ix.upsert(ctx, tx, entries) })
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
	if err := ix.upsert(ctx, tx, entries); err != nil {
		return fmt.Errorf("upsert vectors into %s: %w", ix.table, err)
	}
	return nil
}

func (ix *Index) upsert(ctx context.Context, tx pgx.Tx, entries []vector.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	// Rows are locked in memory_id order, so writers of overlapping batches wait for
	// each other instead of deadlocking.
	entries = slices.SortedFunc(slices.Values(entries), func(a, b vector.Entry) int { return strings.Compare(a.ID, b.ID) })
	if len(entries) >= copyThreshold {
		done, err := ix.insertNew(ctx, tx, entries)
		if done || err != nil {
			return err
		}
		done, err = ix.upsertCopy(ctx, tx, entries)
		if done || err != nil {
			return err
		}
	}
	return ix.upsertInsert(ctx, tx, entries)
}

const onConflict = ` ON CONFLICT (memory_id) DO UPDATE
	SET scope = EXCLUDED.scope, memory_type = EXCLUDED.memory_type, embedding = EXCLUDED.embedding
	WHERE (v.scope, v.memory_type, v.embedding) IS DISTINCT FROM (EXCLUDED.scope, EXCLUDED.memory_type, EXCLUDED.embedding)`

func (ix *Index) upsertInsert(ctx context.Context, tx pgx.Tx, entries []vector.Entry) error {
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
			fmt.Fprintf(&sql, "($%d, $%d, $%d, $%d::bytea)", n+1, n+2, n+3, n+4)
			args = append(args, e.ID, e.Scope, e.Type, EncodeVector(vector.Prepare(ix.spec.Metric, e.Vector)))
		}
		sql.WriteString(onConflict)
		if _, err := tx.Exec(ctx, sql.String(), args...); err != nil {
			return err
		}
	}
	return nil
}

// insertNew writes entries that have no row yet (the vectors of a restore or import
// into a new store) with a plain COPY into the table: the upsert of such entries
// inserts them all, and skipping the temporary table and its INSERT ... ON CONFLICT
// halves the database's work. When some entry has a row the COPY fails on the
// primary key and is rolled back to its savepoint: it reports done=false, having
// changed nothing, and the Index stops trying (a rerun would fail every batch).
func (ix *Index) insertNew(ctx context.Context, tx pgx.Tx, entries []vector.Entry) (done bool, err error) {
	if ix.insertsMet.Load() {
		return false, nil
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return false, err
	}
	_, err = sp.CopyFrom(ctx, pgx.Identifier{ix.schema, ix.name}, vectorCols, ix.copyRows(entries))
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

var vectorCols = []string{"memory_id", "scope", "memory_type", "embedding"}

// copyRows are entries as COPY rows of vectorCols.
func (ix *Index) copyRows(entries []vector.Entry) pgx.CopyFromSource {
	return pgx.CopyFromSlice(len(entries), func(i int) ([]any, error) {
		e := entries[i]
		return []any{e.ID, e.Scope, e.Type, EncodeVector(vector.Prepare(ix.spec.Metric, e.Vector))}, nil
	})
}

// upsertCopy writes entries through COPY into a temporary table. It reports
// done=false, having changed nothing, when the role may not create temporary tables
// (a database hardened with REVOKE TEMPORARY), so the caller falls back to INSERTs.
func (ix *Index) upsertCopy(ctx context.Context, tx pgx.Tx, entries []vector.Entry) (done bool, err error) {
	const tmp = "memory_operator_vectors_upsert"
	sp, err := tx.Begin(ctx) // savepoint: a refused CREATE must not abort tx
	if err != nil {
		return false, err
	}
	_, err = sp.Exec(ctx, `CREATE TEMPORARY TABLE `+tmp+` (memory_id text NOT NULL, scope text NOT NULL, memory_type text NOT NULL, embedding bytea NOT NULL) ON COMMIT DROP`)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == insufficientPrivilege {
		return false, sp.Rollback(ctx)
	}
	if err != nil {
		return false, err
	}
	if err := sp.Commit(ctx); err != nil { // releases the savepoint
		return false, err
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{tmp}, vectorCols, ix.copyRows(entries)); err != nil {
		return false, err
	}
	_, err = tx.Exec(ctx, `INSERT INTO `+ix.table+` AS v (memory_id, scope, memory_type, embedding)
		SELECT memory_id, scope, memory_type, embedding FROM `+tmp+` ORDER BY memory_id`+onConflict)
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
	if _, err := ix.pool.Exec(ctx, `DELETE FROM `+ix.table+` WHERE memory_id = ANY($1)`, ids); err != nil {
		return fmt.Errorf("delete vectors from %s: %w", ix.table, err)
	}
	return nil
}

// Fetch returns the stored vectors of the given IDs, as Search compares them: with
// COSINE normalised (vector.Prepare on write), otherwise as written. IDs without a
// vector are absent from the map, and so is a vector of another dimension than the
// index's spec, which Search never finds either. Snapshots and archival read vectors
// back through it (engine.Fetcher) as they do from the other engines. One query,
// whatever the number of IDs.
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
	rows, err := ix.pool.Query(ctx, `SELECT v.memory_id, v.embedding FROM `+ix.table+` v
		WHERE v.memory_id = ANY($1::text[]) AND octet_length(v.embedding) = $2`, ids, storedBytes(ix.spec.Dimension))
	if err != nil {
		return nil, fmt.Errorf("fetch vectors from %s: %w", ix.table, err)
	}
	err = eachStored(rows, func(_, id string, raw []byte) error {
		v, err := DecodeVector(raw) // a copy: raw is the row's buffer
		if err != nil {
			return err
		}
		out[id] = v
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("fetch vectors from %s: %w", ix.table, err)
	}
	return out, nil
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

// Search returns the K entries of q.Scope (and q.Types) with the highest score,
// best first; ties are ordered by memory_id.
func (ix *Index) Search(ctx context.Context, q vector.Query) ([]vector.Hit, error) {
	if err := vector.ValidateQuery(ix.spec, q); err != nil {
		return nil, fmt.Errorf("search vectors in %s: %w", ix.table, err)
	}
	sql, args := ix.scopeRows(q.Scope, q.Types)
	hits, err := ix.scoreRows(ctx, vector.Prepare(ix.spec.Metric, q.Vector), q.K, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("search vectors in %s: %w", ix.table, err)
	}
	return hits, nil
}

// scopeRows is the query of the (memory_id, embedding) rows of a scope (and types).
func (ix *Index) scopeRows(scope string, types []string) (string, []any) {
	args := []any{scope, storedBytes(ix.spec.Dimension)}
	typeFilter := ""
	if len(types) > 0 {
		typeFilter = ` AND v.memory_type = ANY($3::text[])`
		args = append(args, types)
	}
	return `SELECT v.memory_id, v.embedding FROM ` + ix.table + ` v
		WHERE v.scope = $1` + typeFilter + ` AND octet_length(v.embedding) = $2`, args
}

// SearchMany answers qs as Search answers each, in one round trip: the searches of
// one scope and types share one scan of its vectors, and the scopes searched with
// the same types are read by one statement (a batch's near-duplicate check asks one
// search per memory, over hundreds of scopes: one statement each cost more than
// reading their rows).
func (ix *Index) SearchMany(ctx context.Context, qs []vector.Query) ([][]vector.Hit, error) {
	hits, _, err := ix.searchMany(ctx, qs, "")
	return hits, err
}

// Mark is vector.ChangeTracker's Mark: a snapshot of the database's transactions
// (pg_current_snapshot). Every row carries the transaction that last wrote it
// (column xact, migration 15), so the rows written since are those whose
// transaction the snapshot does not see as committed.
func (ix *Index) Mark(ctx context.Context) (vector.Mark, error) {
	var snap string
	if err := ix.pool.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&snap); err != nil {
		return "", fmt.Errorf("mark %s: %w", ix.table, err)
	}
	return vector.Mark(snap), nil
}

// SearchSince is vector.ChangeTracker's SearchSince: SearchMany over the rows
// written by transactions that m does not see, found through the (scope,
// memory_type, xact) index from the snapshot's oldest transaction on. A row of a
// table written before migration 15 has no xact: it is older than any mark.
func (ix *Index) SearchSince(ctx context.Context, m vector.Mark, qs []vector.Query) ([][]vector.Hit, map[string]bool, error) {
	if m == "" {
		return nil, nil, fmt.Errorf("search vectors in %s: no mark", ix.table)
	}
	return ix.searchMany(ctx, qs, m)
}

// searchMany is SearchMany, over the rows written since m unless m is "", in which
// case changed is nil.
func (ix *Index) searchMany(ctx context.Context, qs []vector.Query, m vector.Mark) ([][]vector.Hit, map[string]bool, error) {
	type group struct {
		queries [][]float32
		ks      []int
		members []int
	}
	type typeSet struct {
		types  []string
		scopes []string
		groups map[string]*group // by scope
	}
	var sets []*typeSet
	byTypes := map[string]*typeSet{}
	for i, q := range qs {
		if err := vector.ValidateQuery(ix.spec, q); err != nil {
			return nil, nil, fmt.Errorf("search vectors in %s: %w", ix.table, err)
		}
		types := slices.Sorted(slices.Values(q.Types))
		key := strings.Join(types, "\x00")
		ts := byTypes[key]
		if ts == nil {
			ts = &typeSet{types: types, groups: map[string]*group{}}
			byTypes[key] = ts
			sets = append(sets, ts)
		}
		g := ts.groups[q.Scope]
		if g == nil {
			g = &group{}
			ts.groups[q.Scope] = g
			ts.scopes = append(ts.scopes, q.Scope)
		}
		g.queries = append(g.queries, vector.Prepare(ix.spec.Metric, q.Vector))
		g.ks = append(g.ks, q.K)
		g.members = append(g.members, i)
	}
	out := make([][]vector.Hit, len(qs))
	var changed map[string]bool
	if m != "" {
		changed = map[string]bool{}
	}
	if len(sets) == 0 {
		return out, changed, nil
	}
	batch := &pgx.Batch{}
	for _, ts := range sets {
		args := []any{ts.scopes, storedBytes(ix.spec.Dimension)}
		typeFilter := ""
		if len(ts.types) > 0 {
			typeFilter = ` AND v.memory_type = ANY($3::text[])`
			args = append(args, ts.types)
		}
		sinceFilter := ""
		if m != "" {
			// xact >= the snapshot's oldest transaction is the index's range; the
			// visibility test keeps the rows of transactions the snapshot did not see.
			n := strconv.Itoa(len(args) + 1)
			sinceFilter = ` AND v.xact >= pg_snapshot_xmin($` + n + `::pg_snapshot) AND NOT pg_visible_in_snapshot(v.xact, $` + n + `::pg_snapshot)`
			args = append(args, string(m))
		}
		batch.Queue(`SELECT v.scope, v.memory_id, v.embedding FROM `+ix.table+` v
			WHERE v.scope = ANY($1::text[])`+typeFilter+` AND octet_length(v.embedding) = $2`+sinceFilter, args...)
	}
	br := ix.pool.SendBatch(ctx, batch)
	defer func() { _ = br.Close() }()
	for _, ts := range sets {
		rows, err := br.Query()
		if err != nil {
			return nil, nil, fmt.Errorf("search vectors in %s: %w", ix.table, err)
		}
		best := map[string][]hitHeap{}
		for scope, g := range ts.groups {
			best[scope] = make([]hitHeap, len(g.queries))
		}
		err = eachStored(rows, func(scope, id string, raw []byte) error {
			g := ts.groups[scope]
			if g == nil {
				return nil // cannot happen: = ANY compares the bytes
			}
			if changed != nil {
				changed[id] = true
			}
			for qi, query := range g.queries {
				if err := best[scope][qi].offer(ix.spec.Metric, id, raw, query, g.ks[qi]); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("search vectors in %s: %w", ix.table, err)
		}
		for scope, g := range ts.groups {
			for qi, i := range g.members {
				out[i] = best[scope][qi].ranked()
			}
		}
	}
	return out, changed, br.Close()
}
