package importer

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// LangChainPostgresHistory reads a langchain-postgres PostgresChatMessageHistory
// table: (id serial, session_id uuid, message jsonb, created_at timestamptz), one row
// per message in message_to_dict form ({"type", "data": model_dump()}), a session's
// messages in id order (research/importers.md 3). A session is a thread; the table
// has no user column, so its scope comes from the session (session:{thread}) or a
// pattern on the session id, and mapping renames it.
type LangChainPostgresHistory struct {
	pool  *pgxpool.Pool
	table string
}

// OpenLangChainPostgresHistory checks that table (optionally schema-qualified) has
// the history's columns.
func OpenLangChainPostgresHistory(ctx context.Context, pool *pgxpool.Pool, schema, table string) (*LangChainPostgresHistory, error) {
	id := pgx.Identifier{table}
	if schema != "" {
		id = pgx.Identifier{schema, table}
	}
	l := &LangChainPostgresHistory{pool: pool, table: id.Sanitize()}
	var cols []string
	rows, err := pool.Query(ctx, `SELECT attname FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped`, l.table)
	if err != nil {
		return nil, fmt.Errorf("langchain history: %w", err)
	}
	cols, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("langchain history: %w", err)
	}
	have := map[string]bool{}
	for _, c := range cols {
		have[c] = true
	}
	for _, c := range []string{"id", "session_id", "message", "created_at"} {
		if !have[c] {
			if len(cols) == 0 {
				return nil, fmt.Errorf("langchain history: no table %s", l.table)
			}
			return nil, fmt.Errorf("langchain history: %s has no %s column: not a PostgresChatMessageHistory table", l.table, c)
		}
	}
	return l, nil
}

// Threads calls fn for every session, in session order, its messages in id order.
func (l *LangChainPostgresHistory) Threads(ctx context.Context, fn func(Thread) error) error {
	rows, err := l.pool.Query(ctx, `SELECT session_id::text, message, created_at FROM `+l.table+` ORDER BY session_id, id`)
	if err != nil {
		return fmt.Errorf("langchain history: %w", err)
	}
	defer rows.Close()
	var cur *Thread
	flush := func() error {
		if cur == nil {
			return nil
		}
		t := *cur
		cur = nil
		return fn(t)
	}
	for rows.Next() {
		var (
			session string
			raw     []byte
			at      time.Time
		)
		if err := rows.Scan(&session, &raw, &at); err != nil {
			return fmt.Errorf("langchain history: %w", err)
		}
		if cur != nil && cur.ID != session {
			if err := flush(); err != nil {
				return err
			}
		}
		if cur == nil {
			cur = &Thread{ID: session, FirstActivity: at}
		}
		cur.LastActivity = at
		if cur.Unsupported != nil {
			continue
		}
		m, err := historyMessage(raw)
		if err != nil {
			cur.Unsupported, cur.Messages = err, nil
			continue
		}
		cur.Messages = append(cur.Messages, m)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("langchain history: %w", err)
	}
	return flush()
}

// historyMessage reads one message_to_dict row into a message dict.
func historyMessage(raw []byte) (map[string]any, error) {
	var w struct {
		Type string         `json:"type"`
		Data map[string]any `json:"data"`
	}
	if err := json.Unmarshal(raw, &w); err != nil || w.Type == "" || w.Data == nil {
		return nil, unsupported("a history row that is not message_to_dict output")
	}
	w.Data["type"] = w.Type
	return w.Data, nil
}

// StoreItems yields nothing: a chat history has no store.
func (l *LangChainPostgresHistory) StoreItems(context.Context, func(StoreItem) error) error {
	return nil
}
