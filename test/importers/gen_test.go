package importers

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
	_ "modernc.org/sqlite"

	"github.com/amemory/memory-operator/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

// TestGenerate proves the generated fixtures are what Expected claims, reading the
// source tables directly (pgx, database/sql over modernc.org/sqlite, an independent
// msgpack walk), never through LangGraph.
func TestGenerate(t *testing.T) {
	start := time.Now()
	exp := Generate(t, Options{})
	t.Logf("generated in %s: %v; generator timings %v", time.Since(start).Round(time.Millisecond), exp.Counts, exp.Timings)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, exp.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()

	t.Run("plan", func(t *testing.T) { checkPlan(t, exp) })
	t.Run("versions", func(t *testing.T) { checkVersions(t, exp) })
	t.Run("postgres checkpoints", func(t *testing.T) { checkPostgres(ctx, t, conn, exp) })
	t.Run("postgres store", func(t *testing.T) { checkStore(ctx, t, conn, exp) })
	t.Run("langchain history", func(t *testing.T) { checkLangChain(ctx, t, conn, exp) })
	t.Run("sqlite", func(t *testing.T) { checkSQLite(t, exp) })
	t.Run("cached, own copy", func(t *testing.T) {
		start := time.Now()
		again := Generate(t, Options{})
		if again.Database == exp.Database || again.SQLitePath == exp.SQLitePath {
			t.Fatalf("a second Generate shares the first one's data: %s %s", again.Database, again.SQLitePath)
		}
		if !reflect.DeepEqual(again.Threads, exp.Threads) {
			t.Fatal("a second Generate with the same options returned other threads")
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Fatalf("a cached Generate took %s", d)
		}
		shared := Generate(t, Options{Shared: true})
		if !strings.HasSuffix(shared.Database, "_tpl") || shared.Database == exp.Database || len(shared.Threads) != len(exp.Threads) {
			t.Fatalf("Shared gave database %s with %d threads", shared.Database, len(shared.Threads))
		}
	})
}

// checkPlan: the scenario mix is what the seed's story needs.
func checkPlan(t *testing.T, exp Expected) {
	c := exp.Counts
	if c["threads"] != 200 || len(exp.Threads) != 200 || len(exp.Users) != 50 {
		t.Fatalf("want 200 threads of 50 users, got %d threads (counts %v), %d users", len(exp.Threads), c, len(exp.Users))
	}
	zombies := float64(c[ZombieError]+c[ZombieNoReply]) / float64(c["threads"])
	if zombies < 0.2 || zombies > 0.4 || c[ZombieError] == 0 || c[ZombieNoReply] == 0 {
		t.Errorf("zombie share %.2f (%v), want about 0.3 of both kinds", zombies, c)
	}
	if c[Old] < 10 || c["from_thread_id"] < 20 || c["from_metadata"] < 100 {
		t.Errorf("too few old or thread-id threads: %v", c)
	}
	details := map[string]bool{}
	for _, th := range exp.Threads {
		details[th.Detail] = true
	}
	for _, d := range []string{"error_first_step", "error_after_tool", "interrupted", "update_state"} {
		if !details[d] {
			t.Errorf("no zombie made by %s", d)
		}
	}
	langs := map[string]int{}
	for _, u := range exp.Users {
		langs[u.Lang]++
		topics := map[string]bool{}
		for _, th := range exp.Threads {
			if *th.UserID == u.UserID && th.Scenario == Normal {
				for _, tp := range th.Topics {
					topics[tp] = true
				}
			}
		}
		for _, tp := range []string{"coffee", "order", "procedure"} {
			if !topics[tp] {
				t.Errorf("user %s has no kept thread about %s", u.UserID, tp)
			}
		}
	}
	if langs["zh"] < 10 || langs["en"] < 10 {
		t.Errorf("languages %v", langs)
	}
}

// checkVersions: the generator ran with the packages hack/install-tools.sh pins.
func checkVersions(t *testing.T, exp Expected) {
	f, err := os.Open(filepath.Join(testutil.RepoRoot(t), "hack", "install-tools.sh"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	pin := regexp.MustCompile(`^\s+"?([a-z-]+)(\[[a-z]+\])?==([0-9.]+)"?$`)
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		m := pin.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		if got, ok := exp.Versions[m[1]]; ok {
			n++
			if got != m[3] {
				t.Errorf("%s is %s, install-tools.sh pins %s", m[1], got, m[3])
			}
		}
	}
	if n < 5 {
		t.Errorf("only %d pinned packages found in expected versions %v", n, exp.Versions)
	}
}

var messageClass = map[string]string{"human": "HumanMessage", "ai": "AIMessage", "tool": "ToolMessage", "system": "SystemMessage"}

func checkPostgres(ctx context.Context, t *testing.T, conn *pgx.Conn, exp Expected) {
	var mig, sub int
	if err := conn.QueryRow(ctx, `SELECT max(v) FROM checkpoint_migrations`).Scan(&mig); err != nil || mig < 9 {
		t.Fatalf("checkpoint_migrations max v = %d (%v), want >= 9", mig, err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM checkpoints WHERE checkpoint_ns <> ''`).Scan(&sub); err != nil || sub != 0 {
		t.Fatalf("subgraph checkpoints: %d %v", sub, err)
	}
	// Per thread: root checkpoint count, and the latest checkpoint with its messages blob.
	rows, err := conn.Query(ctx, `
WITH latest AS (
  SELECT DISTINCT ON (thread_id) thread_id, checkpoint_id, checkpoint, metadata
  FROM checkpoints WHERE checkpoint_ns = '' ORDER BY thread_id, checkpoint_id DESC)
SELECT l.thread_id, l.checkpoint_id, l.checkpoint->>'ts', l.metadata::text,
       (SELECT count(*) FROM checkpoints c WHERE c.thread_id = l.thread_id AND c.checkpoint_ns = ''),
       (SELECT count(DISTINCT c.metadata->>'user_id') FROM checkpoints c WHERE c.thread_id = l.thread_id),
       b.type, b.blob
FROM latest l
LEFT JOIN checkpoint_blobs b ON b.thread_id = l.thread_id AND b.checkpoint_ns = '' AND b.channel = 'messages'
 AND b.version = l.checkpoint->'channel_versions'->>'messages'`)
	if err != nil {
		t.Fatal(err)
	}
	type latest struct {
		id, ts, meta, typ string
		n, users          int
		blob              []byte
	}
	got := map[string]latest{}
	for rows.Next() {
		var l latest
		var id string
		var typ *string
		if err := rows.Scan(&id, &l.id, &l.ts, &l.meta, &l.n, &l.users, &typ, &l.blob); err != nil {
			t.Fatal(err)
		}
		if typ != nil {
			l.typ = *typ
		}
		got[id] = l
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(exp.Threads) {
		t.Fatalf("%d threads in checkpoints, %d expected", len(got), len(exp.Threads))
	}
	errWrites := map[string]string{} // thread -> decoded __error__ of its latest checkpoint
	wrows, err := conn.Query(ctx, `SELECT w.thread_id, w.type, w.blob FROM checkpoint_writes w
JOIN (SELECT thread_id, max(checkpoint_id) AS id FROM checkpoints WHERE checkpoint_ns = '' GROUP BY 1) l
  ON l.thread_id = w.thread_id AND l.id = w.checkpoint_id
WHERE w.idx = -1 AND w.channel = '__error__'`)
	if err != nil {
		t.Fatal(err)
	}
	for wrows.Next() {
		var id, typ string
		var blob []byte
		if err := wrows.Scan(&id, &typ, &blob); err != nil {
			t.Fatal(err)
		}
		v, err := walk(blob)
		if _, ok := v.(string); err != nil || typ != "msgpack" || !ok {
			t.Fatalf("__error__ write of %s: %s %#v %v", id, typ, v, err)
		}
		errWrites[id] = v.(string)
	}
	if err := wrows.Err(); err != nil {
		t.Fatal(err)
	}
	var anyErrors int
	if err := conn.QueryRow(ctx, `SELECT count(DISTINCT thread_id) FROM checkpoint_writes WHERE idx = -1`).Scan(&anyErrors); err != nil {
		t.Fatal(err)
	}
	if anyErrors != exp.Counts[ZombieError] {
		t.Errorf("%d threads have an __error__ write anywhere, %d zombie_error threads", anyErrors, exp.Counts[ZombieError])
	}

	now := time.Now()
	tidUser := regexp.MustCompile(`^u-([0-9]+):sess-[0-9]+$`)
	var sawStructuredArgs, sawBlocks, sawToolUse, sawArtifact, sawListTool bool
	for _, th := range exp.Threads {
		l, ok := got[th.ThreadID]
		if !ok {
			t.Fatalf("thread %s has no checkpoint", th.ThreadID)
		}
		ts, err := time.Parse(time.RFC3339Nano, l.ts)
		if err != nil || !ts.Equal(th.LastTS) || l.id != th.LastCheckpointID || l.n != th.Checkpoints {
			t.Fatalf("thread %s: latest %s at %s (%d checkpoints), expected %s at %s (%d)", th.ThreadID, l.id, l.ts, l.n, th.LastCheckpointID, th.LastTS, th.Checkpoints)
		}
		// The uuid6 id carries the same (simulated) clock as ts.
		if d := uuid6Time(t, l.id).Sub(ts); d < -time.Second || d > time.Second {
			t.Errorf("thread %s: checkpoint id time is %s off its ts", th.ThreadID, d)
		}
		var meta map[string]any
		if err := json.Unmarshal([]byte(l.meta), &meta); err != nil {
			t.Fatal(err)
		}
		if meta["channel"] != th.Channel || int(meta["step"].(float64)) != th.Step || meta["source"] != th.Source {
			t.Errorf("thread %s: metadata %v, expected channel %s step %d source %s", th.ThreadID, meta, th.Channel, th.Step, th.Source)
		}
		switch th.UserFrom {
		case "metadata":
			if meta["user_id"] != *th.UserID || l.users != 1 || th.MetadataUserID == nil {
				t.Errorf("thread %s: metadata user_id %v (%d distinct), want %s", th.ThreadID, meta["user_id"], l.users, *th.UserID)
			}
		case "thread_id":
			m := tidUser.FindStringSubmatch(th.ThreadID)
			if _, has := meta["user_id"]; has || l.users != 0 || m == nil || m[1] != *th.UserID {
				t.Errorf("thread %s: user %s should be only in the thread id (metadata %v)", th.ThreadID, *th.UserID, meta)
			}
		default:
			t.Errorf("thread %s: user_from %q", th.ThreadID, th.UserFrom)
		}
		age := now.Sub(th.LastTS)
		switch th.Scenario {
		case Old:
			if age < 10*24*time.Hour || age > 41*24*time.Hour {
				t.Errorf("old thread %s last active %s ago", th.ThreadID, age)
			}
		case Normal:
			if age > 7*24*time.Hour || age < 0 {
				t.Errorf("normal thread %s last active %s ago", th.ThreadID, age)
			}
		}

		// The blob is msgpack: a list of ext-5 (pydantic v2) LangChain messages that
		// are exactly the expected ones.
		if l.typ != "msgpack" {
			t.Fatalf("thread %s: messages blob type %q", th.ThreadID, l.typ)
		}
		v, err := walk(l.blob)
		if err != nil {
			t.Fatalf("thread %s: %v", th.ThreadID, err)
		}
		msgs, ok := v.([]any)
		if !ok || len(msgs) != len(th.Messages) {
			t.Fatalf("thread %s: blob holds %T of %d, expected %d messages", th.ThreadID, v, len(msgs), len(th.Messages))
		}
		for i, m := range msgs {
			e, ok := m.(ext)
			want := th.Messages[i]
			tup, _ := e.V.([]any)
			if !ok || e.Code != 5 || len(tup) != 4 || tup[0] != "langchain_core.messages."+want.Type || tup[1] != messageClass[want.Type] || tup[3] != "model_validate_json" {
				t.Fatalf("thread %s message %d: %#v", th.ThreadID, i, m)
			}
			if !jsonEqual(t, tup[2], want.Raw) {
				t.Fatalf("thread %s message %d differs:\nblob     %s\nexpected %s", th.ThreadID, i, mustJSON(t, tup[2]), want.Raw)
			}
			data := tup[2].(map[string]any)
			switch c := data["content"].(type) {
			case []any:
				for _, b := range c {
					switch b.(map[string]any)["type"] {
					case "text":
						sawBlocks = true
					case "tool_use":
						sawToolUse = true
					}
				}
				if want.Type == "tool" {
					sawListTool = true
				}
			}
			if calls, _ := data["tool_calls"].([]any); len(calls) > 0 {
				for _, c := range calls {
					args := c.(map[string]any)["args"].(map[string]any)
					_, isMap := args["address"].(map[string]any)
					_, isList := args["time_windows"].([]any)
					if isMap && isList {
						sawStructuredArgs = true
					}
				}
			}
			if _, ok := data["artifact"].(map[string]any); ok {
				sawArtifact = true
			}
		}

		// What each scenario looks like in the tables.
		types := make([]string, len(th.Messages))
		replies := 0
		for i, m := range th.Messages {
			types[i] = m.Type
			if calls, _ := m.Data["tool_calls"].([]any); m.Type == "ai" && len(calls) == 0 {
				replies++
			}
		}
		errMsg, hasErr := errWrites[th.ThreadID]
		switch th.Scenario {
		case ZombieError:
			if !hasErr || !strings.Contains(errMsg, "ScriptedFailure") || replies != 0 || len(th.Next) != 1 || th.Next[0] != "agent" {
				t.Errorf("zombie_error %s: __error__ %q (%v), %d replies, next %v, messages %v", th.ThreadID, errMsg, hasErr, replies, th.Next, types)
			}
		case ZombieNoReply:
			if hasErr || len(types) != 1 || types[0] != "human" || len(th.Next) != 1 {
				t.Errorf("zombie_no_reply %s: error %v, messages %v, next %v", th.ThreadID, hasErr, types, th.Next)
			}
		default:
			if hasErr || len(th.Next) != 0 || types[len(types)-1] != "ai" || replies != th.Turns {
				t.Errorf("%s thread %s: error %v, next %v, %d replies for %d turns, messages %v", th.Scenario, th.ThreadID, hasErr, th.Next, replies, th.Turns, types)
			}
		}
	}
	if !sawStructuredArgs || !sawBlocks || !sawToolUse || !sawArtifact || !sawListTool {
		t.Errorf("message shapes missing: structured args %v, text blocks %v, tool_use blocks %v, tool artifact %v, list tool content %v",
			sawStructuredArgs, sawBlocks, sawToolUse, sawArtifact, sawListTool)
	}
}

func checkStore(ctx context.Context, t *testing.T, conn *pgx.Conn, exp Expected) {
	var mig int
	if err := conn.QueryRow(ctx, `SELECT max(v) FROM store_migrations`).Scan(&mig); err != nil || mig < 3 {
		t.Fatalf("store_migrations max v = %d (%v)", mig, err)
	}
	rows, err := conn.Query(ctx, `SELECT prefix, key, value::text, created_at, updated_at, expires_at, ttl_minutes FROM store`)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		value            string
		created, updated time.Time
		expires          *time.Time
		ttl              *int32
	}
	got := map[string]row{}
	for rows.Next() {
		var p, k string
		var r row
		if err := rows.Scan(&p, &k, &r.value, &r.created, &r.updated, &r.expires, &r.ttl); err != nil {
			t.Fatal(err)
		}
		got[p+"\x00"+k] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(exp.Store) || len(exp.Store) < 150 {
		t.Fatalf("store has %d rows, expected %d", len(got), len(exp.Store))
	}
	var ttls, updated int
	for _, it := range exp.Store {
		r, ok := got[strings.Join(it.Namespace, ".")+"\x00"+it.Key]
		if !ok {
			t.Fatalf("store item %v/%s missing", it.Namespace, it.Key)
		}
		if !jsonEqual(t, it.Value, json.RawMessage(r.value)) || !r.created.Equal(it.CreatedAt) || !r.updated.Equal(it.UpdatedAt) {
			t.Errorf("store item %v/%s: %s %s %s, expected %v %s %s", it.Namespace, it.Key, r.value, r.created, r.updated, it.Value, it.CreatedAt, it.UpdatedAt)
		}
		if (r.expires == nil) != (it.ExpiresAt == nil) || (r.expires != nil && !r.expires.Equal(*it.ExpiresAt)) {
			t.Errorf("store item %v/%s expires %v, expected %v", it.Namespace, it.Key, r.expires, it.ExpiresAt)
		}
		if r.expires != nil {
			ttls++
		}
		if it.UpdatedAt.After(it.CreatedAt) {
			updated++
		}
	}
	if ttls == 0 || updated == 0 {
		t.Errorf("%d items with a ttl, %d updated after creation: want some of both", ttls, updated)
	}
}

func checkLangChain(ctx context.Context, t *testing.T, conn *pgx.Conn, exp Expected) {
	if exp.LangChain == nil || len(exp.LangChain.Sessions) == 0 {
		t.Fatal("no langchain sessions expected")
	}
	rows, err := conn.Query(ctx, `SELECT session_id::text, message::text FROM `+pgx.Identifier{exp.LangChain.Table}.Sanitize()+` ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for rows.Next() {
		var sid, msg string
		if err := rows.Scan(&sid, &msg); err != nil {
			t.Fatal(err)
		}
		got[sid] = append(got[sid], msg)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, s := range exp.LangChain.Sessions {
		msgs := got[s.SessionID]
		if len(msgs) != len(s.Messages) {
			t.Fatalf("session %s: %d rows, %d expected", s.SessionID, len(msgs), len(s.Messages))
		}
		var calls, tools int
		for i, m := range s.Messages {
			if !jsonEqual(t, m, json.RawMessage(msgs[i])) {
				t.Errorf("session %s message %d:\nrow      %s\nexpected %s", s.SessionID, i, msgs[i], mustJSON(t, m))
			}
			if tc, _ := m.Data["tool_calls"].([]any); len(tc) > 0 {
				calls++
			}
			if m.Type == "tool" && m.Data["tool_call_id"] != "" {
				tools++
			}
		}
		if calls == 0 || tools == 0 {
			t.Errorf("session %s has no tool call or tool message", s.SessionID)
		}
	}
}

func checkSQLite(t *testing.T, exp Expected) {
	db, err := sql.Open("sqlite", "file:"+url.PathEscape(exp.SQLitePath)+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	tables := map[string]bool{}
	trows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'table'`)
	if err != nil {
		t.Fatal(err)
	}
	for trows.Next() {
		var n string
		if err := trows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		tables[n] = true
	}
	_ = trows.Close()
	for _, n := range []string{"checkpoints", "writes", "store", "store_migrations"} {
		if !tables[n] {
			t.Fatalf("SQLite file has no %s table (has %v)", n, tables)
		}
	}
	// The latest checkpoint of each thread: one msgpack blob holding the whole Checkpoint
	// (channel_values inline), metadata as JSON.
	rows, err := db.Query(`SELECT thread_id, checkpoint_id, type, checkpoint, metadata,
  (SELECT count(*) FROM checkpoints c2 WHERE c2.thread_id = c.thread_id AND c2.checkpoint_ns = '')
FROM checkpoints c WHERE checkpoint_ns = '' AND checkpoint_id = (
  SELECT max(checkpoint_id) FROM checkpoints c3 WHERE c3.thread_id = c.thread_id AND c3.checkpoint_ns = '')`)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	seen := 0
	for rows.Next() {
		var tid, cid, typ string
		var blob, meta []byte
		var n int
		if err := rows.Scan(&tid, &cid, &typ, &blob, &meta, &n); err != nil {
			t.Fatal(err)
		}
		th, ok := exp.Thread(tid)
		if !ok {
			t.Fatalf("unexpected thread %s in SQLite", tid)
		}
		seen++
		if cid != th.LastCheckpointID || n != th.Checkpoints || typ != "msgpack" {
			t.Fatalf("SQLite thread %s: latest %s of %d (%s), expected %s of %d", tid, cid, n, typ, th.LastCheckpointID, th.Checkpoints)
		}
		var md map[string]any
		if err := json.Unmarshal(meta, &md); err != nil {
			t.Fatalf("SQLite metadata of %s: %v", tid, err)
		}
		if (md["user_id"] != nil) != (th.UserFrom == "metadata") {
			t.Errorf("SQLite metadata of %s: %v", tid, md)
		}
		v, err := walk(blob)
		if err != nil {
			t.Fatal(err)
		}
		cp := v.(map[string]any)
		ts, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(cp["ts"]))
		if !ts.Equal(th.LastTS) || cp["id"] != cid {
			t.Errorf("SQLite checkpoint of %s: ts %v id %v", tid, cp["ts"], cp["id"])
		}
		cv, _ := cp["channel_values"].(map[string]any)
		msgs, _ := cv["messages"].([]any)
		if len(msgs) != len(th.Messages) {
			t.Fatalf("SQLite thread %s: %d messages inline, %d expected", tid, len(msgs), len(th.Messages))
		}
		for i, m := range msgs {
			e, _ := m.(ext)
			tup, _ := e.V.([]any)
			if e.Code != 5 || len(tup) != 4 || !jsonEqual(t, tup[2], th.Messages[i].Raw) {
				t.Fatalf("SQLite thread %s message %d differs: %s", tid, i, mustJSON(t, m))
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if seen != len(exp.Threads) {
		t.Fatalf("SQLite has %d threads, %d expected", seen, len(exp.Threads))
	}
	var errs, items, ttls int
	if err := db.QueryRow(`SELECT count(DISTINCT thread_id) FROM writes WHERE idx = -1 AND channel = '__error__'`).Scan(&errs); err != nil || errs != exp.Counts[ZombieError] {
		t.Errorf("SQLite: %d threads with an __error__ write (%v), %d expected", errs, err, exp.Counts[ZombieError])
	}
	if err := db.QueryRow(`SELECT count(*), count(expires_at) FROM store`).Scan(&items, &ttls); err != nil || items != len(exp.SQLiteStore) || ttls == 0 {
		t.Errorf("SQLite store: %d items, %d with expires_at (%v); %d expected", items, ttls, err, len(exp.SQLiteStore))
	}
}

// ---------------------------------------------------------------------------------------

// ext is a msgpack extension value: its type code and its payload, itself decoded.
type ext struct {
	Code int8
	V    any
}

// walk decodes msgpack the way JsonPlusSerializer writes it: ext payloads are msgpack
// too, and map keys need not be strings.
func walk(b []byte) (any, error) {
	d := msgpack.NewDecoder(bytes.NewReader(b))
	v, err := walkValue(d)
	if err != nil {
		return nil, err
	}
	if _, err := d.PeekCode(); err == nil {
		return nil, fmt.Errorf("trailing bytes after the msgpack value")
	}
	return v, nil
}

func walkValue(d *msgpack.Decoder) (any, error) {
	c, err := d.PeekCode()
	if err != nil {
		return nil, err
	}
	switch {
	case msgpcode.IsExt(c):
		code, n, err := d.DecodeExtHeader()
		if err != nil {
			return nil, err
		}
		payload := make([]byte, n)
		if err := d.ReadFull(payload); err != nil {
			return nil, err
		}
		v, err := walk(payload)
		return ext{code, v}, err
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err := d.DecodeArrayLen()
		if err != nil {
			return nil, err
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = walkValue(d); err != nil {
				return nil, err
			}
		}
		return out, nil
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, err := d.DecodeMapLen()
		if err != nil {
			return nil, err
		}
		out := make(map[string]any, n)
		for range n {
			k, err := walkValue(d)
			if err != nil {
				return nil, err
			}
			if out[fmt.Sprint(k)], err = walkValue(d); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return d.DecodeInterface()
}

// uuid6Time is the time a uuid6 (LangGraph's checkpoint id) was made.
func uuid6Time(t *testing.T, id string) time.Time {
	h := strings.ReplaceAll(id, "-", "")
	hi, err1 := strconv.ParseUint(h[:12], 16, 64)   // time_high and time_mid: 48 bits
	lo, err2 := strconv.ParseUint(h[13:16], 16, 64) // after the version nibble: 12 bits
	if err1 != nil || err2 != nil || h[12] != '6' {
		t.Fatalf("%s is not a uuid6", id)
	}
	ticks := int64(hi<<12|lo) - 0x01B21DD213814000 // 100 ns since 1582-10-15 -> since 1970
	return time.Unix(0, ticks*100)
}

func jsonEqual(t *testing.T, a, b any) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(mustJSON(t, a), &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(mustJSON(t, b), &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	if r, ok := v.(json.RawMessage); ok {
		return r
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
