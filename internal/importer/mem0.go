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
	"time"

	"github.com/amemory/memory-operator/internal/memory"
)

// Mem0 reads mem0's local storage (mem0ai 2.x), written by Memory.add/update/delete:
//
//   - its vector store in Chroma's local mode (a PersistentClient directory's
//     chroma.sqlite3): the collection's metadata segment holds every live memory's
//     payload: data (the text), hash, user_id, agent_id, run_id, role, actor_id,
//     created_at, updated_at, expiration_date, and the caller's metadata keys
//     (category, ...). The vectors are not read: the restore embeds with the target's
//     embedder (the source's model is whatever mem0 was configured with).
//   - its history database (history.db): one ADD, UPDATE or DELETE event per change
//     of a memory, with the old and new text. An UPDATE's old text becomes the
//     memory's history; a memory whose last event is DELETE is never imported, even
//     if a vector store that was not cleaned still holds it.
//
// Each memory becomes a semantic memory keyed by its mem0 id, in its user's scope
// (user_id), else its agent's (agent_id), else its run's (run_id): store items of
// namespace ("memories", user), ("agents", agent) or ("sessions", run), which the
// default namespace rules map to user:, agent: and session:. Its content keeps the
// text, role, actor, the three ids and the metadata. What the files hold that is not
// a memory is counted in Stats.LeftOut: the memories DELETE removed, and the messages
// mem0 keeps as its extraction context.
//
// mem0's default vector store, Qdrant in local mode, keeps its points pickled in
// SQLite; the importer never unpickles, so such a store is refused naming the way
// out (Chroma, or mem0's own export).
type Mem0 struct {
	chroma    *chromaDB
	history   *sql.DB
	segment   string // the collection's metadata segment
	deleted   map[string]bool
	revisions map[string][]memory.Revision
	messages  int64 // rows of history.db's messages table
}

// Mem0DefaultCollection is the collection mem0 names when its config names none.
const Mem0DefaultCollection = "mem0"

// OpenMem0 opens the Chroma database (chroma.sqlite3, or the directory holding it) and,
// when historyPath is not empty, mem0's history database, both read-only.
func OpenMem0(ctx context.Context, chromaPath, historyPath, collection string) (*Mem0, error) {
	if collection == "" {
		collection = Mem0DefaultCollection
	}
	chroma, err := openChroma(ctx, chromaPath)
	var notChroma errNotChroma
	switch {
	case errors.As(err, &notChroma) && notChroma.qdrant:
		return nil, fmt.Errorf("mem0: %s is a Qdrant local store, which keeps its points pickled: the importer never unpickles; "+
			"configure mem0's vector store as Chroma (provider chroma) or export its memories with mem0 (get_all)", chromaPath)
	case errors.As(err, &notChroma):
		return nil, fmt.Errorf("mem0: %s is not a Chroma database (chroma.sqlite3 of a PersistentClient directory)", chromaPath)
	case err != nil:
		return nil, fmt.Errorf("mem0: %w", err)
	}
	m := &Mem0{chroma: chroma, deleted: map[string]bool{}, revisions: map[string][]memory.Revision{}}
	if m.segment, err = chroma.metadataSegment(ctx, collection); err != nil {
		_ = chroma.Close()
		return nil, fmt.Errorf("mem0: %w", err)
	}
	if historyPath != "" {
		if _, err := os.Stat(historyPath); err != nil {
			_ = chroma.Close()
			return nil, fmt.Errorf("mem0 history: %w", err)
		}
		if m.history, err = openSQLiteRO(historyPath); err != nil {
			_ = chroma.Close()
			return nil, fmt.Errorf("mem0 history: %w", err)
		}
		if err := m.readHistory(ctx, historyPath); err != nil {
			_ = m.Close()
			return nil, err
		}
	}
	return m, nil
}

// openSQLiteRO opens a source database read-only. (Memory-mapped reads were tried:
// faster, but the mapped file counts in the worker's RSS, 343 MiB at mem0's 146 MB.)
func openSQLiteRO(path string) (*sql.DB, error) {
	return sql.Open("sqlite", "file:"+url.PathEscape(path)+"?mode=ro&_pragma=query_only(1)")
}

// Close closes the files.
func (m *Mem0) Close() error {
	err := m.chroma.Close()
	if m.history != nil {
		err = errors.Join(err, m.history.Close())
	}
	return err
}

// readHistory reads every memory's events: which were deleted, and the text each
// UPDATE replaced.
func (m *Mem0) readHistory(ctx context.Context, path string) error {
	rows, err := m.history.QueryContext(ctx, `SELECT memory_id, coalesce(old_memory, ''), coalesce(event, ''), coalesce(created_at, ''),
		coalesce(updated_at, '') FROM history ORDER BY memory_id, updated_at, rowid`)
	if err != nil {
		return fmt.Errorf("mem0 history: %s has no readable history table: %w", path, err)
	}
	defer rows.Close()
	last := map[string]string{}
	prev := map[string]time.Time{} // when the current text was written
	for rows.Next() {
		var id, old, event, created, updated string
		if err := rows.Scan(&id, &old, &event, &created, &updated); err != nil {
			return fmt.Errorf("mem0 history: %w", err)
		}
		at, _ := mem0Time(updated)
		switch event {
		case "ADD":
			prev[id] = at
		case "UPDATE":
			from := prev[id]
			if from.IsZero() {
				from, _ = mem0Time(created)
			}
			if old != "" && !at.IsZero() && !from.IsZero() {
				content, _ := json.Marshal(map[string]string{"text": old})
				m.revisions[id] = append(m.revisions[id], memory.Revision{Content: content, Source: "mem0", BaseScore: 0.5,
					UpdatedAt: from, SupersededAt: at})
			}
			prev[id] = at
		}
		last[id] = event
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("mem0 history: %w", err)
	}
	for id, e := range last {
		if e == "DELETE" {
			m.deleted[id] = true
		}
	}
	var messages sql.NullInt64
	if m.history.QueryRowContext(ctx, `SELECT count(*) FROM messages`).Scan(&messages) == nil {
		m.messages = messages.Int64
	}
	return nil
}

// mem0Time parses the ISO times mem0 writes (Python's isoformat, zone included).
func mem0Time(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999-07:00", "2006-01-02 15:04:05.999999999"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("time %q", s)
}

// Threads yields nothing: mem0 holds memories, not conversations.
func (m *Mem0) Threads(context.Context, func(Thread) error) error { return nil }

// mem0Reserved are the payload keys mem0 itself writes; every other key is the
// caller's metadata. text_lemmatized is the text mem0 lemmatised for its BM25.
var mem0Reserved = map[string]bool{"data": true, "hash": true, "created_at": true, "updated_at": true, "user_id": true,
	"agent_id": true, "run_id": true, "actor_id": true, "role": true, "text_lemmatized": true, "expiration_date": true,
	"attributed_to": true, "linked_memory_ids": true, "chroma:document": true, "#document": true}

// StoreItems yields every live memory of the collection, in mem0 id order.
func (m *Mem0) StoreItems(ctx context.Context, fn func(StoreItem) error) error {
	err := m.chroma.records(ctx, m.segment, func(r chromaRecord) error {
		if m.deleted[r.ID] {
			return nil // its history ends in DELETE: counted in leftOut
		}
		return fn(m.storeItem(r.ID, r.Meta))
	})
	if err != nil {
		return fmt.Errorf("mem0: reading memories: %w", err)
	}
	return nil
}

// storeItem is one memory's payload as a store item (see Mem0).
func (m *Mem0) storeItem(id string, p map[string]any) StoreItem {
	str := func(k string) string { s, _ := p[k].(string); return s }
	content := map[string]any{"text": p["data"], "mem0_id": id}
	for _, k := range []string{"role", "actor_id", "user_id", "agent_id", "run_id", "hash", "attributed_to"} {
		if v := str(k); v != "" {
			content[k] = v
		}
	}
	meta := map[string]any{}
	for _, k := range slices.Sorted(maps.Keys(p)) {
		if !mem0Reserved[k] && p[k] != nil {
			meta[k] = p[k]
		}
	}
	if len(meta) > 0 {
		content["metadata"] = meta
	}
	raw, _ := json.Marshal(content) // strings, numbers and booleans: cannot fail
	si := StoreItem{Key: id, Value: raw, History: m.revisions[id]}
	switch {
	case str("user_id") != "":
		si.Namespace = []string{"memories", str("user_id")}
	case str("agent_id") != "":
		si.Namespace = []string{"agents", str("agent_id")}
	case str("run_id") != "":
		si.Namespace = []string{"sessions", str("run_id")}
	default:
		si.Namespace = []string{"mem0"} // no rule maps it: counted as a store item left out
	}
	si.CreatedAt, _ = mem0Time(str("created_at"))
	si.UpdatedAt, _ = mem0Time(str("updated_at"))
	if si.UpdatedAt.Before(si.CreatedAt) {
		si.UpdatedAt = si.CreatedAt
	}
	if exp, err := mem0Time(str("expiration_date")); err == nil {
		si.ExpiresAt = &exp
	}
	return si
}

// leftOut counts what mem0's files hold that is not a live memory (leftOutReporter).
func (m *Mem0) leftOut() ([]LeftOut, string) {
	var out []LeftOut
	if n := len(m.deleted); n > 0 {
		out = append(out, LeftOut{What: "mem0 memories deleted (their history ends in DELETE)", Count: int64(n)})
	}
	if m.messages > 0 {
		out = append(out, LeftOut{What: "mem0 messages kept as its extraction context (history.db messages)", Count: m.messages})
	}
	return out, ""
}
