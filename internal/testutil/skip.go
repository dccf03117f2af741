package testutil

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// HowToRun says how to run the tests that need the harness's services.
const HowToRun = "Run `make guarantees` (the Guarantee tests) or `make test` (all), which start the services"

// missing handles a test that cannot run for want of part of the harness: under CI it
// fails (a broken harness is never a pass); with -short it is skipped, as asked; else it
// is skipped and the skip announced where the person running the tests sees it.
func missing(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	if !testing.Short() {
		announceSkip(t.Name(), msg)
	}
	t.Skip(msg)
}

var announced struct {
	sync.Mutex
	pkg bool // the package's other tests were announced
}

// announceSkip reports a skipped test. A Guarantee test is named, each one; the
// package's other tests are announced once, together.
func announceSkip(test, msg string) {
	if testing.Verbose() {
		return // the skip message is shown anyway
	}
	if strings.HasPrefix(test, "TestGuarantee") {
		Announce(fmt.Sprintf("SKIP %s: %s not run: %s. %s.", packageDir(), test, msg, HowToRun))
		return
	}
	announced.Lock()
	defer announced.Unlock()
	if !announced.pkg {
		announced.pkg = true
		Announce(fmt.Sprintf("SKIP %s: the tests that need the harness are skipped: %s. %s.", packageDir(), msg, HowToRun))
	}
}

// Announce writes a line where the person running `go test` reads it, even without
// -v. In package list mode (`go test ./...`) the go command prints a passing package's
// output only with -v, so a skip said on the test's own stdout or stderr goes unseen;
// this writes to the go command's stderr (the test binary's parent's) instead, when it
// is a terminal or a pipe, or a file opened for appending (`2>>log`). A file opened
// otherwise (`2>log`) is left alone: the go command writes it at its own offset and
// would overwrite the line. Failing that, the controlling terminal; failing that, our
// own stderr.
func Announce(line string) {
	w := console()
	_, _ = fmt.Fprintln(w, line)
}

var consoleOnce struct {
	sync.Once
	w io.Writer
}

func console() io.Writer {
	consoleOnce.Do(func() {
		consoleOnce.w = os.Stderr
		parent := fmt.Sprintf("/proc/%d/fd/2", os.Getppid())
		for _, path := range []string{parent, "/dev/tty"} {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				continue
			}
			if st, err := f.Stat(); err == nil && (st.Mode()&(os.ModeNamedPipe|os.ModeCharDevice|os.ModeSocket) != 0 ||
				st.Mode().IsRegular() && path == parent && appending(os.Getppid(), 2)) {
				consoleOnce.w = f
				return
			}
			_ = f.Close()
		}
	})
	return consoleOnce.w
}

// appending reports whether the process's file descriptor was opened with O_APPEND.
func appending(pid, fd int) bool {
	info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%d", pid, fd))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(info), "\n") {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			return err == nil && flags&syscall.O_APPEND != 0
		}
	}
	return false
}

// packageDir is the test's package as a directory under the module's root (go test
// runs a test binary in its package's directory).
func packageDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "?"
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if rel, err := filepath.Rel(dir, wd); err == nil {
				return filepath.ToSlash(rel)
			}
			return wd
		}
		if filepath.Dir(dir) == dir {
			return wd
		}
	}
}
