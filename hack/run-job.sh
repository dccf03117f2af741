#!/usr/bin/env bash
# Stands in for a kubelet and the Job controller in the local demo: runs the container
# command of a worker Job on this machine (bin/memory-operator instead of the image's
# /memory-operator), with its environment resolved from the Secrets the Job references,
# then records the outcome as they would: a Pod whose container terminated with the
# worker's last line as its termination message, and the Job's status. Demo use only.
#
#   hack/run-job.sh NAMESPACE JOB
set -euo pipefail
ns=$1 job=$2
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

kubectl -n "$ns" get job "$job" -o json >"$work/job.json"
mapfile -t args < <(python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["spec"]["template"]["spec"]["containers"][0]; print("\n".join(c.get("args", [])))' "$work/job.json")
mapfile -t envs < <(python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))["spec"]["template"]["spec"]["containers"][0]
for e in c.get("env", []):
    ref = e.get("valueFrom", {}).get("secretKeyRef")
    if ref:
        print(e["name"] + "\t" + ref["name"] + "\t" + ref["key"])
' "$work/job.json")

env_args=()
for line in "${envs[@]}"; do
	IFS=$'\t' read -r name secret key <<<"$line"
	value=$(kubectl -n "$ns" get secret "$secret" -o "jsonpath={.data.${key//./\\.}}" | base64 -d)
	env_args+=("$name=$value")
done

start=$(date -u +%Y-%m-%dT%H:%M:%SZ)
rc=0
env "${env_args[@]}" "$ROOT/bin/memory-operator" "${args[@]}" >"$work/stdout" 2>"$work/stderr" || rc=$?
cat "$work/stdout"
[[ $rc == 0 ]] || cat "$work/stderr" >&2
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)

# The Pod, as the kubelet would leave it, then the Job's status.
python3 - "$work/job.json" "$rc" "$start" "$now" "$work/stdout" "$work/stderr" "$work" <<'PY'
import json, sys
job, rc, start, now, out, err, work = json.load(open(sys.argv[1])), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7]
lines = [l for l in open(out if rc == 0 else err).read().splitlines() if l.strip()]
message = lines[-1] if lines else ""
tmpl = job["spec"]["template"]
labels = dict(tmpl.get("metadata", {}).get("labels", {}))
labels["batch.kubernetes.io/controller-uid"] = job["metadata"]["uid"]
labels["batch.kubernetes.io/job-name"] = job["metadata"]["name"]
pod = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": job["metadata"]["name"] + "-demo", "namespace": job["metadata"]["namespace"], "labels": labels},
       "spec": tmpl["spec"]}
c = tmpl["spec"]["containers"][0]
status = {"status": {"phase": "Succeeded" if rc == 0 else "Failed", "containerStatuses": [{
    "name": c["name"], "image": c["image"], "imageID": "", "ready": False, "restartCount": 0,
    "state": {"terminated": {"exitCode": rc, "reason": "Completed" if rc == 0 else "Error",
                             "message": message, "startedAt": start, "finishedAt": now}}}]}}
if rc == 0:
    conds = [{"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": now, "lastProbeTime": now},
             {"type": "Complete", "status": "True", "lastTransitionTime": now, "lastProbeTime": now}]
    jobStatus = {"status": {"startTime": start, "completionTime": now, "succeeded": 1, "conditions": conds}}
else:
    conds = [{"type": t, "status": "True", "reason": "BackoffLimitExceeded", "lastTransitionTime": now, "lastProbeTime": now}
             for t in ("FailureTarget", "Failed")]
    jobStatus = {"status": {"startTime": start, "failed": 1, "conditions": conds}}
json.dump(pod, open(work + "/pod.json", "w"))
json.dump(status, open(work + "/pod-status.json", "w"))
json.dump(jobStatus, open(work + "/job-status.json", "w"))
PY
kubectl create -f "$work/pod.json" >/dev/null
kubectl -n "$ns" patch pod "$job-demo" --subresource=status --type=merge --patch-file "$work/pod-status.json" >/dev/null
kubectl -n "$ns" patch job "$job" --subresource=status --type=merge --patch-file "$work/job-status.json" >/dev/null
exit "$rc"
