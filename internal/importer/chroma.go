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

// records calls fn for every record of a metadata segment, in id order. The rows are
// read in the order of the embeddings' (segment_id, embedding_id) index, each
// record's metadata through its (id, key) key: no sort, however many records.
// List-valued metadata (Chroma 1.5+, rare) is read first, by record.
func (c *chromaDB) records(ctx context.Context, segment string, fn func(chromaRecord) error) error {
	arrays := map[int64]map[string][]any{}
	if c.arrays {
		rows, err := c.db.QueryContext(ctx, `SELECT a.id, a.key, a.string_value, a.int_value, a.float_value, a.bool_value
			FROM embedding_metadata_array a JOIN embeddings e ON e.id = a.id WHERE e.segment_id = ? ORDER BY a.id, a.key, a.rowid`, segment)
		if err != nil {
			return fmt.Errorf("reading %s: %w", c.path, err)
		}
		for rows.Next() {
			var (
				id  int64
				key string
				v   chromaValue
			)
			if err := rows.Scan(&id, &key, &v.s, &v.i, &v.f, &v.b); err != nil {
				rows.Close()
				return fmt.Errorf("reading %s: %w", c.path, err)
			}
			if arrays[id] == nil {
				arrays[id] = map[string][]any{}
			}
			arrays[id][key] = append(arrays[id][key], v.value())
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("reading %s: %w", c.path, err)
		}
	}
	// SQLite is read on a goroutine of its own, a batch of records at a time, while
	// the caller converts the previous ones: reading is most of an import's work.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan []chromaRecord, 4)
	var readErr error
	go func() {
		defer close(batches)
		readErr = c.scan(ctx, segment, arrays, func(b []chromaRecord) bool {
			select {
			case batches <- b:
				return true
			case <-ctx.Done():
				return false
			}
		})
	}()
	for b := range batches {
		for _, r := range b {
			if err := fn(r); err != nil {
				cancel()
				for range batches { // let the reader see the cancellation and stop
				}
				return err
			}
		}
	}
	return readErr
}

// chromaBatch is how many records the reader hands over at a time.
const chromaBatch = 256

// scan reads the segment's records in embedding_id order and hands them to emit in
// batches, until emit says stop.
func (c *chromaDB) scan(ctx context.Context, segment string, arrays map[int64]map[string][]any, emit func([]chromaRecord) bool) error {
	rows, err := c.db.QueryContext(ctx, `SELECT e.embedding_id, e.id, coalesce(CAST(e.created_at AS TEXT), ''), md.key, md.string_value,
		md.int_value, md.float_value, md.bool_value
		FROM embeddings e JOIN embedding_metadata md ON md.id = e.id
		WHERE e.segment_id = ? ORDER BY e.embedding_id, md.key`, segment)
	if err != nil {
		return fmt.Errorf("reading %s: %w", c.path, err)
	}
	defer rows.Close()
	batch := make([]chromaRecord, 0, chromaBatch)
	var cur chromaRecord
	flush := func() bool {
		if cur.ID == "" {
			return true
		}
		for k, l := range arrays[cur.Row] {
			cur.Meta[k] = l
		}
		batch = append(batch, cur)
		if len(batch) < chromaBatch {
			return true
		}
		ok := emit(batch)
		batch = make([]chromaRecord, 0, chromaBatch)
		return ok
	}
	for rows.Next() {
		var (
			id, created, key string
			row              int64
			v                chromaValue
		)
		if err := rows.Scan(&id, &row, &created, &key, &v.s, &v.i, &v.f, &v.b); err != nil {
			return fmt.Errorf("reading %s: %w", c.path, err)
		}
		if id != cur.ID {
			if !flush() {
				return ctx.Err()
			}
			cur = chromaRecord{ID: id, Row: row, Meta: map[string]any{}}
			cur.CreatedAt, _ = time.Parse(time.DateTime, created) // SQLite's CURRENT_TIMESTAMP: UTC
		}
		cur.Meta[key] = v.value()
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading %s: %w", c.path, err)
	}
	if !flush() || len(batch) > 0 && !emit(batch) {
		return ctx.Err()
	}
	return nil
}

// chromaValue is one metadata value as Chroma stores it: one column set, by type.
type chromaValue struct {
	s sql.NullString
	i sql.NullInt64
	f sql.NullFloat64
	b sql.NullBool
}

func (v chromaValue) value() any {
	switch {
	case v.s.Valid:
		return v.s.String
	case v.i.Valid:
		return v.i.Int64
	case v.f.Valid && !math.IsNaN(v.f.Float64) && !math.IsInf(v.f.Float64, 0):
		return v.f.Float64
	case v.b.Valid:
		return v.b.Bool
	}
	return nil
}

// count is the number of records of a metadata segment.
func (c *chromaDB) count(ctx context.Context, segment string) (int64, error) {
	var n int64
	err := c.db.QueryRowContext(ctx, `SELECT count(*) FROM embeddings WHERE segment_id = ?`, segment).Scan(&n)
	return n, err
}
