//go:build tools

// Package tools pins the Kubernetes binaries this project builds from the Go module
// proxy: kube-apiserver for envtest, and the rest of a single-node cluster for the
// end-to-end tests (hack/cluster.sh), kubectl at the same version among them.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
