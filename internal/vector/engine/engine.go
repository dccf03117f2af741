// Package engine opens a store's vector index in the processes that use it (the
// gateway and every Job) from one set of flags, so each engine is configured, logged
// into and opened the same way everywhere:
//
//   - Postgres: pgindex, plain arrays in the store's schema, searched exactly;
//   - PGVector: pgvector, the vector extension's HNSW index in the store's schema;
//   - Milvus: one collection of a Milvus server, reached as the store's own Milvus
//     user when the server has authentication (the login comes from the environment,
//     never from flags).
package engine

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/vector"
	"github.com/amemory/memory-operator/internal/vector/milvus"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
	"github.com/amemory/memory-operator/internal/vector/pgvector"
)

// The engines, as spec.vector.engine and status.vector.engine name them.
const (
	Postgres = "Postgres"
	PGVector = "PGVector"
	Milvus   = "Milvus"
)

// Environment variables holding the store's Milvus login. The operator fills them from
// the store's Secrets by reference, so no password is an argument or in a Pod spec.
const (
	EnvMilvusUsername = "MEMORY_MILVUS_USERNAME"
	EnvMilvusPassword = "MEMORY_MILVUS_PASSWORD"
)

// Vectors says where a store's vectors are. Configurations of the gateway and the
// Jobs embed it, so its fields read as theirs (cfg.VectorEngine).
type Vectors struct {
	// VectorEngine is Postgres, PGVector or Milvus.
	VectorEngine string
	// MilvusAddress (host:port) and Collection locate a Milvus engine's collection.
	MilvusAddress, Collection string
	// VectorTable is the Postgres or PGVector engine's table in the store's schema
	// ("": its vectors or embeddings table); an index generation has a table of its
	// own.
	VectorTable string
	// EfSearch and ExactBelow tune the PGVector engine's searches (0: its defaults):
	// the HNSW candidate list size, and the scope size up to which a search is exact.
	EfSearch, ExactBelow int
}

// Register adds the flags of v to fs.
func (v *Vectors) Register(fs *flag.FlagSet) { v.RegisterPrefixed(fs, "") }

// RegisterPrefixed adds the flags with their names after prefix ("serving-":
// --serving-vector-engine), for a process that uses two indexes of a store.
func (v *Vectors) RegisterPrefixed(fs *flag.FlagSet, prefix string) {
	fs.StringVar(&v.VectorEngine, prefix+"vector-engine", Postgres, "Postgres, PGVector or Milvus")
	fs.StringVar(&v.MilvusAddress, prefix+"milvus-address", "", "Milvus host:port (Milvus engine)")
	fs.StringVar(&v.Collection, prefix+"collection", "", "Milvus collection (Milvus engine)")
	fs.StringVar(&v.VectorTable, prefix+"vector-table", "", "table of the vectors in the store's schema (Postgres and PGVector engines; default: vectors, embeddings)")
	fs.IntVar(&v.EfSearch, prefix+"hnsw-ef-search", 0, "HNSW candidate list size of a search (PGVector engine; 0: default)")
	fs.IntVar(&v.ExactBelow, prefix+"exact-search-below", 0, "scope size up to which searches are exact (PGVector engine; 0: default)")
}

// Args renders v as the flags Register parses.
func (v Vectors) Args() []string { return v.ArgsPrefixed("") }

// ArgsPrefixed renders v as the flags RegisterPrefixed(prefix) parses.
func (v Vectors) ArgsPrefixed(prefix string) []string {
	args := []string{"--" + prefix + "vector-engine=" + v.VectorEngine}
	opt := func(name, value string) {
		if value != "" && value != "0" {
			args = append(args, "--"+prefix+name+"="+value)
		}
	}
	opt("milvus-address", v.MilvusAddress)
	opt("collection", v.Collection)
	opt("vector-table", v.VectorTable)
	opt("hnsw-ef-search", strconv.Itoa(max(v.EfSearch, 0)))
	opt("exact-search-below", strconv.Itoa(max(v.ExactBelow, 0)))
	return args
}

// Validate checks the engine and where its index is.
func (v Vectors) Validate() error {
	if err := v.ValidateEngine(); err != nil {
		return err
	}
	if v.VectorEngine == Milvus && (v.MilvusAddress == "" || v.Collection == "") {
		return errors.New("the Milvus engine needs --milvus-address and --collection")
	}
	return nil
}

// ValidateEngine checks the engine's name and tuning, for callers that may not need
// to reach the index.
func (v Vectors) ValidateEngine() error {
	switch v.VectorEngine {
	case Postgres, PGVector, Milvus:
	default:
		return fmt.Errorf("--vector-engine %q: want Postgres, PGVector or Milvus", v.VectorEngine)
	}
	if v.VectorTable != "" && v.VectorEngine == Milvus {
		return errors.New("--vector-table is for the Postgres and PGVector engines; Milvus keeps its index where --collection says")
	}
	if v.EfSearch < 0 || v.ExactBelow < 0 {
		return errors.New("--hnsw-ef-search and --exact-search-below must not be negative")
	}
	return nil
}

// Table is the Postgres engine's table of vectors in the store's schema (the
// vectors table on the other engines, which leave it empty).
func (v Vectors) Table() string {
	if v.VectorTable == "" || v.VectorEngine != Postgres {
		return pgindex.Table
	}
	return v.VectorTable
}

// pgvectorTable is the PGVector engine's table in the store's schema.
func (v Vectors) pgvectorTable() string {
	if v.VectorTable == "" {
		return pgvector.Table
	}
	return v.VectorTable
}

// InSchema reports whether the vectors are the schema's own vectors table (the
// Postgres engine), which exports and imports read and write with the memories; the
// other engines' vectors are fetched from and written to their index.
func (v Vectors) InSchema() bool { return v.VectorEngine == Postgres }

// External reports whether the index is on another server than the store's
// PostgreSQL (Milvus), which may be down while PostgreSQL is up.
func (v Vectors) External() bool { return v.VectorEngine == Milvus }

// Login is a store's Milvus user. Empty for a server without authentication.
type Login struct {
	Username, Password string
}

// LoginFromEnv reads the Milvus login from EnvMilvusUsername and EnvMilvusPassword.
func LoginFromEnv() Login {
	return Login{Username: os.Getenv(EnvMilvusUsername), Password: os.Getenv(EnvMilvusPassword)}
}

// DialTimeout bounds connecting to Milvus: the SDK dials blocking and would retry an
// unreachable server for as long as the context lives, leaving a caller hanging with
// no word of why. Tests shorten it.
var DialTimeout = 30 * time.Second

// Open returns the store's index and a function that releases what it holds. pool is
// the store's PostgreSQL pool (its role's) and schema its schema; the Postgres and
// PGVector engines use them, Milvus dials its server as login.
func (v Vectors) Open(ctx context.Context, pool *pgxpool.Pool, schema string, spec vector.Spec, login Login) (vector.Index, func(), error) {
	switch v.VectorEngine {
	case Milvus:
		c, err := dialMilvus(ctx, v.MilvusAddress, login)
		if err != nil {
			return nil, nil, err
		}
		return milvus.New(c, v.Collection, spec), func() { _ = c.Close() }, nil
	case PGVector:
		return openPGVector(pool, schema, spec, v), func() {}, nil
	default:
		return pgindex.NewTable(pool, schema, v.Table(), spec), func() {}, nil
	}
}

// Fetcher is an index whose stored vectors can be read back by memory ID, for
// snapshots of engines that keep vectors outside the schema's vectors table.
type Fetcher interface {
	Fetch(ctx context.Context, ids []string) (map[string][]float32, error)
}

// FreshLoader is an index that writes a load into an empty index more cheaply when
// told so: Milvus inserts instead of upserting, which spares it rewriting and
// indexing again every segment of the load afterwards (milvus/fresh.go).
type FreshLoader interface {
	// BeginFreshLoad starts a fresh load of about expected entries if the index
	// holds none, and reports whether it did.
	BeginFreshLoad(ctx context.Context, expected int64) (bool, error)
	EndFreshLoad()
}

// BulkLoader is an index that loads many vectors faster without its search index and
// builds that afterwards (PGVector's HNSW graph). Searches stay correct meanwhile,
// only slower.
type BulkLoader interface {
	DropSearchIndex(ctx context.Context) error
	// BuildSearchIndex builds the search index with memory for the build (a
	// PostgreSQL size such as "1GB"; empty: the server's setting).
	BuildSearchIndex(ctx context.Context, memory string) error
	// SearchIndexDeferred says since when a bulk load has held the index back ("":
	// it is in place).
	SearchIndexDeferred(ctx context.Context) (string, error)
}
