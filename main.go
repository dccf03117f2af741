// Command memory-operator is the operator's single binary. Its subcommands are the
// controller manager and the workers that the operator's Jobs run.
package main

import (
	"fmt"
	"os"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `memory-operator manages AI-agent memory stores on Kubernetes.

Usage:
  memory-operator manager [flags]   run the controllers
  memory-operator snapshot [flags]  export a store as a package (what snapshot Jobs run)
  memory-operator restore [flags]   import a package into a store (what restore Jobs run)
  memory-operator archive [flags]   archive low-score memories, purge expired ones (what archival Jobs run)
  memory-operator gateway [flags]   serve a store's memory API to its agents (what gateway Deployments run)
  memory-operator version           print the version

Run "memory-operator manager -h" for the manager's flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "manager":
		os.Exit(runManager(args))
	case "snapshot":
		os.Exit(runSnapshotWorker(args))
	case "restore":
		os.Exit(runRestoreWorker(args))
	case "archive":
		os.Exit(runArchiveWorker(args))
	case "gateway":
		os.Exit(runGateway(args))
	case "version", "--version":
		fmt.Println(version)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "memory-operator: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
}
