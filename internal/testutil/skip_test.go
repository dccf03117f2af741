package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSkipsAreAnnounced: `go test ./... -run Guarantee` without the services used to
// print `ok` for every package and nothing else, having skipped all but one Guarantee
// test. Run as a user runs it (package list mode, no -v, output to a pipe), a package
// whose tests are skipped for want of a service still passes, but each skipped
// Guarantee test is named, the package's other skips are announced once, and both say
// how to run them, also into a log appended to. With -v the skip messages show anyway;
// -short skips quietly, as asked; under CI a missing service fails. (A result replayed
// from the test cache is not announced again: the go command replays only the output
// it captured.)
func TestSkipsAreAnnounced(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go test")
	}
	fixture := "./internal/testutil/testdata/skipfixture"
	command := func(env []string, args ...string) *exec.Cmd {
		cmd := exec.Command("go", append([]string{"test"}, append(args, fixture)...)...)
		cmd.Dir = RepoRoot(t)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "MEMORY_TEST_") && !strings.HasPrefix(kv, "CI=") && !strings.HasPrefix(kv, "KUBEBUILDER_ASSETS=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, env...)
		return cmd
	}
	run := func(env []string, args ...string) (string, error) {
		out, err := command(env, args...).CombinedOutput()
		return string(out), err
	}
	// toFile runs go test with its output to a file opened with flag, as a shell's
	// 2>log (O_TRUNC) or 2>>log (O_APPEND) opens it.
	toFile := func(flag int) string {
		path := filepath.Join(t.TempDir(), "log")
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|flag, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		cmd := command(nil, "-count=1")
		cmd.Stdout, cmd.Stderr = f, f
		err = cmd.Run()
		_ = f.Close()
		out, _ := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return string(out)
	}
	guarantee := regexp.MustCompile("(?m)^SKIP internal/testutil/testdata/skipfixture: TestGuaranteeFixture not run: " +
		regexp.QuoteMeta("PostgreSQL is not running (MEMORY_TEST_PG_DSN is unset). Run `make guarantees`"))
	others := regexp.MustCompile("(?m)^SKIP internal/testutil/testdata/skipfixture: the tests that need the harness are skipped: ")
	ok := regexp.MustCompile(`(?m)^ok\s+github.com/amemory/memory-operator/internal/testutil/testdata/skipfixture\s`)

	out, err := run(nil, "-count=1")
	if err != nil || !ok.MatchString(out) {
		t.Fatalf("%v\n%s", err, out)
	}
	if !guarantee.MatchString(out) {
		t.Errorf("the skipped Guarantee test is not named:\n%s", out)
	}
	if n := len(others.FindAllString(out, -1)); n != 1 {
		t.Errorf("the other skips are announced %d times, want once:\n%s", n, out)
	}
	// A log appended to gets the announcements too; one written from its start does not
	// (the go command would write over them), and its own lines stay whole.
	if out := toFile(os.O_APPEND); !guarantee.MatchString(out) || !ok.MatchString(out) {
		t.Errorf("2>>log:\n%s", out)
	}
	if out := toFile(os.O_TRUNC); guarantee.MatchString(out) || !ok.MatchString(out) {
		t.Errorf("2>log:\n%s", out)
	}
	if out, err := run(nil, "-count=1", "-v"); err != nil || guarantee.MatchString(out) || !strings.Contains(out, "--- SKIP: TestGuaranteeFixture") {
		t.Errorf("-v: %v\n%s", err, out)
	}
	if out, err := run(nil, "-count=1", "-short"); err != nil || strings.Contains(out, "SKIP") {
		t.Errorf("-short: %v\n%s", err, out)
	}
	if out, err := run([]string{"CI=true"}, "-count=1"); err == nil || !strings.Contains(out, "--- FAIL: TestGuaranteeFixture") {
		t.Errorf("CI: %v\n%s", err, out)
	}
}
