package scripts

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/amemory/memory-operator/internal/testutil"
)

// installTools runs hack/install-tools.sh WHAT into the scratch directory bin (as
// TOOLS_BIN) with the given PATH and extra environment, and returns its output.
func installTools(t *testing.T, bin, path string, extra []string, what string) string {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(testutil.RepoRoot(t), "hack", "install-tools.sh"), what)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "TOOLS_BIN=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "PATH="+path, "TOOLS_BIN="+bin)
	cmd.Env = append(cmd.Env, extra...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("install-tools.sh %s: %v\n%s", what, err, out)
	}
	return string(out)
}

// pathWithout is a PATH holding every command of the current PATH but the named ones:
// one directory of links (the commands a machine has, without those it lacks).
func pathWithout(t *testing.T, missing ...string) string {
	t.Helper()
	farm := t.TempDir()
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			name := e.Name()
			if slices.Contains(missing, name) {
				continue
			}
			target := filepath.Join(dir, name)
			if st, err := os.Stat(target); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
				continue
			}
			if _, err := os.Lstat(filepath.Join(farm, name)); err == nil {
				continue // an earlier PATH entry wins
			}
			if err := os.Symlink(target, filepath.Join(farm, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return farm
}

// apiserverVersion is the Kubernetes version the wrapper module pins.
func apiserverVersion(t *testing.T) string {
	t.Helper()
	f, err := os.Open(filepath.Join(testutil.RepoRoot(t), "hack", "tools", "kube-apiserver", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "require "))
		if len(fields) >= 2 && fields[0] == "k8s.io/kubernetes" {
			return fields[1]
		}
	}
	t.Fatal("k8s.io/kubernetes is not required in hack/tools/kube-apiserver/go.mod")
	return ""
}

// kubectlVersion runs kubectl version --client and returns its gitVersion.
func kubectlVersion(t *testing.T, kubectl string) string {
	t.Helper()
	out, err := exec.Command(kubectl, "version", "--client", "-o", "json").Output()
	if err != nil {
		t.Fatalf("%s version: %v", kubectl, err)
	}
	var v struct {
		ClientVersion struct{ GitVersion string } `json:"clientVersion"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("%s version: %v\n%s", kubectl, err, out)
	}
	return v.ClientVersion.GitVersion
}

// TestInstallToolsKubectlWithoutOne: on a machine without kubectl, hack/install-tools.sh
// leaves a real kubectl at the apiserver's version in bin/k8s (the demo and scripts use
// it); a link left there to a machine's kubectl is replaced, never written through; a
// second run builds nothing; and the local cluster's kubectl of the same version, when
// there is one, is reused instead of built. The Go build cache is the user's, so after
// the first build this costs a link.
func TestInstallToolsKubectlWithoutOne(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kubectl")
	}
	want := apiserverVersion(t)
	path := pathWithout(t, "kubectl")
	if _, err := os.Lstat(filepath.Join(path, "kubectl")); err == nil {
		t.Fatal("kubectl is still on the scrubbed PATH")
	}
	bin := t.TempDir()
	kubectl := filepath.Join(bin, "k8s", "kubectl")

	// What the script used to leave: a link to the machine's kubectl.
	decoy := filepath.Join(t.TempDir(), "kubectl")
	decoyText := []byte("#!/bin/sh\necho a machine's kubectl\n")
	if err := os.WriteFile(decoy, decoyText, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(kubectl), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(decoy, kubectl); err != nil {
		t.Fatal(err)
	}

	out := installTools(t, bin, path, nil, "kubectl")
	st, err := os.Lstat(kubectl)
	if err != nil || !st.Mode().IsRegular() {
		t.Fatalf("bin/k8s/kubectl is not a file of its own (%v, %v)\n%s", st, err, out)
	}
	if got := kubectlVersion(t, kubectl); got != want {
		t.Errorf("kubectl is %s, want the apiserver's %s", got, want)
	}
	if got, _ := os.ReadFile(decoy); !bytes.Equal(got, decoyText) {
		t.Errorf("the machine's kubectl was written over")
	}
	if stamp, _ := os.ReadFile(filepath.Join(bin, ".stamp-kubectl")); strings.TrimSpace(string(stamp)) != want {
		t.Errorf("stamp %q, want %s", stamp, want)
	}

	// Up to date: nothing is built.
	if out := installTools(t, bin, path, nil, "kubectl"); strings.Contains(out, "building") {
		t.Errorf("a second run built again:\n%s", out)
	}
	if st2, err := os.Stat(kubectl); err != nil || !st2.ModTime().Equal(st.ModTime()) {
		t.Errorf("a second run replaced kubectl (%v)", err)
	}

	// The local cluster's kubectl of the same version is taken as it is.
	cluster := filepath.Join(bin, "cluster", "kubectl")
	if err := os.MkdirAll(filepath.Dir(cluster), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(kubectl, cluster); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, ".stamp-cluster-kubectl"), []byte(want+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(bin, ".stamp-kubectl")); err != nil {
		t.Fatal(err)
	}
	out = installTools(t, bin, path, nil, "kubectl")
	if strings.Contains(out, "building") {
		t.Errorf("built kubectl though the cluster's was there:\n%s", out)
	}
	if got := kubectlVersion(t, kubectl); got != want {
		t.Errorf("kubectl is %s, want %s", got, want)
	}
}

// fakeWheel writes a pure-Python wheel of the named distribution into dir; with script,
// it installs a console script of that name printing the Python's sys.prefix. pip
// installs it with --no-index --find-links: no registry is asked.
func fakeWheel(t *testing.T, dir, dist, version, script string) {
	t.Helper()
	name := strings.ReplaceAll(dist, "-", "_")
	f, err := os.Create(filepath.Join(dir, name+"-"+version+"-py3-none-any.whl"))
	if err != nil {
		t.Fatal(err)
	}
	w := zip.NewWriter(f)
	info := name + "-" + version + ".dist-info/"
	files := map[string]string{
		name + "_fake.py":      "import sys\n\ndef main():\n    print(sys.prefix)\n",
		info + "METADATA":      "Metadata-Version: 2.1\nName: " + dist + "\nVersion: " + version + "\n",
		info + "WHEEL":         "Wheel-Version: 1.0\nGenerator: memory-operator-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		info + "top_level.txt": name + "_fake\n",
	}
	if script != "" {
		files[info+"entry_points.txt"] = "[console_scripts]\n" + script + " = " + name + "_fake:main\n"
	}
	var record strings.Builder
	for _, p := range slices.Sorted(maps.Keys(files)) {
		fw, err := w.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fw.Write([]byte(files[p])); err != nil {
			t.Fatal(err)
		}
		record.WriteString(p + ",,\n")
	}
	record.WriteString(info + "RECORD,,\n")
	fw, err := w.Create(info + "RECORD")
	if err == nil {
		_, err = fw.Write([]byte(record.String()))
	}
	if err == nil {
		err = w.Close()
	}
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestInstallToolsRemakesACopiedVenv: a bin/ copied with the checkout holds venvs whose
// scripts run the old place's Python (and its packages) though their stamps match.
// install-tools.sh makes such a venv again, here, and leaves one that is here alone.
func TestInstallToolsRemakesACopiedVenv(t *testing.T) {
	if testing.Short() {
		t.Skip("makes Python venvs")
	}
	wheels := t.TempDir()
	fakeWheel(t, wheels, "milvus-lite", "3.2.2", "milvus-lite")
	fakeWheel(t, wheels, "pymilvus", "3.0.2", "")
	pip := []string{"PIP_NO_INDEX=1", "PIP_FIND_LINKS=" + wheels, "MILVUS_LITE_VERSION=3.2.2", "PYMILVUS_VERSION=3.0.2"}
	path := os.Getenv("PATH")
	prefix := func(bin string) string {
		out, err := exec.Command(filepath.Join(bin, "venv", "bin", "milvus-lite")).Output()
		if err != nil {
			t.Fatalf("%s/venv/bin/milvus-lite: %v", bin, err)
		}
		p, err := filepath.EvalSymlinks(strings.TrimSpace(string(out)))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	resolved := func(p string) string {
		r, err := filepath.EvalSymlinks(p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	first := filepath.Join(t.TempDir(), "bin")
	installTools(t, first, path, pip, "milvus")
	if got := prefix(first); got != resolved(filepath.Join(first, "venv")) {
		t.Fatalf("the venv runs %s", got)
	}

	// The checkout copied elsewhere, bin/ with it.
	second := filepath.Join(t.TempDir(), "bin")
	if out, err := exec.Command("cp", "-a", first, second).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	if got := prefix(second); got != resolved(filepath.Join(first, "venv")) {
		t.Fatalf("the copied venv runs %s: this test no longer copies what it means to", got)
	}
	out := installTools(t, second, path, pip, "milvus")
	if got := prefix(second); got != resolved(filepath.Join(second, "venv")) {
		t.Errorf("after install-tools.sh the copied venv still runs %s's Python\n%s", got, out)
	}
	if out := installTools(t, second, path, pip, "milvus"); strings.Contains(out, "installing") {
		t.Errorf("a venv that is here was made again:\n%s", out)
	}
}

// TestInstallToolsShowsBuildProgress: a Go build says while it runs how long it has run
// and how many packages it has built (a cold kube-apiserver printed nothing for many
// minutes), passes on what is not a package (downloads, errors) and says when it is done.
// PROGRESS_EVERY=0 makes every line of the build's output a moment to report.
func TestInstallToolsShowsBuildProgress(t *testing.T) {
	cmd := exec.Command("bash", "-c", `source "$1"; progress kube-apiserver`, "-",
		filepath.Join(testutil.RepoRoot(t), "hack", "install-tools.sh"))
	cmd.Env = append(os.Environ(), "TOOLS_BIN="+t.TempDir(), "PROGRESS_EVERY=0")
	cmd.Stdin = strings.NewReader("k8s.io/api/core/v1\nk8s.io/apiserver/pkg/server\ngo: downloading example.com/m v1.0.0\n" +
		"# k8s.io/kubernetes/cmd/x\nx.go:1:1: undefined: y\nk8s.io/kubernetes/cmd/kube-apiserver")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{
		`(?m)^\[install-tools\] kube-apiserver: still building, \dm\d\ds so far, 1 packages built$`,
		`(?m)^\[install-tools\] kube-apiserver: still building, \dm\d\ds so far, 2 packages built$`,
		`(?m)^go: downloading example.com/m v1.0.0$`,
		`(?m)^# k8s.io/kubernetes/cmd/x$`,
		`(?m)^x.go:1:1: undefined: y$`,
		`(?m)^\[install-tools\] kube-apiserver: built in \dm\d\ds \(3 packages\)$`,
	} {
		if !regexp.MustCompile(want).Match(out) {
			t.Errorf("output lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "k8s.io/api/core/v1") {
		t.Errorf("package paths are passed on, not counted:\n%s", out)
	}
}

// TestInstallToolsNamesWhatTheMachineLacks: what the harness needs from the machine
// (the README's prerequisites) is checked first, and what is missing is named (here
// curl, on a PATH without it or apt-get to install it).
func TestInstallToolsNamesWhatTheMachineLacks(t *testing.T) {
	path := pathWithout(t, "curl", "apt-get")
	cmd := exec.Command("bash", "-c", `source "$1"; ensure_packages`, "-",
		filepath.Join(testutil.RepoRoot(t), "hack", "install-tools.sh"))
	cmd.Env = append(os.Environ(), "TOOLS_BIN="+t.TempDir(), "PATH="+path)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "missing from this machine: curl (Debian's packages") {
		t.Errorf("ensure_packages without curl: %v\n%s", err, out)
	}
}
