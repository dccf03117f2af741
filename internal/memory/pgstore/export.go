package pgstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/amemory/memory-operator/internal/memory"
	"github.com/amemory/memory-operator/internal/vector/pgindex"
)

// ExportFilter selects the memories Export streams. Scopes and ScopePrefixes are
// alternatives (a memory matching either is exported); with neither, every scope is.
type ExportFilter struct {
	// Scopes are exact scope strings.
	Scopes []string
	// ScopePrefixes match scopes by prefix, e.g. "user:" for every user.
	ScopePrefixes []string
	// Types restricts the memory types; empty means all.
	Types []memory.Type
	// Now is the time expiry is judged against; zero means time.Now().
	Now time.Time
	// ExcludeExpired leaves out memories with expires_at <= Now.
	ExcludeExpired bool
	// IncludeArchived exports archived memories too.
	IncludeArchived bool
	// ArchivedAt, when set, exports only the memories archived at one of these times
	// (the archival runs a cold package covers, see ArchiveRuns); it implies
	// IncludeArchived.
	ArchivedAt []time.Time
	// IncludeEmbeddings fills Item.Embedding from the vectors table, where present.
	IncludeEmbeddings bool
	// ActiveSince, when set, leaves out whole scopes whose newest memory was updated
	// before it (abandoned sessions): a scope is exported entirely or not at all.
	ActiveSince time.Time
}

// Export calls fn for every memory matching f, in (scope, memory_id) order, streaming
// rows from the server: memory use does not grow with the table. It stops at and
// returns the first error from fn. A snapshot that also carries tombstones reads both
// through ReadCut instead.
func (s *Store) Export(ctx context.Context, f ExportFilter, fn func(memory.Item) error) error {
	return s.export(ctx, s.pool, f, fn)
}

// Cut is a consistent view of the store: its Export and EachTombstone read one
// REPEATABLE READ snapshot of the database, so what they return is the store at one
// moment, Time. A package written from one cut holds every memory and tombstone
// committed before Time and nothing committed after it: a scope forgotten while it
// is read is in it either with its memories or with its tombstone. Time is taken in
// the snapshot while no write or forget is in progress (see ReadCut), so a memory
// this store recorded before Time (recorded_at) and a tombstone it wrote before Time
// (forgotten_at) are in the cut, and nothing later is.
type Cut struct {
	s  *Store
	tx pgx.Tx
	// Time is when the snapshot was taken, by the server's clock.
	Time time.Time
}

// ReadCut runs fn with a Cut of the store, in a read-only REPEATABLE READ
// transaction that ends when fn returns. It takes the store's write/forget lock
// exclusively (on the cut's own session) just long enough to take the snapshot and
// read the clock: writes and forgets in progress finish first, and those after wait
// until the cut has its snapshot. A write stamps its recorded_at, and a forget its
// tombstone, by the server's clock once it holds that lock (forget.go), so every
// stamp before Time belongs to a transaction the snapshot sees, and none after.
// Writes pause for about one round trip; a long one in progress (a restore's batch)
// delays the cut until it commits.
func (s *Store) ReadCut(ctx context.Context, fn func(ctx context.Context, c *Cut) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: beginning a consistent read: %w", err)
	}
	// A session whose lock could not be released is closed: its lock goes with it.
	healthy := false
	defer func() {
		if !healthy {
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
		conn.Release()
	}()
	c := &Cut{s: s}
	if err := s.takeCut(ctx, conn.Conn(), c); err != nil {
		return fmt.Errorf("pgstore: beginning a consistent read: %w", err)
	}
	defer func() { _ = c.tx.Rollback(context.WithoutCancel(ctx)) }()
	healthy = true
	return fn(ctx, c)
}

// takeCut begins the cut's transaction on conn, its snapshot taken under the write
// lock, and releases the lock.
func (s *Store) takeCut(ctx context.Context, conn *pgx.Conn, c *Cut) error {
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, s.forgetLock()); err != nil {
		return err
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	// The transaction's first statement takes its snapshot, and the clock; the lock
	// is released only then, by the next one.
	if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&c.Time); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_unlock($1)`, s.forgetLock()); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	c.tx, c.Time = tx, c.Time.UTC()
	return nil
}

// Export is Store.Export within the cut.
func (c *Cut) Export(ctx context.Context, f ExportFilter, fn func(memory.Item) error) error {
	return c.s.export(ctx, c.tx, f, fn)
}

// EachTombstone is Store.EachTombstone within the cut.
func (c *Cut) EachTombstone(ctx context.Context, fn func(Tombstone) error) error {
	return c.s.eachTombstone(ctx, c.tx, fn)
}

func (s *Store) export(ctx context.Context, q querier, f ExportFilter, fn func(memory.Item) error) error {
	types, err := typeNames(f.Types)
	if err != nil {
		return fmt.Errorf("pgstore: export: %w", err)
	}
	var (
		args  []any
		where []string
	)
	param := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	var scopeConds []string
	if len(f.Scopes) > 0 {
		scopeConds = append(scopeConds, `m.scope = ANY(`+param(f.Scopes)+`::text[])`)
	}
	if len(f.ScopePrefixes) > 0 {
		scopeConds = append(scopeConds, `EXISTS (SELECT 1 FROM unnest(`+param(f.ScopePrefixes)+`::text[]) AS p(prefix) WHERE starts_with(m.scope, p.prefix))`)
	}
	if len(scopeConds) > 0 {
		where = append(where, `(`+strings.Join(scopeConds, ` OR `)+`)`)
	}
	if len(types) > 0 {
		where = append(where, `m.memory_type = ANY(`+param(types)+`::text[])`)
	}
	if f.ExcludeExpired {
		now := f.Now
		if now.IsZero() {
			now = time.Now()
		}
		where = append(where, `(m.expires_at IS NULL OR m.expires_at > `+param(now)+`::timestamptz)`)
	}
	switch {
	case len(f.ArchivedAt) > 0:
		where = append(where, `m.archived_at = ANY(`+param(f.ArchivedAt)+`::timestamptz[])`)
	case !f.IncludeArchived:
		where = append(where, `m.archived_at IS NULL`)
	}
	if !f.ActiveSince.IsZero() {
		where = append(where, `m.scope IN (SELECT scope FROM `+s.t.memories+` GROUP BY scope HAVING max(updated_at) >= `+param(f.ActiveSince)+`::timestamptz)`)
	}

	sql := `SELECT ` + s.exportFrom(f.IncludeEmbeddings)
	if len(where) > 0 {
		sql += ` WHERE ` + strings.Join(where, ` AND `)
	}
	sql += ` ORDER BY m.scope, m.memory_id`

	// Cancelling the query is the only way to stop the server streaming the rest of
	// the result when fn gives up early.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("pgstore: export: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		it, err := s.scanExported(rows, f.IncludeEmbeddings)
		if err != nil {
			return fmt.Errorf("pgstore: export: %w", err)
		}
		if err := fn(it); err != nil {
			cancel()
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgstore: export: %w", err)
	}
	return nil
}

// exportFrom is the columns and tables export reads, with the vectors of the
// embedded engine when withEmbeddings, as the store's schema version lays them out.
func (s *Store) exportFrom(withEmbeddings bool) string {
	cols := prefixed("m.", memoryCols)
	if s.readsBefore(7) {
		// What migration 7 sets an existing row's recorded_at to.
		cols = strings.Replace(cols, "m.recorded_at", "least(m.created_at, now()) AS recorded_at", 1)
	}
	from := s.t.memories + ` m`
	switch {
	case withEmbeddings && s.readsBefore(9):
		// Cast although the column is real[] then: a statement of its own, since a
		// prepared one of the bytes layout must not be reused on it.
		cols += `, v.embedding::real[]`
	case withEmbeddings:
		cols += `, v.embedding`
	}
	if withEmbeddings {
		from += ` LEFT JOIN ` + s.t.vectors + ` v ON v.memory_id = m.memory_id`
	}
	return cols + ` FROM ` + from
}

// scanExported scans one row of export's query: an item, with its vector when the
// query reads them (the embedded engine's bytes, real[] before version 9; none when
// the memory has no row).
func (s *Store) scanExported(rows pgx.Rows, withEmbedding bool) (memory.Item, error) {
	if !withEmbedding {
		return scanItem(rows)
	}
	if s.readsBefore(9) {
		var v []float32
		it, err := scanItem(rows, &v)
		if err == nil && v != nil {
			it.Embedding = v
		}
		return it, err
	}
	var raw []byte
	it, err := scanItem(rows, &raw)
	if err == nil && raw != nil {
		it.Embedding, err = pgindex.DecodeVector(raw)
	}
	return it, err
}

// prefixed qualifies every column of a comma-separated list with prefix.
func prefixed(prefix, cols string) string {
	parts := strings.Split(cols, ",")
	for i, p := range parts {
		parts[i] = prefix + strings.TrimSpace(p)
	}
	return strings.Join(parts, ", ")
}
