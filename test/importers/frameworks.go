package importers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/amemory/memory-operator/internal/testutil"
)

// The agent frameworks beside LangGraph (mem0, LlamaIndex, ...) write the importer
// tests' data with their own code, each from a venv of its own
// (bin/frameworks-venv/NAME, hack/install-tools.sh frameworks), once per data set and
// test binary; every test gets a copy.

var frameworkCache sync.Map // frameworkKey -> *frameworkRun

type frameworkKey struct {
	script string
	args   string
}

type frameworkRun struct {
	once     sync.Once
	dir      string // data/ and expected.json
	expected []byte
	err      error
}

// frameworkData runs test/importers/script with bin/frameworks-venv/venv's Python and
// args (plus --path DATA --out expected.json) once per test binary, and returns a copy
// of the data directory for this test and the expected.json it wrote. Without the venv
// the test fails under CI and is skipped elsewhere; it is skipped under -short.
func frameworkData(t testing.TB, venv, script string, args ...string) (string, []byte) {
	t.Helper()
	if testing.Short() {
		t.Skip("generates data with " + venv + ": not a -short test")
	}
	python := testutil.HarnessFile(t, filepath.Join(testutil.RepoRoot(t), "bin", "frameworks-venv", venv, "bin", "python"),
		"run `hack/install-tools.sh frameworks` or `make tools`")
	v, _ := frameworkCache.LoadOrStore(frameworkKey{script, fmt.Sprint(args)}, &frameworkRun{})
	r := v.(*frameworkRun)
	r.once.Do(func() {
		// Named as Generate's directories are, so that a crashed binary's are swept.
		if r.dir, r.err = os.MkdirTemp("", fmt.Sprintf("lg-importers-%d-%s-", os.Getpid(), venv)); r.err != nil {
			return
		}
		out := filepath.Join(r.dir, "expected.json")
		full := append([]string{filepath.Join(testutil.RepoRoot(t), "test", "importers", script),
			"--path", filepath.Join(r.dir, "data"), "--out", out}, args...)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, python, full...)
		cmd.Dir = r.dir
		cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "MEM0_TELEMETRY=False", "ANONYMIZED_TELEMETRY=False",
			"MEM0_DIR="+filepath.Join(r.dir, "home"), "HOME="+filepath.Join(r.dir, "home"))
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = io.Discard, &stderr
		if err := cmd.Run(); err != nil {
			r.err = fmt.Errorf("%s: %v\n%s", script, err, tail(stderr.String(), 4000))
			return
		}
		r.expected, r.err = os.ReadFile(out)
	})
	if r.err != nil {
		t.Fatalf("generating %s data %v: %v", venv, args, r.err)
	}
	dir := filepath.Join(t.TempDir(), venv)
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(r.dir, "data"))); err != nil {
		t.Fatal(err)
	}
	return dir, r.expected
}

// cleanupFrameworks removes the data this process generated (Cleanup calls it).
func cleanupFrameworks() {
	frameworkCache.Range(func(k, v any) bool {
		if r := v.(*frameworkRun); r.dir != "" {
			_ = os.RemoveAll(r.dir)
		}
		frameworkCache.Delete(k)
		return true
	})
}

// LlamaIndexExpected is what LlamaIndex's own stores return of the data it wrote:
// per store ("json", "sqlite", "memory"), per key, the messages as
// ChatMessage.model_dump(mode="json").
type LlamaIndexExpected struct {
	// Dir holds chat_store.json, chat_store.db and memory.db; a copy of this test's own.
	Dir    string                                             `json:"-"`
	Users  []string                                           `json:"users"`
	Keys   []string                                           `json:"keys"`
	Stores map[string]map[string][]map[string]json.RawMessage `json:"stores"`
}

// GenerateLlamaIndex returns LlamaIndex chat data written by the real llama-index-core
// (bin/frameworks-venv/llamaindex): users sessions per user of turns user turns each.
func GenerateLlamaIndex(t testing.TB, users, sessions, turns int) LlamaIndexExpected {
	t.Helper()
	dir, b := frameworkData(t, "llamaindex", "gen_llamaindex.py", "--users", strconv.Itoa(users),
		"--sessions", strconv.Itoa(sessions), "--turns", strconv.Itoa(turns))
	var exp LlamaIndexExpected
	if err := json.Unmarshal(b, &exp); err != nil {
		t.Fatalf("gen_llamaindex.py's expected.json: %v", err)
	}
	exp.Dir = dir
	return exp
}

// AutoGenExpected is what autogen-agentchat saved: per conversation n (files team-<n>.json
// and agent-<n>.json), the team's message thread and the agent's model context, and the
// ListMemory's contents (memory.json).
type AutoGenExpected struct {
	Dir           string `json:"-"`
	Conversations map[string]struct {
		Thread  []map[string]json.RawMessage `json:"thread"`
		Context []map[string]json.RawMessage `json:"context"`
	} `json:"conversations"`
	Memory []map[string]json.RawMessage `json:"memory"`
}

// GenerateAutoGen returns AutoGen state written by the real autogen-agentchat
// (bin/frameworks-venv/autogen): n conversations of a support team with a ListMemory.
func GenerateAutoGen(t testing.TB, n int) AutoGenExpected {
	t.Helper()
	dir, b := frameworkData(t, "autogen", "gen_autogen.py", "--conversations", strconv.Itoa(n))
	var exp AutoGenExpected
	if err := json.Unmarshal(b, &exp); err != nil {
		t.Fatalf("gen_autogen.py's expected.json: %v", err)
	}
	exp.Dir = dir
	return exp
}

// CrewAIExpected is what crewai itself holds after its crews ran (gen_crewai.py): the
// long-term rows per task (LTMSQLiteStorage.load), and each Chroma collection's
// records as chromadb's get() returns them.
type CrewAIExpected struct {
	// Dir is crewai's storage directory (long_term_memory_storage.db, chroma.sqlite3);
	// a copy of this test's own.
	Dir      string `json:"-"`
	LongTerm map[string][]struct {
		Metadata map[string]any `json:"metadata"`
		Datetime string         `json:"datetime"`
		Score    float64        `json:"score"`
	} `json:"long_term"`
	Collections map[string][]struct {
		ID       string         `json:"id"`
		Document string         `json:"document"`
		Metadata map[string]any `json:"metadata"`
	} `json:"collections"`
}

// GenerateCrewAI returns CrewAI memory written by the real crewai 1.9
// (bin/frameworks-venv/crewai): crews crews with memory on, each kicked off runs times.
func GenerateCrewAI(t testing.TB, crews, runs int) CrewAIExpected {
	t.Helper()
	dir, b := frameworkData(t, "crewai", "gen_crewai.py", "--crews", strconv.Itoa(crews), "--runs", strconv.Itoa(runs))
	var exp CrewAIExpected
	if err := json.Unmarshal(b, &exp); err != nil {
		t.Fatalf("gen_crewai.py's expected.json: %v", err)
	}
	exp.Dir = dir
	return exp
}

// GenerateSeed000 writes memories (user -> texts, in order) into venv's framework the
// way its users keep them (gen_seed000.py: mem0, llamaindex, autogen or crewai), and
// returns the directory of this test's own copy.
func GenerateSeed000(t testing.TB, venv string, memories map[string][]string) string {
	t.Helper()
	b, err := json.Marshal(memories)
	if err != nil {
		t.Fatal(err)
	}
	// Named by its content, so that the data is generated once per binary and set.
	file := filepath.Join(os.TempDir(), fmt.Sprintf("seed000-%d-%s-%x.json", os.Getpid(), venv, sha256.Sum256(b)))
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(file) })
	dir, _ := frameworkData(t, venv, "gen_seed000.py", "--framework", venv, "--memories", file)
	return dir
}
