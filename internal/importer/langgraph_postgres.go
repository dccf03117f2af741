package importer

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/amemory/memory-operator/internal/memory"
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
	// page overrides threadPageSize (tests).
	page int
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
	return l.threadsEncoded(ctx, Rules{}, func(t Thread) error {
		if err := t.decode(ctx, false); err != nil {
			return err
		}
		return fn(t)
	})
}

// tsLayout is how langgraph writes a checkpoint's ts (Python's isoformat() of a UTC
// time with microseconds). Such strings sort as their times do.
const tsLayout = "2006-01-02T15:04:05.000000+00:00"

// threadsEncoded is Threads with each thread's messages left encoded (Thread.decode).
// Of the threads rules leave out on what is known without their messages (ended in
// an error, idle), the messages never leave the database: that is half of what an
// import with an inactivity window reads. The database only elides what it can judge
// for certain (a ts in langgraph's own layout, compared as a string in the C
// collation against the cutoff truncated to microseconds); Convert decides every
// thread again, and a thread it keeps whose messages were elided fetches them. The
// messages blob is looked up per kept thread (LATERAL, through the blobs' primary
// key), not joined by hashing every blob row before the first thread can stream.
func (l *LangGraphPostgres) threadsEncoded(ctx context.Context, rules Rules, fn func(Thread) error) error {
	var cutoff *string
	if rules.InactiveAfter > 0 {
		c := rules.Now.Add(-rules.InactiveAfter).UTC().Truncate(time.Microsecond).Format(tsLayout)
		cutoff = &c
	}
	// Pages of threads, in one read-only snapshot: each page's first thread streams
	// at once (its ids come off the primary key in order), where one query over
	// every thread first gathered and sorted all their ids.
	tx, err := l.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("langgraph postgres: reading threads: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var after *string
	for {
		n, last, err := l.threadPage(ctx, tx, after, rules.SkipZombies, cutoff, fn)
		if err != nil {
			return err
		}
		if n < l.pageSize() {
			return nil
		}
		after = &last
	}
}

// threadPageSize is how many threads one query of threadsEncoded reads
// (LangGraphPostgres.page, when set, in tests).
const threadPageSize = 1000

func (l *LangGraphPostgres) pageSize() int {
	if l.page > 0 {
		return l.page
	}
	return threadPageSize
}

// threadPage reads the threads after the thread id after (from the first when nil),
// up to threadPageSize of them, and reports how many and the last one's id.
func (l *LangGraphPostgres) threadPage(ctx context.Context, tx pgx.Tx, after *string, skipZombies bool, cutoff *string,
	fn func(Thread) error) (int, string, error) {
	// The first page's query has no lower bound: "$4 IS NULL OR thread_id > $4" would
	// keep a generic plan from starting the index scan at the bound.
	args := []any{skipZombies, cutoff, l.pageSize()}
	bound := ""
	if after != nil {
		args, bound = append(args, *after), "$4"
	}
	rows, err := tx.Query(ctx, `
		WITH latest AS (`+latestCheckpoints(l.table("checkpoints"), bound, "$3")+`),
		judged AS (
			SELECT l.*, e.errored, e.wtypes, e.wblobs,
				($1 AND e.errored) OR ($2::text IS NOT NULL
					AND l.checkpoint->>'ts' ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}[.][0-9]{6}[+]00:00$'
					AND l.checkpoint->>'ts' COLLATE "C" < $2::text COLLATE "C") AS elided
			FROM latest l, LATERAL (SELECT coalesce(bool_or(w.channel = '__error__'), false) AS errored,
				array_agg(w.type ORDER BY `+l.writesOrder()+`) FILTER (WHERE w.channel = 'messages') AS wtypes,
				array_agg(w.blob ORDER BY `+l.writesOrder()+`) FILTER (WHERE w.channel = 'messages') AS wblobs
				FROM `+l.table("checkpoint_writes")+` w WHERE w.thread_id = l.thread_id
				AND w.checkpoint_ns = '' AND w.checkpoint_id = l.checkpoint_id AND w.channel IN ('__error__', 'messages')) e)
		SELECT l.thread_id, l.checkpoint->>'ts', l.metadata,
			(SELECT min(checkpoint_id) FROM `+l.table("checkpoints")+` c WHERE c.thread_id = l.thread_id AND c.checkpoint_ns = ''),
			l.checkpoint->'channel_values'->'messages', l.checkpoint->'channel_versions'->>'messages',
			b.type, b.blob, l.errored, l.elided, l.wtypes, l.wblobs,
			CASE WHEN NOT l.elided THEN (l.checkpoint->'channel_values') - 'messages' END, cb.names, cb.types, cb.blobs
		FROM judged l
		LEFT JOIN LATERAL (SELECT array_agg(b.channel ORDER BY b.channel) AS names, array_agg(b.type ORDER BY b.channel) AS types,
			array_agg(b.blob ORDER BY b.channel) AS blobs
			FROM jsonb_each_text(l.checkpoint->'channel_versions') v(channel, version)
			JOIN `+l.table("checkpoint_blobs")+` b ON b.thread_id = l.thread_id AND b.checkpoint_ns = '' AND b.channel = v.channel AND b.version = v.version
			WHERE NOT l.elided AND v.channel <> 'messages' AND v.channel NOT LIKE '\_\_%' AND strpos(v.channel, ':') = 0) cb ON true
		LEFT JOIN LATERAL (SELECT b.type, b.blob FROM `+l.table("checkpoint_blobs")+` b WHERE NOT l.elided AND b.thread_id = l.thread_id
			AND b.checkpoint_ns = '' AND b.channel = 'messages' AND b.version = l.checkpoint->'channel_versions'->>'messages' OFFSET 0) b ON true
		ORDER BY l.thread_id`, args...)
	if err != nil {
		return 0, "", fmt.Errorf("langgraph postgres: reading threads: %w", err)
	}
	defer rows.Close()
	n, last := 0, ""
	for rows.Next() {
		var (
			t                    Thread
			ts, firstID, version *string
			meta, inline         []byte
			blobType             *string
			blob                 []byte
			elided               bool
			wtypes               []*string
			wblobs               [][]byte
			inlineValues         map[string]json.RawMessage
			cnames, ctypes       []*string
			cblobs               [][]byte
		)
		if err := rows.Scan(&t.ID, &ts, &meta, &firstID, &inline, &version, &blobType, &blob, &t.Errored, &elided, &wtypes, &wblobs,
			&inlineValues, &cnames, &ctypes, &cblobs); err != nil {
			return n, last, fmt.Errorf("langgraph postgres: reading threads: %w", err)
		}
		n, last = n+1, t.ID
		var metaErr error
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
			t.Unsupported = unsupported("the messages channel is inline (%s): a DeltaChannel or custom channel", shorten(string(inline)))
		case elided && version != nil:
			t.fetch = l.messagesFetcher(t.ID, *version)
		case blobType != nil:
			t.encoded = &encodedMessages{typ: *blobType, blob: blob}
		}
		t.channels = postgresChannels(inlineValues, cnames, ctypes, cblobs)
		for i := range wtypes {
			if wtypes[i] != nil && i < len(wblobs) {
				t.pending = append(t.pending, encodedMessages{typ: *wtypes[i], blob: wblobs[i]})
			}
		}
		if err := fn(t); err != nil {
			return n, last, err
		}
	}
	if err := rows.Err(); err != nil {
		return n, last, fmt.Errorf("langgraph postgres: reading threads: %w", err)
	}
	return n, last, nil
}

// postgresChannels are a thread's state channels beyond messages: the primitives
// inline in its checkpoint and the others' blobs (channels.go), in name order.
func postgresChannels(inline map[string]json.RawMessage, names, types []*string, blobs [][]byte) []encodedChannel {
	var out []encodedChannel
	for name, v := range inline {
		if IsStateChannel(name) {
			out = append(out, encodedChannel{name: name, inline: v})
		}
	}
	for i := range names {
		if names[i] != nil && types[i] != nil && i < len(blobs) && IsStateChannel(*names[i]) {
			out = append(out, encodedChannel{name: *names[i], typ: *types[i], blob: blobs[i]})
		}
	}
	slices.SortFunc(out, func(a, b encodedChannel) int { return strings.Compare(a.name, b.name) })
	return out
}

// writesOrder is the order in which get_state applies a checkpoint's pending writes:
// by task path (the column came with checkpointer schema version 9; before, the task
// id stands in for it), then task, then the write's index.
func (l *LangGraphPostgres) writesOrder() string {
	if l.MigrationVersion >= 9 {
		return "w.task_path, w.task_id, w.idx"
	}
	return "w.task_id, w.idx"
}

// latestCheckpoints selects the latest root checkpoint of the threads after the
// thread id parameter after (from the first when it is ""), up to limit of them, in
// thread_id order. It finds each through the primary key (thread_id, checkpoint_ns,
// checkpoint_id): a DISTINCT ON over the table sorts every checkpoint with its JSON,
// which spills to disk and took three times as long at the seed's size. The rows keep
// the order of the driving ids through the nested loops (thread_id is theirs), so a
// query ordered by it streams its first thread at once.
func latestCheckpoints(table, after, limit string) string {
	cond := ""
	if after != "" {
		cond = ` AND thread_id > ` + after
	}
	return `SELECT t.thread_id, c.checkpoint_id, c.checkpoint, c.metadata
		FROM (SELECT DISTINCT thread_id FROM ` + table + ` WHERE checkpoint_ns = ''` + cond + ` ORDER BY thread_id LIMIT ` + limit + `) t,
		LATERAL (SELECT thread_id, checkpoint_id, checkpoint, metadata FROM ` + table + ` c
			WHERE c.thread_id = t.thread_id AND c.checkpoint_ns = '' ORDER BY checkpoint_id DESC LIMIT 1) c`
}

// messagesFetcher reads one thread's messages blob (of a thread whose messages the
// thread query elided).
func (l *LangGraphPostgres) messagesFetcher(threadID, version string) func(context.Context) (*encodedMessages, error) {
	return func(ctx context.Context) (*encodedMessages, error) {
		var e encodedMessages
		err := l.pool.QueryRow(ctx, `SELECT type, blob FROM `+l.table("checkpoint_blobs")+`
			WHERE thread_id = $1 AND checkpoint_ns = '' AND channel = 'messages' AND version = $2`, threadID, version).Scan(&e.typ, &e.blob)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return nil, nil // no messages channel value
		case err != nil:
			return nil, fmt.Errorf("langgraph postgres: reading the messages of thread %s: %w", threadID, err)
		}
		return &e, nil
	}
}

// decodeMessages decodes a messages channel value into message dicts; forImport
// leaves out what the conversion never keeps (decodeJSONPlus).
func decodeMessages(typ string, b []byte, forImport bool) ([]map[string]any, error) {
	var (
		v   any
		ok  bool
		err error
	)
	if typ == "msgpack" {
		v, err = decodeJSONPlus(b, forImport)
		ok = err == nil
	} else {
		v, ok, err = DecodeTyped(typ, b)
	}
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
	// History holds the item's earlier values, oldest first (mem0's UPDATE events).
	History []memory.Revision
	// Scope, when set, is the item's scope, and Namespace only names the item in
	// problems: for sources whose items are not LangGraph namespaces (CrewAI's).
	Scope string
	// Type of the memory; semantic when empty.
	Type memory.Type
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
