#!/usr/bin/env bash
# Stands in for a kubelet in the local demo: runs the container command of a worker
# Job on this machine (bin/memory-operator instead of the image's /memory-operator),
# with its environment resolved from the Secrets the Job references, then records the
# outcome in the Job's status as the Job controller would. Demo use only.
#
#   hack/run-job.sh NAMESPACE JOB
set -euo pipefail
ns=$1 job=$2
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

spec=$(kubectl -n "$ns" get job "$job" -o json)
mapfile -t args < <(python3 -c 'import json,sys; c=json.load(sys.stdin)["spec"]["template"]["spec"]["containers"][0]; print("\n".join(c.get("args", [])))' <<<"$spec")
mapfile -t envs < <(python3 -c '
import json, sys
c = json.load(sys.stdin)["spec"]["template"]["spec"]["containers"][0]
for e in c.get("env", []):
    ref = e.get("valueFrom", {}).get("secretKeyRef")
    if ref:
        print(e["name"] + "\t" + ref["name"] + "\t" + ref["key"])
' <<<"$spec")

env_args=()
for line in "${envs[@]}"; do
	IFS=$'\t' read -r name secret key <<<"$line"
	value=$(kubectl -n "$ns" get secret "$secret" -o "jsonpath={.data.${key//./\\.}}" | base64 -d)
	env_args+=("$name=$value")
done

start=$(date -u +%Y-%m-%dT%H:%M:%SZ)
if env "${env_args[@]}" "$ROOT/bin/memory-operator" "${args[@]}"; then
	now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
	kubectl -n "$ns" patch job "$job" --subresource=status --type=merge -p "{\"status\":{
		\"startTime\":\"$start\",\"completionTime\":\"$now\",\"succeeded\":1,
		\"conditions\":[
		  {\"type\":\"SuccessCriteriaMet\",\"status\":\"True\",\"lastTransitionTime\":\"$now\",\"lastProbeTime\":\"$now\"},
		  {\"type\":\"Complete\",\"status\":\"True\",\"lastTransitionTime\":\"$now\",\"lastProbeTime\":\"$now\"}]}}" >/dev/null
else
	now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
	kubectl -n "$ns" patch job "$job" --subresource=status --type=merge -p "{\"status\":{
		\"startTime\":\"$start\",\"failed\":1,
		\"conditions\":[
		  {\"type\":\"FailureTarget\",\"status\":\"True\",\"reason\":\"BackoffLimitExceeded\",\"lastTransitionTime\":\"$now\",\"lastProbeTime\":\"$now\"},
		  {\"type\":\"Failed\",\"status\":\"True\",\"reason\":\"BackoffLimitExceeded\",\"lastTransitionTime\":\"$now\",\"lastProbeTime\":\"$now\"}]}}" >/dev/null
	exit 1
fi
