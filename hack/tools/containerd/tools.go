//go:build tools

// Package tools pins containerd v2 (its daemon, the runc shim and ctr) for the local
// cluster of the end-to-end tests: Debian's containerd 1.6 lacks the CRI RuntimeConfig
// call that kubelets from 1.38 on require.
package tools

import (
	_ "github.com/containerd/containerd/v2/cmd/containerd"
	_ "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2"
	_ "github.com/containerd/containerd/v2/cmd/ctr"
)
