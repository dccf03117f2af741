package pgstore

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/amemory/memory-operator/internal/memory"
)

// ConflictPolicy decides what Merge does when an item meets a memory that is already
// stored: the same memory_id, the same (scope, key) slot, or, for an item without a
// key, the same content in the scope.
type ConflictPolicy string

// The conflict policies.
const (
	// KeepNewer keeps whichever value was updated last (ties: the greater content
	// hash, so the outcome never depends on the order of writes). The other value is
	// recorded in the winner's history, like Put's supersede does. Identical values
	// (the same content hash) are left as stored.
	KeepNewer ConflictPolicy = "KeepNewer"
	// Overwrite lets the item win: the stored memory takes every field of the item
	// (content, type, source, score, times, expiry, archival). A replaced value that
	// differs is recorded in history, so nothing is lost.
	Overwrite ConflictPolicy = "Overwrite"
	// SkipExisting leaves a stored memory untouched.
	SkipExisting ConflictPolicy = "Skip"
)

// Valid reports whether p is one of the three policies.
func (p ConflictPolicy) Valid() bool {
	return p == KeepNewer || p == Overwrite || p == SkipExisting
}

// MergeOutcome says what Merge did with one item.
type MergeOutcome uint8

// Merge outcomes.
const (
	// MergeInserted: the item was stored as a new memory.
	MergeInserted MergeOutcome = iota + 1
	// MergeReplaced: the item's value replaced the stored memory's (KeepNewer: the
	// item was newer; Overwrite: the stored memory differed in any field).
	MergeReplaced
	// MergeKept: the stored memory was newer and kept its value; the item's value
	// was added to its history (KeepNewer).
	MergeKept
	// MergeUnchanged: the stored memory already holds the item's value (the same
	// content hash; with Overwrite, every field equal). Nothing was written.
	MergeUnchanged
	// MergeSkipped: the stored memory differs and was kept, and nothing was written
	// (SkipExisting; or KeepNewer when the item's value was already in its history).
	MergeSkipped
	// MergeIDInUse: the item's memory_id belongs to a memory of another slot of its
	// scope. Memory IDs are stable, so the memory is never moved: nothing was written.
	MergeIDInUse
	// MergeTombstoned: the item's scope has a tombstone that covers it (the item was
	// recorded at or before it). Nothing was written.
	MergeTombstoned
	// MergeInvalid: the item failed validation (MergeResult.Errs says why). Nothing
	// was written.
	MergeInvalid
	// MergeIDInOtherScope: the item's memory_id belongs to a memory of another scope
	// (another user's). Nothing was written; MergeIDInUse is the same within the
	// item's own scope (another slot).
	MergeIDInOtherScope
)

var outcomeNames = [...]string{"", "inserted", "replaced", "kept", "unchanged", "skipped", "id-in-use", "tombstoned", "invalid", "id-in-other-scope"}

func (o MergeOutcome) String() string {
	if int(o) < len(outcomeNames) && o != 0 {
		return outcomeNames[o]
	}
	return fmt.Sprintf("MergeOutcome(%d)", uint8(o))
}

// Written reports whether the outcome wrote the item's value as the memory's current
// value (its vector must then be brought up to date).
func (o MergeOutcome) Written() bool { return o == MergeInserted || o == MergeReplaced }

// MergeOptions configure Merge.
type MergeOptions struct {
	// Policy resolves conflicts with stored memories; empty means KeepNewer.
	Policy ConflictPolicy
	// DryRun runs the merge in a transaction that is rolled back: the outcomes are
	// exactly those of a real merge, and nothing is written.
	DryRun bool
	// Tombstones, in a dry run only, are applied in the batch's transaction before it
	// merges (as ApplyTombstones would, and rolled back with it): a dry run of a
	// restore sees the target as the package's tombstones would leave it.
	Tombstones []Tombstone
	// Renames are the batch's package scopes written under another name, and
	// RenameSource the package's source store: recorded with the batch (see
	// KnownRenames), rolled back with it in a dry run.
	Renames      []ScopeRename
	RenameSource string
	// BeforeCommit, when set, is called with the outcomes while the transaction is
	// still open (in a dry run too, before the rollback). An error rolls the batch
	// back and is returned. Writing the vectors of the merged memories here means a
	// committed memory always has its vector: a crash between the two leaves at most
	// a vector without a committed row, which a rerun overwrites. It may be called
	// more than once when the batch is retried (see Merge).
	BeforeCommit func(ctx context.Context, res *MergeResult) error
}

// MergeResult reports Merge's outcome for each item, by position.
type MergeResult struct {
	// Outcomes[i] is what happened to items[i].
	Outcomes []MergeOutcome
	// IDs[i] is the memory_id of the stored memory items[i] was merged into: the
	// item's own ID, or that of the memory already holding its (scope, key) slot or
	// its content. Empty for MergeIDInUse, MergeIDInOtherScope, MergeTombstoned and
	// MergeInvalid.
	IDs []string
	// Errs[i] is set for MergeInvalid items.
	Errs []error
}

// mergeAttempts bounds the retries of a batch that lost a race with concurrent
// writers (a unique violation, a deadlock).
const mergeAttempts = 5

// errMergeRace makes Merge retry the batch.
var errMergeRace = errors.New("concurrent writes changed the memories being merged")

// mergeRow is one validated item on its way to the staging table.
type mergeRow struct {
	pos     int // index in items
	it      *memory.Item
	hash    []byte
	history []byte
	// round is the merge round the row goes in: the first item of the batch for a
	// memory_id or slot goes in round 1, the next one for the same ID or slot in a
	// later round, so that one round never meets a memory twice (ON CONFLICT cannot
	// touch one row twice) and items for the same memory merge in batch order.
	round int32
}

// PreparedBatch is a batch of items validated and hashed for MergePrepared. Preparing
// is pure CPU work: a caller that streams batches prepares the next one while the
// database merges the previous one.
type PreparedBatch struct {
	n       int
	rows    []mergeRow
	invalid []invalidItem
	rounds  int32
	scopes  []string // the distinct scopes of rows
	// plainHistories is set when no row has two or more revisions: the merge
	// statement stores such histories as they are (see insertNew).
	plainHistories bool
}

type invalidItem struct {
	pos int
	err error
}

// PreparedItem is one item made ready for a merge by PrepareItem: validated, its
// times truncated to microseconds, its content hashed and its history encoded.
type PreparedItem struct {
	// Item is the item as it will be stored. Its Scope may still be changed (a
	// restore maps scopes after preparing): nothing prepared depends on the scope,
	// and a valid item stays valid under any valid scope.
	Item    memory.Item
	hash    []byte
	history []byte
	err     error
}

// Err is why the item is invalid, nil when it is valid.
func (p *PreparedItem) Err() error { return p.err }

// PrepareItem validates and hashes it (with memory.Item.ValidatedHash; no defaults
// are filled in) and encodes its history, after truncating its times to
// microseconds. It is pure CPU work, safe to run on many items at once. The item's
// times are judged against the clock (PrepareItemAt).
func PrepareItem(it memory.Item) PreparedItem { return PrepareItemAt(it, time.Now()) }

// PrepareItemAt is PrepareItem judging the item's times against now: created_at and
// updated_at more than memory.MaxFutureSkew after it make the item invalid, and its
// recorded_at becomes what it says, at most now, or else its created_at (see
// Merge). A restore passes its package's cut: nothing in a package was recorded after
// it.
func PrepareItemAt(it memory.Item, now time.Time) PreparedItem {
	normalizeTimes(&it) // replaces pointers, never writes through
	it.RecordedAt = recordedAt(&it, now)
	p := PreparedItem{Item: it}
	if p.hash, p.err = it.ValidatedHash(); p.err == nil {
		if p.err = it.CheckNotFuture(now); p.err == nil {
			p.history, p.err = historyJSON(it.History)
		}
	}
	if p.err != nil {
		p.err = fmt.Errorf("memory %q: %w", it.MemoryID, p.err)
	}
	return p
}

// PrepareMerge prepares items (PrepareItem) and plans the merge rounds. It does not
// modify items.
func PrepareMerge(items []memory.Item) *PreparedBatch {
	ps := make([]PreparedItem, len(items))
	for i := range items {
		ps[i] = PrepareItem(items[i])
	}
	return PrepareMergeItems(ps)
}

// PrepareMergeItems plans the merge rounds of prepared items; items must not change
// until the batch is merged.
func PrepareMergeItems(items []PreparedItem) *PreparedBatch {
	b := &PreparedBatch{n: len(items), rows: make([]mergeRow, 0, len(items)), plainHistories: true}
	// Keys are hashes of the ID and of the slot: two that collide only put an item in
	// a later round than it needs, never two meetings of one memory in one round.
	lastByID := make(map[uint64]int32, len(items))
	lastBySlot := make(map[uint64]int32, len(items))
	seed := maphash.MakeSeed()
	var h maphash.Hash
	scopes := make(map[string]struct{})
	for i := range items {
		p := &items[i]
		if p.err != nil {
			b.invalid = append(b.invalid, invalidItem{pos: i, err: p.err})
			continue
		}
		it := &p.Item
		if _, ok := scopes[it.Scope]; !ok {
			scopes[it.Scope] = struct{}{}
			b.scopes = append(b.scopes, it.Scope)
		}
		// A slot is (scope, key), or (scope, content hash) for an item without a key.
		h.SetSeed(seed)
		h.WriteString(it.Scope)
		if it.Key != "" {
			h.WriteString("\x00k")
			h.WriteString(it.Key)
		} else {
			h.WriteString("\x00h")
			h.Write(p.hash)
		}
		sk := h.Sum64()
		id := maphash.String(seed, it.MemoryID)
		round := max(lastByID[id], lastBySlot[sk]) + 1
		lastByID[id], lastBySlot[sk] = round, round
		b.rounds = max(b.rounds, round)
		b.plainHistories = b.plainHistories && len(it.History) < 2
		b.rows = append(b.rows, mergeRow{pos: i, it: it, hash: p.hash, history: p.history, round: round})
	}
	return b
}

// Merge stores items set-based, in one transaction: the items are copied into a
// temporary staging table and merged into the memories with one INSERT ... ON
// CONFLICT statement, which resolves every conflict per opts.Policy. Use batches of a
// few thousand items; memory use is proportional to the batch.
//
// An item meets a stored memory through its (scope, key) slot (items with a key),
// its content in the scope (items without a key: the same content hash), or else its
// memory_id. A slot or content match merges into the stored memory, which keeps its
// memory_id; a memory_id match in another slot of its scope is MergeIDInUse, in
// another scope MergeIDInOtherScope. An item that its scope's tombstone covers
// (recorded at or before it, see forget.go) is never written (MergeTombstoned); the
// batch holds the forget lock shared, so a Forget waits for it and no tombstone
// appears while it runs. The item's recorded_at (PrepareItemAt) is stored with its
// value: a restored memory keeps the time its source recorded it, so a tombstone
// restored later, or earlier, covers it exactly as it did there.
//
// Merge is idempotent: merging the same items again changes nothing (outcomes
// MergeUnchanged, or MergeSkipped for values kept out by the policy). Histories are
// merged as sets: every revision is kept once (identified by its content and
// updated_at), ordered oldest first, so records are never duplicated.
//
// Several items of the batch that meet the same memory are merged one after the
// other, in batch order, within the transaction. Items are validated (with
// memory.Item.Validate; no defaults are filled in) and times truncated to
// microseconds; an invalid item is reported as MergeInvalid and the others are
// merged. When the batch loses a race with concurrent writers it is retried from the
// start (BeforeCommit then runs again).
func (s *Store) Merge(ctx context.Context, items []memory.Item, opts MergeOptions) (*MergeResult, error) {
	return s.MergePrepared(ctx, PrepareMerge(items), opts)
}

// MergePrepared is Merge of a batch prepared by PrepareMerge.
func (s *Store) MergePrepared(ctx context.Context, b *PreparedBatch, opts MergeOptions) (*MergeResult, error) {
	policy := opts.Policy
	if policy == "" {
		policy = KeepNewer
	}
	if !policy.Valid() {
		return nil, fmt.Errorf("pgstore: merge: unknown conflict policy %q (want KeepNewer, Overwrite or Skip)", policy)
	}
	if len(opts.Tombstones) > 0 && !opts.DryRun {
		return nil, errors.New("pgstore: merge: MergeOptions.Tombstones is for dry runs (apply them with ApplyTombstones)")
	}
	res := &MergeResult{
		Outcomes: make([]MergeOutcome, b.n),
		IDs:      make([]string, b.n),
		Errs:     make([]error, b.n),
	}
	for _, inv := range b.invalid {
		res.Outcomes[inv.pos], res.Errs[inv.pos] = MergeInvalid, inv.err
	}
	if len(b.rows) == 0 {
		if opts.BeforeCommit != nil {
			if err := opts.BeforeCommit(ctx, res); err != nil {
				return nil, err
			}
		}
		return res, nil
	}
	for attempt := 1; ; attempt++ {
		err := s.mergeOnce(ctx, b, policy, opts, res)
		if err == nil {
			return res, nil
		}
		if attempt < mergeAttempts && retryableMerge(err) && ctx.Err() == nil {
			for _, r := range b.rows {
				res.Outcomes[r.pos], res.IDs[r.pos] = 0, ""
			}
			continue
		}
		return nil, fmt.Errorf("pgstore: merge: %w", err)
	}
}

// retryableMerge reports whether err is a lost race that a fresh attempt resolves.
func retryableMerge(err error) bool {
	if errors.Is(err, errMergeRace) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505", "40P01", "40001": // unique_violation, deadlock_detected, serialization_failure
			return true
		}
	}
	return false
}

// mergeStage is the staging table, in the session's temporary schema; it is emptied
// at the end of every transaction.
var mergeStage = pgx.Identifier{"pg_temp", "memory_merge_stage"}

var mergeStageCols = []string{"ord", "round", "memory_id", "memory_type", "scope", "key", "content", "content_hash",
	"source", "base_score", "created_at", "updated_at", "expires_at", "archived_at", "history", "recorded_at"}

func (s *Store) mergeOnce(ctx context.Context, b *PreparedBatch, policy ConflictPolicy, opts MergeOptions, res *MergeResult) error {
	rows := b.rows
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	// Forgets wait for this batch, and it for forgets in progress: the merge
	// statement below sees every tombstone that will exist when it commits.
	if err := s.lockForWrite(ctx, tx); err != nil {
		return err
	}
	if len(opts.Tombstones) > 0 { // a dry run: rolled back below
		if _, err := s.applyTombstones(ctx, tx, opts.Tombstones, ApplyOptions{}); err != nil {
			return fmt.Errorf("applying the tombstones of a dry run: %w", err)
		}
	}
	// Nearly always no scope of the batch was ever forgotten: then the statement
	// needs no per-item tombstone check (none can appear while the lock is held).
	var forgotten bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+s.t.tombstones+` WHERE scope = ANY($1))`, b.scopes).Scan(&forgotten); err != nil {
		return err
	}
	if !forgotten {
		inserted, err := s.insertNew(ctx, tx, b, res)
		if err != nil {
			return err
		}
		if inserted {
			return s.finishMerge(ctx, tx, b, opts, res)
		}
	}
	sql := s.mergeSQL(policy, forgotten)
	// The merge statement's estimated cost (thousands of index probes) is above
	// jit_above_cost, but compiling it costs more than running it.
	if _, err := tx.Exec(ctx, `SET LOCAL jit = off`); err != nil {
		return err
	}
	// The staging table lives as long as the session (its rows only as long as the
	// transaction): creating and dropping it per batch is catalog churn.
	if _, err := tx.Exec(ctx, `CREATE TEMP TABLE IF NOT EXISTS `+mergeStage.Sanitize()+` (
		ord          int4 NOT NULL,
		round        int4 NOT NULL,
		memory_id    text COLLATE "C" NOT NULL,
		memory_type  text NOT NULL,
		scope        text COLLATE "C" NOT NULL,
		key          text,
		content      jsonb NOT NULL,
		content_hash bytea NOT NULL,
		source       text NOT NULL,
		base_score   double precision NOT NULL,
		created_at   timestamptz NOT NULL,
		updated_at   timestamptz NOT NULL,
		expires_at   timestamptz,
		archived_at  timestamptz,
		history      jsonb NOT NULL,
		recorded_at  timestamptz NOT NULL
	) ON COMMIT DELETE ROWS`); err != nil {
		return err
	}
	_, err = tx.CopyFrom(ctx, mergeStage, mergeStageCols, pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
		r := rows[i]
		it := r.it
		return []any{int32(i), r.round, it.MemoryID, string(it.MemoryType), it.Scope, nullable(it.Key), []byte(it.Content), r.hash,
			it.Source, it.BaseScore, it.CreatedAt, it.UpdatedAt, it.ExpiresAt, it.ArchivedAt, r.history, it.RecordedAt}, nil
	}))
	if err != nil {
		return fmt.Errorf("copying into the staging table: %w", err)
	}

	for round := int32(1); round <= b.rounds; round++ {
		if err := s.mergeRound(ctx, tx, sql, round, rows, res); err != nil {
			return err
		}
	}

	return s.finishMerge(ctx, tx, b, opts, res)
}

// finishMerge marks the scopes whose memories the batch wrote as owed their lexical
// postings (lexical.go: a search makes them), records the batch's renamed scopes,
// runs BeforeCommit and commits the batch (a dry run rolls it back).
func (s *Store) finishMerge(ctx context.Context, tx pgx.Tx, b *PreparedBatch, opts MergeOptions, res *MergeResult) error {
	var owed []string
	seen := make(map[string]bool)
	for _, r := range b.rows {
		if res.Outcomes[r.pos].Written() && !seen[r.it.Scope] {
			seen[r.it.Scope] = true
			owed = append(owed, r.it.Scope)
		}
	}
	if err := s.markTermsOwed(ctx, tx, owed); err != nil {
		return err
	}
	if err := s.recordRenames(ctx, tx, opts.RenameSource, opts.Renames); err != nil {
		return err
	}
	if opts.BeforeCommit != nil {
		if err := opts.BeforeCommit(ctx, res); err != nil {
			return err
		}
	}
	if opts.DryRun {
		return tx.Rollback(ctx)
	}
	return tx.Commit(ctx)
}

// insertNew is the merge of a batch that meets no stored memory, the common case of
// a restore or import into a new store or new scopes: every item is then inserted
// whatever the policy, so the rows are copied straight into the memories table,
// without the staging table and the merge statement's lookups (about half of a
// merge's database time). It applies when no scope of the batch has a tombstone (the
// caller checked), every item is alone in its round (PrepareMergeItems) and no
// history needs the statement's canonical union (fewer than two revisions). The
// memories table's unique indexes are exactly the ways an item meets a memory
// (memory_id, (scope, key), (scope, content_hash) without a key), so the COPY
// succeeds only when no item meets one, even with concurrent writers: then the
// outcomes are what the merge statement would report (inserted, under the item's
// own ID). Otherwise it fails with a unique violation, is rolled back to its
// savepoint, and insertNew reports false for the merge statement to run. The first
// such failure stops the Store trying (a target that holds the package's memories,
// as in a rerun, would fail every batch); there is no cheap reliable check first:
// an EXISTS over the batch's scopes is planned as a scan of the table that
// expects an early match, and reads it whole when there is none.
func (s *Store) insertNew(ctx context.Context, tx pgx.Tx, b *PreparedBatch, res *MergeResult) (bool, error) {
	if b.rounds > 1 || !b.plainHistories || s.insertsMet.Load() {
		return false, nil
	}
	sp, err := tx.Begin(ctx)
	if err != nil {
		return false, err
	}
	rows := b.rows
	_, err = sp.CopyFrom(ctx, pgx.Identifier{s.schema, "memories"}, memCopyCols, pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
		it := rows[i].it
		return []any{it.MemoryID, string(it.MemoryType), it.Scope, nullable(it.Key), []byte(it.Content), rows[i].hash,
			it.Source, it.BaseScore, it.CreatedAt, it.UpdatedAt, it.ExpiresAt, it.ArchivedAt, rows[i].history, it.RecordedAt}, nil
	}))
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23505" { // unique_violation: an item met a memory
			s.insertsMet.Store(true)
			return false, sp.Rollback(ctx)
		}
		return false, fmt.Errorf("copying into the memories table: %w", err)
	}
	if err := sp.Commit(ctx); err != nil { // releases the savepoint
		return false, err
	}
	for _, r := range rows {
		res.Outcomes[r.pos], res.IDs[r.pos] = MergeInserted, r.it.MemoryID
	}
	s.copiedNew.Add(1)
	return true, nil
}

// mergeRound runs the merge statement over the staged rows of one round and records
// the outcome of every one of them.
func (s *Store) mergeRound(ctx context.Context, tx pgx.Tx, sql string, round int32, rows []mergeRow, res *MergeResult) error {
	qrows, err := tx.Query(ctx, sql, round)
	if err != nil {
		return err
	}
	var race bool
	for qrows.Next() {
		var (
			ord  int32
			dest string
			f    mergeFacts
		)
		if err := qrows.Scan(&ord, &dest, &f.idInUse, &f.otherScope, &f.tombstoned, &f.existed, &f.sameExisting,
			&f.written, &f.inserted, &f.pkgValue); err != nil {
			qrows.Close()
			return err
		}
		pos := rows[ord].pos
		o := f.outcome()
		// 0: expected an insert, but a memory with this ID appeared meanwhile in
		// another scope or slot: look again.
		race = race || o == 0
		res.Outcomes[pos] = o
		if o != MergeTombstoned && o != MergeIDInUse && o != MergeIDInOtherScope {
			res.IDs[pos] = dest
		}
	}
	if err := qrows.Err(); err != nil {
		return err
	}
	if race {
		return errMergeRace
	}
	return nil
}

// mergeFacts are what the merge statement reports of one staged row.
type mergeFacts struct {
	idInUse, otherScope, tombstoned, existed, sameExisting bool
	written, inserted, pkgValue                            bool
}

// outcome is the row's MergeOutcome, 0 when the facts contradict each other (a race).
func (f mergeFacts) outcome() MergeOutcome {
	switch {
	case f.tombstoned:
		return MergeTombstoned
	case f.idInUse && f.otherScope:
		return MergeIDInOtherScope
	case f.idInUse:
		return MergeIDInUse
	case f.written && f.inserted:
		return MergeInserted
	case f.written && f.pkgValue:
		return MergeReplaced
	case f.written:
		return MergeKept
	case f.existed && f.sameExisting:
		return MergeUnchanged
	case f.existed:
		return MergeSkipped
	}
	return 0
}

// tsJSON renders a timestamptz as a JSON string the way Go's time.Time marshals a UTC
// time (RFC 3339 with trailing zeros of the fraction trimmed, "Z"), so revisions
// written here read back like the ones Put writes.
func tsJSON(expr string) string {
	return `to_jsonb(rtrim(rtrim(to_char((` + expr + `) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'), '0'), '.') || 'Z')`
}

// revisionJSON is the history entry recording row r's current value, superseded at sup.
func revisionJSON(r, sup string) string {
	return `jsonb_build_object('content', ` + r + `.content, 'source', ` + r + `.source, 'base_score', ` + r + `.base_score, ` +
		`'updated_at', ` + tsJSON(r+`.updated_at`) + `, 'superseded_at', ` + tsJSON(sup) + `)`
}

// historyUnion is the union of jsonb history arrays as a set: one entry per (content,
// updated_at) — the earliest superseded_at of duplicates, then the smallest text,
// so the choice is deterministic — sorted oldest first. It is idempotent: the union
// of a result with any of its inputs is the result itself.
func historyUnion(arrays string) string {
	return `(SELECT coalesce(jsonb_agg(d.v ORDER BY d.ut, d.st, d.v::text), '[]'::jsonb) FROM (
		SELECT DISTINCT ON (e.ut, e.v->'content') e.v, e.ut, e.st FROM (
			SELECT x.v, (x.v->>'updated_at')::timestamptz AS ut, (x.v->>'superseded_at')::timestamptz AS st
			FROM jsonb_array_elements(` + arrays + `) AS x(v)) e
		ORDER BY e.ut, e.v->'content', e.st, e.v::text) d)`
}

// mergeSQL builds the merge statement for a policy, checking each item against the
// tombstones when some scope of the batch has one; $1 is the round. Its parts:
//
//   - src finds each staged item's memory: by slot ((scope, key), or (scope,
//     content_hash) without a key), else by memory_id when that memory has the same
//     scope and slot; a memory_id used elsewhere is id_in_use. It also notes a
//     tombstone covering the item. Within a round no two items share a memory_id or a
//     slot (PrepareMerge plans the rounds so), hence no two writable items share a
//     destination memory: slots are unique in the table, and an item whose own ID
//     is another slot's memory is id_in_use.
//   - w inserts the items under their destination's memory_id; ON CONFLICT
//     (memory_id) applies the policy, guarded so that a memory of another scope or
//     slot is never updated, and writing only when something changes.
//   - the final SELECT reports, per staged row, what happened.
func (s *Store) mergeSQL(p ConflictPolicy, tombstones bool) string {
	covered := `false`
	if tombstones {
		covered = s.covered("s")
	}
	m, st := s.t.memories, mergeStage.Sanitize()
	cols := `memory_id, memory_type, scope, key, content, content_hash, source, base_score, created_at, updated_at, expires_at, archived_at, history, recorded_at`
	canonHistory := `CASE WHEN jsonb_array_length(history) < 2 THEN history ELSE ` + historyUnion(`history`) + ` END`
	guard := `m.scope = EXCLUDED.scope AND m.key IS NOT DISTINCT FROM EXCLUDED.key`

	var onConflict string
	switch p {
	case KeepNewer:
		win := `((EXCLUDED.updated_at, EXCLUDED.content_hash) > (m.updated_at, m.content_hash))`
		hist := historyUnion(`m.history || EXCLUDED.history || jsonb_build_array(CASE WHEN ` + win + ` THEN ` +
			revisionJSON("m", "EXCLUDED.updated_at") + ` ELSE ` + revisionJSON("EXCLUDED", "m.updated_at") + ` END)`)
		pick := func(col string) string {
			return col + ` = CASE WHEN ` + win + ` THEN EXCLUDED.` + col + ` ELSE m.` + col + ` END`
		}
		sets := []string{pick("memory_type"), pick("content"), pick("content_hash"), pick("source"), pick("base_score"),
			`created_at = CASE WHEN ` + win + ` THEN least(m.created_at, EXCLUDED.created_at) ELSE m.created_at END`,
			pick("updated_at"), pick("expires_at"), pick("archived_at"), pick("recorded_at"), `history = ` + hist}
		onConflict = `ON CONFLICT (memory_id) DO UPDATE SET ` + strings.Join(sets, `, `) + `
			WHERE ` + guard + ` AND m.content_hash <> EXCLUDED.content_hash AND (` + win + ` OR ` + hist + ` IS DISTINCT FROM m.history)`
	case Overwrite:
		hist := historyUnion(`m.history || EXCLUDED.history || CASE WHEN m.content_hash <> EXCLUDED.content_hash THEN jsonb_build_array(` +
			revisionJSON("m", "EXCLUDED.updated_at") + `) ELSE '[]'::jsonb END`)
		created := `least(m.created_at, EXCLUDED.created_at)`
		onConflict = `ON CONFLICT (memory_id) DO UPDATE SET memory_type = EXCLUDED.memory_type, content = EXCLUDED.content,
				content_hash = EXCLUDED.content_hash, source = EXCLUDED.source, base_score = EXCLUDED.base_score,
				created_at = ` + created + `, updated_at = EXCLUDED.updated_at, expires_at = EXCLUDED.expires_at,
				archived_at = EXCLUDED.archived_at, history = ` + hist + `, recorded_at = EXCLUDED.recorded_at
			WHERE ` + guard + ` AND (EXCLUDED.memory_type, EXCLUDED.content_hash, EXCLUDED.source, EXCLUDED.base_score, ` + created + `,
				EXCLUDED.updated_at, EXCLUDED.expires_at, EXCLUDED.archived_at, ` + hist + `)
				IS DISTINCT FROM (m.memory_type, m.content_hash, m.source, m.base_score, m.created_at,
				m.updated_at, m.expires_at, m.archived_at, m.history)`
	default: // SkipExisting
		onConflict = `ON CONFLICT (memory_id) DO NOTHING`
	}

	return `WITH src AS (
		SELECT s.*, coalesce(tid, s.memory_id) AS dest FROM (
			SELECT s.*,
				coalesce(slot.memory_id, CASE WHEN same_slot THEN byid.memory_id END) AS tid,
				coalesce(slot.content_hash, CASE WHEN same_slot THEN byid.content_hash END) AS ex_hash,
				(slot.memory_id IS NULL AND byid.memory_id IS NOT NULL AND NOT same_slot) AS id_in_use,
				coalesce(byid.scope <> s.scope, false) AS other_scope,
				` + covered + ` AS tombstoned
			FROM ` + st + ` s
			LEFT JOIN LATERAL (
				SELECT x.memory_id, x.content_hash FROM ` + m + ` x
					WHERE s.key IS NOT NULL AND x.scope = s.scope AND x.key = s.key
				UNION ALL
				SELECT x.memory_id, x.content_hash FROM ` + m + ` x
					WHERE s.key IS NULL AND x.scope = s.scope AND x.key IS NULL AND x.content_hash = s.content_hash
				OFFSET 0
			) slot ON true
			-- OFFSET 0 keeps the lookups parameterized (one index probe per staged row):
			-- flattened into a join, the planner may scan the whole table per batch.
			LEFT JOIN LATERAL (
				SELECT x.memory_id, x.scope, x.key, x.content_hash FROM ` + m + ` x WHERE x.memory_id = s.memory_id OFFSET 0
			) byid ON true
			CROSS JOIN LATERAL (SELECT coalesce(byid.scope = s.scope AND byid.key IS NOT DISTINCT FROM s.key, false) AS same_slot) ss
			WHERE s.round = $1
		) s
	), w AS (
		INSERT INTO ` + m + ` AS m (` + cols + `)
		SELECT dest, memory_type, scope, key, content, content_hash, source, base_score, created_at, updated_at,
			expires_at, archived_at, ` + canonHistory + `, recorded_at
		FROM src WHERE NOT id_in_use AND NOT tombstoned
		` + onConflict + `
		RETURNING m.memory_id, (m.xmax = 0) AS inserted, m.content_hash, m.updated_at
	)
	SELECT r.ord, r.dest, r.id_in_use, r.other_scope, r.tombstoned,
		r.tid IS NOT NULL AS existed, coalesce(r.ex_hash = r.content_hash, false) AS same_existing,
		w.memory_id IS NOT NULL AS written, coalesce(w.inserted, false) AS inserted,
		coalesce(w.content_hash = r.content_hash AND w.updated_at = r.updated_at, false) AS pkg_value
	FROM src r LEFT JOIN w ON w.memory_id = r.dest AND NOT r.id_in_use AND NOT r.tombstoned`
}

// PoolSize is the maximum number of connections of the store's pool, for callers
// that run merges in parallel and must leave connections for other work (0 for a
// Store without a pool, which tests build).
func (s *Store) PoolSize() int {
	if s.pool == nil {
		return 0
	}
	return int(s.pool.Config().MaxConns)
}
