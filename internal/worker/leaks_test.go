package worker

import (
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestWorkerProcessesLeakNoSecrets runs the snapshot and restore workers as the
// processes their Jobs run, succeeding and failing in every way a secret is involved
// (a wrong PostgreSQL password, a wrong object-storage secret, a malformed or wrong
// encryption key, an embedder API key), and finds none of the secrets it gave them in
// what they print: their stderr is what lands in Pod logs, and their last error in the
// termination message and from there in status.
func TestWorkerProcessesLeakNoSecrets(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	f := newFixture(t)
	f.importGenerated(t, 300)
	bin := buildBinary(t)
	u, err := url.Parse(f.sec.PostgresURI)
	if err != nil {
		t.Fatal(err)
	}
	pgPassword, _ := u.User.Password()
	withPassword := func(pw string) string {
		w := *u
		w.User = url.UserPassword(u.User.Username(), pw)
		return w.String()
	}
	const (
		wrongPassword = "Wr0ng-Passw0rd-9f2c1"
		wrongS3Secret = "Wr0ngS3Secret-7a1b2c3d4e"
		badKey        = "not-a-key-but-a-secret-a1b2c3d4e5f6"
		otherKey      = "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"
		embedderKey   = "sk-embedder-4e3f2a1b0c9d8e7f"
	)
	secrets := []string{pgPassword, f.sec.S3SecretKey, f.sec.S3AccessKey, testKey, wrongPassword, wrongS3Secret, badKey, otherKey, embedderKey}

	snap := f.config("leaks/")
	snapEnv := map[string]string{EnvPostgresURI: f.sec.PostgresURI, EnvS3AccessKey: f.sec.S3AccessKey, EnvS3SecretKey: f.sec.S3SecretKey, EnvEncryptionKey: testKey}
	restore := f.restoreConfig(f.targetSchema(t), "leaks/")
	restore.DetailKey = "leaks/restores/detail.jsonl.zst"
	restore.AllowRepeat = true
	restoreEnv := map[string]string{EnvPostgresURI: f.sec.PostgresURI, EnvSourceS3AccessKey: f.sec.S3AccessKey,
		EnvSourceS3SecretKey: f.sec.S3SecretKey, EnvSourceKey: testKey, EnvEmbedderAPIKey: embedderKey}
	with := func(env map[string]string, k, v string) map[string]string {
		out := map[string]string{}
		for a, b := range env {
			out[a] = b
		}
		out[k] = v
		return out
	}
	cases := []struct {
		name   string
		args   []string
		env    map[string]string
		wantOK bool
	}{
		{"snapshot", append([]string{"snapshot"}, snap.Args()...), snapEnv, true},
		{"snapshot, wrong PostgreSQL password", append([]string{"snapshot"}, f.config("leaks-1/").Args()...), with(snapEnv, EnvPostgresURI, withPassword(wrongPassword)), false},
		{"snapshot, wrong object-storage secret", append([]string{"snapshot"}, f.config("leaks-2/").Args()...), with(snapEnv, EnvS3SecretKey, wrongS3Secret), false},
		{"snapshot, malformed key", append([]string{"snapshot"}, f.config("leaks-3/").Args()...), with(snapEnv, EnvEncryptionKey, badKey), false},
		{"restore", append([]string{"restore"}, restore.Args()...), restoreEnv, true},
		{"restore, wrong key", append([]string{"restore"}, restore.Args()...), with(restoreEnv, EnvSourceKey, otherKey), false},
		{"restore, wrong PostgreSQL password", append([]string{"restore"}, restore.Args()...), with(restoreEnv, EnvPostgresURI, withPassword(wrongPassword)), false},
		{"restore, wrong object-storage secret", append([]string{"restore"}, restore.Args()...), with(restoreEnv, EnvSourceS3SecretKey, wrongS3Secret), false},
	}
	for _, c := range cases {
		cmd := exec.Command(bin, c.args...)
		cmd.Env = os.Environ()
		for k, v := range c.env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out, err := cmd.CombinedOutput()
		if (err == nil) != c.wantOK {
			t.Fatalf("%s: exit %v\n%s", c.name, err, out)
		}
		for _, s := range secrets {
			if s != "" && strings.Contains(string(out), s) {
				t.Errorf("%s: a secret (%d bytes, starting %q) is in its output", c.name, len(s), s[:3])
			}
		}
		if !c.wantOK && len(out) == 0 {
			t.Errorf("%s failed without saying why", c.name)
		}
	}
}
