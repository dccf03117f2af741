package importers

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"
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

// GenerateMem0 returns mem0 data written by the real mem0ai (bin/frameworks-venv/mem0)
// for opts, in a directory of this test's own (chroma/, history.db).
func GenerateMem0(t testing.TB, opts Mem0Options) Mem0Expected {
	t.Helper()
	if opts.Users == 0 {
		opts.Users = 12
	}
	if opts.MemoriesPerUser == 0 {
		opts.MemoriesPerUser = 6
	}
	if opts.Seed == 0 {
		opts.Seed = 1
	}
	args := []string{"--users", strconv.Itoa(opts.Users), "--memories-per-user", strconv.Itoa(opts.MemoriesPerUser),
		"--seed", strconv.FormatInt(opts.Seed, 10)}
	if opts.NoTruth {
		args = append(args, "--no-truth")
	}
	dir, b := frameworkData(t, "mem0", "gen_mem0.py", args...)
	var exp Mem0Expected
	if err := json.Unmarshal(b, &exp); err != nil {
		t.Fatalf("gen_mem0.py's expected.json: %v", err)
	}
	exp.Dir = dir
	return exp
}
