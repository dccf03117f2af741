#!/usr/bin/env bash
# The demo on a real cluster (make demo-cluster, as root): the local single-node cluster
# (hack/cluster.sh), the operator installed with its Helm chart from the locally built
# image into namespaces at the restricted Pod Security level, PostgreSQL, MinIO and
# Milvus Lite on the cluster bridge's address. Then the same steps as `make demo`
# (hack/demo-steps.sh): a MemoryStore shown Ready, an agent remembering and recalling
# through the gateway's Service, a snapshot, a restore into a second store with a user ID
# mapped, archival on a schedule, and the store deleted. `make demo` is the fast path
# with no kubelet (the Jobs and the gateway run as local processes); here they are Pods.
#
#   make demo-cluster                 # runs it and tears everything down
#   DEMO_KEEP=1 make demo-cluster     # leaves the cluster up (hack/cluster.sh down to stop)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export RUN_DIR="$ROOT/bin/demo-cluster-run" SERVICES_HOST=10.213.0.1
export KUBECONFIG="$ROOT/bin/cluster-run/kubeconfig"
NS=demo
K="$ROOT/bin/cluster/kubectl"
say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
cleanup() {
	[[ -n ${DEMO_KEEP:-} ]] && { say "DEMO_KEEP: the cluster stays up. export KUBECONFIG=$KUBECONFIG; bin/cluster/kubectl get memorystores -A; stop with: RUN_DIR=$RUN_DIR hack/services.sh stop; hack/cluster.sh down"; return; }
	hack/services.sh stop || true
	hack/cluster.sh down || true
}

hack/install-tools.sh all
hack/install-tools.sh cluster
make --no-print-directory image >/dev/null
hack/cluster.sh down
trap cleanup EXIT INT TERM
say "Starting a single-node cluster (kubelet, containerd, runc) and the backends on 10.213.0.1"
hack/cluster.sh up
hack/services.sh start
# shellcheck disable=SC1091
source "$RUN_DIR/env.sh"
"$K" get nodes -o wide

say "helm install memory-operator (restricted Pod Security in both namespaces)"
for ns in memory-operator-system "$NS"; do
	"$K" create namespace "$ns" --dry-run=client -o yaml | "$K" apply -f - >/dev/null
	"$K" label namespace "$ns" pod-security.kubernetes.io/enforce=restricted --overwrite >/dev/null
done
bin/helm upgrade --install memory-operator charts/memory-operator -n memory-operator-system \
	--set image.repository=localhost/memory-operator --set image.tag=e2e --set image.pullPolicy=Never --wait --timeout 3m >/dev/null
"$K" -n memory-operator-system get pods

# The hooks of the shared steps (hack/demo-steps.sh): here the kubelet runs the
# gateway's and the Jobs' Pods.
kubectl() { "$K" "$@"; }
start_gateway() {
	kubectl -n "$1" rollout status deployment "$2-gateway" --timeout=120s
	gw="http://$(kubectl -n "$1" get service "$2-gateway" -o jsonpath='{.spec.clusterIP}'):8080"
	echo "(the gateway's Pods, reached through the Service $2-gateway at $gw)"
	for _ in $(seq 1 120); do curl -fs "$gw/readyz" >/dev/null 2>&1 && return; sleep 0.5; done
	failed deployment "$2-gateway"
}
run_job() {
	local state="" i
	echo "(the Job $2 runs as a Pod)"
	for i in $(seq 1 360); do
		state=$(kubectl -n "$1" get job "$2" -o jsonpath='{range .status.conditions[?(@.status=="True")]}{.type} {end}')
		[[ $state == *Complete* || $state == *Failed* ]] && break
		sleep 0.5
	done
	kubectl -n "$1" get pods -l batch.kubernetes.io/job-name="$2" -o custom-columns='POD:.metadata.name,PHASE:.status.phase,EXIT:.status.containerStatuses[0].state.terminated.exitCode,MESSAGE:.status.containerStatuses[0].state.terminated.message'
}
demo_diagnostics() {
	kubectl -n "$NS" get pods,jobs -o wide
	kubectl -n "$NS" get events --sort-by=.lastTimestamp | tail -n 20
	echo "--- the operator's log (last 40 lines):"
	kubectl -n memory-operator-system logs deployment/memory-operator --tail=40
}
# shellcheck source=hack/demo-steps.sh
source hack/demo-steps.sh
demo_story
if [[ -n ${DEMO_KEEP:-} ]]; then
	say "DEMO_KEEP: the store acme stays, and the cluster"
else
	demo_delete
fi
say "Demo finished"
