// Command healthcheck prints, for every object in the given YAML files, the
// health verdicts of kstatus, Argo CD's health.lua and Flux's
// healthCheckExprs, and whether they agree. It exits with status 1 when any
// object gets disagreeing verdicts or a judge fails.
//
//	go run ./hack/health/healthcheck [-dir config/health] file.yaml...
//
// With -argocd-cm it prints instead the argocd-cm patch installing the Lua scripts.
package main

import (
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/amemory/memory-operator/hack/health"
)

func main() {
	dir := flag.String("dir", "config/health", "directory holding <group>/<Kind>/health.lua and "+health.FluxChecksFile)
	argoCM := flag.Bool("argocd-cm", false, "print the argocd-cm patch installing the health scripts, and exit")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: healthcheck [-dir DIR] file.yaml...\n       healthcheck [-dir DIR] -argocd-cm\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *argoCM {
		cm, err := health.ArgoCDConfig(*dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		_, _ = os.Stdout.Write(cm)
		return
	}
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}

	ok := true
	for _, path := range flag.Args() {
		objs, err := health.ReadObjects(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			ok = false
			continue
		}
		for i, obj := range objs {
			if !report(*dir, fmt.Sprintf("%s#%d", path, i+1), obj) {
				ok = false
			}
		}
	}
	if !ok {
		os.Exit(1)
	}
}

// report prints one object's verdicts and tells whether they agree.
func report(dir, where string, obj map[string]any) bool {
	u := &unstructured.Unstructured{Object: obj}
	name := u.GetName()
	if ns := u.GetNamespace(); ns != "" {
		name = ns + "/" + name
	}
	fmt.Printf("%s: %s %s\n", where, u.GetKind(), name)

	// A judge's error is already its verdict's message.
	vs, err := health.Judge(dir, obj)
	for _, v := range vs.All() {
		fmt.Printf("  %s\n", v)
	}
	switch {
	case err != nil:
		fmt.Println("  ERROR: a judge could not judge the object")
		return false
	case !vs.Agree():
		fmt.Println("  DISAGREE")
		return false
	}
	fmt.Printf("  agree: %s\n", vs.Kstatus.Health)
	return true
}
