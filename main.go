// Command memory-operator is the operator's single binary. Its subcommands are the
// controller manager and the workers that the operator's Jobs run.
package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `memory-operator manages AI-agent memory stores on Kubernetes.

Usage:
  memory-operator manager [flags]   run the controllers
  memory-operator snapshot [flags]  export a store as a package (what snapshot Jobs run)
  memory-operator restore [flags]   import a package into a store (what restore Jobs run)
  memory-operator archive [flags]   archive low-score memories, purge expired ones (what archival Jobs run)
  memory-operator drill [flags]     restore a snapshot into a store's scratch copy and check it (what restore drill Jobs run)
  memory-operator reembed [flags]   fill a new index generation with another embedding model (what embedding switch Jobs run)
  memory-operator gateway [flags]   serve a store's memory API to its agents (what gateway Deployments run)
  memory-operator version           print the version

Run "memory-operator manager -h" for the manager's flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	os.Exit(withCPUProfile(os.Getenv("MEMORY_OPERATOR_CPU_PROFILE"), func() int { return dispatch(os.Args[1], os.Args[2:]) }))
}

// withCPUProfile runs fn, writing a CPU profile of it to path when path is set: how
// a slow worker run is diagnosed (go tool pprof).
func withCPUProfile(path string, fn func() int) int {
	if path == "" {
		return fn()
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "memory-operator: CPU profile %s: %v\n", path, err)
		return 2
	}
	code := fn()
	pprof.StopCPUProfile()
	_ = f.Close()
	return code
}

func dispatch(cmd string, args []string) int {
	switch cmd {
	case "manager":
		return runManager(args)
	case "snapshot":
		return runSnapshotWorker(args)
	case "restore":
		return runRestoreWorker(args)
	case "archive":
		return runArchiveWorker(args)
	case "drill":
		return runDrillWorker(args)
	case "reembed":
		return runReembedWorker(args)
	case "gateway":
		return runGateway(args)
	case "version", "--version":
		fmt.Println(version)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "memory-operator: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	return 0
}
