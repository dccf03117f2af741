package scripts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/amemory/memory-operator/internal/testutil"
)

// fakeWorker stands in for the worker where the test needs output the real one never
// makes: it writes what its first argument says to its log and termination log.
const fakeWorker = `#!/bin/sh
case "$1" in
log-only)
	i=1
	while [ $i -le 100 ]; do printf 'line %03d %s\n' $i "$2" >&2; i=$((i + 1)); done
	exit 3 ;;
file)
	i=0
	while [ $i -lt 500 ]; do printf '%09d\n' $i; i=$((i + 1)); done >"$MEMORY_OPERATOR_TERMINATION_LOG"
	echo "the last line of the log" >&2
	exit 1 ;;
ok)
	printf '{"restored": 5}' >"$MEMORY_OPERATOR_TERMINATION_LOG"
	echo "done"
	exit 0 ;;
esac
exit 99
`

// TestRunJobTerminationMessage: the demo's stand-in for the kubelet (hack/run-job.sh)
// gives a Job's Pod the termination message a kubelet would. The worker's own words
// (what it wrote to its termination log) are the message, not the last line it
// logged (a failed restore's is its peak memory); with FallbackToLogsOnError and
// nothing written, the log's last 80 lines, at most 2048 bytes; a file's last 4096
// bytes; nothing from the log under the File policy or after a success.
func TestRunJobTerminationMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and starts a control plane")
	}
	kubeconfig, c := controlPlane(t)
	root := testutil.RepoRoot(t)
	testutil.HarnessFile(t, filepath.Join(root, "bin", "k8s", "kubectl"), "run hack/install-tools.sh")
	operator := operatorBinary(t)
	fake := filepath.Join(t.TempDir(), "fake-worker")
	if err := os.WriteFile(fake, []byte(fakeWorker), 0o755); err != nil {
		t.Fatal(err)
	}
	ns := testutil.UniqueName("run-job-")
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}

	var lines, long []string
	for i := 21; i <= 100; i++ {
		lines = append(lines, fmt.Sprintf("line %03d \n", i))
		long = append(long, fmt.Sprintf("line %03d %s\n", i, strings.Repeat("x", 40)))
	}
	var file strings.Builder
	for i := range 500 {
		fmt.Fprintf(&file, "%09d\n", i)
	}
	restoreArgs := []string{"restore", "--schema=mem_demo", "--source-endpoint=127.0.0.1:1", "--source-insecure",
		"--source-bucket=b", "--source-prefix=p/", "--detail-key=d", "--dimension=8"}
	fallback, filePolicy := corev1.TerminationMessageFallbackToLogsOnError, corev1.TerminationMessageReadFile
	for _, tc := range []struct {
		name   string
		bin    string
		args   []string
		policy corev1.TerminationMessagePolicy
		code   int
		check  func(t *testing.T, message, stderr string)
	}{
		{name: "a failed restore says its error", bin: operator, args: restoreArgs, policy: fallback, code: 1,
			check: func(t *testing.T, message, stderr string) {
				// What the old stand-in kept: the worker's last line, its peak memory.
				if !strings.Contains(stderr, "peak memory") {
					t.Errorf("the worker no longer logs its peak memory last, so this case tests nothing: %q", stderr)
				}
				if !strings.HasPrefix(message, "memory-operator restore: no object-storage credentials") || strings.Contains(message, "peak memory") {
					t.Errorf("message %q, want the worker's error", message)
				}
			}},
		{name: "fallback to the log's last 80 lines", bin: fake, args: []string{"log-only", ""}, policy: fallback, code: 3,
			check: wantMessage(strings.Join(lines, ""))},
		{name: "fallback to the log's last 2048 bytes", bin: fake, args: []string{"log-only", strings.Repeat("x", 40)}, policy: fallback, code: 3,
			check: wantMessage(strings.Join(long, "")[len(strings.Join(long, ""))-2048:])},
		{name: "no fallback under the File policy", bin: fake, args: []string{"log-only", ""}, policy: filePolicy, code: 3,
			check: wantMessage("")},
		{name: "the file's last 4096 bytes", bin: fake, args: []string{"file"}, policy: fallback, code: 1,
			check: wantMessage(file.String()[file.Len()-4096:])},
		{name: "a success's summary", bin: fake, args: []string{"ok"}, policy: fallback, code: 0,
			check: wantMessage(`{"restored": 5}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := testutil.UniqueName("job-")
			job := workerJob(ns, name, tc.args, tc.policy)
			if err := c.Create(context.Background(), job); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(filepath.Join(root, "hack", "run-job.sh"), ns, name)
			cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "MEMORY_OPERATOR="+tc.bin)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			switch {
			case err == nil && tc.code != 0:
				t.Fatalf("run-job.sh exited 0, want %d", tc.code)
			case err != nil && !errors.As(err, &exit):
				t.Fatalf("run-job.sh: %v\n%s", err, stderr.String())
			case err != nil && exit.ExitCode() != tc.code:
				t.Fatalf("run-job.sh exited %d, want %d\n%s", exit.ExitCode(), tc.code, stderr.String())
			}

			var pod corev1.Pod
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name + "-demo"}, &pod); err != nil {
				t.Fatalf("the Pod: %v\n%s", err, stderr.String())
			}
			if len(pod.Status.ContainerStatuses) != 1 || pod.Status.ContainerStatuses[0].State.Terminated == nil {
				t.Fatalf("Pod status %+v", pod.Status)
			}
			term := pod.Status.ContainerStatuses[0].State.Terminated
			wantReason, wantPhase, wantJob := "Error", corev1.PodFailed, batchv1.JobFailed
			if tc.code == 0 {
				wantReason, wantPhase, wantJob = "Completed", corev1.PodSucceeded, batchv1.JobComplete
			}
			if int(term.ExitCode) != tc.code || term.Reason != wantReason || pod.Status.Phase != wantPhase {
				t.Errorf("terminated %d %s, phase %s; want %d %s, %s", term.ExitCode, term.Reason, pod.Status.Phase, tc.code, wantReason, wantPhase)
			}
			tc.check(t, term.Message, stderr.String())

			if err := c.Get(context.Background(), client.ObjectKeyFromObject(job), job); err != nil {
				t.Fatal(err)
			}
			found := false
			for _, cond := range job.Status.Conditions {
				found = found || (cond.Type == wantJob && cond.Status == corev1.ConditionTrue)
			}
			if !found {
				t.Errorf("Job conditions %+v, want %s", job.Status.Conditions, wantJob)
			}
		})
	}
}

func wantMessage(want string) func(t *testing.T, message, stderr string) {
	return func(t *testing.T, message, _ string) {
		if message != want {
			t.Errorf("termination message (%d bytes) ending %q, want (%d bytes) ending %q", len(message), tail(message), len(want), tail(want))
		}
	}
}

func tail(s string) string { return s[max(0, len(s)-100):] }

// workerJob is a Job shaped as the operator's worker Jobs are, as far as the kubelet's
// part is concerned (the controllers' builder is tested with them).
func workerJob(ns, name string, args []string, policy corev1.TerminationMessagePolicy) *batchv1.Job {
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](0),
			Template: corev1.PodTemplateSpec{
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					AutomountServiceAccountToken: ptr.To(false),
					Containers: []corev1.Container{{
						Name: "restore", Image: "memory-operator:dev", Command: []string{"/memory-operator"}, Args: args,
						TerminationMessagePolicy: policy,
					}},
				},
			},
		},
	}
}
