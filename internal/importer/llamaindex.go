package importer

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
)

// LlamaIndexChatStore reads the conversations LlamaIndex (llama-index-core 0.14) keeps,
// each key of the store a thread, its messages in order:
//
//   - SimpleChatStore's persisted JSON ({"store": {key: [message, ...]}, "class_name":
//     "SimpleChatStore"});
//   - llama-index-storage-chat-store-sqlite's SQLiteChatStore (table data_chatstore:
//     key, value: one message as JSON, in id order);
//   - the chat history of llama_index.core.memory.Memory, kept by its
//     SQLAlchemyChatStore in SQLite (table llama_index_memory: key, timestamp in
//     nanoseconds, role, status "active" or "archived", data: one message): the
//     archived part, which Memory flushed out of its window into its memory blocks, is
//     the same conversation and is imported with it. Memory's blocks themselves
//     (static text, extracted facts) are not stored by LlamaIndex.
//
// A message is a ChatMessage's model_dump: role (user, assistant, system, tool,
// function, chatbot, developer), additional_kwargs (OpenAI-style tool_calls,
// tool_call_id, name) and blocks (text, image, audio, document, ... ; a single text
// block is the message's content as a string, otherwise the blocks are kept as a list
// of content blocks, text as {"type": "text", "text"}).
type LlamaIndexChatStore struct {
	threads []Thread // a SimpleChatStore's, read whole with its file
	kind    string   // the store's class, for Source
	// A SQLite store is read as Threads walks it, one key at a time: its size is not
	// bounded by memory.
	db           *sql.DB
	query, table string
}

// Close closes a SQLite store's database.
func (l *LlamaIndexChatStore) Close() error {
	if l.db == nil {
		return nil
	}
	return l.db.Close()
}

// maxChatStoreJSON bounds a SimpleChatStore file read into memory.
const maxChatStoreJSON = 1 << 30

// OpenLlamaIndexChatStore reads path: a SimpleChatStore JSON file, or a SQLite
// database with a SQLiteChatStore or Memory table.
func OpenLlamaIndexChatStore(ctx context.Context, path, table string) (*LlamaIndexChatStore, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("llamaindex: %w", err)
	}
	head := make([]byte, 16)
	if f, err := os.Open(path); err == nil {
		n, _ := f.Read(head)
		head = head[:n]
		_ = f.Close()
	}
	if bytes.HasPrefix(head, []byte("SQLite format 3\x00")) {
		return openLlamaIndexSQLite(ctx, path, table)
	}
	b, err := readSourceFile("llamaindex", path, maxChatStoreJSON)
	if err != nil {
		return nil, err
	}
	return parseSimpleChatStore(b)
}

func parseSimpleChatStore(b []byte) (*LlamaIndexChatStore, error) {
	var f struct {
		Store     map[string][]json.RawMessage `json:"store"`
		ClassName string                       `json:"class_name"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("llamaindex: neither a SQLite database nor a SimpleChatStore JSON file: %w", err)
	}
	if f.Store == nil && f.ClassName != "SimpleChatStore" {
		return nil, errors.New("llamaindex: a JSON file without a SimpleChatStore's \"store\" (is it a persisted SimpleChatStore?)")
	}
	l := &LlamaIndexChatStore{kind: "llamaindex-simple-chat-store"}
	for _, key := range slices.Sorted(maps.Keys(f.Store)) {
		t := Thread{ID: key}
		for i, raw := range f.Store[key] {
			m, err := llamaMessage(raw)
			if err != nil {
				t.Unsupported = unsupported("message %d: %v", i, err)
				break
			}
			t.Messages = append(t.Messages, m)
		}
		l.threads = append(l.threads, t)
	}
	return l, nil
}

// openLlamaIndexSQLite reads a SQLiteChatStore table (data_chatstore by default) or a
// Memory table (llama_index_memory by default), whichever the file has, or table.
func openLlamaIndexSQLite(ctx context.Context, path, table string) (*LlamaIndexChatStore, error) {
	db, err := openSQLiteRO(path)
	if err != nil {
		return nil, fmt.Errorf("llamaindex: %w", err)
	}
	keep := false // the store keeps the database open once it is found readable
	defer func() {
		if !keep {
			_ = db.Close()
		}
	}()
	cols := map[string]map[string]bool{}
	rows, err := db.QueryContext(ctx, `SELECT m.name, p.name FROM sqlite_master m, pragma_table_info(m.name) p WHERE m.type = 'table'`)
	if err != nil {
		return nil, fmt.Errorf("llamaindex: %s is not a readable SQLite database: %w", path, err)
	}
	for rows.Next() {
		var t, c string
		if rows.Scan(&t, &c) == nil {
			if cols[t] == nil {
				cols[t] = map[string]bool{}
			}
			cols[t][c] = true
		}
	}
	rows.Close()
	isMemory := func(t string) bool {
		return cols[t]["key"] && cols[t]["data"] && cols[t]["timestamp"] && cols[t]["status"]
	}
	isChatStore := func(t string) bool { return cols[t]["key"] && cols[t]["value"] && cols[t]["id"] }
	if table == "" {
		for _, t := range []string{"llama_index_memory", "data_chatstore"} {
			if isMemory(t) || isChatStore(t) {
				table = t
				break
			}
		}
	}
	var query, kind string
	switch {
	case table == "":
		return nil, fmt.Errorf("llamaindex: %s has no chat store table (data_chatstore: key, value; or Memory's llama_index_memory: key, timestamp, status, data); name it with --import-table", path)
	case isMemory(table):
		query = `SELECT key, data, timestamp FROM ` + quoteSQLite(table) + ` ORDER BY key, id`
		kind = "llamaindex-memory"
	case isChatStore(table):
		query = `SELECT key, value, NULL FROM ` + quoteSQLite(table) + ` ORDER BY key, id`
		kind = "llamaindex-sqlite-chat-store"
	default:
		return nil, fmt.Errorf("llamaindex: %s: table %q is neither a SQLiteChatStore's (key, value) nor a Memory's (key, timestamp, status, data)", path, table)
	}
	keep = true
	return &LlamaIndexChatStore{kind: kind, db: db, query: query, table: table}, nil
}

// sqliteThreads reads the store's rows in (key, id) order and hands each key's
// conversation to fn as soon as its last row is read.
func (l *LlamaIndexChatStore) sqliteThreads(ctx context.Context, fn func(Thread) error) error {
	rows, err := l.db.QueryContext(ctx, l.query)
	if err != nil {
		return fmt.Errorf("llamaindex: reading %s: %w", l.table, err)
	}
	defer rows.Close()
	var cur *Thread
	for rows.Next() {
		var key string
		var raw []byte
		var ts sql.NullInt64
		if err := rows.Scan(&key, &raw, &ts); err != nil {
			return fmt.Errorf("llamaindex: reading %s: %w", l.table, err)
		}
		if cur == nil || cur.ID != key {
			if cur != nil {
				if err := fn(*cur); err != nil {
					return err
				}
			}
			cur = &Thread{ID: key}
		}
		if cur.Unsupported != nil {
			continue
		}
		m, err := llamaMessage(raw)
		if err != nil {
			cur.Unsupported = unsupported("message %d: %v", len(cur.Messages), err)
			continue
		}
		var at time.Time
		if ts.Valid {
			at = time.Unix(0, ts.Int64).UTC()
		}
		cur.add(m, at)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("llamaindex: reading %s: %w", l.table, err)
	}
	if cur != nil {
		return fn(*cur)
	}
	return nil
}

func quoteSQLite(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

// llamaRoles are LlamaIndex's MessageRole values as LangChain message types.
var llamaRoles = map[string]string{"user": "human", "assistant": "ai", "chatbot": "ai", "model": "ai", "system": "system",
	"developer": "system", "tool": "tool", "function": "function"}

// llamaMessage is one ChatMessage (model_dump JSON) as a LangChain message dict.
func llamaMessage(raw []byte) (map[string]any, error) {
	var m struct {
		Role             string           `json:"role"`
		AdditionalKwargs map[string]any   `json:"additional_kwargs"`
		Blocks           []map[string]any `json:"blocks"`
		Content          *string          `json:"content"` // before blocks (llama-index-core < 0.12)
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("not a ChatMessage: %v", err)
	}
	typ := llamaRoles[m.Role]
	if typ == "" {
		return nil, fmt.Errorf("role %q", m.Role)
	}
	var content any = ""
	switch {
	case len(m.Blocks) == 1 && m.Blocks[0]["block_type"] == "text":
		content = m.Blocks[0]["text"]
	case len(m.Blocks) > 0:
		parts := make([]any, 0, len(m.Blocks))
		for _, b := range m.Blocks {
			if b["block_type"] == "text" {
				parts = append(parts, map[string]any{"type": "text", "text": b["text"]})
				continue
			}
			part := map[string]any{"type": b["block_type"]}
			for k, v := range b {
				if k != "block_type" && v != nil {
					part[k] = v
				}
			}
			parts = append(parts, part)
		}
		content = parts
	case m.Content != nil:
		content = *m.Content
	}
	out := map[string]any{"type": typ, "content": content}
	if len(m.AdditionalKwargs) > 0 {
		out["additional_kwargs"] = m.AdditionalKwargs
		for _, k := range []string{"tool_call_id", "name"} {
			if v, ok := m.AdditionalKwargs[k].(string); ok && v != "" {
				out[k] = v
			}
		}
	}
	return out, nil
}

// Source names the store for the memories' provenance.
func (l *LlamaIndexChatStore) Source() string { return l.kind }

// Threads yields every key's conversation, in key order.
func (l *LlamaIndexChatStore) Threads(ctx context.Context, fn func(Thread) error) error {
	if l.db != nil {
		return l.sqliteThreads(ctx, fn)
	}
	for _, t := range l.threads {
		if err := fn(t); err != nil {
			return err
		}
	}
	return nil
}

// StoreItems yields nothing: a chat store holds conversations only.
func (l *LlamaIndexChatStore) StoreItems(context.Context, func(StoreItem) error) error { return nil }
