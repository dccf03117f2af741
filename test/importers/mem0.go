package importers

import (
	"bytes"
	"context"
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

// Mem0Options size a mem0 data set (gen_mem0.py).
type Mem0Options struct {
	Users, MemoriesPerUser int   // defaults 12 and 6
	Seed                   int64 // default 1
	NoTruth                bool  // leave the memories out of Mem0Expected (large runs)
}

// Mem0Expected is what mem0 itself reports of the data it wrote.
type Mem0Expected struct {
	// Dir holds chroma/ (the vector store) and history.db; a copy of this test's own.
	Dir      string                `json:"-"`
	Users    []string              `json:"users"`
	Deleted  []string              `json:"deleted"`
	Updated  []string              `json:"updated"`
	Counts   map[string]int        `json:"counts"`
	Memories map[string]Mem0Memory `json:"memories"`
	Timings  map[string]float64    `json:"timings_s"`
}

// Mem0Memory is mem0's get() of one memory, with its history().
type Mem0Memory struct {
	ID        string         `json:"id"`
	Memory    string         `json:"memory"`
	Hash      string         `json:"hash"`
	Metadata  map[string]any `json:"metadata"`
	CreatedAt time.Time      `json:"created_at"`
	UpdatedAt time.Time      `json:"updated_at"`
	UserID    string         `json:"user_id"`
	AgentID   string         `json:"agent_id"`
	RunID     string         `json:"run_id"`
	Role      string         `json:"role"`
	History   []struct {
		OldMemory *string   `json:"old_memory"`
		NewMemory *string   `json:"new_memory"`
		Event     string    `json:"event"`
		UpdatedAt time.Time `json:"updated_at"`
	} `json:"history"`
}

var mem0Cache sync.Map // Mem0Options -> *mem0Generated

type mem0Generated struct {
	once sync.Once
	dir  string
	exp  Mem0Expected
	err  error
}

// GenerateMem0 returns mem0 data written by the real mem0ai (bin/frameworks-venv) for
// opts, generated once per test binary and copied for this test. Without the venv the
// test fails under CI and is skipped elsewhere; it is skipped under -short.
func GenerateMem0(t testing.TB, opts Mem0Options) Mem0Expected {
	t.Helper()
	if testing.Short() {
		t.Skip("generates mem0 data with mem0ai: not a -short test")
	}
	python := testutil.HarnessFile(t, filepath.Join(testutil.RepoRoot(t), "bin", "frameworks-venv", "bin", "python"),
		"run `hack/install-tools.sh frameworks` or `make tools`")
	if opts.Users == 0 {
		opts.Users = 12
	}
	if opts.MemoriesPerUser == 0 {
		opts.MemoriesPerUser = 6
	}
	if opts.Seed == 0 {
		opts.Seed = 1
	}
	v, _ := mem0Cache.LoadOrStore(opts, &mem0Generated{})
	g := v.(*mem0Generated)
	g.once.Do(func() {
		// Named as Generate's directories are, so that a crashed binary's are swept.
		g.dir, g.err = os.MkdirTemp("", fmt.Sprintf("lg-importers-%d-mem0-", os.Getpid()))
		if g.err != nil {
			return
		}
		out := filepath.Join(g.dir, "expected.json")
		args := []string{filepath.Join(testutil.RepoRoot(t), "test", "importers", "gen_mem0.py"), "--path", filepath.Join(g.dir, "data"),
			"--users", strconv.Itoa(opts.Users), "--memories-per-user", strconv.Itoa(opts.MemoriesPerUser),
			"--seed", strconv.FormatInt(opts.Seed, 10), "--out", out}
		if opts.NoTruth {
			args = append(args, "--no-truth")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, python, args...)
		cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "MEM0_TELEMETRY=False", "ANONYMIZED_TELEMETRY=False",
			"MEM0_DIR="+filepath.Join(g.dir, "home"))
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = io.Discard, &stderr
		if err := cmd.Run(); err != nil {
			g.err = fmt.Errorf("gen_mem0.py: %v\n%s", err, tail(stderr.String(), 4000))
			return
		}
		b, err := os.ReadFile(out)
		if err != nil {
			g.err = err
			return
		}
		g.err = json.Unmarshal(b, &g.exp)
	})
	if g.err != nil {
		t.Fatalf("generating mem0 data %+v: %v", opts, g.err)
	}
	exp := g.exp
	exp.Dir = filepath.Join(t.TempDir(), "mem0")
	if err := os.CopyFS(exp.Dir, os.DirFS(filepath.Join(g.dir, "data"))); err != nil {
		t.Fatal(err)
	}
	return exp
}

// cleanupMem0 removes the mem0 data this process generated (Cleanup calls it).
func cleanupMem0() {
	mem0Cache.Range(func(k, v any) bool {
		if g := v.(*mem0Generated); g.dir != "" {
			_ = os.RemoveAll(g.dir)
		}
		mem0Cache.Delete(k)
		return true
	})
}
