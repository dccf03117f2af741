package testutil

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// RepoRoot is the module's root directory (where go.mod is), found from the working
// directory of the test.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// MilvusLite is a private Milvus Lite server a test can stop and start again (on the
// same port and data), to see what clients do while Milvus is away.
type MilvusLite struct {
	t       testing.TB
	bin     string
	Addr    string
	port    int
	dataDir string
	cmd     *exec.Cmd
}

// StartMilvusLite starts a private Milvus Lite server on a free loopback port. The
// binary is the harness's (bin/venv/bin/milvus-lite); without it the test fails under
// CI and is skipped elsewhere. The server is stopped at cleanup.
func StartMilvusLite(t testing.TB) *MilvusLite {
	t.Helper()
	bin := HarnessFile(t, filepath.Join(RepoRoot(t), "bin", "venv", "bin", "milvus-lite"), "run hack/install-tools.sh")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	m := &MilvusLite{t: t, bin: bin, port: port, Addr: "127.0.0.1:" + strconv.Itoa(port), dataDir: t.TempDir()}
	m.Start()
	t.Cleanup(m.Stop)
	return m
}

// Start starts the server (again) and waits until it accepts connections.
func (m *MilvusLite) Start() {
	m.t.Helper()
	m.cmd = exec.Command(m.bin, "server", "--data-dir", m.dataDir, "--host", "127.0.0.1", "--port", strconv.Itoa(m.port))
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := m.cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", m.Addr, time.Second)
		if err == nil {
			_ = c.Close()
			return
		}
		if time.Now().After(deadline) {
			m.Stop()
			m.t.Fatalf("Milvus Lite did not listen on %s within 90s", m.Addr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Stop stops the server (its whole process group) and waits for it to exit.
func (m *MilvusLite) Stop() {
	if m.cmd == nil || m.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = m.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-m.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	m.cmd = nil
}
