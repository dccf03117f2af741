// Package scripts holds the tests of hack/'s shell scripts, run as a user runs them:
// hack/run-job.sh (the demo's stand-in for a kubelet) against a real control plane,
// and hack/install-tools.sh into a scratch bin/ on a PATH without the machine's tools.
// recall_bm25.py and recall_langgraph.py beside them are the recall benchmark's
// baselines (hack/bench, make bench-recall), run with bin/clients-venv's Python.
package scripts
