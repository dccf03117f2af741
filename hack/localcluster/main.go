// Command localcluster runs a local Kubernetes control plane (etcd and kube-apiserver
// from bin/k8s, as envtest does) with the memory-operator CRDs installed, writes an
// admin kubeconfig, and runs until interrupted. hack/demo.sh uses it; there is no
// kubelet, so Pods and Jobs are stored but never run.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

func main() {
	kubeconfig := flag.String("write-kubeconfig", "bin/demo/kubeconfig", "Where to write the admin kubeconfig.")
	crds := flag.String("crds", "config/crd/bases", "Directory of CRD manifests to install.")
	flag.Parse()

	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{*crds},
		ErrorIfCRDPathMissing: true,
	}
	if _, err := env.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "localcluster: starting the control plane: %v (is KUBEBUILDER_ASSETS set? run hack/install-tools.sh)\n", err)
		os.Exit(1)
	}
	code := run(env, *kubeconfig)
	if err := env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "localcluster: stopping: %v\n", err)
	}
	os.Exit(code)
}

func run(env *envtest.Environment, kubeconfigPath string) int {
	user, err := env.AddUser(envtest.User{Name: "demo-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "localcluster: adding a user: %v\n", err)
		return 1
	}
	cfg, err := user.KubeConfig()
	if err != nil {
		fmt.Fprintf(os.Stderr, "localcluster: kubeconfig: %v\n", err)
		return 1
	}
	if err := os.WriteFile(kubeconfigPath, cfg, 0o600); err != nil {
		fmt.Fprintf(os.Stderr, "localcluster: %v\n", err)
		return 1
	}
	fmt.Printf("control plane at %s; kubeconfig %s\n", env.Config.Host, kubeconfigPath)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	return 0
}
