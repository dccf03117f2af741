// Package pgstore is the PostgreSQL system of record for memories: one schema per
// store holding the memories, their tombstones, an audit log, the embedded vector
// table and a few settings. It uses pgx/v5 directly and knows nothing of Kubernetes.
//
// Every identifier built from the caller's schema name is quoted with
// pgx.Identifier.Sanitize; every value travels as a query parameter or through COPY.
//
// Beside the vector index, a lexical index (BM25 over scope-local postings) serves
// LexicalSearch; lexical.go describes its tokenizer, ranking, maintenance and cost.
package pgstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/memory"
)

var (
	// ErrNotFound is returned when no memory has the requested ID.
	ErrNotFound = errors.New("pgstore: memory not found")
	// ErrConflict is returned by Put when the item's memory_id already names a memory
	// in a different scope or (scope, key) slot.
	ErrConflict = errors.New("pgstore: memory_id already used by a different scope or key")
)

// Store reads and writes the memories of one store (one schema). It is safe for
// concurrent use. Call Migrate before using it.
type Store struct {
	pool   *pgxpool.Pool
	schema string
	t      tableNames

	// importBatch is the number of items Import stages per COPY; tests lower it.
	importBatch int
	// insertsMet is set once a merge batch copied as new met a stored memory (see
	// insertNew): later batches go straight to the merge statement.
	insertsMet atomic.Bool
	// copiedNew counts the merge batches insertNew copied straight in.
	copiedNew atomic.Int64
	// version is the schema version the store's tables are at when it is older than
	// LatestVersion (ReadingVersion): exports read that layout. 0: the latest.
	version int
}

type tableNames struct {
	memories, tombstones, auditLog, vectors, storeMeta  string
	indexDeletions, archiveRuns, restores, indexPending string
	scopeRenames                                        string
	memoryTerms, termDocs, termPending                  string
}

// DefaultImportBatch is how many items Import copies and inserts per transaction.
const DefaultImportBatch = 10000

// New returns a Store over the tables of schema. It does not touch the database;
// Migrate validates the schema name and creates the tables.
func New(pool *pgxpool.Pool, schema string) *Store {
	q := func(table string) string { return pgx.Identifier{schema, table}.Sanitize() }
	return &Store{
		pool:   pool,
		schema: schema,
		t: tableNames{
			memories:   q("memories"),
			tombstones: q("tombstones"),
			auditLog:   q("audit_log"),
			vectors:    q("vectors"),
			storeMeta:  q("store_meta"),

			indexDeletions: q("index_deletions"),
			archiveRuns:    q("archive_runs"),
			restores:       q("restores"),
			indexPending:   q("index_pending"),
			scopeRenames:   q("scope_renames"),
			memoryTerms:    q("memory_terms"),
			termDocs:       q("term_docs"),
			termPending:    q("term_pending"),
		},
		importBatch: DefaultImportBatch,
	}
}

// WithVectorsTable returns the store over the same tables but for its vectors, kept
// in table (the Postgres engine's serving index generation; "" or "vectors": the
// schema's own vectors table). Exports read vectors from it, restores write them
// there, and deletions and forgets remove them from it in their transaction.
func (s *Store) WithVectorsTable(table string) *Store {
	if table == "" {
		table = "vectors"
	}
	c := New(s.pool, s.schema)
	c.importBatch, c.version = s.importBatch, s.version
	c.t.vectors = pgx.Identifier{s.schema, table}.Sanitize()
	return c
}

// ReadingVersion returns a Store that exports (Export, ReadCut, EachTombstone) from
// tables at schema version v, from ExportableFrom up: the snapshot an operator
// upgrade takes before it migrates the store. Only those reads know older layouts;
// nothing else may be called on it.
func (s *Store) ReadingVersion(v int) (*Store, error) {
	if v < ExportableFrom || v > LatestVersion {
		return nil, fmt.Errorf("pgstore: schema %s is at version %d; this version exports from versions %d to %d",
			s.schema, v, ExportableFrom, LatestVersion)
	}
	c := New(s.pool, s.schema)
	c.importBatch, c.t.vectors = s.importBatch, s.t.vectors
	if v < LatestVersion {
		c.version = v
	}
	return c, nil
}

// HasSessions reports whether the store's tables hold PostgreSQL sessions (version
// 11 on).
func (s *Store) HasSessions() bool { return !s.readsBefore(11) }

// readsBefore reports whether the store's tables are older than schema version v.
func (s *Store) readsBefore(v int) bool { return s.version != 0 && s.version < v }

// Schema returns the store's schema name.
func (s *Store) Schema() string { return s.schema }

// Outcome says what Put did.
type Outcome string

// Put outcomes.
const (
	// Inserted: a new memory was stored.
	Inserted Outcome = "inserted"
	// Unchanged: the same memory was already stored; nothing was written.
	Unchanged Outcome = "unchanged"
	// Superseded: the item replaced the value of an existing memory (the same (scope,
	// key) slot, or the same memory_id), whose previous value went to its history.
	Superseded Outcome = "superseded"
)

// PutResult reports the outcome of Put and the ID of the stored memory, which is the
// existing memory's ID when the outcome is Unchanged or Superseded.
type PutResult struct {
	MemoryID string
	Outcome  Outcome
	// Pending identifies the index work PutQueued recorded (0: none); pass it to
	// IndexDone once the index has the memory.
	Pending int64
}

// memoryCols are the memories columns in the order scanItem reads them.
const memoryCols = `memory_id, memory_type, scope, key, content, source, base_score, created_at, updated_at, expires_at, archived_at, history, recorded_at`

// writeCols are the columns a write by an agent gives: every memory column but
// recorded_at, which the server sets (agents have no privilege on it).
const writeCols = `memory_id, memory_type, scope, key, content, source, base_score, created_at, updated_at, expires_at, archived_at, history`

// Put stores one memory. Missing memory_id and timestamps are filled in (see
// memory.Item.SetDefaults), then the item is validated. Times are stored with
// microsecond precision.
//
// Writes are idempotent:
//   - without a key, the same content (see memory.Item.ContentHash) in the same scope
//     is stored once; re-sending it returns the existing memory's ID as Unchanged;
//   - with a key, a write to an occupied (scope, key) slot supersedes it in arrival
//     order: the memory keeps its ID and created_at, takes the new content, type,
//     source, score, updated_at, expires_at and archived_at, and the old value is
//     appended to its history (the incoming item's own history is ignored then).
//     Identical content (and type) leaves the slot Unchanged;
//   - a key-less write reusing an existing memory_id with new content supersedes that
//     memory the same way. A memory_id already used in another scope or slot is
//     ErrConflict.
//
// An Unchanged write changes nothing at all: it does not refresh updated_at, nor
// revive an archived or expired memory.
//
// Its recorded_at is the server's clock when it is written, and created_at and
// updated_at may not lie more than memory.MaxFutureSkew after it. A write that comes
// after its scope was forgotten is new consent and is stored (see forget.go); only a
// tombstone later than the server's clock (one a restore brought from a server whose
// clock is ahead) refuses it, with ErrForgotten. An item that comes with RecordedAt
// set is a copy of content read at that time (by the server's clock): a tombstone at
// or after it refuses the write too. The stored row's recorded_at is the server's
// clock all the same.
//
// Concurrent writers to one slot are serialised by row locks, so no superseded value
// is lost. Put never touches the vectors table; re-embedding a superseded memory is
// the vector index's job. It does write the memory's lexical postings (lexical.go),
// in the same transaction, whenever the value changed.
func (s *Store) Put(ctx context.Context, item memory.Item) (PutResult, error) {
	return s.putVia(ctx, s.pool, item, false)
}

// beginner is a pool or a single connection.
type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// putVia is Put over db; with queue, a write that changed the row also records the
// index work it owes (see pending.go) in the same transaction.
func (s *Store) putVia(ctx context.Context, db beginner, item memory.Item, queue bool) (PutResult, error) {
	now := time.Now()
	// A memory its writer does not date takes the time the store records it, by
	// the server's clock: its created_at and updated_at are its recorded_at.
	serverDated := item.CreatedAt.IsZero() && item.UpdatedAt.IsZero()
	item.SetDefaults(now)
	normalizeTimes(&item)
	readAt := item.RecordedAt
	item.RecordedAt = time.Time{} // the server's to set
	if err := item.Validate(); err != nil {
		return PutResult{}, fmt.Errorf("pgstore: put %q: %w", item.MemoryID, err)
	}
	if err := item.CheckNotFuture(now); err != nil {
		return PutResult{}, fmt.Errorf("pgstore: put %q: %w", item.MemoryID, err)
	}
	hash, err := item.ContentHash()
	if err != nil {
		return PutResult{}, fmt.Errorf("pgstore: put %q: %w", item.MemoryID, err)
	}
	// The memory's postings (lexical.go), counted before the transaction.
	doc := makeTermDoc("", &item, hash)
	var res PutResult
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if err := s.checkNotForgotten(ctx, tx, item.Scope, readAt); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared($1)`, s.termsLock(item.Scope)); err != nil {
			return err
		}
		var err error
		if res, err = s.put(ctx, tx, item, hash, serverDated); err != nil || res.Outcome == Unchanged {
			return err
		}
		// The value changed (inserted, or superseded under the slot's row lock, so
		// concurrent supersedes write their postings in the order of their values).
		doc.id = res.MemoryID
		if err := s.writeTermDocs(ctx, tx, []termDoc{doc}); err != nil {
			return err
		}
		if !queue {
			return nil
		}
		res.Pending, err = s.enqueue(ctx, tx, res.MemoryID)
		return err
	})
	if err != nil {
		if errors.Is(err, ErrConflict) || errors.Is(err, ErrForgotten) {
			return PutResult{}, fmt.Errorf("%w: %q", err, item.MemoryID)
		}
		return PutResult{}, fmt.Errorf("pgstore: put %q: %w", item.MemoryID, err)
	}
	return res, nil
}

// checkNotForgotten takes the forget lock shared for the transaction and refuses the
// write when its scope's tombstone would cover it: the row will be recorded no
// earlier than the server's clock now, which is after every tombstone a forget wrote
// (forgets stamp their tombstone under the lock this write now holds), so only a
// tombstone from the future refuses it (see forget.go) — or, for a copy of content
// read at readAt (see Put), a tombstone at or after readAt.
func (s *Store) checkNotForgotten(ctx context.Context, tx pgx.Tx, scope string, readAt time.Time) error {
	if err := s.lockForWrite(ctx, tx); err != nil {
		return err
	}
	var (
		now time.Time
		at  *time.Time
	)
	if err := tx.QueryRow(ctx, `SELECT clock_timestamp(), (SELECT max(forgotten_at) FROM `+s.t.tombstones+` WHERE scope = $1)`, scope).Scan(&now, &at); err != nil {
		return err
	}
	return refusedByTombstone(scope, now, at, readAt)
}

// refusedByTombstone is ErrForgotten when scope's latest tombstone at (nil: none)
// covers a write recorded now whose content was read at readAt (zero: now).
func refusedByTombstone(scope string, now time.Time, at *time.Time, readAt time.Time) error {
	switch {
	case at == nil:
		return nil
	case !now.After(*at):
		return fmt.Errorf("%w: %s was forgotten at %s, which is after the server's clock (%s): a restore brought a tombstone from a server whose clock is ahead; retry later",
			ErrForgotten, scope, at.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
	case !readAt.IsZero() && !at.Before(readAt):
		return fmt.Errorf("%w: %s was forgotten at %s, after what this write copies was read (%s)",
			ErrForgotten, scope, at.UTC().Format(time.RFC3339Nano), readAt.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// lockedRow is the current value of a memory, read FOR UPDATE.
type lockedRow struct {
	id, scope string
	key       *string
	content   []byte
	hash      []byte
	source    string
	baseScore float64
	updatedAt time.Time
}

func (s *Store) lockRow(ctx context.Context, tx pgx.Tx, where string, args ...any) (*lockedRow, error) {
	var r lockedRow
	err := tx.QueryRow(ctx, `SELECT memory_id, scope, key, content, content_hash, source, base_score, updated_at
		FROM `+s.t.memories+` WHERE `+where+` FOR UPDATE`, args...).
		Scan(&r.id, &r.scope, &r.key, &r.content, &r.hash, &r.source, &r.baseScore, &r.updatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// putAttempts bounds the retries after losing an insert race; one retry always
// suffices (the winner's row is visible to the next statement), the rest is margin.
const putAttempts = 4

func (s *Store) put(ctx context.Context, tx pgx.Tx, it memory.Item, hash []byte, serverDated bool) (PutResult, error) {
	for range putAttempts {
		var cur *lockedRow
		var err error
		if it.Key != "" {
			cur, err = s.lockRow(ctx, tx, `scope = $1 AND key = $2`, it.Scope, it.Key)
		} else {
			cur, err = s.lockRow(ctx, tx, `scope = $1 AND key IS NULL AND content_hash = $2`, it.Scope, hash)
			if err == nil && cur != nil {
				return PutResult{MemoryID: cur.id, Outcome: Unchanged}, nil
			}
		}
		if err != nil {
			return PutResult{}, err
		}
		if cur == nil {
			byID, err := s.lockRow(ctx, tx, `memory_id = $1`, it.MemoryID)
			if err != nil {
				return PutResult{}, err
			}
			if byID != nil {
				if byID.scope != it.Scope || deref(byID.key) != it.Key {
					return PutResult{}, ErrConflict
				}
				cur = byID
			}
		}
		if cur != nil {
			if bytes.Equal(cur.hash, hash) {
				return PutResult{MemoryID: cur.id, Outcome: Unchanged}, nil
			}
			if err := s.supersede(ctx, tx, cur, it, hash); err != nil {
				return PutResult{}, err
			}
			return PutResult{MemoryID: cur.id, Outcome: Superseded}, nil
		}

		history, err := historyJSON(it.History)
		if err != nil {
			return PutResult{}, err
		}
		var created, updated any = it.CreatedAt, it.UpdatedAt
		if serverDated {
			created, updated = nil, nil // the statement's time, which recorded_at takes too
		}
		var id string
		err = tx.QueryRow(ctx, `INSERT INTO `+s.t.memories+` (`+writeCols+`, content_hash)
			VALUES ($1, $2, $3, $4, $5, $6, $7, coalesce($8::timestamptz, statement_timestamp()), coalesce($9::timestamptz, statement_timestamp()),
				$10, $11, $12, $13)
			ON CONFLICT DO NOTHING RETURNING memory_id`,
			it.MemoryID, string(it.MemoryType), it.Scope, nullable(it.Key), []byte(it.Content), it.Source,
			it.BaseScore, created, updated, it.ExpiresAt, it.ArchivedAt, history, hash).Scan(&id)
		if err == nil {
			return PutResult{MemoryID: id, Outcome: Inserted}, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return PutResult{}, err
		}
		// A concurrent writer inserted the same slot, content or ID first: look again.
	}
	return PutResult{}, errors.New("concurrent writes to the same memory did not settle; retry")
}

func (s *Store) supersede(ctx context.Context, tx pgx.Tx, cur *lockedRow, it memory.Item, hash []byte) error {
	rev, err := json.Marshal([]memory.Revision{{
		Content:      json.RawMessage(cur.content),
		Source:       cur.source,
		BaseScore:    cur.baseScore,
		UpdatedAt:    cur.updatedAt.UTC(),
		SupersededAt: it.UpdatedAt,
	}})
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `UPDATE `+s.t.memories+` SET
			memory_type = $2, content = $3, content_hash = $4, source = $5, base_score = $6,
			updated_at = $7, expires_at = $8, archived_at = $9, history = history || $10::jsonb
		WHERE memory_id = $1`,
		cur.id, string(it.MemoryType), []byte(it.Content), hash, it.Source, it.BaseScore,
		it.UpdatedAt, it.ExpiresAt, it.ArchivedAt, rev)
	return err
}

// Get returns the memory with the given ID (without its embedding), or ErrNotFound.
func (s *Store) Get(ctx context.Context, id string) (memory.Item, error) {
	row := s.pool.QueryRow(ctx, `SELECT `+memoryCols+` FROM `+s.t.memories+` WHERE memory_id = $1`, id)
	it, err := scanItem(row)
	if errors.Is(err, pgx.ErrNoRows) {
		return memory.Item{}, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	if err != nil {
		return memory.Item{}, fmt.Errorf("pgstore: get %q: %w", id, err)
	}
	return it, nil
}

// Count returns the number of memories in the store, archived ones included.
func (s *Store) Count(ctx context.Context) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+s.t.memories).Scan(&n); err != nil {
		return 0, fmt.Errorf("pgstore: count: %w", err)
	}
	return n, nil
}

// scanItem reads memoryCols (and then extra destinations) from row.
func scanItem(row pgx.Row, extra ...any) (memory.Item, error) {
	var (
		it               memory.Item
		typ              string
		key              *string
		content, history []byte
	)
	dest := append([]any{&it.MemoryID, &typ, &it.Scope, &key, &content, &it.Source, &it.BaseScore,
		&it.CreatedAt, &it.UpdatedAt, &it.ExpiresAt, &it.ArchivedAt, &history, &it.RecordedAt}, extra...)
	if err := row.Scan(dest...); err != nil {
		return memory.Item{}, err
	}
	it.MemoryType = memory.Type(typ)
	it.Key = deref(key)
	it.Content = json.RawMessage(content)
	if len(history) > 0 && !bytes.Equal(history, []byte("[]")) {
		if err := json.Unmarshal(history, &it.History); err != nil {
			return memory.Item{}, fmt.Errorf("decoding history of %q: %w", it.MemoryID, err)
		}
		if len(it.History) == 0 {
			it.History = nil
		}
	}
	it.CreatedAt = it.CreatedAt.UTC()
	it.UpdatedAt = it.UpdatedAt.UTC()
	it.RecordedAt = it.RecordedAt.UTC()
	if it.ExpiresAt != nil {
		t := it.ExpiresAt.UTC()
		it.ExpiresAt = &t
	}
	if it.ArchivedAt != nil {
		t := it.ArchivedAt.UTC()
		it.ArchivedAt = &t
	}
	return it, nil
}

// normalizeTimes converts the item's times to UTC with microsecond precision, which
// is what timestamptz keeps, so what Put stores is what Get returns. Pointers are
// replaced, never written through.
func normalizeTimes(it *memory.Item) {
	n := func(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }
	it.CreatedAt = n(it.CreatedAt)
	it.UpdatedAt = n(it.UpdatedAt)
	if !it.RecordedAt.IsZero() {
		it.RecordedAt = n(it.RecordedAt)
	}
	if it.ExpiresAt != nil {
		t := n(*it.ExpiresAt)
		it.ExpiresAt = &t
	}
	if it.ArchivedAt != nil {
		t := n(*it.ArchivedAt)
		it.ArchivedAt = &t
	}
	if len(it.History) > 0 {
		h := make([]memory.Revision, len(it.History))
		for i, r := range it.History {
			r.UpdatedAt, r.SupersededAt = n(r.UpdatedAt), n(r.SupersededAt)
			h[i] = r
		}
		it.History = h
	}
}

func historyJSON(h []memory.Revision) ([]byte, error) {
	if len(h) == 0 {
		return []byte("[]"), nil
	}
	return json.Marshal(h)
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
