#!/usr/bin/env bash
# Stands in for a kubelet and the Job controller in the local demo: runs the container
# command of a worker Job on this machine (bin/memory-operator instead of the image's
# /memory-operator), with its environment resolved from the Secrets the Job references,
# then records the outcome as they would: a Pod whose container terminated, and the
# Job's status. Demo use only.
#
# The Pod's termination message is made as the kubelet makes it:
#   - the kubelet mounts an empty file at the container's terminationMessagePath
#     (/dev/termination-log unless the Job says otherwise); the message is what the
#     container wrote there, at most its last 4096 bytes. Here the file is a temporary
#     one, and MEMORY_OPERATOR_TERMINATION_LOG tells the worker where it is;
#   - with terminationMessagePolicy FallbackToLogsOnError, a container that exited
#     non-zero and left the file empty gets the tail of its log instead (stdout and
#     stderr as they came): the last 80 lines, at most the last 2048 bytes.
#
#   hack/run-job.sh NAMESPACE JOB
#
# MEMORY_OPERATOR (default bin/memory-operator) is the binary run for the container's
# command; KUBECTL (default bin/k8s/kubectl) the kubectl used.
set -euo pipefail
ns=$1 job=$2
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KUBECTL=${KUBECTL:-$ROOT/bin/k8s/kubectl}
MEMORY_OPERATOR=${MEMORY_OPERATOR:-$ROOT/bin/memory-operator}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
kubectl() { "$KUBECTL" "$@"; }

kubectl -n "$ns" get job "$job" -o json >"$work/job.json"
mapfile -t envs < <(python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))["spec"]["template"]["spec"]["containers"][0]
for e in c.get("env", []):
    ref = e.get("valueFrom", {}).get("secretKeyRef")
    if ref:
        print(e["name"] + "\t" + ref["name"] + "\t" + ref["key"])
' "$work/job.json")

start=$(date -u +%Y-%m-%dT%H:%M:%SZ)
rc=0
# The container: run (in a subshell, so the Secrets' values are exported to it alone and
# never on a command line) by the kubelet's part below, which writes the Pod's status.
(
	for line in "${envs[@]}"; do
		IFS=$'\t' read -r name secret key <<<"$line"
		value=$(kubectl -n "$ns" get secret "$secret" -o "jsonpath={.data.${key//./\\.}}" | base64 -d)
		export "$name=$value"
	done
	exec python3 - "$work" "$MEMORY_OPERATOR" "$start" <<'PY'
import datetime, io, json, os, selectors, subprocess, sys

work, binary, start = sys.argv[1], sys.argv[2], sys.argv[3]
job = json.load(open(work + "/job.json"))
tmpl = job["spec"]["template"]
c = tmpl["spec"]["containers"][0]
env = dict(os.environ)
for e in c.get("env", []):
    if "value" in e:
        env[e["name"]] = e["value"]

# The file the kubelet would mount at terminationMessagePath. The worker writes
# /dev/termination-log; a Job naming another path gets nothing from it, as in a Pod.
term_path = c.get("terminationMessagePath", "/dev/termination-log")
term_file = work + "/termination-log"
open(term_file, "w").close()
if term_path == "/dev/termination-log":
    env["MEMORY_OPERATOR_TERMINATION_LOG"] = term_file

# Run the container's command, keeping its log as a container runtime would: both
# streams, line by line as they come. The demo shows its stdout, and its stderr only
# when it fails.
args = c.get("args", [])
proc = subprocess.Popen([binary] + args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
stderr = io.BytesIO()
sel = selectors.DefaultSelector()
sel.register(proc.stdout, selectors.EVENT_READ, sys.stdout.buffer)
sel.register(proc.stderr, selectors.EVENT_READ, stderr)
log, pending = [], {proc.stdout: b"", proc.stderr: b""}
while sel.get_map():
    for key, _ in sel.select():
        chunk = os.read(key.fileobj.fileno(), 65536)
        if not chunk:
            if pending[key.fileobj]:
                log.append(pending[key.fileobj])
            sel.unregister(key.fileobj)
            continue
        key.data.write(chunk)
        key.data.flush()
        lines = (pending[key.fileobj] + chunk).split(b"\n")
        pending[key.fileobj] = lines.pop()
        log.extend(l + b"\n" for l in lines)
rc = proc.wait()
if rc < 0:  # killed by a signal: the runtime reports 128 + its number
    rc = 128 - rc
if rc != 0:
    sys.stderr.buffer.write(stderr.getvalue())
    sys.stderr.flush()
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

# The kubelet's termination message (pkg/kubelet/kuberuntime: getTerminationMessage,
# readLastStringFromContainerLogs).
with open(term_file, "rb") as f:
    message = f.read()[-4096:]
if not message and rc != 0 and c.get("terminationMessagePolicy") == "FallbackToLogsOnError":
    message = b"".join(log[-80:])[-2048:]
message = message.decode("utf-8", "replace")

labels = dict(tmpl.get("metadata", {}).get("labels", {}))
labels["batch.kubernetes.io/controller-uid"] = job["metadata"]["uid"]
labels["batch.kubernetes.io/job-name"] = job["metadata"]["name"]
pod = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": job["metadata"]["name"] + "-demo", "namespace": job["metadata"]["namespace"], "labels": labels},
       "spec": tmpl["spec"]}
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
sys.exit(rc)
PY
) || rc=$?
[[ -f $work/pod-status.json ]] || exit "$rc"

# The Pod, as the kubelet would leave it, then the Job's status.
kubectl create -f "$work/pod.json" >/dev/null
kubectl -n "$ns" patch pod "$job-demo" --subresource=status --type=merge --patch-file "$work/pod-status.json" >/dev/null
kubectl -n "$ns" patch job "$job" --subresource=status --type=merge --patch-file "$work/job-status.json" >/dev/null
exit "$rc"
