// Package importers generates the real source data the importer tests read: LangGraph
// checkpoints and stores written by LangGraph itself (langgraph-checkpoint-postgres,
// langgraph-checkpoint-sqlite) and a langchain-postgres chat history, produced by
// gen_langgraph.py in bin/clients-venv, together with LangGraph's own view of every
// thread (get_state) as the expected result.
//
// Generate runs the generator once per distinct Options in a test binary into a template
// database, then gives each caller a fresh copy of it (CREATE DATABASE ... TEMPLATE,
// dropped at the test's cleanup) and a copy of the SQLite file in the test's TempDir, so
// a test may change its source freely. Templates are dropped by Cleanup (call it from
// TestMain) or, after a crash, by the next Generate in any process.
package importers

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/amemory/memory-operator/internal/testutil"
)

// Options select what is generated. The zero value is the default data set: 50 users
// with 4 threads each (~200 threads, ~1,600 messages), seed 1, in about 6 seconds. The
// seed's size (~800k messages) is Users 500, ThreadsPerUser 40, Turns "12-24",
// Durability "exit", Workers 2, NoMessages, Shared.
type Options struct {
	Users          int    // users (default 50); their ids are "1000", "1001", ...
	ThreadsPerUser int    // threads per user (default 4)
	Turns          string // user turns per kept thread, "MIN-MAX" (default "2-4")
	Seed           int64  // decides every scenario and all content (default 1)
	// LangChainTable names the langchain-postgres PostgresChatMessageHistory table
	// written next to the checkpoints (default "chat_history"); "-" writes none.
	LangChainTable string
	// Durability is LangGraph's durability mode: "async" (default, a checkpoint per
	// step, as production apps have), "sync", or "exit" (one checkpoint per turn; fast).
	Durability string
	Workers    int  // generator processes (PostgreSQL only; default 1)
	NoMessages bool // leave messages out of Expected (Thread.MessageCount still set)
	// PendingWrites adds this many threads of scenario PendingWrite.
	PendingWrites int
	// CustomState adds this many threads of scenario CustomState.
	CustomState int
	// Shared hands out the generated database and SQLite file themselves instead of
	// copies (for big data sets, where a copy costs time and disk): the test must not
	// change them. It is not part of what is generated: Shared and unshared callers with
	// otherwise equal options share one generation.
	Shared bool
}

func (o Options) normalized() Options {
	if o.Users == 0 {
		o.Users = 50
	}
	if o.ThreadsPerUser == 0 {
		o.ThreadsPerUser = 4
	}
	if o.Turns == "" {
		o.Turns = "2-4"
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.LangChainTable == "" {
		o.LangChainTable = "chat_history"
	}
	if o.Durability == "" {
		o.Durability = "async"
	}
	if o.Workers == 0 {
		o.Workers = 1
	}
	return o
}

// Expected is the generated data's ground truth, as LangGraph and LangChain report it,
// plus where the test's own copy of the data is.
type Expected struct {
	Seed     int64             `json:"seed"`
	Versions map[string]string `json:"versions"` // package -> version (importlib.metadata)
	Users    []User            `json:"users"`
	Threads  []Thread          `json:"threads"`
	// Store holds the PostgresStore items, SQLiteStore the same items in the SqliteStore
	// (their timestamps differ: each store stamps its own).
	Store       []StoreItem        `json:"store"`
	SQLiteStore []StoreItem        `json:"sqlite_store"`
	LangChain   *LangChain         `json:"langchain"`
	Counts      map[string]int     `json:"counts"` // threads, messages, checkpoints, per scenario, from_metadata, from_thread_id
	Timings     map[string]float64 `json:"timings_s"`

	DSN        string `json:"-"` // superuser DSN of this test's copy of the PostgreSQL database
	Database   string `json:"-"` // its name
	SQLitePath string `json:"-"` // this test's copy of the SQLite file (checkpoints, writes, store)
}

// User is a generated customer and the facts their kept threads carry (the seed-000
// recall check asks for them).
type User struct {
	UserID     string            `json:"user_id"`
	Lang       string            `json:"lang"`   // "zh" or "en"
	Coffee     map[string]string `json:"coffee"` // {"temperature": "hot"|"iced", "sugar": "none"}
	OrderID    string            `json:"order_id"`
	OldOrderID string            `json:"old_order_id"` // only in old threads
	Address    map[string]string `json:"address"`
}

// Scenarios of a thread.
const (
	Normal        = "normal"          // last activity within the last 6 days
	Old           = "old"             // last activity 10.5-40 days ago
	ZombieError   = "zombie_error"    // the agent node raised: an __error__ write, no reply
	ZombieNoReply = "zombie_no_reply" // the only turn never got a reply
	// PendingWrite: a parallel approval branch called interrupt() while the agent
	// answered, so the answer is a pending write of the latest checkpoint, which
	// get_state() shows (Options.PendingWrites).
	PendingWrite = "pending_write"
	// CustomState: an app whose state has channels beyond messages (a Pydantic
	// profile, a dataclass of preferences, a datetime, a set of tags, a string), and
	// a Pydantic object in its answer's additional_kwargs (Options.CustomState).
	CustomState = "custom_state"
)

// Thread is one generated thread and its latest state (get_state).
type Thread struct {
	ThreadID string `json:"thread_id"`
	// UserID is the thread's owner; UserFrom says where LangGraph holds it: "metadata"
	// (passed in configurable, so checkpoint metadata has user_id) or "thread_id" (only
	// encoded in the thread id, "u-<user>:sess-<n>"). MetadataUserID is what the latest
	// checkpoint's metadata holds (nil for "thread_id" threads).
	UserID         *string `json:"user_id"`
	UserFrom       string  `json:"user_from"`
	MetadataUserID *string `json:"metadata_user_id"`
	Scenario       string  `json:"scenario"`
	// Detail says how a zombie was made: "error_first_step", "error_after_tool" (a tool
	// ran, then the node raised), "interrupted" (interrupt_before the agent), or
	// "update_state" (a message added with update_state, no run).
	Detail  string   `json:"detail"`
	Marker  string   `json:"marker"` // zombies only: an order id found in no other thread
	Lang    string   `json:"lang"`
	Channel string   `json:"channel"` // also in the checkpoint metadata ("channel")
	Topics  []string `json:"topics"`  // coffee, order, procedure, old_order, filler, zombie
	Turns   int      `json:"turns"`   // user turns

	FirstTS          time.Time `json:"first_ts"` // ts of the first root checkpoint
	LastTS           time.Time `json:"last_ts"`  // ts of the latest root checkpoint
	LastCheckpointID string    `json:"last_checkpoint_id"`
	Checkpoints      int       `json:"checkpoints"` // root checkpoints of the thread
	Step             int       `json:"step"`        // the latest checkpoint's metadata step
	Source           string    `json:"source"`      // ... and its source: input, loop, update
	Next             []string  `json:"next"`        // nodes still to run (["agent"] for zombies)
	Errors           []string  `json:"errors"`      // task errors, e.g. "ScriptedFailure('upstream model timeout')"
	Messages         []Message `json:"messages"`    // get_state().values["messages"], messages_to_dict
	// Channels are get_state().values beyond messages, as LangGraph's JSON reviver
	// reads their stored bytes (Options.CustomState).
	Channels     map[string]json.RawMessage `json:"channels"`
	MessageCount int                        `json:"message_count"`
}

// Zombie reports whether the thread is one of the zombie scenarios.
func (t Thread) Zombie() bool { return t.Scenario == ZombieError || t.Scenario == ZombieNoReply }

// Message is langchain_core's messages_to_dict form: {"type": ..., "data": model_dump()}.
// Data keeps JSON numbers as float64; Raw is the data exactly as written, for comparing
// JSON with JSON.
type Message struct {
	Type string          `json:"type"`
	Data map[string]any  `json:"data"`
	Raw  json.RawMessage `json:"-"`
}

// UnmarshalJSON keeps the raw data next to the decoded map.
func (m *Message) UnmarshalJSON(b []byte) error {
	var w struct {
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	m.Type, m.Raw, m.Data = w.Type, w.Data, nil
	return json.Unmarshal(w.Data, &m.Data)
}

// MarshalJSON writes the messages_to_dict form back.
func (m Message) MarshalJSON() ([]byte, error) {
	data := m.Raw
	if data == nil {
		var err error
		if data, err = json.Marshal(m.Data); err != nil {
			return nil, err
		}
	}
	return json.Marshal(struct {
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
	}{m.Type, data})
}

// StoreItem is one LangGraph store item as the store returns it (expires_at and
// ttl_minutes come from the store table: Item does not carry them).
type StoreItem struct {
	Namespace  []string       `json:"namespace"`
	Key        string         `json:"key"`
	Value      map[string]any `json:"value"`
	CreatedAt  time.Time      `json:"created_at"`
	UpdatedAt  time.Time      `json:"updated_at"`
	ExpiresAt  *time.Time     `json:"expires_at"`
	TTLMinutes *float64       `json:"ttl_minutes"`
}

// LangChain is the PostgresChatMessageHistory table and its sessions.
type LangChain struct {
	Table    string    `json:"table"`
	Sessions []Session `json:"sessions"`
}

// Session is one chat history session (the table has no user column: UserID is whose
// session it is, for the test's own bookkeeping).
type Session struct {
	SessionID string    `json:"session_id"`
	UserID    string    `json:"user_id"`
	Messages  []Message `json:"messages"`
}

// Thread returns the thread with the given id.
func (e Expected) Thread(id string) (Thread, bool) {
	for _, t := range e.Threads {
		if t.ThreadID == id {
			return t, true
		}
	}
	return Thread{}, false
}

// ThreadsIn returns the threads of the given scenarios, in generation order.
func (e Expected) ThreadsIn(scenarios ...string) []Thread {
	var out []Thread
	for _, t := range e.Threads {
		for _, s := range scenarios {
			if t.Scenario == s {
				out = append(out, t)
				break
			}
		}
	}
	return out
}

// ---------------------------------------------------------------------------------------

type generated struct {
	once     sync.Once
	mu       sync.Mutex // serializes CREATE DATABASE ... TEMPLATE
	template string     // database name
	dir      string     // holds lg.sqlite and expected.json
	exp      Expected
	err      error
}

var (
	cache   sync.Map // Options (normalized) -> *generated
	janitor sync.Once
	adminMu sync.Mutex
	admin   string // the superuser DSN, for Cleanup
)

// dbName matches the databases (and dirPattern the directories) this package creates;
// the number is the creating process's pid.
var (
	dbName     = regexp.MustCompile(`^lg_([0-9]+)_[0-9a-f]+(_tpl)?$`)
	dirPattern = regexp.MustCompile(`^lg-importers-([0-9]+)-`)
)

// Generate returns the data generated for opts (generating it on the first call with
// these options in this test binary) in a fresh database and SQLite file of this test's
// own. It needs the test PostgreSQL and bin/clients-venv: without them the test fails
// under CI and is skipped elsewhere; it is skipped under -short.
func Generate(t testing.TB, opts Options) Expected {
	t.Helper()
	if testing.Short() {
		t.Skip("generates LangGraph data in PostgreSQL: not a -short test")
	}
	dsn := testutil.PostgresDSN(t)
	python := testutil.HarnessFile(t, filepath.Join(testutil.RepoRoot(t), "bin", "clients-venv", "bin", "python"),
		"run `hack/install-tools.sh clients` or `make tools`")
	adminMu.Lock()
	admin = dsn
	adminMu.Unlock()
	janitor.Do(func() { sweep(dsn) })

	shared := opts.Shared
	opts.Shared = false
	opts = opts.normalized()
	v, _ := cache.LoadOrStore(opts, &generated{})
	g := v.(*generated)
	g.once.Do(func() {
		g.err = g.generate(dsn, python, filepath.Join(testutil.RepoRoot(t), "test", "importers", "gen_langgraph.py"), opts)
	})
	if g.err != nil {
		t.Fatalf("generating LangGraph data %+v: %v", opts, g.err)
	}

	exp := g.exp
	if shared {
		exp.Database, exp.SQLitePath = g.template, filepath.Join(g.dir, "lg.sqlite")
		var err error
		if exp.DSN, err = WithDatabase(dsn, g.template); err != nil {
			t.Fatal(err)
		}
		return exp
	}
	exp.Database = uniqueDB("")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	g.mu.Lock()
	err := execAdmin(ctx, dsn, "CREATE DATABASE "+pgx.Identifier{exp.Database}.Sanitize()+" TEMPLATE "+pgx.Identifier{g.template}.Sanitize())
	g.mu.Unlock()
	if err != nil {
		t.Fatalf("copying the generated database: %v", err)
	}
	t.Cleanup(func() { dropDB(dsn, exp.Database) })
	var uerr error
	if exp.DSN, uerr = WithDatabase(dsn, exp.Database); uerr != nil {
		t.Fatal(uerr)
	}
	exp.SQLitePath = filepath.Join(t.TempDir(), "langgraph.sqlite")
	if err := copyFile(filepath.Join(g.dir, "lg.sqlite"), exp.SQLitePath); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(g.dir, "lg.sqlite-wal")); err == nil { // normally folded in
		if err := copyFile(filepath.Join(g.dir, "lg.sqlite-wal"), exp.SQLitePath+"-wal"); err != nil {
			t.Fatal(err)
		}
	}
	return exp
}

func (g *generated) generate(dsn, python, script string, opts Options) error {
	dir, err := os.MkdirTemp("", fmt.Sprintf("lg-importers-%d-", os.Getpid()))
	if err != nil {
		return err
	}
	g.dir = dir
	g.template = uniqueDB("_tpl")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	if err := execAdmin(ctx, dsn, "CREATE DATABASE "+pgx.Identifier{g.template}.Sanitize()); err != nil {
		return err
	}
	tplDSN, err := WithDatabase(dsn, g.template)
	if err != nil {
		return err
	}
	out := filepath.Join(dir, "expected.json")
	args := []string{script,
		"--postgres-dsn", tplDSN,
		"--sqlite", filepath.Join(dir, "lg.sqlite"),
		"--users", strconv.Itoa(opts.Users),
		"--threads-per-user", strconv.Itoa(opts.ThreadsPerUser),
		"--turns", opts.Turns,
		"--seed", strconv.FormatInt(opts.Seed, 10),
		"--durability", opts.Durability,
		"--workers", strconv.Itoa(opts.Workers),
		"--out", out,
	}
	if opts.LangChainTable != "-" {
		args = append(args, "--langchain-table", opts.LangChainTable)
	}
	if opts.NoMessages {
		args = append(args, "--no-messages")
	}
	if opts.CustomState > 0 {
		args = append(args, "--custom-state", strconv.Itoa(opts.CustomState))
	}
	if opts.PendingWrites > 0 {
		args = append(args, "--pending-writes", strconv.Itoa(opts.PendingWrites))
	}
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %v\n%s", filepath.Base(script), err, tail(stderr.String(), 4000))
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &g.exp); err != nil {
		return fmt.Errorf("expected.json: %w", err)
	}
	return nil
}

// Cleanup drops the template databases and removes the files this process generated.
// Call it from TestMain after m.Run; anything left behind (a crashed binary) is removed
// by the next Generate in any process.
func Cleanup() {
	cleanupFrameworks()
	adminMu.Lock()
	dsn := admin
	adminMu.Unlock()
	cache.Range(func(k, v any) bool {
		g := v.(*generated)
		if g.template != "" && dsn != "" {
			dropDB(dsn, g.template)
		}
		if g.dir != "" {
			_ = os.RemoveAll(g.dir)
		}
		cache.Delete(k)
		return true
	})
}

// sweep drops databases and removes directories left by processes that are gone.
func sweep(dsn string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return
	}
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE 'lg\_%'`)
	var stale []string
	if err == nil {
		for rows.Next() {
			var name string
			if rows.Scan(&name) == nil && deadOwner(dbName, name) {
				stale = append(stale, name)
			}
		}
		rows.Close()
	}
	_ = conn.Close(ctx)
	for _, name := range stale {
		dropDB(dsn, name)
	}
	entries, _ := os.ReadDir(os.TempDir())
	for _, e := range entries {
		if e.IsDir() && deadOwner(dirPattern, e.Name()) {
			_ = os.RemoveAll(filepath.Join(os.TempDir(), e.Name()))
		}
	}
}

// deadOwner reports whether name was made by a process (its pid in the name) that no
// longer runs.
func deadOwner(re *regexp.Regexp, name string) bool {
	m := re.FindStringSubmatch(name)
	if m == nil {
		return false
	}
	pid, err := strconv.Atoi(m[1])
	if err != nil || pid == os.Getpid() {
		return false
	}
	return syscall.Kill(pid, 0) == syscall.ESRCH
}

func uniqueDB(suffix string) string {
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return fmt.Sprintf("lg_%d_%s%s", os.Getpid(), hex.EncodeToString(b), suffix)
}

// WithDatabase returns dsn (a postgres:// URL) naming database db instead.
func WithDatabase(dsn, db string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("parsing the PostgreSQL DSN: %w", err)
	}
	u.Path = "/" + db
	return u.String(), nil
}

func execAdmin(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	_, err = conn.Exec(ctx, sql)
	return err
}

func dropDB(dsn, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = execAdmin(ctx, dsn, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
