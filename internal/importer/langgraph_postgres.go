package importer

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// LangGraphPostgres reads a langgraph-checkpoint-postgres database: each thread's
// latest root checkpoint (checkpoint_ns ”) with its messages channel, and the store
// table of LangGraph's PostgresStore when there is one (research/importers.md 1).
type LangGraphPostgres struct {
	pool *pgxpool.Pool
	// Schema holds the checkpointer's tables ("" for the connection's search_path).
	schema string
	// MigrationVersion is the checkpointer's schema version (checkpoint_migrations).
	MigrationVersion int
	// HasStore: the database has PostgresStore's store table.
	HasStore bool
}

// Checkpointer schema versions this reader knows: 4 made blobs nullable, and nothing
// since (through 9, task_path) changed what it reads.
const (
	minCheckpointMigration = 4
	maxCheckpointMigration = 9
)

// OpenLangGraphPostgres checks that the database holds a checkpointer this reader
// understands. The error says precisely what is missing.
func OpenLangGraphPostgres(ctx context.Context, pool *pgxpool.Pool, schema string) (*LangGraphPostgres, error) {
	l := &LangGraphPostgres{pool: pool, schema: schema}
	var ok bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, l.table("checkpoint_migrations")).Scan(&ok); err != nil {
		return nil, fmt.Errorf("langgraph postgres: %w", err)
	}
	if !ok {
		return nil, fmt.Errorf("langgraph postgres: no %s table: this is not a langgraph-checkpoint-postgres database (or not its schema)", l.table("checkpoint_migrations"))
	}
	var v *int
	if err := pool.QueryRow(ctx, `SELECT max(v) FROM `+l.table("checkpoint_migrations")).Scan(&v); err != nil {
		return nil, fmt.Errorf("langgraph postgres: reading the checkpointer version: %w", err)
	}
	if v == nil || *v < minCheckpointMigration || *v > maxCheckpointMigration {
		got := "none"
		if v != nil {
			got = fmt.Sprint(*v)
		}
		return nil, unsupported("langgraph-checkpoint-postgres schema version %s (this importer reads versions %d to %d)", got, minCheckpointMigration, maxCheckpointMigration)
	}
	l.MigrationVersion = *v
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, l.table("store")).Scan(&l.HasStore); err != nil {
		return nil, fmt.Errorf("langgraph postgres: %w", err)
	}
	return l, nil
}

func (l *LangGraphPostgres) table(name string) string {
	if l.schema == "" {
		return pgx.Identifier{name}.Sanitize()
	}
	return pgx.Identifier{l.schema, name}.Sanitize()
}

// Threads calls fn for every thread with a root checkpoint, in thread_id order. A
// thread whose data cannot be read is passed with Unsupported set; only database
// errors end the walk.
func (l *LangGraphPostgres) Threads(ctx context.Context, fn func(Thread) error) error {
	return l.ThreadsWhere(ctx, nil, fn)
}

// ThreadsWhere is Threads that decodes a thread's messages only when needsMessages
// (nil: always) says they are needed.
func (l *LangGraphPostgres) ThreadsWhere(ctx context.Context, needsMessages func(Thread) bool, fn func(Thread) error) error {
	rows, err := l.pool.Query(ctx, `
		WITH latest AS (
			SELECT DISTINCT ON (thread_id) thread_id, checkpoint_id, checkpoint, metadata
			FROM `+l.table("checkpoints")+` WHERE checkpoint_ns = ''
			ORDER BY thread_id, checkpoint_id DESC)
		SELECT l.thread_id, l.checkpoint->>'ts', l.metadata,
			(SELECT min(checkpoint_id) FROM `+l.table("checkpoints")+` c WHERE c.thread_id = l.thread_id AND c.checkpoint_ns = ''),
			l.checkpoint->'channel_values'->'messages',
			b.type, b.blob,
			EXISTS (SELECT 1 FROM `+l.table("checkpoint_writes")+` w WHERE w.thread_id = l.thread_id
				AND w.checkpoint_ns = '' AND w.checkpoint_id = l.checkpoint_id AND w.channel = '__error__')
		FROM latest l
		LEFT JOIN `+l.table("checkpoint_blobs")+` b ON b.thread_id = l.thread_id AND b.checkpoint_ns = ''
			AND b.channel = 'messages' AND b.version = l.checkpoint->'channel_versions'->>'messages'
		ORDER BY l.thread_id`)
	if err != nil {
		return fmt.Errorf("langgraph postgres: reading threads: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			t                  Thread
			ts, firstID        *string
			meta, inline       []byte
			blobType           *string
			blob               []byte
			metaErr, inlineErr error
		)
		if err := rows.Scan(&t.ID, &ts, &meta, &firstID, &inline, &blobType, &blob, &t.Errored); err != nil {
			return fmt.Errorf("langgraph postgres: reading threads: %w", err)
		}
		if len(meta) > 0 {
			metaErr = json.Unmarshal(meta, &t.Metadata)
		}
		if ts != nil {
			t.LastActivity, _ = time.Parse(time.RFC3339Nano, *ts)
		}
		if firstID != nil {
			t.FirstActivity, _ = uuid6Time(*firstID)
		}
		switch {
		case metaErr != nil:
			t.Unsupported = unsupported("checkpoint metadata: %v", metaErr)
		case len(inline) > 0 && string(inline) != "null":
			// A DeltaChannel marks its channel with an inline true; a plain list is
			// never inline (only primitives are).
			inlineErr = unsupported("the messages channel is inline (%s): a DeltaChannel or custom channel", shorten(string(inline)))
			t.Unsupported = inlineErr
		case blobType != nil && (needsMessages == nil || needsMessages(t)):
			t.Messages, t.Unsupported = decodeMessages(*blobType, blob)
		}
		if err := fn(t); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("langgraph postgres: reading threads: %w", err)
	}
	return nil
}

// decodeMessages decodes a messages channel value into message dicts.
func decodeMessages(typ string, b []byte) ([]map[string]any, error) {
	v, ok, err := DecodeTyped(typ, b)
	if err != nil || !ok {
		return nil, err
	}
	list, isList := v.([]any)
	if !isList {
		return nil, unsupported("the messages channel holds %T, not a list of messages", v)
	}
	out := make([]map[string]any, 0, len(list))
	for i, e := range list {
		m, ok := e.(map[string]any)
		if !ok || m["type"] == nil {
			return nil, unsupported("message %d is %T, not a LangChain message", i, e)
		}
		out = append(out, m)
	}
	return out, nil
}

func shorten(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// uuid6Time is the time in a LangGraph checkpoint id (a uuid6: 60 bits of 100 ns
// intervals since 1582-10-15, most significant first).
func uuid6Time(id string) (time.Time, error) {
	h := strings.ReplaceAll(id, "-", "")
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != 16 || b[6]>>4 != 6 {
		return time.Time{}, errors.New("not a uuid6")
	}
	ts := uint64(b[0])<<52 | uint64(b[1])<<44 | uint64(b[2])<<36 | uint64(b[3])<<28 |
		uint64(b[4])<<20 | uint64(b[5])<<12 | uint64(b[6]&0x0f)<<8 | uint64(b[7])
	const gregorianToUnix = 0x01b21dd213814000 // 100 ns intervals from 1582-10-15 to 1970-01-01
	return time.Unix(0, int64(ts-gregorianToUnix)*100).UTC(), nil
}

// StoreItem is one item of LangGraph's PostgresStore.
type StoreItem struct {
	Namespace            []string
	Key                  string
	Value                json.RawMessage
	CreatedAt, UpdatedAt time.Time
	ExpiresAt            *time.Time
}

// StoreItems calls fn for every item of the store table, in (prefix, key) order.
func (l *LangGraphPostgres) StoreItems(ctx context.Context, fn func(StoreItem) error) error {
	if !l.HasStore {
		return nil
	}
	rows, err := l.pool.Query(ctx, `SELECT prefix, key, value, created_at, updated_at, expires_at FROM `+l.table("store")+` ORDER BY prefix, key`)
	if err != nil {
		return fmt.Errorf("langgraph postgres: reading the store: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var it StoreItem
		var prefix string
		if err := rows.Scan(&prefix, &it.Key, &it.Value, &it.CreatedAt, &it.UpdatedAt, &it.ExpiresAt); err != nil {
			return fmt.Errorf("langgraph postgres: reading the store: %w", err)
		}
		it.Namespace = strings.Split(prefix, ".")
		if err := fn(it); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("langgraph postgres: reading the store: %w", err)
	}
	return nil
}
