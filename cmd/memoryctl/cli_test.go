package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amemory/memory-operator/internal/testutil"
)

func TestParseInterspersed(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		positional []string
		scopes     bool
		key        string
	}{
		{[]string{"./pkg"}, []string{"./pkg"}, false, ""},
		{[]string{"--scopes", "./pkg"}, []string{"./pkg"}, true, ""},
		{[]string{"./pkg", "--key-file", "k", "--scopes"}, []string{"./pkg"}, true, "k"},
		{[]string{"a", "--scopes", "b"}, []string{"a", "b"}, true, ""},
		{[]string{"--key-file=k", "--", "--scopes"}, []string{"--scopes"}, false, "k"},
		{[]string{"a", "--", "-b"}, []string{"a", "-b"}, false, ""},
		{nil, nil, false, ""},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		scopes := fs.Bool("scopes", false, "")
		key := fs.String("key-file", "", "")
		got, err := parseInterspersed(fs, tc.args)
		if err != nil || !slices.Equal(got, tc.positional) || *scopes != tc.scopes || *key != tc.key {
			t.Errorf("%q: positional %q scopes %v key %q err %v; want %q %v %q", tc.args, got, *scopes, *key, err, tc.positional, tc.scopes, tc.key)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if _, err := parseInterspersed(fs, []string{"./pkg", "--nope"}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("an unknown flag after the location: %v", err)
	}
}

// lettaFile is a Letta agent file from the importer's test data: an import that needs
// no service.
func lettaFile(t *testing.T) string {
	return filepath.Join(testutil.RepoRoot(t), "internal", "importer", "testdata", "letta", "support.af")
}

// TestErrorsSpeakMemoryctl: what a user gets wrong is said in memoryctl's flags and
// words, never the restore worker's.
func TestErrorsSpeakMemoryctl(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	notDir := filepath.Join(dir, "file")
	_ = os.WriteFile(notDir, []byte("x"), 0o600)
	for _, tc := range []struct {
		name string
		run  func() error
		want string
	}{
		{"import without a kind", func() error { return runImport(ctx, []string{"--out", dir, "--unencrypted"}, io.Discard, io.Discard) },
			"--import-kind is required (LangGraphPostgres, LangGraphSQLite, LangChainPostgresHistory, LettaAgentFile, Mem0, LlamaIndexChatStore, AutoGenState, CrewAI)"},
		{"a file kind without --file", func() error {
			return runImport(ctx, []string{"--import-kind=LangGraphSQLite", "--import-user-pattern=^(.*)$", "--out", dir, "--unencrypted"}, io.Discard, io.Discard)
		}, "--import-kind LangGraphSQLite reads a file: give --file PATH"},
		{"a missing --file", func() error {
			return runImport(ctx, []string{"--import-kind=LettaAgentFile", "--import-scope-template=agent:{thread}", "--file", filepath.Join(dir, "nope.af"), "--out", dir, "--unencrypted"}, io.Discard, io.Discard)
		}, "--file: stat " + filepath.Join(dir, "nope.af") + ": no such file or directory"},
		{"--file for a database kind", func() error {
			return runImport(ctx, []string{"--import-kind=LangGraphPostgres", "--import-user-metadata-key=u", "--file", notDir, "--out", dir, "--unencrypted"}, io.Discard, io.Discard)
		}, "--import-kind LangGraphPostgres reads a database from $MEMORYCTL_SOURCE_URI, not --file"},
		{"no key choice", func() error {
			return runImport(ctx, []string{"--import-kind=LettaAgentFile", "--import-scope-template=agent:{thread}", "--file", lettaFile(t), "--out", dir}, io.Discard, io.Discard)
		}, "give --key-file to encrypt the package, or --unencrypted for a plaintext one"},
		{"a Letta file with the default scope template", func() error {
			return runImport(ctx, []string{"--import-kind=LettaAgentFile", "--file", lettaFile(t), "--out", dir, "--unencrypted"}, io.Discard, io.Discard)
		}, "a Letta agent file names agents, not users: set --import-scope-template='agent:{thread}'"},
		{"no --out", func() error {
			return runImport(ctx, []string{"--import-kind=LettaAgentFile", "--import-scope-template=agent:{thread}", "--file", lettaFile(t), "--unencrypted"}, io.Discard, io.Discard)
		}, "--out is required"},
		{"inspect a missing directory", func() error {
			return runRead(ctx, "inspect", []string{filepath.Join(dir, "gone")}, io.Discard, io.Discard)
		},
			"no memory package at " + filepath.Join(dir, "gone") + ": no such directory"},
		{"inspect an empty directory", func() error { return runRead(ctx, "inspect", []string{empty}, io.Discard, io.Discard) },
			"no memory package at " + empty + ": no manifest.json in it or in " + filepath.Join(empty, "package")},
		{"verify a file", func() error { return runRead(ctx, "verify", []string{notDir}, io.Discard, io.Discard) },
			"not a directory"},
		{"verify two locations", func() error { return runRead(ctx, "verify", []string{dir, empty}, io.Discard, io.Discard) },
			"verify takes one package location"},
		{"a drill of a directory", func() error { return runRead(ctx, "verify", []string{dir, "--restore"}, io.Discard, io.Discard) },
			"--restore reads the package from object storage"},
		{"an s3 location without an endpoint", func() error { return runRead(ctx, "inspect", []string{"s3://b/p/"}, io.Discard, io.Discard) },
			"s3://b/p/: an s3:// location needs --s3-endpoint HOST:PORT"},
		{"an s3 location without a prefix", func() error {
			return runRead(ctx, "inspect", []string{"s3://b/", "--s3-endpoint", "localhost:1"}, io.Discard, io.Discard)
		}, "s3://b/: no package prefix"},
	} {
		err := tc.run()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), "--source-") || strings.Contains(err.Error(), "--import-object") || strings.Contains(err.Error(), "snapshot: empty")) {
			t.Errorf("%s: the restore worker's words: %v", tc.name, err)
		}
	}
}

// TestHelp: each command's -h lists its flags (memoryctl's own) with examples.
func TestHelp(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		run   func(stderr io.Writer) error
		flags []string
	}{
		{func(w io.Writer) error { return runImport(ctx, []string{"-h"}, io.Discard, w) }, []string{"--import-kind", "--file", "--out", "--key-file", "--unencrypted", "--s3-insecure"}},
		{func(w io.Writer) error { return runRead(ctx, "inspect", []string{"--help"}, io.Discard, w) }, []string{"--scopes", "--key-file", "--s3-endpoint"}},
		{func(w io.Writer) error { return runRead(ctx, "verify", []string{"-h"}, io.Discard, w) }, []string{"--key-file", "--s3-insecure"}},
		{func(w io.Writer) error { return runPending(ctx, []string{"list", "-h"}, io.Discard, w) }, []string{"--parked", "--scope", "--gateway-url"}},
		{func(w io.Writer) error { return runPending(ctx, []string{"retry", "-h"}, io.Discard, w) }, []string{"--scope", "--gateway-url"}},
	} {
		var out bytes.Buffer
		if err := tc.run(&out); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("-h: %v", err)
		}
		h := out.String()
		if !strings.HasPrefix(h, "usage: memoryctl ") || !strings.Contains(h, "\nExamples:\n") || !strings.Contains(h, "\nFlags:\n") {
			t.Errorf("help without usage, examples or flags:\n%s", h)
		}
		for _, f := range tc.flags {
			if !strings.Contains(h, "  -"+strings.TrimPrefix(f, "--")) {
				t.Errorf("help does not list %s:\n%s", f, h)
			}
		}
		for _, worker := range []string{"source-bucket", "import-object", "restore-"} {
			if strings.Contains(h, worker) {
				t.Errorf("help names the restore worker's %s:\n%s", worker, h)
			}
		}
	}
}

// TestPlaintextPackage: a package written with --unencrypted reads back with no key
// flag, from the directory import wrote or the package directory itself, flags before
// or after the location; a key given for it is not needed and not an error.
func TestPlaintextPackage(t *testing.T) {
	ctx := context.Background()
	out := filepath.Join(t.TempDir(), "reviewed")
	var stdout, stderr bytes.Buffer
	if err := runImport(ctx, []string{"--import-kind=LettaAgentFile", "--import-scope-template=agent:{thread}", "--file", lettaFile(t), "--out", out, "--unencrypted"}, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "at "+filepath.Join(out, "package")+":") || stderr.Len() != 0 {
		t.Fatalf("import printed %q, stderr %q (no progress off a terminal)", stdout.String(), stderr.String())
	}
	keyFile := filepath.Join(t.TempDir(), "k")
	_ = os.WriteFile(keyFile, []byte(strings.Repeat("ab", 32)), 0o600)
	for _, args := range [][]string{{out}, {filepath.Join(out, "package")}, {out, "--key-file", keyFile}} {
		stdout.Reset()
		if err := runRead(ctx, "verify", args, &stdout, &stderr); err != nil || !strings.Contains(stdout.String(), "verified:") || !strings.Contains(stdout.String(), "encrypted false") {
			t.Errorf("verify %q: %v\n%s", args, err, stdout.String())
		}
	}
	stdout.Reset()
	if err := runRead(ctx, "inspect", []string{out, "--scopes"}, &stdout, &stderr); err != nil || !strings.Contains(stdout.String(), "agent:") ||
		!strings.Contains(stdout.String(), "imported from letta-agent-file: threads 1: imported 1 (5 messages)") {
		t.Errorf("inspect DIR --scopes: %v\n%s", err, stdout.String())
	}
}

// TestProgressOnATerminal: the import shows its progress on stderr when stderr is a
// terminal (a pseudo-terminal here), and nothing in a pipe.
func TestProgressOnATerminal(t *testing.T) {
	bin, err := memoryctlBinary()
	if err != nil {
		t.Fatal(err)
	}
	ptmx, pts := openPTY(t)
	args := []string{"import", "--import-kind=LettaAgentFile", "--import-scope-template=agent:{thread}", "--file", lettaFile(t), "--unencrypted"}
	cmd := exec.Command(filepath.Join(bin, "memoryctl"), append(args, "--out", t.TempDir())...)
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, pts
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	_ = pts.Close()
	_ = ptmx.SetReadDeadline(time.Now().Add(5 * time.Second))
	shown, _ := io.ReadAll(ptmx) // ends with EIO once the terminal's other side is closed
	if !strings.Contains(string(shown), "importing: ") || !strings.Contains(string(shown), " threads (") || !strings.Contains(string(shown), " memories") {
		t.Errorf("terminal shows %q, want the progress line", shown)
	}
	if strings.Contains(stdout.String(), "importing:") {
		t.Errorf("progress on stdout: %q", stdout.String())
	}
	// The same in a pipe: no progress.
	var piped bytes.Buffer
	cmd = exec.Command(filepath.Join(bin, "memoryctl"), append(args, "--out", t.TempDir())...)
	cmd.Stdout, cmd.Stderr = io.Discard, &piped
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if piped.Len() != 0 {
		t.Errorf("stderr in a pipe: %q", piped.String())
	}
}

// openPTY opens a pseudo-terminal pair (Linux /dev/ptmx).
func openPTY(t *testing.T) (ptmx, pts *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { _ = ptmx.Close() })
	fd := int(ptmx.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pts.Close() })
	return ptmx, pts
}
