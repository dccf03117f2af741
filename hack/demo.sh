#!/usr/bin/env bash
# The demo: a local stack on loopback — a Kubernetes control plane (etcd and
# kube-apiserver, no kubelet), PostgreSQL 15, MinIO and Milvus Lite — the operator
# running against it, and a sample MemoryStore applied and shown Ready. Then an "agent"
# remembers and recalls through the store's gateway with the key from the connection
# Secret the operator wrote; the store is
# snapshotted, restored into a second store with a user ID mapped, archived on a
# schedule, and deleted. The steps are hack/demo-steps.sh, which `make demo-cluster`
# shows on a real cluster; here Jobs run through hack/run-job.sh and the gateway through
# hack/run-gateway.sh (there is no kubelet).
#
#   make demo                 # runs it and tears everything down
#   DEMO_KEEP=1 make demo     # leaves the stack running until Ctrl-C
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# kubectl is the one hack/install-tools.sh builds at the control plane's version (the
# machine may have none, or one too old), here and in the Jobs' and gateway's stand-ins.
export PATH="$ROOT/bin/k8s:$PATH"
# DEMO_DIR (default bin/demo) holds its state, services and logs.
DEMO_DIR=${DEMO_DIR:-$ROOT/bin/demo}
export RUN_DIR="$DEMO_DIR/run"
KUBECONFIG="$DEMO_DIR/kubeconfig"
export KUBECONFIG
NS=demo
mkdir -p "$DEMO_DIR"

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
pids=()
cleanup() {
	local pid
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	hack/services.sh stop
}
trap cleanup EXIT

for f in bin/memory-operator bin/k8s/kubectl; do
	[[ -x $f ]] || { echo "$f missing: run 'make demo'" >&2; exit 1; }
done

say "Starting PostgreSQL, MinIO and Milvus Lite on loopback"
hack/services.sh start
# shellcheck disable=SC1091
source "$RUN_DIR/env.sh"

say "Starting a local control plane (etcd + kube-apiserver) with the CRDs installed"
rm -f "$KUBECONFIG"
go build -o "$DEMO_DIR/localcluster" ./hack/localcluster
"$DEMO_DIR/localcluster" --write-kubeconfig "$KUBECONFIG" >"$DEMO_DIR/localcluster.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 120); do [[ -s $KUBECONFIG ]] && break; sleep 0.5; done
[[ -s $KUBECONFIG ]] || { cat "$DEMO_DIR/localcluster.log" >&2; exit 1; }
kubectl get crds

say "Starting the operator (memory-operator manager)"
kubectl create namespace memory-operator-system --dry-run=client -o yaml | kubectl apply -f - >/dev/null
bin/memory-operator manager --operator-namespace memory-operator-system --worker-image memory-operator:dev \
	--metrics-bind-address 0 --health-probe-bind-address 0 >"$DEMO_DIR/operator.log" 2>&1 &
pids+=($!)

# The hooks of the shared steps (hack/demo-steps.sh): no kubelet here, so the gateway's
# and the Jobs' commands run as local processes.
start_gateway() {
	local port
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	echo "(no kubelet here: hack/run-gateway.sh runs the Deployment's command, as the store's own role, on 127.0.0.1:$port)"
	hack/run-gateway.sh "$1" "$2" "$port" >"$DEMO_DIR/gateway.log" 2>&1 &
	pids+=($!)
	gw="http://127.0.0.1:$port"
	for _ in $(seq 1 120); do curl -fs "$gw/readyz" >/dev/null 2>&1 && return; sleep 0.5; done
	failed deployment acme-gateway
}
run_job() {
	echo "(no kubelet here: hack/run-job.sh runs the Job's command with the Secrets it references)"
	hack/run-job.sh "$1" "$2"
}
demo_diagnostics() {
	echo "--- the operator's log (last 40 lines):"
	tail -n 40 "$DEMO_DIR/operator.log"
	[[ -f $DEMO_DIR/gateway.log ]] && { echo "--- the gateway's log:"; tail -n 20 "$DEMO_DIR/gateway.log"; }
}
# shellcheck source=hack/demo-steps.sh
source hack/demo-steps.sh
demo_story

if [[ -n ${DEMO_KEEP:-} ]]; then
	say "The stack keeps running. In another shell: export KUBECONFIG=$KUBECONFIG; bin/k8s/kubectl get memorystores -A; press Ctrl-C to stop"
	wait "${pids[0]}"
fi
demo_delete
say "Demo finished"
