package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/amemory/memory-operator/internal/worker"
)

// terminationLog is where Kubernetes reads a container's last words (the kubelet mounts
// a file there); the worker's error or summary lands there so the controller can show
// it in a condition. terminationLogEnv names another file, for running a Job's command
// outside a Pod as the demo does (hack/run-job.sh).
const (
	terminationLog    = "/dev/termination-log"
	terminationLogEnv = "MEMORY_OPERATOR_TERMINATION_LOG"
)

// runSnapshotWorker is `memory-operator snapshot`: the process a snapshot Job runs.
func runSnapshotWorker(args []string) int {
	cfg, err := worker.ParseSnapshotArgs(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return fail("snapshot", err, 2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer reportPeakMemory("snapshot")

	start := time.Now().UTC()
	m, err := worker.RunSnapshot(ctx, cfg, worker.SecretsFromEnv(), worker.RunOptions{Version: version, Now: start, Progress: os.Stderr})
	if err != nil {
		return fail("snapshot", err, 1)
	}
	summary := map[string]any{
		"prefix":     cfg.Destination.Prefix,
		"packageId":  m.PackageID,
		"items":      m.Counts.Items,
		"scopes":     m.Counts.Scopes,
		"shards":     len(m.Shards),
		"bytes":      m.StoredBytes(),
		"tombstones": m.Tombstones.Count,
		"duration":   time.Since(start).Round(time.Millisecond).String(),
	}
	_ = json.NewEncoder(os.Stdout).Encode(summary)
	return 0
}

// runRestoreWorker is `memory-operator restore`: the process a restore Job runs. On
// success its summary (counts) goes to stdout and the termination log, where the
// controller reads it.
func runRestoreWorker(args []string) int {
	cfg, err := worker.ParseRestoreArgs(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return fail("restore", err, 2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer reportPeakMemory("restore")

	sum, err := worker.RunRestore(ctx, cfg, worker.RestoreSecretsFromEnv(), worker.RunOptions{Version: version, Now: time.Now().UTC(), Progress: os.Stderr})
	if err != nil && sum.Error != "" {
		// It failed after writing part of the package: the summary (with the error)
		// tells the controller what was written.
		fmt.Fprintf(os.Stderr, "memory-operator restore: %v\n", err)
		if msg, merr := sum.TerminationMessage(); merr == nil {
			writeTerminationLog(string(msg))
			return 1
		}
	}
	if err != nil {
		return fail("restore", err, 1)
	}
	msg, err := sum.TerminationMessage()
	if err != nil {
		return fail("restore", err, 1)
	}
	fmt.Println(string(msg))
	writeTerminationLog(string(msg))
	return 0
}

// runArchiveWorker is `memory-operator archive`: the process an archival Job runs. On
// success its summary (counts) goes to stdout and the termination log, where the
// controller reads it.
func runArchiveWorker(args []string) int {
	cfg, err := worker.ParseArchiveArgs(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return fail("archive", err, 2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer reportPeakMemory("archive")

	sum, err := worker.RunArchive(ctx, cfg, worker.SecretsFromEnv(), worker.RunOptions{Version: version, Now: time.Now().UTC(), Progress: os.Stderr})
	if err != nil {
		return fail("archive", err, 1)
	}
	msg, err := sum.TerminationMessage()
	if err != nil {
		return fail("archive", err, 1)
	}
	fmt.Println(string(msg))
	writeTerminationLog(string(msg))
	return 0
}

// runDrillWorker is `memory-operator drill`: the process a restore drill Job runs. Its
// summary goes to stdout and the termination log whether the drill passed or not
// (exit 0 when it passed, 1 when a check failed or it could not run to its end).
func runDrillWorker(args []string) int {
	cfg, err := worker.ParseDrillArgs(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return fail("drill", err, 2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer reportPeakMemory("drill")

	sum, err := worker.RunDrill(ctx, cfg, worker.RestoreSecretsFromEnv(), worker.RunOptions{Version: version, Now: time.Now().UTC(), Progress: os.Stderr})
	if err != nil {
		fmt.Fprintf(os.Stderr, "memory-operator drill: %v\n", err)
	}
	msg, merr := sum.TerminationMessage()
	if merr != nil {
		return fail("drill", merr, 1)
	}
	fmt.Println(string(msg))
	writeTerminationLog(string(msg))
	if err != nil {
		return 1
	}
	return 0
}

// runReembedWorker is `memory-operator reembed`: the process an embedding switch's
// Job runs. Its summary goes to stdout and the termination log whether it succeeded
// or not (exit 0 when the new index is complete and passed its check).
func runReembedWorker(args []string) int {
	cfg, err := worker.ParseReembedArgs(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return fail("reembed", err, 2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer reportPeakMemory("reembed")

	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	sum, err := worker.RunReembed(ctx, cfg, worker.ReembedSecretsFromEnv(), log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "memory-operator reembed: %v\n", err)
	}
	msg, merr := sum.TerminationMessage()
	if merr != nil {
		return fail("reembed", merr, 1)
	}
	fmt.Println(string(msg))
	writeTerminationLog(string(msg))
	if err != nil {
		return 1
	}
	return 0
}

// reportPeakMemory writes the process's peak resident memory (VmHWM) to stderr when
// a worker ends: Job logs show what a run needed, and the tests hold the workers to
// their memory target with it. (A parent's rusage of its child is no measure: with
// vfork-style spawning the child's high-water mark starts at the parent's.)
func reportPeakMemory(cmd string) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			if kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64); err == nil {
				fmt.Fprintf(os.Stderr, "memory-operator %s: peak memory %d MiB\n", cmd, kb>>10)
			}
			return
		}
	}
}

// fail reports a worker error on stderr and in the termination log.
func fail(cmd string, err error, code int) int {
	msg := fmt.Sprintf("memory-operator %s: %v", cmd, err)
	fmt.Fprintln(os.Stderr, msg)
	writeTerminationLog(msg)
	return code
}

// writeTerminationLog replaces the termination log's content when the file exists (in
// a pod); elsewhere it does nothing.
func writeTerminationLog(msg string) {
	path := terminationLog
	if p := os.Getenv(terminationLogEnv); p != "" {
		path = p
	}
	if f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0); err == nil {
		_, _ = f.WriteString(msg)
		_ = f.Close()
	}
}
