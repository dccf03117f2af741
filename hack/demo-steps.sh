# The demo's story, shared by hack/demo.sh (a control plane without a kubelet) and
# hack/demo-cluster.sh (a real single-node cluster), so both show the same steps. Sourced
# after the backends are up ($RUN_DIR/env.sh) and the operator is running. The sourcing
# script provides:
#   kubectl                  a kubectl for the cluster
#   start_gateway NS STORE   makes the store's gateway reachable and sets gw to its URL
#   run_job NS JOB           sees the Job through (runs it, or waits for its Pod)
# and may provide demo_diagnostics, which shows what helps when a step fails.
# shellcheck shell=bash

NS=${NS:-demo}
say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
failed() { # failed WHAT...: shows WHAT (kubectl get args) and the diagnostics, and fails
	kubectl -n "$NS" get "$@" -o yaml >&2 || true
	if declare -F demo_diagnostics >/dev/null; then demo_diagnostics >&2 || true; fi
	return 1
}

# wait_for_job SELECTOR WHAT: the name of the first Job matching SELECTOR, waited for.
wait_for_job() {
	local job="" i
	for i in $(seq 1 150); do # an archival's first Job waits for the next minute
		job=$(kubectl -n "$NS" get jobs -l "$1" -o name 2>/dev/null | grep -- "${3:-}" | head -n 1 || true)
		[[ -n $job ]] && break
		sleep 0.5
	done
	[[ -n $job ]] || failed "$2"
	echo "${job#job.batch/}"
}

# backend_yaml: the harness's PostgreSQL and object storage, as spec.backend names them.
backend_yaml() {
	cat <<YAML
    postgres: {host: $MEMORY_TEST_PG_HOST, port: $MEMORY_TEST_PG_PORT, sslMode: disable, adminSecret: {name: pg-admin}}
    objectStorage: {endpoint: $MEMORY_TEST_S3_ENDPOINT, bucket: agent-memory, insecure: true, createBucket: true, credentialsSecret: {name: s3-credentials}}
YAML
}

# demo_story: every step but the store's deletion, in order.
demo_story() {
	demo_store
	demo_gateway
	demo_agent
	demo_snapshot
	demo_restore
	demo_archival
}

demo_store() {
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
$(backend_yaml)
    milvus: {address: $MEMORY_TEST_MILVUS_ADDR}
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
	kubectl -n "$NS" wait memorystore/acme --for=condition=Ready --timeout=120s || failed memorystore acme
	say "kubectl get memorystores"
	kubectl -n "$NS" get memorystores -o wide
	say "Conditions"
	kubectl -n "$NS" get memorystore acme -o jsonpath='{range .status.conditions[*]}{.type}{"\t"}{.status}{"\t"}{.reason}{"\t"}{.message}{"\n"}{end}'
	say "The connection Secret an agent mounts (keys only)"
	kubectl -n "$NS" get secret acme-memory -o go-template='{{range $k, $v := .data}}{{$k}}{{"\n"}}{{end}}'
}

demo_gateway() {
	say "The gateway: a Deployment and Service per store, keys in a Secret of their own"
	kubectl -n "$NS" get deployments,services -l memory.amemory.io/store=acme
	start_gateway "$NS" acme
	kubectl -n "$NS" wait memorystore/acme --for=condition=GatewayReady --timeout=120s >/dev/null || failed memorystore acme
	kubectl -n "$NS" get memorystore acme -o jsonpath='GatewayReady: {.status.conditions[?(@.type=="GatewayReady")].reason}, url {.status.gateway.url}, keys {.status.gateway.keys}{"\n"}'
}

demo_agent() {
	local key ro uri
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
}

demo_snapshot() {
	local job
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
	job=$(wait_for_job memory.amemory.io/snapshot=before-migration memorysnapshot/before-migration)
	kubectl -n "$NS" get job "$job" -o jsonpath='Job {.metadata.name}: {.spec.template.spec.containers[0].command} {.spec.template.spec.containers[0].args}{"\n"}'
	run_job "$NS" "$job"
	kubectl -n "$NS" wait memorysnapshot/before-migration --for=condition=Completed --timeout=120s >/dev/null ||
		failed memorysnapshot before-migration
	say "kubectl get memorysnapshots"
	kubectl -n "$NS" get memorysnapshots -o wide
}

demo_restore() {
	local job
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
$(backend_yaml)
  vector: {dimension: 384}
  reclaimPolicy: Delete
  preChangeSnapshot: {enabled: false} # the demo drops this copy at once; acme is snapshotted before its deletion
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
	job=$(wait_for_job memory.amemory.io/restore=migrate memoryrestore/migrate)
	run_job "$NS" "$job"
	kubectl -n "$NS" wait memoryrestore/migrate --for=condition=Completed --timeout=120s >/dev/null || failed memoryrestore migrate
	say "kubectl get memoryrestores"
	kubectl -n "$NS" get memoryrestores -o wide
	say "The new store, through its own connection Secret"
	psql "$(kubectl -n "$NS" get secret acme-v2-memory -o jsonpath='{.data.uri}' | base64 -d)" -q \
		-c 'SELECT memory_id, scope, key, content FROM memories ORDER BY memory_id'
	kubectl -n "$NS" delete memorystore acme-v2 --timeout=60s >/dev/null
}

demo_archival() {
	local job uri i
	uri=$(kubectl -n "$NS" get secret acme-memory -o jsonpath='{.data.uri}' | base64 -d)
	say "Archival: an old, unimportant memory leaves recall and the vector index on schedule"
	psql "$uri" -v ON_ERROR_STOP=1 -q <<'SQL'
INSERT INTO memories (memory_id, memory_type, scope, key, content, content_hash, source, base_score, created_at, updated_at) VALUES
 ('demo-5', 'episodic', 'user:1024', NULL, '{"event": "asked about opening hours"}', '\x05', 'demo', 0.3, now() - interval '400 days', now() - interval '400 days');
SQL
	kubectl -n "$NS" patch memorystore acme --type merge \
		-p '{"spec":{"archival":{"schedule":"* * * * *","threshold":"0.05"}}}' >/dev/null
	echo "(archival every minute, threshold 0.05: episodic memories halve every 30 days, so demo-5 scores 0.3 * 0.5^(400/30) ≈ 0.00003)"
	job=$(wait_for_job memory.amemory.io/store=acme memorystore/acme -archive-)
	run_job "$NS" "$job"
	for i in $(seq 1 120); do
		[[ -n $(kubectl -n "$NS" get memorystore acme -o jsonpath='{.status.archival.lastRun.completionTime}') ]] && break
		sleep 0.5
	done
	kubectl -n "$NS" get memorystore acme -o jsonpath='last run {.status.archival.lastRun.jobName}: {.status.archival.lastRun.result}, scanned {.status.archival.lastRun.scanned}, archived {.status.archival.lastRun.archived} {.status.archival.lastRun.archivedByType}; next run {.status.archival.nextScheduleTime}{"\n"}'
	psql "$uri" -q -c "SELECT memory_id, scope, archived_at IS NOT NULL AS archived FROM memories WHERE scope = 'user:1024' ORDER BY memory_id"
	kubectl -n "$NS" patch memorystore acme --type merge -p '{"spec":{"archival":{"suspend":true}}}' >/dev/null
}

demo_delete() {
	local job
	say "Deleting the store: a snapshot of it first (preChangeSnapshot), then reclaimPolicy: Delete drops schema, role, collection and prefix"
	kubectl -n "$NS" patch memorystore acme --type merge \
		-p '{"spec":{"preChangeSnapshot":{"template":{"encryption":{"keySecret":{"name":"snapshot-key","key":"key"}}}}}}' >/dev/null
	kubectl -n "$NS" delete memorystore acme --wait=false
	job=$(wait_for_job memory.amemory.io/store=acme memorysnapshots pre-delete)
	kubectl -n "$NS" get memorystore acme -o jsonpath='{.status.conditions[?(@.type=="Ready")].reason}: {.status.conditions[?(@.type=="Ready")].message}{"\n"}'
	run_job "$NS" "$job"
	kubectl -n "$NS" wait memorystore/acme --for=delete --timeout=120s >/dev/null || failed memorystore acme
	kubectl -n "$NS" get memorysnapshots -l memory.amemory.io/pre-change=Delete
	local i events=""
	for i in $(seq 1 20); do # Events are recorded a moment after what they announce
		events=$(kubectl -n "$NS" get events --field-selector reason=Reclaimed,involvedObject.name=acme -o jsonpath='{range .items[*]}{.reason}: {.message}{"\n"}{end}')
		[[ -n $events ]] && break
		sleep 0.5
	done
	echo "$events"
}
