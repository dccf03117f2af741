// Package pgvector implements vector.Index on PostgreSQL's `vector` extension
// (pgvector, 0.5.0 or later): the PGVector engine. The store's vectors live in one
// table of the store's schema,
//
//	embeddings(memory_id text primary key, scope text not null, memory_type text not null,
//	           embedding <ext>.vector(dimension) not null)
//	-- btree on (scope, memory_type), one HNSW index on embedding
//
// where <ext> is the schema holding the extension (any schema: every use of its type
// and operators is schema-qualified, since the store's roles search only their own
// schema). The HNSW index uses the metric's operator class: vector_l2_ops for L2,
// vector_ip_ops for IP, and vector_ip_ops for COSINE too, because cosine vectors are
// stored normalised (vector.Prepare) and on unit vectors the inner product ranks as
// cosine does without computing two norms per distance. Scores are always computed
// here, in float64 as vector.Score does, from the stored float32 components, so every
// engine reports the same score for the same pair; pgvector's own (float32) distances
// only choose the candidates.
//
// # Filtered search
//
// Every search is confined to a scope (and optionally memory types), and an HNSW
// index knows nothing of scopes: PostgreSQL walks the graph and drops the rows of
// other scopes afterwards, so a search for K of a small scope in a big store would
// come back short although the scope holds K entries. pgvector 0.6 has no iterative
// index scans (hnsw.iterative_scan is 0.8). Search therefore never trusts a short ANN
// result:
//
//   - It first counts the matches of scope and types, bounded (LIMIT ExactBelow+1 on
//     the (scope, memory_type) btree) and cached for a few seconds per scope and
//     types; a stale count only ever costs time, never results.
//   - Up to ExactBelow matches (or K above hnsw.ef_search's limit of 1000), the search
//     is exact: the scope's rows through the btree, ranked by distance. A subquery
//     with OFFSET 0 fences the ORDER BY from the HNSW index, so the planner cannot
//     turn it into a post-filtered index scan.
//   - Above, it walks the HNSW index with hnsw.ef_search = max(EfSearch, K) (set
//     for that statement's transaction only) and filters on scope and types. When
//     that yields fewer than K rows (the matches are a share of the candidates the
//     graph visits: a scope that is half of the store yields about ef_search/2), the
//     walk is redone with ef_search raised to what that share needs for K matches,
//     with a margin (at least doubled, up to 1000); only when ef_search 1000 still
//     yields fewer (a rare type in a big scope, a scope that is a small part of a very
//     large store) is the search redone exactly. So a search returns exactly
//     min(K, matches): exact below ExactBelow, and above it approximate with
//     HNSW's recall (see the package benchmark), never short.
//
// Candidates are fetched with a margin (exactMargin) beyond K and re-ranked with
// vector.RankHits, ties by memory_id, so float32 near-ties in the database do not
// change which K an exact search returns.
//
// # Defaults
//
// Measured by BenchmarkSearch (one scope of 100k clustered 384-dimensional vectors,
// 2 shared cores, PostgreSQL 16.2 with pgvector 0.6.2; build to build recall varies by
// about 0.01):
//
//	HNSW, ef_search 40     1.0-1.2 ms   recall@10 0.95-0.96
//	HNSW, ef_search 100    1.3-1.6 ms   recall@10 0.99-1.00
//	HNSW, ef_search 200    2.3-2.9 ms   recall@10 1.00
//	exact, 100k entries     63-66 ms
//	exact, 10k entries      4.0-4.4 ms
//
// At a million vectors in one scope (1.25M in the table; make bench-hnsw, the engines
// benchmark's data, shared_buffers holding the index; the statement the engine runs,
// K 64 as the gateway asks for top_k 10), pgvector's own ef_construction 64 builds a
// graph too coarse for that size:
//
//	ef_construction 64:  build 445 s; ef_search 100 4.5 ms recall@10 0.817, 200 4.6 ms 0.934, 400 7.7 ms 0.956
//	ef_construction 128: build 856 s; ef_search 100 4.7 ms recall@10 0.990, 200 4.7 ms 1.000, 400 8.5 ms 1.000
//
// Hence DefaultParams: m = 16 and ef_construction = 128 (twice the build time of
// pgvector's 64, and recall@10 0.99 instead of 0.82 at a million; the 110k-vector
// index builds in about 40 s), ef_search = 100 (pgvector's 40 stays at the edge of
// recall 0.95 at 100k for 0.3 ms saved), and ExactBelow = 10000 (an exact search of
// 10k vectors costs about 4 ms, within the search budget and exact; beyond that exact
// cost grows linearly, 63 ms at 100k). m and ef_construction take effect when
// the index is built (Ensure on a new table, BuildSearchIndex); ef_search and
// ExactBelow on every search.
//
// # Bulk loads
//
// Inserting into a table with its HNSW index adds every vector to the graph one at a
// time: BenchmarkUpsertIndexed measures it 13-15 times slower than COPY into the bare
// table and CREATE INDEX after. A load into a new store (a restore) should therefore
// call DropSearchIndex, Upsert its batches, then BuildSearchIndex with enough
// maintenance_work_mem for the graph. The two run through SECURITY DEFINER functions
// of the store's schema that Ensure creates and provisioning lets only the worker role
// execute, since the store's roles own no table.
//
// # Where the extension lives
//
// The extension is one per database. EnsureExtension uses an installed one wherever
// it is, and otherwise creates it in schema ExtensionSchema ("extensions"), never in a
// store's schema, which DeletePostgres drops with CASCADE (taking the extension, and
// every other store's embeddings column, with it).
package pgvector

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
)

// Table is the table of a store's schema that holds its vectors (pgindex's is
// "vectors", a real[] column: the two engines never share a table).
const Table = "embeddings"

// MaxDimension is the largest dimension an HNSW index of pgvector's vector type
// holds (vector.Spec allows more, which Milvus takes).
const MaxDimension = 2000

// ExtensionSchema is where EnsureExtension creates the extension when the database
// has none: a schema of its own, shared by every store of the database and dropped
// with none of them (the extension is one per database; created in one store's
// schema it would go, with every other store's column, when that store is deleted).
const ExtensionSchema = "extensions"

// minHNSWVersion is the first pgvector release with HNSW indexes.
var minHNSWVersion = [3]int{0, 5, 0}

// Params are the HNSW index and search parameters.
type Params struct {
	// M is the number of neighbours per graph node (pgvector's m, 2..100).
	M int
	// EfConstruction is the candidate list size while building (4..1000, >= 2*M).
	EfConstruction int
	// EfSearch is the candidate list size of a search (1..1000); a search for more
	// than EfSearch hits raises it to K.
	EfSearch int
	// ExactBelow is the number of matches (of a search's scope and types) up to which
	// a search is exact instead of using the HNSW index (1..1,000,000).
	ExactBelow int
}

// Defaults, see the package documentation.
const (
	DefaultM              = 16
	DefaultEfConstruction = 128
	DefaultEfSearch       = 100
	DefaultExactBelow     = 10000
	// maxEfSearch is pgvector's upper bound of hnsw.ef_search: an HNSW scan never
	// yields more rows than that, so a larger K is searched exactly.
	maxEfSearch = 1000
	// maxExactBelow bounds ExactBelow so the bounded count stays cheap.
	maxExactBelow = 1_000_000
)

// DefaultParams returns the defaults.
func DefaultParams() Params {
	return Params{M: DefaultM, EfConstruction: DefaultEfConstruction, EfSearch: DefaultEfSearch, ExactBelow: DefaultExactBelow}
}

// WithDefaults fills the zero fields of p with the defaults.
func (p Params) WithDefaults() Params {
	d := DefaultParams()
	if p.M == 0 {
		p.M = d.M
	}
	if p.EfConstruction == 0 {
		p.EfConstruction = max(d.EfConstruction, 2*p.M)
	}
	if p.EfSearch == 0 {
		p.EfSearch = d.EfSearch
	}
	if p.ExactBelow == 0 {
		p.ExactBelow = d.ExactBelow
	}
	return p
}

// Validate checks p against the ranges pgvector accepts.
func (p Params) Validate() error {
	var errs []error
	if p.M < 2 || p.M > 100 {
		errs = append(errs, fmt.Errorf("m must be in [2, 100], got %d", p.M))
	}
	if p.EfConstruction < 4 || p.EfConstruction > 1000 {
		errs = append(errs, fmt.Errorf("ef_construction must be in [4, 1000], got %d", p.EfConstruction))
	} else if p.EfConstruction < 2*p.M {
		errs = append(errs, fmt.Errorf("ef_construction must be at least 2*m = %d, got %d", 2*p.M, p.EfConstruction))
	}
	if p.EfSearch < 1 || p.EfSearch > maxEfSearch {
		errs = append(errs, fmt.Errorf("ef_search must be in [1, %d], got %d", maxEfSearch, p.EfSearch))
	}
	if p.ExactBelow < 1 || p.ExactBelow > maxExactBelow {
		errs = append(errs, fmt.Errorf("exact-below must be in [1, %d], got %d", maxExactBelow, p.ExactBelow))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("pgvector parameters: %w", err)
	}
	return nil
}

// ValidateSpec checks spec for this engine: vector.Spec's ranges and at most
// MaxDimension dimensions.
func ValidateSpec(spec vector.Spec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	if spec.Dimension > MaxDimension {
		return fmt.Errorf("vector dimension %d is more than pgvector's HNSW index holds (%d): use the Milvus or the Postgres engine for this model", spec.Dimension, MaxDimension)
	}
	return nil
}

// ErrExtensionMissing is returned, wrapped with what to install, when the server has
// no vector extension to create, or only one without HNSW indexes (before 0.5.0).
var ErrExtensionMissing = errors.New("pgvector extension missing")

// Extension is the vector extension of a database.
type Extension struct {
	Schema  string
	Version string
}

// extLock serialises EnsureExtension in a database: two stores provisioned at once
// would otherwise both run CREATE EXTENSION and one fail on the catalog's unique key.
var extLock = int64(0x6d656d7067766563) // "mempgvec"

// EnsureExtension finds the vector extension of the admin's database, creating it
// (in ExtensionSchema) when the database has none. It needs the privileges to create
// an extension (pgvector is not a trusted extension: a superuser, or the owner with
// pgvector marked trusted). A server without pgvector, or with one older than
// 0.5.0, gives an error wrapping ErrExtensionMissing that says what to install.
func EnsureExtension(ctx context.Context, admin *pgxpool.Pool) (Extension, error) {
	var ext Extension
	err := pgx.BeginFunc(ctx, admin, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, extLock); err != nil {
			return err
		}
		found, err := installed(ctx, tx)
		if err != nil {
			return err
		}
		if found != nil {
			ext = *found
			return checkVersion(ext.Version, fmt.Sprintf("the vector extension installed in schema %s", ext.Schema),
				"ALTER EXTENSION vector UPDATE (after installing pgvector 0.5.0 or later on the server)")
		}
		version, err := availableVersion(ctx, tx)
		if err != nil {
			return err
		}
		schema := pgx.Identifier{ExtensionSchema}.Sanitize()
		if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+schema); err != nil {
			return fmt.Errorf("create schema %s for the vector extension: %w", ExtensionSchema, err)
		}
		if _, err := tx.Exec(ctx, `CREATE EXTENSION vector WITH SCHEMA `+schema+` VERSION `+quoteLiteral(version)); err != nil {
			return fmt.Errorf("create extension vector %s in schema %s: %w", version, ExtensionSchema, err)
		}
		ext = Extension{Schema: ExtensionSchema, Version: version}
		return nil
	})
	if err != nil {
		return Extension{}, err
	}
	return ext, nil
}

// FindExtension reports where the database's vector extension is, wrapping
// ErrExtensionMissing when it is not installed (EnsureExtension installs it). Any
// role may call it.
func FindExtension(ctx context.Context, q Querier) (Extension, error) {
	found, err := installed(ctx, q)
	if err != nil {
		return Extension{}, err
	}
	if found == nil {
		return Extension{}, fmt.Errorf("%w: the database has no vector extension installed (provisioning creates it as the backend's admin)", ErrExtensionMissing)
	}
	return *found, nil
}

// AvailableVersion reports, changing nothing, the vector extension's version a store
// would use: the installed one, else the one EnsureExtension would create; an error
// wrapping ErrExtensionMissing when there is none with HNSW.
func AvailableVersion(ctx context.Context, q Querier) (string, error) {
	found, err := installed(ctx, q)
	if err != nil {
		return "", err
	}
	if found != nil {
		return found.Version, checkVersion(found.Version, "the installed vector extension", "update it (ALTER EXTENSION vector UPDATE) after installing pgvector 0.5.0 or later")
	}
	return availableVersion(ctx, q)
}

// Querier is a pool, a connection or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// installed returns the installed extension, nil when there is none.
func installed(ctx context.Context, q Querier) (*Extension, error) {
	var ext Extension
	err := q.QueryRow(ctx, `SELECT n.nspname, e.extversion FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
		WHERE e.extname = 'vector'`).Scan(&ext.Schema, &ext.Version)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up the vector extension: %w", err)
	}
	return &ext, nil
}

// availableVersion picks the version of the vector extension to create: the
// server's default when it has HNSW, else the newest available one that has.
func availableVersion(ctx context.Context, q Querier) (string, error) {
	rows, err := q.Query(ctx, `SELECT version, version = (SELECT default_version FROM pg_available_extensions WHERE name = 'vector')
		FROM pg_available_extension_versions WHERE name = 'vector'`)
	if err != nil {
		return "", fmt.Errorf("look up the available vector extension: %w", err)
	}
	var (
		v         string
		isDefault bool
		versions  []string
		best      string
		bestParts [3]int
	)
	_, err = pgx.ForEachRow(rows, []any{&v, &isDefault}, func() error {
		versions = append(versions, v)
		parts, ok := parseVersion(v)
		if !ok || less(parts, minHNSWVersion) {
			return nil
		}
		if isDefault {
			best, bestParts = v, [3]int{1 << 30}
		} else if best == "" || less(bestParts, parts) {
			best, bestParts = v, parts
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("look up the available vector extension: %w", err)
	}
	if len(versions) == 0 {
		return "", fmt.Errorf("%w: the PostgreSQL server has no vector extension to create; install pgvector 0.5.0 or later on it (for example the postgresql-<major>-pgvector package, or pgvector's image) and provisioning will create the extension", ErrExtensionMissing)
	}
	if best == "" {
		return "", fmt.Errorf("%w: the PostgreSQL server offers the vector extension only in version %s, which has no HNSW index; install pgvector 0.5.0 or later on it", ErrExtensionMissing, strings.Join(versions, ", "))
	}
	return best, nil
}

func checkVersion(version, what, fix string) error {
	parts, ok := parseVersion(version)
	if ok && !less(parts, minHNSWVersion) {
		return nil
	}
	return fmt.Errorf("%w: %s is version %s, which has no HNSW index (0.5.0 or later needed); %s", ErrExtensionMissing, what, version, fix)
}

// parseVersion reads "major.minor[.patch]" (pgvector's versions).
func parseVersion(v string) ([3]int, bool) {
	var out [3]int
	fields := strings.Split(v, ".")
	if len(fields) < 2 || len(fields) > 3 {
		return out, false
	}
	for i, f := range fields {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return out, false
		}
		out[i] = n
	}
	return out, true
}

func less(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// quoteLiteral quotes s as an SQL string literal (DDL takes no bind parameters).
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// opClass and operator of each metric (see the package documentation for COSINE).
func opClass(m vector.Metric) (class, op string) {
	switch m {
	case vector.L2:
		return "vector_l2_ops", "<->"
	default: // COSINE on unit vectors, and IP
		return "vector_ip_ops", "<#>"
	}
}

// Ensure creates the store's embeddings table and its indexes in schema (which the
// store's migrations made, with store_meta), and records the index spec in
// store_meta on the first call, checking it on later ones with pgindex.RecordSpec, as
// pgindex.Ensure does: another dimension gives a wrapped vector.ErrDimensionMismatch, another metric
// a wrapped vector.ErrMetricMismatch, and nothing is changed. The vector extension
// must be installed (EnsureExtension). It runs as the backend's admin, in one
// transaction, and is idempotent; an existing index keeps the M and EfConstruction it
// was built with. Zero fields of p are defaulted.
func Ensure(ctx context.Context, admin *pgxpool.Pool, schema string, spec vector.Spec, p Params) error {
	return EnsureServing(ctx, admin, schema, Table, spec, p)
}

// EnsureServing is Ensure for the table that serves the store's searches: the
// embeddings table, or an index generation's table (EnsureTable) once a switch of
// embedding model made it serve. The spec recorded in store_meta is the serving
// one's.
func EnsureServing(ctx context.Context, admin *pgxpool.Pool, schema, table string, spec vector.Spec, p Params) error {
	return ensure(ctx, admin, schema, table, spec, p, true)
}

// EnsureTable creates table in schema like the embeddings table, with its own HNSW
// index and bulk-load functions (TableFunctions), unless it exists: the table of an
// index generation, which a switch of embedding model fills beside the serving one
// (pgstore's generations.go). It leaves store_meta's spec alone (that is the serving
// table's). A new table starts with its HNSW index held back, as a bulk load holds it
// (SearchIndexDeferred): whoever fills it builds the index when the table is full,
// which costs a fraction of inserting every vector into the graph. A table holding
// vectors of another dimension is refused (wrapping vector.ErrDimensionMismatch).
func EnsureTable(ctx context.Context, admin *pgxpool.Pool, schema, table string, spec vector.Spec, p Params) error {
	if table == Table {
		return fmt.Errorf("pgvector: %q is the store's own embeddings table", table)
	}
	return ensure(ctx, admin, schema, table, spec, p, false)
}

func ensure(ctx context.Context, admin *pgxpool.Pool, schema, table string, spec vector.Spec, p Params, serving bool) error {
	if err := ValidateSpec(spec); err != nil {
		return err
	}
	p = p.WithDefaults()
	if err := p.Validate(); err != nil {
		return err
	}
	t := pgx.Identifier{schema, table}.Sanitize()
	return pgx.BeginFunc(ctx, admin, func(tx pgx.Tx) error {
		// One Ensure of a schema at a time: CREATE ... IF NOT EXISTS races otherwise.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, int32(extLock), schema); err != nil {
			return err
		}
		ext, err := FindExtension(ctx, tx)
		if err != nil {
			return err
		}
		if serving {
			if _, err := pgindex.RecordSpec(ctx, tx, schema, spec); err != nil {
				return err
			}
		}
		var existed bool
		if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, t).Scan(&existed); err != nil {
			return err
		}
		extSchema := pgx.Identifier{ext.Schema}.Sanitize()
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+t+` (
			memory_id text PRIMARY KEY,
			scope text NOT NULL,
			memory_type text NOT NULL,
			embedding `+extSchema+`.vector(`+strconv.Itoa(spec.Dimension)+`) NOT NULL)`); err != nil {
			return fmt.Errorf("create %s: %w", t, err)
		}
		// A table made before (by hand, or by an Ensure whose spec was then removed
		// from store_meta) must hold vectors of this dimension.
		var typmod int
		if err := tx.QueryRow(ctx, `SELECT atttypmod FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'embedding'`,
			t).Scan(&typmod); err != nil {
			return fmt.Errorf("read the embedding column of %s: %w", t, err)
		}
		if typmod != spec.Dimension {
			return vector.DimensionError("table "+t, spec.Dimension, typmod)
		}
		if _, err := tx.Exec(ctx, `CREATE INDEX IF NOT EXISTS `+pgx.Identifier{table + "_scope_type_idx"}.Sanitize()+
			` ON `+t+` (scope, memory_type)`); err != nil {
			return fmt.Errorf("create the scope index of %s: %w", t, err)
		}
		if !existed && !serving {
			if err := deferSearchIndex(ctx, tx, schema, table); err != nil {
				return err
			}
		}
		build := hnswDDL(schema, table, ext.Schema, spec.Metric, p)
		// A bulk load that dropped the index builds it when it is done: building it
		// here, under the load, would make every later row of it go through the graph.
		deferred, err := searchIndexDeferred(ctx, tx, schema, table)
		if err != nil {
			return err
		}
		if deferred == "" {
			if _, err := tx.Exec(ctx, build); err != nil {
				return fmt.Errorf("create the HNSW index of %s: %w", t, err)
			}
		}
		return ensureBulkFunctions(ctx, tx, schema, table, build)
	})
}

// DropTable drops an index generation's table (EnsureTable) and its functions, if
// they exist, as the schema's owner. The store's own embeddings table is never
// dropped.
func DropTable(ctx context.Context, admin *pgxpool.Pool, schema, table string) error {
	if table == Table {
		return fmt.Errorf("pgvector: %q is the store's own embeddings table", table)
	}
	drop, build := TableFunctions(table)
	return pgx.BeginFunc(ctx, admin, func(tx pgx.Tx) error {
		for _, stmt := range []string{
			`DROP FUNCTION IF EXISTS ` + pgx.Identifier{schema, drop}.Sanitize() + `()`,
			`DROP FUNCTION IF EXISTS ` + pgx.Identifier{schema, build}.Sanitize() + `()`,
			`DROP TABLE IF EXISTS ` + pgx.Identifier{schema, table}.Sanitize(),
		} {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("dropping %s.%s: %w", schema, table, err)
			}
		}
		if _, err := tx.Exec(ctx, `DELETE FROM `+pgx.Identifier{schema, "store_meta"}.Sanitize()+` WHERE key = $1`,
			metaSearchIndexDeferred(table)); err != nil {
			return fmt.Errorf("dropping %s.%s: %w", schema, table, err)
		}
		return nil
	})
}

// hnswDDL creates the HNSW index of schema's table unless it exists.
func hnswDDL(schema, table, extSchema string, m vector.Metric, p Params) string {
	class, _ := opClass(m)
	return `CREATE INDEX IF NOT EXISTS ` + pgx.Identifier{table + "_hnsw_idx"}.Sanitize() + ` ON ` + pgx.Identifier{schema, table}.Sanitize() +
		` USING hnsw (embedding ` + pgx.Identifier{extSchema}.Sanitize() + `.` + class + `) WITH (m = ` + strconv.Itoa(p.M) +
		`, ef_construction = ` + strconv.Itoa(p.EfConstruction) + `)`
}

// Functions of the store's schema that let a role without DDL rights (the worker's)
// take the HNSW index away for a bulk load and build it again (DropSearchIndex,
// BuildSearchIndex): loading into an indexed table inserts every vector into the
// graph one by one, about 15 times slower than COPY and CREATE INDEX after. They run
// as their owner (the admin, SECURITY DEFINER) with a fixed search_path, do only
// that, and PUBLIC may not call them; provisioning grants EXECUTE to the worker role.
// These are the embeddings table's; TableFunctions names another table's.
const (
	DropIndexFunction  = Table + "_drop_hnsw"
	BuildIndexFunction = Table + "_build_hnsw"
)

// TableFunctions names the functions that drop and build table's HNSW index.
func TableFunctions(table string) (drop, build string) {
	return table + "_drop_hnsw", table + "_build_hnsw"
}

// MetaSearchIndexDeferred is the store_meta key a bulk load's DropSearchIndex sets
// (to when it dropped the index) and BuildSearchIndex removes, for the embeddings
// table; another table's key ends in "." and its name.
const MetaSearchIndexDeferred = "pgvector.search_index_deferred_since"

func metaSearchIndexDeferred(table string) string {
	if table == Table {
		return MetaSearchIndexDeferred
	}
	return MetaSearchIndexDeferred + "." + table
}

// SearchIndexDeferred reports since when a bulk load has held the embeddings table's
// HNSW index back ("" when none does): searches are exact until it builds the index.
func SearchIndexDeferred(ctx context.Context, q Querier, schema string) (string, error) {
	return searchIndexDeferred(ctx, q, schema, Table)
}

// TableSearchIndexDeferred is SearchIndexDeferred for another table of schema.
func TableSearchIndexDeferred(ctx context.Context, q Querier, schema, table string) (string, error) {
	return searchIndexDeferred(ctx, q, schema, table)
}

func searchIndexDeferred(ctx context.Context, q Querier, schema, table string) (string, error) {
	var since string
	key := metaSearchIndexDeferred(table)
	err := q.QueryRow(ctx, `SELECT value FROM `+pgx.Identifier{schema, "store_meta"}.Sanitize()+` WHERE key = $1`, key).Scan(&since)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read %s of schema %s: %w", key, schema, err)
	}
	return since, nil
}

// deferSearchIndex marks table's HNSW index as held back, as the drop function does.
func deferSearchIndex(ctx context.Context, tx pgx.Tx, schema, table string) error {
	_, err := tx.Exec(ctx, `INSERT INTO `+pgx.Identifier{schema, "store_meta"}.Sanitize()+
		` (key, value) VALUES ($1, now()::text) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`, metaSearchIndexDeferred(table))
	return err
}

func ensureBulkFunctions(ctx context.Context, tx pgx.Tx, schema, table, build string) error {
	const tag = "$memop_pgvector$"
	meta := pgx.Identifier{schema, "store_meta"}.Sanitize()
	key := quoteLiteral(metaSearchIndexDeferred(table))
	// The drop leaves a mark in store_meta that Ensure honours (it builds no index
	// under a load), the build takes it away.
	drop := `DROP INDEX IF EXISTS ` + pgx.Identifier{schema, table + "_hnsw_idx"}.Sanitize() + `; INSERT INTO ` + meta +
		` (key, value) VALUES (` + key + `, now()::text) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`
	build = build + `; DELETE FROM ` + meta + ` WHERE key = ` + key
	dropFn, buildFn := TableFunctions(table)
	for fn, body := range map[string]string{dropFn: drop, buildFn: build} {
		if strings.Contains(body, tag) {
			return fmt.Errorf("schema name %q cannot hold the index functions", schema)
		}
		name := pgx.Identifier{schema, fn}.Sanitize()
		if _, err := tx.Exec(ctx, `CREATE OR REPLACE FUNCTION `+name+`() RETURNS void LANGUAGE plpgsql SECURITY DEFINER
			SET search_path = pg_catalog, pg_temp AS `+tag+` BEGIN `+body+`; END `+tag); err != nil {
			return fmt.Errorf("create function %s: %w", name, err)
		}
		if _, err := tx.Exec(ctx, `REVOKE ALL ON FUNCTION `+name+`() FROM PUBLIC`); err != nil {
			return fmt.Errorf("revoke function %s from PUBLIC: %w", name, err)
		}
	}
	return nil
}
