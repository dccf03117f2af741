package main

import (
	"archive/tar"
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// dockerfileRuntime reads the final stage of the Dockerfile: its USER, WORKDIR,
// ENTRYPOINT and CMD (exec form) and where it copies the binary.
func dockerfileRuntime(t *testing.T) (user, workdir, binary string, entrypoint, cmd []string) {
	t.Helper()
	f, err := os.Open("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		word, rest, _ := strings.Cut(line, " ")
		switch word {
		case "FROM":
			user, workdir, binary, entrypoint, cmd = "", "", "", nil, nil // a new stage
		case "USER":
			user = rest
		case "WORKDIR":
			workdir = rest
		case "COPY":
			if fields := strings.Fields(rest); strings.HasPrefix(fields[0], "--from=") {
				binary = fields[len(fields)-1]
			}
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &entrypoint); err != nil {
				t.Fatalf("ENTRYPOINT %s: %v", rest, err)
			}
		case "CMD":
			if err := json.Unmarshal([]byte(rest), &cmd); err != nil {
				t.Fatalf("CMD %s: %v", rest, err)
			}
		}
	}
	return user, workdir, binary, entrypoint, cmd
}

// makeImageFlags are the flags `make image` passes (kept in step with the Makefile by
// TestMakefileBuildsTheDockerfileLayout).
func makeImageFlags(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string]string{}
	for _, f := range strings.Fields(string(b)) {
		if k, v, ok := strings.Cut(f, "="); ok && strings.HasPrefix(k, "--") && slices.Contains([]string{"--entrypoint", "--cmd", "--user"}, k) {
			flags[k] = v
		}
	}
	return flags
}

// TestMakefileBuildsTheDockerfileLayout: `make image` (this builder, with the
// Makefile's flags) and the Dockerfile give the same entrypoint, arguments, user,
// working directory and binary path, and the files distroless's static:nonroot
// provides (CA certificates, the nonroot user, /tmp).
func TestMakefileBuildsTheDockerfileLayout(t *testing.T) {
	user, workdir, binary, entrypoint, cmd := dockerfileRuntime(t)
	flags := makeImageFlags(t)
	if flags["--entrypoint"] != strings.Join(entrypoint, ",") || flags["--cmd"] != strings.Join(cmd, ",") || flags["--user"] != user {
		t.Fatalf("Makefile image flags %v; Dockerfile ENTRYPOINT %q CMD %q USER %q", flags, entrypoint, cmd, user)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "memory-operator")
	ca := filepath.Join(dir, "ca.crt")
	_ = os.WriteFile(bin, []byte("#!binary"), 0o755)
	_ = os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----\n"), 0o644)
	out := filepath.Join(dir, "image.tar")
	if err := run(out, "localhost/memory-operator:test", flags["--entrypoint"], flags["--cmd"], flags["--user"], ca, []string{bin + ":" + binary}, nil); err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Config
	if !slices.Equal(c.Entrypoint, entrypoint) || !slices.Equal(c.Cmd, cmd) || c.User != user || c.WorkingDir != workdir {
		t.Fatalf("image config %+v; Dockerfile entrypoint %q cmd %q user %q workdir %q", c, entrypoint, cmd, user, workdir)
	}
	files := map[string]*tar.Header{}
	layers, _ := img.Layers()
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			files["/"+strings.TrimSuffix(h.Name, "/")] = h
		}
	}
	for p, mode := range map[string]int64{binary: 0o755, "/etc/ssl/certs/ca-certificates.crt": 0o644, "/etc/passwd": 0o644, "/tmp": 0o1777} {
		if h := files[p]; h == nil || h.Mode != mode || h.ModTime.Unix() != 0 {
			t.Errorf("%s: %+v, want mode %o at time 0", p, h, mode)
		}
	}
}
