#!/usr/bin/env bash
# The demo on a real cluster (make demo-cluster, as root): the local single-node cluster
# (hack/cluster.sh), the operator installed with its Helm chart from the locally built
# image, PostgreSQL, MinIO and Milvus Lite on the cluster bridge's address. A MemoryStore
# with a gateway is applied; an agent remembers and searches through the gateway's
# Service; the store is snapshotted and restored into a second store with a user ID
# mapped, each by a Job that runs as a real Pod. `make demo` is the fast path with no
# kubelet (Jobs run as local processes); this one is what a cluster does.
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
	[[ -n ${DEMO_KEEP:-} ]] && { say "DEMO_KEEP: the cluster stays up. export KUBECONFIG=$KUBECONFIG; stop with: RUN_DIR=$RUN_DIR hack/services.sh stop; hack/cluster.sh down"; return; }
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

say "A MemoryStore for tenant acme, with a gateway"
"$K" -n "$NS" create secret generic pg-admin --from-literal=username="$MEMORY_TEST_PG_USER" --from-literal=password="$MEMORY_TEST_PG_PASSWORD"
"$K" -n "$NS" create secret generic s3-credentials --from-literal=accessKeyID="$MEMORY_TEST_S3_ACCESS_KEY" --from-literal=secretAccessKey="$MEMORY_TEST_S3_SECRET_KEY"
"$K" -n "$NS" create secret generic snapshot-key --from-literal=key="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"
backend="postgres: {host: $MEMORY_TEST_PG_HOST, port: $MEMORY_TEST_PG_PORT, sslMode: disable, adminSecret: {name: pg-admin}}
    objectStorage: {endpoint: $MEMORY_TEST_S3_ENDPOINT, bucket: agent-memory, insecure: true, createBucket: true, credentialsSecret: {name: s3-credentials}}"
"$K" apply -f - <<YAML
apiVersion: memory.amemory.io/v1alpha1
kind: MemoryStore
metadata: {name: acme, namespace: $NS}
spec:
  tenant: acme
  backend:
    $backend
    milvus: {address: $MEMORY_TEST_MILVUS_ADDR}
  vector: {dimension: 384, metric: COSINE}
  reclaimPolicy: Delete
  gateway: {enabled: true, keys: [{name: agent}]}
YAML
"$K" -n "$NS" wait memorystore/acme --for=condition=GatewayReady --timeout=120s >/dev/null
"$K" -n "$NS" get memorystores,deployments,services,pods

say "An agent remembers and searches through the gateway's Service"
gw="http://$("$K" -n "$NS" get service acme-gateway -o jsonpath='{.spec.clusterIP}'):8080"
key=$("$K" -n "$NS" get secret acme-memory -o jsonpath='{.data.gatewayKey}' | base64 -d)
for _ in $(seq 1 60); do curl -fs "$gw/readyz" >/dev/null && break; sleep 0.5; done
api() { curl -sS -H "x-api-key: $key" -H 'Content-Type: application/json' "$@"; echo; }
api -X POST "$gw/v1/memories/batch" -d '{"memories": [
 {"memory_id": "demo-1", "memory_type": "semantic", "scope": "user:1024", "key": "preference.coffee", "content": {"likes": "flat white"}, "base_score": 0.9},
 {"memory_id": "demo-2", "memory_type": "episodic", "scope": "user:1024", "content": {"event": "asked for a refund"}, "base_score": 0.6}]}'
api -X POST "$gw/v1/search" -d '{"scope": "user:1024", "query": "refund", "top_k": 1}'

say "A MemorySnapshot: its Job runs as a Pod"
"$K" apply -f - <<YAML
apiVersion: memory.amemory.io/v1alpha1
kind: MemorySnapshot
metadata: {name: before-migration, namespace: $NS}
spec:
  storeRef: {name: acme}
  encryption: {keySecret: {name: snapshot-key, key: key}}
YAML
"$K" -n "$NS" wait memorysnapshot/before-migration --for=condition=Ready --timeout=120s >/dev/null
"$K" -n "$NS" get memorysnapshots
"$K" -n "$NS" get jobs,pods -l memory.amemory.io/snapshot=before-migration

say "Restore into a second store, renaming user:1024 to user:dbc0a3"
"$K" apply -f - <<YAML
apiVersion: memory.amemory.io/v1alpha1
kind: MemoryStore
metadata: {name: acme-v2, namespace: $NS}
spec:
  tenant: acme-v2
  backend:
    $backend
  vector: {dimension: 384}
  reclaimPolicy: Delete
---
apiVersion: memory.amemory.io/v1alpha1
kind: MemoryRestore
metadata: {name: migrate, namespace: $NS}
spec:
  source: {snapshotRef: {name: before-migration}, keySecret: {name: snapshot-key, key: key}}
  targetRef: {name: acme-v2}
  mapping: {scopes: [{from: "user:1024", to: "user:dbc0a3"}]}
YAML
"$K" -n "$NS" wait memoryrestore/migrate --for=condition=Ready --timeout=180s >/dev/null
"$K" -n "$NS" get memoryrestores -o wide
psql "$("$K" -n "$NS" get secret acme-v2-memory -o jsonpath='{.data.uri}' | base64 -d)" -q -c 'SELECT memory_id, scope FROM memories ORDER BY memory_id'
say "Demo finished"
