package importer

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	_ "modernc.org/sqlite" // database/sql driver "sqlite", pure Go
)

// LangGraphSQLite reads a langgraph-checkpoint-sqlite file: there is no blobs table,
// each checkpoint is one JsonPlus blob holding channel_values (messages included),
// and metadata is JSON text (research/importers.md 2). The file is opened read-only.
type LangGraphSQLite struct {
	db       *sql.DB
	hasStore bool
	// writesOrder orders a checkpoint's pending writes as get_state applies them (by
	// task path, when the writes table has the column).
	writesOrder string
}

// OpenLangGraphSQLite opens path read-only and checks it holds a checkpointer.
func OpenLangGraphSQLite(ctx context.Context, path string) (*LangGraphSQLite, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("langgraph sqlite: %w", err)
	}
	db, err := sql.Open("sqlite", "file:"+url.PathEscape(path)+"?mode=ro&_pragma=query_only(1)")
	if err != nil {
		return nil, fmt.Errorf("langgraph sqlite: %w", err)
	}
	l := &LangGraphSQLite{db: db}
	tables := map[string]bool{}
	rows, err := db.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table'`)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("langgraph sqlite: %s is not a readable SQLite database: %w", path, err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err == nil {
			tables[name] = true
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("langgraph sqlite: %s is not a readable SQLite database: %w", path, err)
	}
	if !tables["checkpoints"] || !tables["writes"] {
		_ = db.Close()
		return nil, fmt.Errorf("langgraph sqlite: %s has no checkpoints and writes tables: not a langgraph-checkpoint-sqlite file", path)
	}
	l.hasStore = tables["store"]
	l.writesOrder = "task_id, idx"
	var hasPath bool
	if err := db.QueryRowContext(ctx, `SELECT count(*) > 0 FROM pragma_table_info('writes') WHERE name = 'task_path'`).Scan(&hasPath); err == nil && hasPath {
		l.writesOrder = "task_path, task_id, idx"
	}
	return l, nil
}

// Close closes the file.
func (l *LangGraphSQLite) Close() error { return l.db.Close() }

// Threads calls fn for every thread with a root checkpoint, in thread_id order.
func (l *LangGraphSQLite) Threads(ctx context.Context, fn func(Thread) error) error {
	rows, err := l.db.QueryContext(ctx, `
		SELECT c.thread_id, c.type, c.checkpoint, c.metadata,
			(SELECT min(checkpoint_id) FROM checkpoints f WHERE f.thread_id = c.thread_id AND f.checkpoint_ns = ''),
			EXISTS (SELECT 1 FROM writes w WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = ''
				AND w.checkpoint_id = c.checkpoint_id AND w.channel = '__error__'),
			c.checkpoint_id,
			EXISTS (SELECT 1 FROM writes w WHERE w.thread_id = c.thread_id AND w.checkpoint_ns = ''
				AND w.checkpoint_id = c.checkpoint_id AND w.channel = 'messages')
		FROM checkpoints c
		WHERE c.checkpoint_ns = '' AND c.checkpoint_id = (
			SELECT max(checkpoint_id) FROM checkpoints m WHERE m.thread_id = c.thread_id AND m.checkpoint_ns = '')
		ORDER BY c.thread_id`)
	if err != nil {
		return fmt.Errorf("langgraph sqlite: reading threads: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			t        Thread
			typ      sql.NullString
			blob     []byte
			meta     []byte
			firstID  sql.NullString
			errorRow bool
			latest   string
			pending  bool
		)
		if err := rows.Scan(&t.ID, &typ, &blob, &meta, &firstID, &errorRow, &latest, &pending); err != nil {
			return fmt.Errorf("langgraph sqlite: reading threads: %w", err)
		}
		t.Errored = errorRow
		if firstID.Valid {
			t.FirstActivity, _ = uuid6Time(firstID.String)
		}
		t.Unsupported = sqliteCheckpoint(&t, typ.String, blob, meta)
		if pending && t.Unsupported == nil {
			writes, err := l.pendingWrites(ctx, t.ID, latest)
			if err != nil {
				return err
			}
			t.Messages, t.Unsupported = mergePending(t.Messages, writes, false)
		}
		if err := fn(t); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("langgraph sqlite: reading threads: %w", err)
	}
	return nil
}

// pendingWrites reads the pending writes to the messages channel of one checkpoint
// (few threads have any: those whose last superstep stopped part way).
func (l *LangGraphSQLite) pendingWrites(ctx context.Context, threadID, checkpointID string) ([]encodedMessages, error) {
	rows, err := l.db.QueryContext(ctx, `SELECT type, value FROM writes WHERE thread_id = ? AND checkpoint_ns = ''
		AND checkpoint_id = ? AND channel = 'messages' ORDER BY `+l.writesOrder, threadID, checkpointID)
	if err != nil {
		return nil, fmt.Errorf("langgraph sqlite: reading the pending writes of thread %s: %w", threadID, err)
	}
	defer rows.Close()
	var out []encodedMessages
	for rows.Next() {
		var typ sql.NullString
		var blob []byte
		if err := rows.Scan(&typ, &blob); err != nil {
			return nil, fmt.Errorf("langgraph sqlite: reading the pending writes of thread %s: %w", threadID, err)
		}
		out = append(out, encodedMessages{typ: typ.String, blob: blob})
	}
	return out, rows.Err()
}

// sqliteCheckpoint fills t from the latest checkpoint blob and its metadata.
func sqliteCheckpoint(t *Thread, typ string, blob, meta []byte) error {
	if len(meta) > 0 {
		if err := json.Unmarshal(meta, &t.Metadata); err != nil {
			return unsupported("checkpoint metadata: %v", err)
		}
	}
	v, ok, err := DecodeTyped(typ, blob)
	if err != nil {
		return err
	}
	cp, isMap := v.(map[string]any)
	if !ok || !isMap {
		return unsupported("the checkpoint is %T, not a checkpoint", v)
	}
	if ts, _ := cp["ts"].(string); ts != "" {
		t.LastActivity, _ = time.Parse(time.RFC3339Nano, ts)
	}
	values, _ := cp["channel_values"].(map[string]any)
	for _, name := range slices.Sorted(maps.Keys(values)) {
		if IsStateChannel(name) {
			t.channels = append(t.channels, encodedChannel{name: name, value: values[name], known: true})
		}
	}
	switch msgs := values["messages"].(type) {
	case nil:
		return nil
	case bool:
		return unsupported("the messages channel is a marker (%v): a DeltaChannel", msgs)
	case []any:
		t.Messages = make([]map[string]any, 0, len(msgs))
		for i, e := range msgs {
			m, ok := e.(map[string]any)
			if !ok || m["type"] == nil {
				return unsupported("message %d is %T, not a LangChain message", i, e)
			}
			t.Messages = append(t.Messages, m)
		}
		return nil
	default:
		return unsupported("the messages channel holds %T", msgs)
	}
}

// StoreItems calls fn for every item of a SqliteStore's store table, if the file has
// one.
func (l *LangGraphSQLite) StoreItems(ctx context.Context, fn func(StoreItem) error) error {
	if !l.hasStore {
		return nil
	}
	rows, err := l.db.QueryContext(ctx, `SELECT prefix, key, value, created_at, updated_at, expires_at FROM store ORDER BY prefix, key`)
	if err != nil {
		return fmt.Errorf("langgraph sqlite: reading the store: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			prefix, key, value string
			created, updated   sql.NullString
			expires            sql.NullString
		)
		if err := rows.Scan(&prefix, &key, &value, &created, &updated, &expires); err != nil {
			return fmt.Errorf("langgraph sqlite: reading the store: %w", err)
		}
		it := StoreItem{Namespace: strings.Split(prefix, "."), Key: key, Value: json.RawMessage(value)}
		it.CreatedAt, _ = sqliteTime(created.String)
		it.UpdatedAt, _ = sqliteTime(updated.String)
		if t, err := sqliteTime(expires.String); err == nil && expires.Valid {
			it.ExpiresAt = &t
		}
		if err := fn(it); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("langgraph sqlite: reading the store: %w", err)
	}
	return nil
}

// sqliteTime parses SQLite's TIMESTAMP text ("2026-11-20 08:30:01[.fff][+00:00]").
func sqliteTime(s string) (time.Time, error) {
	for _, layout := range []string{"2006-01-02 15:04:05.999999999-07:00", "2006-01-02 15:04:05.999999999", time.RFC3339Nano} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, errors.New("not a SQLite timestamp")
}
