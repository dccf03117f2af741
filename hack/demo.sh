#!/usr/bin/env bash
# The demo: a local stack on loopback — a Kubernetes control plane (etcd and
# kube-apiserver, no kubelet), PostgreSQL 15, MinIO and Milvus Lite — the operator
# running against it, and a sample MemoryStore applied and shown Ready. Then an "agent"
# remembers and recalls through the store's gateway with the key from the connection
# Secret the operator wrote; the store is
# snapshotted, restored into a second store with a user ID mapped, and archived on a
# schedule. Jobs run through hack/run-job.sh and the gateway through
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
DEMO_DIR="$ROOT/bin/demo"
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

say "Applying a MemoryStore for tenant acme (PostgreSQL + Milvus + MinIO)"
kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl -n "$NS" create secret generic pg-admin --from-literal=username="$MEMORY_TEST_PG_USER" \
	--from-literal=password="$MEMORY_TEST_PG_PASSWORD" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl -n "$NS" create secret generic s3-credentials --from-literal=accessKeyID="$MEMORY_TEST_S3_ACCESS_KEY" \
	--from-literal=secretAccessKey="$MEMORY_TEST_S3_SECRET_KEY" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl apply -f - <<YAML
apiVersion: memory.amemory.io/v1alpha1
kind: MemoryStore
metadata:
  name: acme
  namespace: $NS
spec:
  tenant: acme
  backend:
    postgres:
      host: 127.0.0.1
      port: $MEMORY_TEST_PG_PORT
      sslMode: disable
      adminSecret: {name: pg-admin}
    milvus:
      address: $MEMORY_TEST_MILVUS_ADDR
    objectStorage:
      endpoint: $MEMORY_TEST_S3_ENDPOINT
      bucket: agent-memory
      insecure: true
      createBucket: true
      credentialsSecret: {name: s3-credentials}
  vector:
    dimension: 384
    metric: COSINE
  embedder:
    type: Hashing
  reclaimPolicy: Delete
  gateway:
    enabled: true
    keys:
    - name: agent
    - name: support-readonly
      scopes: ["user:*"]
      readOnly: true
YAML

if ! kubectl -n "$NS" wait memorystore/acme --for=condition=Ready --timeout=120s; then
	kubectl -n "$NS" get memorystore acme -o yaml
	tail -n 40 "$DEMO_DIR/operator.log"
	exit 1
fi
say "kubectl get memorystores"
kubectl -n "$NS" get memorystores -o wide
say "Conditions"
kubectl -n "$NS" get memorystore acme -o jsonpath='{range .status.conditions[*]}{.type}{"\t"}{.status}{"\t"}{.reason}{"\t"}{.message}{"\n"}{end}'
say "The connection Secret an agent mounts (keys only)"
kubectl -n "$NS" get secret acme-memory -o go-template='{{range $k, $v := .data}}{{$k}}{{"\n"}}{{end}}'

say "The gateway: a Deployment and Service per store, keys in a Secret of their own"
kubectl -n "$NS" get deployments,services -l memory.amemory.io/store=acme
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
echo "(no kubelet here: hack/run-gateway.sh runs the Deployment's command, as the store's own role, on 127.0.0.1:$port)"
hack/run-gateway.sh "$NS" acme "$port" >"$DEMO_DIR/gateway.log" 2>&1 &
pids+=($!)
kubectl -n "$NS" wait memorystore/acme --for=condition=GatewayReady --timeout=60s >/dev/null || { cat "$DEMO_DIR/gateway.log"; exit 1; }
kubectl -n "$NS" get memorystore acme -o jsonpath='GatewayReady: {.status.conditions[?(@.type=="GatewayReady")].reason}, url {.status.gateway.url}, keys {.status.gateway.keys}{"\n"}'
gw="http://127.0.0.1:$port"
key=$(kubectl -n "$NS" get secret acme-memory -o jsonpath='{.data.gatewayKey}' | base64 -d)
api() { curl -sS -H "x-api-key: $key" -H 'Content-Type: application/json' "$@"; echo; }

say "An agent remembers through the gateway (the key from the connection Secret), then recalls"
api -X POST "$gw/v1/memories/batch" -d '{"memories": [
 {"memory_id": "demo-1", "memory_type": "semantic",   "scope": "user:1024", "key": "preference.coffee", "content": {"likes": "flat white"}, "base_score": 0.9},
 {"memory_id": "demo-2", "memory_type": "episodic",   "scope": "user:1024", "content": {"event": "asked for a refund"}, "base_score": 0.6},
 {"memory_id": "demo-3", "memory_type": "semantic",   "scope": "user:2048", "key": "address.city", "content": {"city": "Lisbon"}, "base_score": 0.8},
 {"memory_id": "demo-4", "memory_type": "procedural", "scope": "agent:support", "key": "refund", "content": {"steps": ["verify", "refund"]}, "base_score": 0.7}]}'
echo "search user:1024 for \"refund\" (each result says why: similarity, effective score, age):"
api -X POST "$gw/v1/search" -d '{"scope": "user:1024", "query": "refund", "top_k": 2}' |
	python3 -c 'import json,sys; [print("  %-7s sim %.2f  score %.2f  age %.0fs  %s" % (r["memory"]["memory_id"], r["similarity"], r["effective_score"], r["age_seconds"], json.dumps(r["memory"]["content"]))) for r in json.load(sys.stdin)["results"]]'
echo "recall the coffee preference by key:"
api -X POST "$gw/v1/recall" -d '{"scope": "user:1024", "key": "preference.coffee"}' |
	python3 -c 'import json,sys; [print("  %s %s" % (r["memory"]["memory_id"], json.dumps(r["memory"]["content"]))) for r in json.load(sys.stdin)["results"]]'
if [[ -x bin/clients-venv/bin/python ]]; then
	echo "the same memory through the LangGraph Store API, with langgraph_sdk's own client (namespace (\"memories\", \"1024\") is user:1024):"
	GW="$gw" KEY="$key" bin/clients-venv/bin/python - <<'PY'
import os
from langgraph_sdk import get_sync_client
store = get_sync_client(url=os.environ["GW"], api_key=os.environ["KEY"]).store
store.put_item(("memories", "1024"), "preference.tea", {"likes": "green tea"})
for it in store.search_items(("memories", "1024"), limit=5)["items"]:
    print("  ", tuple(it["namespace"]), it["key"], it["value"])
PY
fi
ro=$(kubectl -n "$NS" get secret acme-gateway-keys -o jsonpath='{.data.support-readonly}' | base64 -d)
echo "a read-only key limited to user:* may not write, nor read agent:support:"
curl -sS -H "x-api-key: $ro" -H 'Content-Type: application/json' -X POST "$gw/v1/memories" \
	-d '{"scope": "user:1024", "memory_type": "semantic", "content": {"x": 1}}'; echo
curl -sS -H "x-api-key: $ro" "$gw/v1/scopes/agent:support/memories"; echo
uri=$(kubectl -n "$NS" get secret acme-memory -o jsonpath='{.data.uri}' | base64 -d)
echo "(the connection Secret's uri is the same least-privilege role the gateway uses; it is refused outside its schema:)"
psql "$uri" -q -c 'CREATE TABLE public.escape (x int)' 2>&1 | sed 's/^/  /' || true

say "Snapshotting the store: a MemorySnapshot becomes a Job"
kubectl -n "$NS" create secret generic snapshot-key \
	--from-literal=key="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl apply -f - <<YAML
apiVersion: memory.amemory.io/v1alpha1
kind: MemorySnapshot
metadata:
  name: before-migration
  namespace: $NS
spec:
  storeRef: {name: acme}
  encryption: {keySecret: {name: snapshot-key, key: key}}
YAML
job=""
for _ in $(seq 1 60); do
	job=$(kubectl -n "$NS" get jobs -l memory.amemory.io/snapshot=before-migration -o jsonpath='{.items[0].metadata.name}' 2>/dev/null || true)
	[[ -n $job ]] && break
	sleep 0.5
done
[[ -n $job ]] || { kubectl -n "$NS" get memorysnapshot before-migration -o yaml; exit 1; }
kubectl -n "$NS" get job "$job" -o jsonpath='Job {.metadata.name}: {.spec.template.spec.containers[0].command} {.spec.template.spec.containers[0].args}{"\n"}'
echo "(no kubelet here: hack/run-job.sh runs the Job's command with the Secrets it references)"
hack/run-job.sh "$NS" "$job"
kubectl -n "$NS" wait memorysnapshot/before-migration --for=condition=Completed --timeout=60s >/dev/null
say "kubectl get memorysnapshots"
kubectl -n "$NS" get memorysnapshots -o wide

say "Migrating: restore the snapshot into a new store, renaming user:1024 to user:dbc0a3"
kubectl apply -f - <<YAML
apiVersion: memory.amemory.io/v1alpha1
kind: MemoryStore
metadata:
  name: acme-v2
  namespace: $NS
spec:
  tenant: acme-v2
  backend:
    postgres:
      host: 127.0.0.1
      port: $MEMORY_TEST_PG_PORT
      sslMode: disable
      adminSecret: {name: pg-admin}
    objectStorage:
      endpoint: $MEMORY_TEST_S3_ENDPOINT
      bucket: agent-memory
      insecure: true
      credentialsSecret: {name: s3-credentials}
  vector: {dimension: 384}
  reclaimPolicy: Delete
---
apiVersion: memory.amemory.io/v1alpha1
kind: MemoryRestore
metadata:
  name: migrate
  namespace: $NS
spec:
  source:
    snapshotRef: {name: before-migration}
    keySecret: {name: snapshot-key, key: key}
  targetRef: {name: acme-v2}
  mapping:
    scopes:
    - {from: "user:1024", to: "user:dbc0a3"}
YAML
job=""
for _ in $(seq 1 120); do
	job=$(kubectl -n "$NS" get jobs -l memory.amemory.io/restore=migrate -o jsonpath='{.items[0].metadata.name}' 2>/dev/null || true)
	[[ -n $job ]] && break
	sleep 0.5
done
[[ -n $job ]] || { kubectl -n "$NS" get memoryrestore migrate -o yaml; exit 1; }
hack/run-job.sh "$NS" "$job"
kubectl -n "$NS" wait memoryrestore/migrate --for=condition=Completed --timeout=60s >/dev/null
say "kubectl get memoryrestores"
kubectl -n "$NS" get memoryrestores -o wide
say "The new store, through its own connection Secret"
psql "$(kubectl -n "$NS" get secret acme-v2-memory -o jsonpath='{.data.uri}' | base64 -d)" -q \
	-c 'SELECT memory_id, scope, key, content FROM memories ORDER BY memory_id'
kubectl -n "$NS" delete memorystore acme-v2 --timeout=60s >/dev/null

say "Archival: an old, unimportant memory leaves recall and the vector index on schedule"
psql "$uri" -v ON_ERROR_STOP=1 -q <<'SQL'
INSERT INTO memories (memory_id, memory_type, scope, key, content, content_hash, source, base_score, created_at, updated_at) VALUES
 ('demo-5', 'episodic', 'user:1024', NULL, '{"event": "asked about opening hours"}', '\x05', 'demo', 0.3, now() - interval '400 days', now() - interval '400 days');
SQL
kubectl -n "$NS" patch memorystore acme --type merge \
	-p '{"spec":{"archival":{"schedule":"* * * * *","threshold":"0.05"}}}' >/dev/null
echo "(archival every minute, threshold 0.05: episodic memories halve every 30 days, so demo-5 scores 0.3 * 0.5^(400/30) ≈ 0.00003)"
job=""
for _ in $(seq 1 150); do
	job=$(kubectl -n "$NS" get jobs -l memory.amemory.io/store=acme -o name 2>/dev/null | grep -- '-archive-' | head -n 1 || true)
	[[ -n $job ]] && break
	sleep 0.5
done
[[ -n $job ]] || { kubectl -n "$NS" get memorystore acme -o yaml; exit 1; }
job=${job#job.batch/}
hack/run-job.sh "$NS" "$job"
for _ in $(seq 1 60); do
	[[ -n $(kubectl -n "$NS" get memorystore acme -o jsonpath='{.status.archival.lastRun.completionTime}') ]] && break
	sleep 0.5
done
kubectl -n "$NS" get memorystore acme -o jsonpath='last run {.status.archival.lastRun.jobName}: {.status.archival.lastRun.result}, scanned {.status.archival.lastRun.scanned}, archived {.status.archival.lastRun.archived} {.status.archival.lastRun.archivedByType}; next run {.status.archival.nextScheduleTime}{"\n"}'
psql "$uri" -q -c "SELECT memory_id, scope, archived_at IS NOT NULL AS archived FROM memories WHERE scope = 'user:1024' ORDER BY memory_id"
kubectl -n "$NS" patch memorystore acme --type merge -p '{"spec":{"archival":{"suspend":true}}}' >/dev/null

if [[ -n ${DEMO_KEEP:-} ]]; then
	say "The stack keeps running. In another shell: export KUBECONFIG=$KUBECONFIG; bin/k8s/kubectl get memorystores -A; press Ctrl-C to stop"
	wait "${pids[0]}"
fi
say "Deleting the store (reclaimPolicy: Delete drops schema, role, collection and prefix)"
kubectl -n "$NS" delete memorystore acme --timeout=60s
say "Demo finished"
