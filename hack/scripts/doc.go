// Package scripts holds the tests of hack/'s shell scripts, run as a user runs them:
// hack/run-job.sh (the demo's stand-in for a kubelet) against a real control plane,
// and hack/install-tools.sh into a scratch bin/ on a PATH without the machine's tools.
package scripts
