#!/usr/bin/env bash
# Stands in for a kubelet in the local demo: runs the container command of a store's
# gateway Deployment on this machine (bin/memory-operator instead of the image's
# /memory-operator), with its environment resolved from the Secrets it references and
# its keys file copied from the keys Secret it mounts, listening on a loopback port
# instead of the Pod's. It marks the Deployment ready, as the kubelet and the
# Deployment controller would, and prints the local URL. Demo use only.
#
#   hack/run-gateway.sh NAMESPACE STORE PORT   # runs in the foreground
set -euo pipefail
ns=$1 store=$2 port=$3
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
kubectl() { "${KUBECTL:-$ROOT/bin/k8s/kubectl}" "$@"; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

dep="$store-gateway"
kubectl -n "$ns" get deployment "$dep" -o json >"$work/deploy.json"
mapfile -t args < <(python3 - "$work/deploy.json" "$work" "$port" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["spec"]["template"]["spec"]["containers"][0]
for a in c.get("args", []):
    if a.startswith("--keys-file="):
        a = "--keys-file=" + sys.argv[2] + "/keys.json"
    elif a.startswith("--listen="):
        a = "--listen=127.0.0.1:" + sys.argv[3]
    elif a.startswith("--metrics-listen="):
        a = "--metrics-listen="
    print(a)
PY
)
mapfile -t envs < <(python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))["spec"]["template"]["spec"]["containers"][0]
for e in c.get("env", []):
    ref = e.get("valueFrom", {}).get("secretKeyRef")
    if ref:
        print(e["name"] + "\t" + ref["name"] + "\t" + ref["key"])
' "$work/deploy.json")
env_args=()
for line in "${envs[@]}"; do
	IFS=$'\t' read -r name secret key <<<"$line"
	env_args+=("$name=$(kubectl -n "$ns" get secret "$secret" -o "jsonpath={.data.${key//./\\.}}" | base64 -d)")
done
kubectl -n "$ns" get secret "$store-gateway-keys" -o jsonpath='{.data.keys\.json}' | base64 -d >"$work/keys.json"

env "${env_args[@]}" "$ROOT/bin/memory-operator" "${args[@]}" >"$work/gateway.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 1 100); do
	curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
	kill -0 $pid 2>/dev/null || { cat "$work/gateway.log" >&2; exit 1; }
	sleep 0.2
done
curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null || { cat "$work/gateway.log" >&2; exit 1; }
replicas=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["spec"].get("replicas", 1))' "$work/deploy.json")
gen=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["metadata"]["generation"])' "$work/deploy.json")
kubectl -n "$ns" patch deployment "$dep" --subresource=status --type=merge -p "{\"status\":{\"observedGeneration\":$gen,\"replicas\":$replicas,\"readyReplicas\":$replicas,\"availableReplicas\":$replicas,\"updatedReplicas\":$replicas}}" >/dev/null
echo "gateway of $ns/$store serving on http://127.0.0.1:$port (pid $pid)"
wait $pid
