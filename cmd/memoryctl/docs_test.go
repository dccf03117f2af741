package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/amemory/memory-operator/internal/testutil"
	"github.com/amemory/memory-operator/test/importers"
)

// The commands users copy: every shell block of README.md and docs/*.md that runs
// memoryctl, and the examples of memoryctl's own help, run as written by bash, with
// the memoryctl built from this package first on PATH. The only changes a test makes
// are its substitutions: the addresses and credentials of its own services for the
// documented ones.

// snippet is one shell script users are shown, and where.
type snippet struct{ from, script string }

var (
	fenced      = regexp.MustCompile("(?ms)^```(?:sh|bash|shell)\n(.*?)^```")
	invocation  = regexp.MustCompile(`(?m)\bmemoryctl\s+([a-z]+)`)
	readCommand = []string{"import", "inspect", "verify"}
)

// documentedSnippets returns the documented scripts whose memoryctl commands are
// among commands ("import", "inspect", "verify" or "pending"), docs first, then help.
func documentedSnippets(t *testing.T, commands ...string) []snippet {
	t.Helper()
	root := testutil.RepoRoot(t)
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var all []snippet
	for _, f := range append([]string{filepath.Join(root, "README.md")}, files...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		for _, m := range fenced.FindAllStringSubmatch(string(b), -1) {
			all = append(all, snippet{from: rel, script: m[1]})
		}
	}
	all = append(all, snippet{from: "memoryctl import -h", script: importHelp.examples})
	for _, c := range []string{"inspect", "verify"} {
		all = append(all, snippet{from: "memoryctl " + c + " -h", script: readHelp[c].examples})
	}
	for _, v := range []string{"list", "retry"} {
		all = append(all, snippet{from: "memoryctl pending " + v + " -h", script: pendingHelp[v].examples})
	}
	all = append(all, snippet{from: "memoryctl status -h", script: statusHelp.examples})
	var out []snippet
	for _, sn := range all {
		used := invocation.FindAllStringSubmatch(sn.script, -1)
		if len(used) == 0 {
			continue
		}
		in := 0
		for _, u := range used {
			if slices.Contains(commands, u[1]) {
				in++
			}
		}
		switch {
		case in == len(used):
			out = append(out, sn)
		case in > 0:
			t.Fatalf("%s: a block mixes memoryctl commands that run against different services; split it:\n%s", sn.from, sn.script)
		}
	}
	return out
}

// memoryctlBinary builds memoryctl once per test process; its directory goes first
// on the snippets' PATH.
var memoryctlBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "memoryctl-bin-")
	if err != nil {
		return "", err
	}
	out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "memoryctl"), ".").CombinedOutput()
	if err != nil {
		return "", &buildError{out: string(out), err: err}
	}
	return dir, nil
})

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }

// runSnippets runs each snippet in a directory of its own that prepare fills for it, with
// only PATH, HOME and TMPDIR from the test's environment (never its MEMORYCTL_* or
// AWS_* variables), after replacing each subs[i] by subs[i+1]. Every substitution
// must be used, and no placeholder ("…") may be left. It returns each snippet's output.
func runSnippets(t *testing.T, prepare func(dir string, sn snippet), snippets []snippet, subs ...string) []string {
	t.Helper()
	bin, err := memoryctlBinary()
	if err != nil {
		t.Fatal(err)
	}
	if len(snippets) == 0 {
		t.Fatal("no documented snippet found")
	}
	used := make([]bool, len(subs)/2)
	var outs []string
	for _, sn := range snippets {
		dir := t.TempDir()
		prepare(dir, sn)
		env := []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME=" + dir, "TMPDIR=" + os.TempDir()}
		script := sn.script
		for i := 0; i < len(subs); i += 2 {
			if strings.Contains(script, subs[i]) {
				used[i/2] = true
				script = strings.ReplaceAll(script, subs[i], subs[i+1])
			}
		}
		if strings.Contains(script, "…") {
			t.Fatalf("%s: a placeholder the test does not fill:\n%s", sn.from, sn.script)
		}
		cmd := exec.Command("bash", "-e", "-o", "pipefail", "-c", script)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: the documented commands failed (%v):\n%s\noutput:\n%s", sn.from, err, sn.script, out)
		}
		t.Logf("%s:\n%s", sn.from, out)
		outs = append(outs, string(out))
	}
	for i, u := range used {
		if !u {
			t.Fatalf("substitution %q is used by no documented snippet: drop it from the test", subs[2*i])
		}
	}
	return outs
}

// TestDocumentedCommands runs the documented import, inspect and verify commands in a
// directory holding what they name: checkpoints.sqlite and a LangGraph database
// written by the real langgraph, mem0/ (mem0ai's Chroma directory and history.db),
// llamaindex/ (llama-index-core's JSON, SQLite and Memory stores), autogen/ (team and
// agent states, a ListMemory), crewai/ (the storage directory crews of crewai 1.9 wrote),
// agent.af (a Letta agent file), snapshot.key, and in
// MinIO the bucket agent-memory with a package at acme/snapshots/nightly-20261201-0200/.
func TestDocumentedCommands(t *testing.T) {
	exp := importers.Generate(t, importers.Options{})
	m0 := importers.GenerateMem0(t, importers.Mem0Options{})
	li := importers.GenerateLlamaIndex(t, 6, 2, 4)
	ag := importers.GenerateAutoGen(t, 4)
	cw := importers.GenerateCrewAI(t, 4, 2)
	s3 := testutil.S3Config(t)
	ctx := context.Background()
	key := []byte(strings.Repeat("5e", 32) + "\n")
	// A package in ./reviewed, for the snippets that read one without writing it first.
	reviewed := filepath.Join(t.TempDir(), "reviewed")
	prepare := func(dir string, sn snippet) {
		copyTo := func(from, to string) {
			b, err := os.ReadFile(from)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, to), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		copyTo(exp.SQLitePath, "checkpoints.sqlite")
		if _, err := os.Stat(exp.SQLitePath + "-wal"); err == nil {
			copyTo(exp.SQLitePath+"-wal", "checkpoints.sqlite-wal")
		}
		copyTo(filepath.Join(testutil.RepoRoot(t), "internal", "importer", "testdata", "letta", "support.af"), "agent.af")
		if err := os.WriteFile(filepath.Join(dir, "snapshot.key"), key, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.CopyFS(filepath.Join(dir, "mem0"), os.DirFS(m0.Dir)); err != nil {
			t.Fatal(err)
		}
		if err := os.CopyFS(filepath.Join(dir, "llamaindex"), os.DirFS(li.Dir)); err != nil {
			t.Fatal(err)
		}
		if err := os.CopyFS(filepath.Join(dir, "autogen"), os.DirFS(ag.Dir)); err != nil {
			t.Fatal(err)
		}
		if err := os.CopyFS(filepath.Join(dir, "crewai"), os.DirFS(cw.Dir)); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(sn.script, "memoryctl import") {
			if err := os.CopyFS(filepath.Join(dir, "reviewed"), os.DirFS(reviewed)); err != nil {
				t.Fatal(err)
			}
		}
	}
	keyFile := filepath.Join(t.TempDir(), "snapshot.key")
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}

	// The bucket and the nightly package the docs read from object storage.
	mc, err := minio.New(s3.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s3.AccessKey, s3.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := mc.BucketExists(ctx, "agent-memory"); err != nil {
		t.Fatal(err)
	} else if !ok {
		if err := mc.MakeBucket(ctx, "agent-memory", minio.MakeBucketOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// What an earlier run against this MinIO left under the documented prefixes.
	for obj := range mc.ListObjects(ctx, "agent-memory", minio.ListObjectsOptions{Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		if err := mc.RemoveObject(ctx, "agent-memory", obj.Key, minio.RemoveObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(envSourceURI, exp.DSN)
	t.Setenv(envAccessKey, s3.AccessKey)
	t.Setenv(envSecretKey, s3.SecretKey)
	var stdout, stderr strings.Builder
	if err := runImport(ctx, []string{"--import-kind=LangGraphPostgres", `--import-user-pattern=^u-(?P<user>[^:]+):`,
		"--out=s3://agent-memory/acme/snapshots/nightly-20261201-0200/", "--s3-endpoint=" + s3.Endpoint, "--s3-insecure", "--key-file=" + keyFile},
		&stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}

	if err := runImport(ctx, []string{"--import-kind=LangGraphPostgres", `--import-user-pattern=^u-(?P<user>[^:]+):`,
		"--out=" + reviewed, "--key-file=" + keyFile}, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}

	outs := runSnippets(t, prepare, documentedSnippets(t, readCommand...),
		"postgres://user:password@db:5432/langgraph", exp.DSN,
		"localhost:9000", s3.Endpoint,
		"AWS_ACCESS_KEY_ID=minio ", "AWS_ACCESS_KEY_ID="+s3.AccessKey+" ",
		"AWS_SECRET_ACCESS_KEY=minio123 ", "AWS_SECRET_ACCESS_KEY="+s3.SecretKey+" ",
		"MEMORYCTL_DRILL_URI=postgres://drills@localhost/scratch ", "MEMORYCTL_DRILL_URI="+exp.DSN+" ")

	// What the documented commands wrote reads back: each import made a package of
	// memories, and verify read every one.
	all := strings.Join(outs, "\n")
	for _, want := range []string{"reviewed/package:", "reviewed-sqlite/package:", "reviewed-letta/package:", "reviewed-mem0/package:", "reviewed-llamaindex/package:", "reviewed-autogen/package:", "s3://agent-memory/imports/agent/:", "verified:", "drill passed in"} {
		if !strings.Contains(all, want) {
			t.Errorf("no %q in the documented commands' output", want)
		}
	}
	if strings.Contains(all, " 0 memories") {
		t.Errorf("a documented import or read found no memories:\n%s", all)
	}
}
