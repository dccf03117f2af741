package importer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"time"
)

// chromaDB reads the SQLite database of a Chroma PersistentClient directory
// (chroma.sqlite3), read-only, as mem0 and CrewAI leave it. Each collection has a
// metadata segment whose rows hold every record's metadata and, under the key
// chroma:document, its text; the vectors (the HNSW segment's binary files) are not read:
// a restore embeds with the target store's embedder.
type chromaDB struct {
	db   *sql.DB
	path string
	// arrays: Chroma 1.5 and later keep list-valued metadata in
	// embedding_metadata_array; earlier versions have no such table.
	arrays bool
}

// errNotChroma says a SQLite file is not a Chroma database; qdrant says it is a Qdrant
// local store instead (mem0's default).
type errNotChroma struct{ qdrant bool }

func (e errNotChroma) Error() string { return "not a Chroma database" }

// openChroma opens path (chroma.sqlite3, or the directory holding it).
func openChroma(ctx context.Context, path string) (*chromaDB, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		path += "/chroma.sqlite3"
	}
	db, err := openSQLiteRO(path)
	if err != nil {
		return nil, err
	}
	c := &chromaDB{db: db, path: path}
	var tables, arrays int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE name IN ('collections', 'segments', 'embeddings', 'embedding_metadata',
		'max_seq_id', 'embeddings_queue')), count(*) FILTER (WHERE name = 'embedding_metadata_array') FROM sqlite_master WHERE type = 'table'`).
		Scan(&tables, &arrays); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("%s is not a readable SQLite database: %w", path, err)
	}
	if tables != 6 {
		var points int
		_ = db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'points'`).Scan(&points)
		_ = db.Close()
		return nil, errNotChroma{qdrant: points == 1}
	}
	c.arrays = arrays == 1
	return c, nil
}

func (c *chromaDB) Close() error { return c.db.Close() }

// collections lists the collections' names, sorted.
func (c *chromaDB) collections(ctx context.Context) ([]string, error) {
	rows, err := c.db.QueryContext(ctx, `SELECT name FROM collections ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", c.path, err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("reading %s: %w", c.path, err)
		}
		names = append(names, n)
	}
	return names, rows.Err()
}

// metadataSegment finds a collection's metadata segment and checks that it has
// applied every write of Chroma's log (a store closed cleanly has): otherwise records
// would be missing without a trace.
func (c *chromaDB) metadataSegment(ctx context.Context, collection string) (string, error) {
	var collID, segment string
	err := c.db.QueryRowContext(ctx, `SELECT c.id, s.id FROM collections c JOIN segments s ON s.collection = c.id
		WHERE c.name = ? AND s.scope = 'METADATA'`, collection).Scan(&collID, &segment)
	if errors.Is(err, sql.ErrNoRows) {
		names, _ := c.collections(ctx)
		return "", fmt.Errorf("%s has no collection %q (it has %s)", c.path, collection, strings.Join(names, ", "))
	}
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", c.path, err)
	}
	var applied, logged sql.NullInt64
	if err := c.db.QueryRowContext(ctx, `SELECT (SELECT seq_id FROM max_seq_id WHERE segment_id = ?),
		(SELECT max(seq_id) FROM embeddings_queue WHERE topic LIKE '%/' || ?)`, segment, collID).Scan(&applied, &logged); err != nil {
		return "", fmt.Errorf("reading %s: %w", c.path, err)
	}
	if logged.Valid && logged.Int64 > applied.Int64 {
		return "", fmt.Errorf("%s: Chroma's metadata segment of %q has applied its log up to write %d of %d; open the store once with chromadb "+
			"(or the framework) so that it applies the rest, then import", c.path, collection, applied.Int64, logged.Int64)
	}
	return segment, nil
}

// chromaRecord is one record of a collection: its id, when Chroma stored it (second
// resolution; Row orders records stored in the same second), and its metadata, the
// text under chroma:document.
type chromaRecord struct {
	ID        string
	Row       int64
	CreatedAt time.Time
	Meta      map[string]any
}

// document is the record's text.
func (r chromaRecord) document() string {
	s, _ := r.Meta["chroma:document"].(string)
	return s
}

// records calls fn for every record of a metadata segment, in id order.
func (c *chromaDB) records(ctx context.Context, segment string, fn func(chromaRecord) error) error {
	arrays := ""
	if c.arrays {
		arrays = ` UNION ALL SELECT id, key, string_value, int_value, float_value, bool_value, 1 FROM embedding_metadata_array`
	}
	rows, err := c.db.QueryContext(ctx, `SELECT e.embedding_id, e.id, coalesce(CAST(e.created_at AS TEXT), ''), md.key, md.string_value,
		md.int_value, md.float_value, md.bool_value, md.arr
		FROM embeddings e JOIN (
			SELECT id, key, string_value, int_value, float_value, bool_value, 0 AS arr FROM embedding_metadata`+arrays+`) md ON md.id = e.id
		WHERE e.segment_id = ? ORDER BY e.embedding_id, md.key, md.arr`, segment)
	if err != nil {
		return fmt.Errorf("reading %s: %w", c.path, err)
	}
	defer rows.Close()
	var cur chromaRecord
	flush := func() error {
		if cur.ID == "" {
			return nil
		}
		return fn(cur)
	}
	for rows.Next() {
		var (
			id, created, key string
			row              int64
			s                sql.NullString
			i                sql.NullInt64
			f                sql.NullFloat64
			b                sql.NullBool
			arr              bool
		)
		if err := rows.Scan(&id, &row, &created, &key, &s, &i, &f, &b, &arr); err != nil {
			return fmt.Errorf("reading %s: %w", c.path, err)
		}
		if id != cur.ID {
			if err := flush(); err != nil {
				return err
			}
			cur = chromaRecord{ID: id, Row: row, Meta: map[string]any{}}
			cur.CreatedAt, _ = time.Parse(time.DateTime, created) // SQLite's CURRENT_TIMESTAMP: UTC
		}
		var v any
		switch {
		case s.Valid:
			v = s.String
		case i.Valid:
			v = i.Int64
		case f.Valid && !math.IsNaN(f.Float64) && !math.IsInf(f.Float64, 0):
			v = f.Float64
		case b.Valid:
			v = b.Bool
		}
		if arr {
			l, _ := cur.Meta[key].([]any)
			cur.Meta[key] = append(l, v)
		} else {
			cur.Meta[key] = v
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading %s: %w", c.path, err)
	}
	return flush()
}

// count is the number of records of a metadata segment.
func (c *chromaDB) count(ctx context.Context, segment string) (int64, error) {
	var n int64
	err := c.db.QueryRowContext(ctx, `SELECT count(*) FROM embeddings WHERE segment_id = ?`, segment).Scan(&n)
	return n, err
}
