package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/amemory/memory-operator/test/importers"
)

// TestImportInspectVerify: memoryctl converts real LangGraph data (the PostgreSQL
// checkpointer) into an encrypted package on disk, and inspect and verify read it;
// verify refuses a corrupted shard and a wrong key.
func TestImportInspectVerify(t *testing.T) {
	exp := importers.Generate(t, importers.Options{})
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key.hex")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("ab", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "pkg")
	t.Setenv(envSourceURI, exp.DSN)
	var stdout, stderr bytes.Buffer
	ctx := context.Background()
	err := runImport(ctx, []string{"--import-kind=LangGraphPostgres", "--import-user-metadata-key=user_id", `--import-user-pattern=^u-(?P<user>[^:]+):`,
		"--import-inactive-after=168h", "--out=" + out, "--key-file=" + keyFile}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	normal := len(exp.ThreadsIn(importers.Normal))
	if !strings.Contains(stdout.String(), "imported "+strconv.Itoa(normal)) {
		t.Fatalf("import output: %s", stdout.String())
	}
	stdout.Reset()
	if err := runRead(ctx, "inspect", []string{"--key-file=" + keyFile, "--scopes", out}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout.String(), "encrypted true") || !strings.Contains(stdout.String(), "user:") {
		t.Fatalf("inspect: %s", stdout.String())
	}
	stdout.Reset()
	if err := runRead(ctx, "verify", []string{"--key-file=" + keyFile, out}, &stdout, &stderr); err != nil || !strings.Contains(stdout.String(), "verified:") {
		t.Fatalf("verify: %v %s", err, stdout.String())
	}
	wrong := filepath.Join(dir, "wrong.hex")
	_ = os.WriteFile(wrong, []byte(strings.Repeat("cd", 32)), 0o600)
	if err := runRead(ctx, "verify", []string{"--key-file=" + wrong, out}, &stdout, &stderr); err == nil {
		t.Fatal("verify accepted a wrong key")
	}
	shards, _ := filepath.Glob(filepath.Join(out, "package", "*", "*"))
	var flipped bool
	for _, s := range shards {
		if strings.Contains(s, "manifest") {
			continue
		}
		b, _ := os.ReadFile(s)
		if len(b) > 100 {
			b[len(b)/2] ^= 0xff
			_ = os.WriteFile(s, b, 0o644)
			flipped = true
			break
		}
	}
	if !flipped {
		t.Fatalf("no shard found among %v", shards)
	}
	if err := runRead(ctx, "verify", []string{"--key-file=" + keyFile, out}, &stdout, &stderr); err == nil {
		t.Fatal("verify accepted a corrupted shard")
	}
}

// TestImportNamesItsOwnVariable: without a source database, memoryctl says which of
// its variables to set (not the restore worker's).
func TestImportNamesItsOwnVariable(t *testing.T) {
	t.Setenv(envSourceURI, "")
	var stdout, stderr bytes.Buffer
	err := runImport(context.Background(), []string{"--import-kind=LangGraphPostgres", "--import-user-metadata-key=user_id",
		"--unencrypted", "--out=" + t.TempDir()}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), envSourceURI) {
		t.Fatalf("error %v, want one naming %s", err, envSourceURI)
	}
}
