#!/usr/bin/env bash
# hack/cluster.sh up|down|status|load IMAGE.tar|digest IMAGE — a real single-node Kubernetes cluster on
# this machine for the end-to-end tests: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, a kubelet running Pods through containerd v2 and runc on a CNI bridge,
# and kube-proxy, all built by `hack/install-tools.sh cluster` into bin/ (Debian's runc,
# CNI plugins and iptables). Why it is set up this way (what this machine lacks, what
# the kubelet changes on the host, how nothing leaves it): docs/local-cluster.md.
#
#   up      starts it (about 15 s) and writes the admin kubeconfig to bin/cluster-run/kubeconfig
#   down    stops everything it started and puts the host back as it found it
#   status  says whether it is up
#   load    imports a docker-archive image tarball (make image) into the node's containerd
#   digest  prints the digest an image is known by (Pods may use repo@digest)
#
# It needs root. It uses only loopback and its own bridge (memop0, 10.213.0.1/24); Pods
# reach the host at 10.213.0.1 and nothing off this machine (an egress guard drops it).
# It stops only processes it recorded, and only if their command line names its run
# directory.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN="$ROOT/bin"
CBIN="$BIN/cluster"
RUN="${CLUSTER_RUN_DIR:-$BIN/cluster-run}"
K8S_VERSION=v1.37.2

BRIDGE=memop0
GW=10.213.0.1
POD_CIDR=10.213.0.0/24
SVC_CIDR=10.213.128.0/24
GUARD_NET=10.213.0.0/16
NODE=memop-node
API_PORT=16443
ETCD_PORT=23790
ETCD_PEER_PORT=23800
KCM_PORT=20257
SCHED_PORT=20259
KUBELET_PORT=20250
KUBELET_HEALTHZ_PORT=20248
PROXY_HEALTHZ_PORT=20256
PROXY_METRICS_PORT=20249
PAUSE_IMAGE=localhost/memory-operator/pause:1
GUARD_CHAIN=MEMOP-EGRESS-GUARD
FORWARD_CHAIN=MEMOP-FORWARD
# The host sysctls the kubelet or the bridge change; down restores them.
SYSCTLS=(vm.overcommit_memory kernel.panic kernel.panic_on_oops net.ipv4.ip_forward)
# Host directories containerd, the CNI plugins or the kubelet write to; down removes
# them when up created them and they are empty again.
HOST_DIRS=(/var/lib/cni /var/log/containers /var/log/pods /run/containerd /var/run/netns /run/netns)
# containerd's shim sockets need a path of at most 42 characters: not under bin/.
SHIM_DIR=/run/memory-operator-cluster/shims

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
KUBECTL=("$CBIN/kubectl" --kubeconfig "$RUN/kubeconfig")
CTR=("$CBIN/ctr" --address "$RUN/containerd/containerd.sock" --namespace k8s.io)

# ---------------------------------------------------------------------------------
# Processes: started detached, each with a pid file; stopped only by that pid when
# its command line still names $RUN (a recycled pid is never signalled).

start() { # start NAME CMD...
	local name=$1; shift
	mkdir -p "$RUN/pids" "$RUN/logs"
	setsid "$@" >>"$RUN/logs/$name.log" 2>&1 </dev/null &
	echo $! >"$RUN/pids/$name"
}

ours() { # ours PID: the process exists and its command line names $RUN
	local pid=$1
	[[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' </proc/"$pid"/cmdline | grep -qF -- "$RUN"
}

running() { # running NAME
	local f="$RUN/pids/$1"
	[[ -f $f ]] && ours "$(cat "$f")"
}

stop() { # stop NAME: TERM, then KILL after 10 s
	local f="$RUN/pids/$1" pid i
	[[ -f $f ]] || return 0
	pid=$(cat "$f")
	if ours "$pid"; then
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < 100; i++)); do
			ours "$pid" || break
			sleep 0.1
		done
		ours "$pid" && kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$f"
}

wait_for() { # wait_for SECONDS WHAT CMD...: retries CMD until it succeeds
	local secs=$1 what=$2; shift 2
	local deadline=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		if ((SECONDS >= deadline)); then
			log "timed out after ${secs}s waiting for $what; the last lines of the logs:"
			tail -n 20 "$RUN"/logs/*.log >&2 || true
			return 1
		fi
		sleep 0.2
	done
}

https_ok() { # https_ok URL: a 200 with the admin certificate
	curl -fsS --cacert "$RUN/pki/ca.crt" --cert "$RUN/pki/admin.crt" --key "$RUN/pki/admin.key" "$1"
}

# ---------------------------------------------------------------------------------
# PKI: one CA (ECDSA P-256) signs every component's certificate; the front proxy has
# its own CA. ECDSA keys take milliseconds, RSA seconds.

cert() { # cert NAME CN [O] [SANS]: a client/server certificate signed by the CA
	local name=$1 cn=$2 org=${3:-} sans=${4:-} ca=${5:-ca}
	local subj="/CN=$cn"
	[[ -n $org ]] && subj="/O=$org$subj"
	openssl ecparam -name prime256v1 -genkey -noout -out "$RUN/pki/$name.key" 2>/dev/null
	openssl req -new -key "$RUN/pki/$name.key" -subj "$subj" -out "$RUN/pki/$name.csr" 2>/dev/null
	{
		echo "basicConstraints=CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=clientAuth,serverAuth"
		[[ -n $sans ]] && echo "subjectAltName=$sans"
	} >"$RUN/pki/$name.ext"
	openssl x509 -req -in "$RUN/pki/$name.csr" -CA "$RUN/pki/$ca.crt" -CAkey "$RUN/pki/$ca.key" -CAcreateserial \
		-days 30 -sha256 -extfile "$RUN/pki/$name.ext" -out "$RUN/pki/$name.crt" 2>/dev/null
	rm -f "$RUN/pki/$name.csr" "$RUN/pki/$name.ext"
}

ca() { # ca NAME CN
	openssl ecparam -name prime256v1 -genkey -noout -out "$RUN/pki/$1.key" 2>/dev/null
	openssl req -x509 -new -key "$RUN/pki/$1.key" -subj "/CN=$2" -days 30 -sha256 -out "$RUN/pki/$1.crt" \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
}

kubeconfig() { # kubeconfig NAME USER: a kubeconfig with NAME's client certificate
	cat >"$RUN/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://$GW:$API_PORT
    certificate-authority: $RUN/pki/ca.crt
users:
- name: $2
  user:
    client-certificate: $RUN/pki/$1.crt
    client-key: $RUN/pki/$1.key
contexts:
- name: local
  context: {cluster: local, user: $2}
current-context: local
EOF
}

pki() {
	mkdir -p "$RUN/pki"
	ca ca memory-operator-local-cluster-ca
	ca front-proxy-ca memory-operator-local-front-proxy-ca
	cert apiserver kube-apiserver "" "IP:$GW,IP:10.213.128.1,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost"
	cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
	cert front-proxy-client front-proxy-client "" "" front-proxy-ca
	cert admin memory-operator-e2e-admin system:masters
	cert controller-manager system:kube-controller-manager
	cert scheduler system:kube-scheduler
	cert kubelet "system:node:$NODE" system:nodes "IP:$GW,DNS:$NODE"
	cert kube-proxy system:kube-proxy
	openssl ecparam -name prime256v1 -genkey -noout -out "$RUN/pki/sa.key" 2>/dev/null
	openssl ec -in "$RUN/pki/sa.key" -pubout -out "$RUN/pki/sa.pub" 2>/dev/null
	kubeconfig admin memory-operator-e2e-admin
	kubeconfig controller-manager system:kube-controller-manager
	kubeconfig scheduler system:kube-scheduler
	kubeconfig kubelet "system:node:$NODE"
	kubeconfig kube-proxy system:kube-proxy
	cp "$RUN/admin.kubeconfig" "$RUN/kubeconfig"
}

# ---------------------------------------------------------------------------------
# Host state: what up changes is recorded first, so that down can undo exactly that.

record_host() {
	mkdir -p "$RUN/host"
	local s d t fam
	for s in "${SYSCTLS[@]}"; do sysctl -n "$s" >"$RUN/host/sysctl.$s"; done
	: >"$RUN/host/created-dirs"
	for d in "${HOST_DIRS[@]}"; do [[ -e $d ]] || echo "$d" >>"$RUN/host/created-dirs"; done
	for t in filter nat mangle raw; do
		for fam in ip ip6; do nft list table "$fam" "$t" >/dev/null 2>&1 || echo "$fam $t" >>"$RUN/host/absent-nft-tables"; done
	done
	touch "$RUN/host/absent-nft-tables"
}

network_up() {
	ip link add "$BRIDGE" type bridge 2>/dev/null || true
	ip addr replace "$GW/24" dev "$BRIDGE"
	ip link set "$BRIDGE" up
	# ClusterIPs are reached from this machine (the tests) through kube-proxy's DNAT.
	# Until a new Service's rule is in, a connection to its IP must fail here (no
	# neighbour on the bridge answers), not leave by the default route: on a sandboxed
	# machine something outside answered with 404s, or never, and an HTTP client kept
	# that connection alive past the rule's arrival.
	ip route replace "$SVC_CIDR" dev "$BRIDGE"
	sysctl -qw net.ipv4.ip_forward=1
	# Pod traffic to ClusterIPs is routed by the host; the bridge must pass through
	# iptables for kube-proxy's rules to apply (br_netfilter).
	modprobe br_netfilter 2>/dev/null || true
	[[ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]] && sysctl -qw net.bridge.bridge-nf-call-iptables=1
	# The egress guard, before any NAT: Pods reach this machine's bridge network and
	# nothing else.
	iptables -t raw -N "$GUARD_CHAIN" 2>/dev/null || iptables -t raw -F "$GUARD_CHAIN"
	iptables -t raw -A "$GUARD_CHAIN" -d "$GUARD_NET" -j RETURN
	iptables -t raw -A "$GUARD_CHAIN" -j DROP
	iptables -t raw -C PREROUTING -s "$POD_CIDR" -j "$GUARD_CHAIN" 2>/dev/null || iptables -t raw -I PREROUTING -s "$POD_CIDR" -j "$GUARD_CHAIN"
	# Bridge-to-bridge traffic is accepted even on hosts whose FORWARD policy is DROP.
	iptables -N "$FORWARD_CHAIN" 2>/dev/null || iptables -F "$FORWARD_CHAIN"
	iptables -A "$FORWARD_CHAIN" -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT
	iptables -C FORWARD -j "$FORWARD_CHAIN" 2>/dev/null || iptables -I FORWARD -j "$FORWARD_CHAIN"
}

configs() {
	mkdir -p "$RUN/cni/net.d" "$RUN/containerd" "$RUN/kubelet" "$RUN/pod-logs"
	cat >"$RUN/cni/net.d/10-memop.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "memop",
  "plugins": [{
    "type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {"type": "host-local", "dataDir": "$RUN/cni/ipam",
             "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$GW", "rangeStart": "10.213.0.10"}]],
             "routes": [{"dst": "0.0.0.0/0"}]}
  }]
}
EOF
	# restrict_oom_score_adj: this machine's root lacks CAP_SYS_RESOURCE, so no process
	# may get a negative OOM score.
	cat >"$RUN/containerd/config.toml" <<EOF
version = 3
root = '$RUN/containerd/root'
state = '$RUN/containerd/state'
[grpc]
  address = '$RUN/containerd/containerd.sock'
[ttrpc]
  address = '$RUN/containerd/containerd.sock.ttrpc'
[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = '$PAUSE_IMAGE'
  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    enable_unprivileged_ports = false
    enable_unprivileged_icmp = false
    cdi_spec_dirs = []
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = '$(command -v runc)'
        Root = '$RUN/containerd/runc'
        SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['/usr/lib/cni']
      conf_dir = '$RUN/cni/net.d'
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = '$SHIM_DIR'
  [plugins.'io.containerd.internal.v1.opt']
    path = '$RUN/containerd/opt'
EOF
	cat >"$RUN/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $GW
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
tlsCertFile: $RUN/pki/kubelet.crt
tlsPrivateKeyFile: $RUN/pki/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $RUN/pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$RUN/containerd/containerd.sock
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
podLogsDir: $RUN/pod-logs
clusterDomain: cluster.local
# Images are imported, never pulled: garbage-collecting them would lose them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "2%", imagefs.available: "2%"}
serializeImagePulls: false
maxPods: 60
EOF
	cat >"$RUN/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $RUN/kube-proxy.kubeconfig}
hostnameOverride: $NODE
mode: iptables
clusterCIDR: $POD_CIDR
healthzBindAddress: 127.0.0.1:$PROXY_HEALTHZ_PORT
metricsBindAddress: 127.0.0.1:$PROXY_METRICS_PORT
nodePortAddresses: [$GW/32]
iptables: {localhostNodePorts: false}
# Leave the host's conntrack sysctls alone.
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
oomScoreAdj: 0
EOF
}

control_plane_up() {
	start etcd "$BIN/k8s/etcd" --name local --data-dir "$RUN/etcd" \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster "local=http://127.0.0.1:$ETCD_PEER_PORT" --listen-metrics-urls "" --log-level warn
	wait_for 20 etcd curl -fsS "http://127.0.0.1:$ETCD_PORT/health"
	local p="$RUN/pki"
	start kube-apiserver "$BIN/k8s/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
		--bind-address "$GW" --advertise-address "$GW" --secure-port "$API_PORT" \
		--service-cluster-ip-range "$SVC_CIDR" --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" \
		--client-ca-file "$p/ca.crt" --kubelet-client-certificate "$p/apiserver-kubelet-client.crt" \
		--kubelet-client-key "$p/apiserver-kubelet-client.key" --kubelet-certificate-authority "$p/ca.crt" \
		--kubelet-preferred-address-types InternalIP \
		--service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
		--service-account-issuer https://kubernetes.default.svc.cluster.local \
		--authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
		--requestheader-client-ca-file "$p/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
		--requestheader-extra-headers-prefix X-Remote-Extra- --requestheader-group-headers X-Remote-Group \
		--requestheader-username-headers X-Remote-User --proxy-client-cert-file "$p/front-proxy-client.crt" \
		--proxy-client-key-file "$p/front-proxy-client.key" --enable-aggregator-routing=true \
		--profiling=false --v=1
	wait_for 60 "kube-apiserver /readyz" https_ok "https://$GW:$API_PORT/readyz"
	start kube-controller-manager "$CBIN/kube-controller-manager" --kubeconfig "$RUN/controller-manager.kubeconfig" \
		--authentication-kubeconfig "$RUN/controller-manager.kubeconfig" --authorization-kubeconfig "$RUN/controller-manager.kubeconfig" \
		--bind-address 127.0.0.1 --secure-port "$KCM_PORT" --leader-elect=false --use-service-account-credentials \
		--service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
		--cluster-signing-cert-file "$p/ca.crt" --cluster-signing-key-file "$p/ca.key" \
		--client-ca-file "$p/ca.crt" --requestheader-client-ca-file "$p/front-proxy-ca.crt" --profiling=false --v=1
	start kube-scheduler "$CBIN/kube-scheduler" --kubeconfig "$RUN/scheduler.kubeconfig" \
		--authentication-kubeconfig "$RUN/scheduler.kubeconfig" --authorization-kubeconfig "$RUN/scheduler.kubeconfig" \
		--bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --leader-elect=false --profiling=false --v=1
	wait_for 60 "kube-controller-manager" curl -fsSk "https://127.0.0.1:$KCM_PORT/healthz"
	wait_for 60 "kube-scheduler" curl -fsSk "https://127.0.0.1:$SCHED_PORT/healthz"
	wait_for 60 "the default ServiceAccount" "${KUBECTL[@]}" get serviceaccount default -n default
}

node_up() {
	PATH="$CBIN:$PATH" start containerd "$CBIN/containerd" --config "$RUN/containerd/config.toml"
	wait_for 30 containerd "${CTR[@]}" version
	load_images
	start kubelet "$CBIN/kubelet" --config "$RUN/kubelet/config.yaml" --kubeconfig "$RUN/kubelet.kubeconfig" \
		--root-dir "$RUN/kubelet" --hostname-override "$NODE" --node-ip "$GW" --v=1
	start kube-proxy "$CBIN/kube-proxy" --config "$RUN/kube-proxy.yaml" --v=1
	wait_for 60 "kube-proxy" curl -fsS "http://127.0.0.1:$PROXY_HEALTHZ_PORT/healthz"
	wait_for 90 "node $NODE Ready" "${KUBECTL[@]}" wait --for=condition=Ready "node/$NODE" --timeout=2s
}

# load_images imports the pause image and every image tarball in bin/images.
load_images() {
	if [[ ! -f $BIN/images/pause.tar ]]; then
		mkdir -p "$BIN/images"
		(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$BIN/images/pause" ./hack/cluster/pause &&
			go run ./hack/image --out "$BIN/images/pause.tar" --tag "$PAUSE_IMAGE" --entrypoint /pause --user 65535:65535 \
				--file "$BIN/images/pause:/pause" >/dev/null)
	fi
	local t
	for t in "$BIN"/images/*.tar; do
		"${CTR[@]}" images import --local "$t" >/dev/null 2> >(grep -v DEPRECATION >&2)
	done
	digest_aliases
}

# digest_aliases names every imported image also by its digest (repo@sha256:...), as
# a pull from a registry would: Pods may then pin images by digest.
digest_aliases() {
	local ref digest
	"${CTR[@]}" images ls 2>/dev/null | awk 'NR > 1 && $1 !~ /@/ {print $1, $3}' | while read -r ref digest; do
		"${CTR[@]}" images tag --force "$ref" "${ref%:*}@$digest" >/dev/null 2>&1 || true
	done
}

cmd_up() {
	[[ $(id -u) == 0 ]] || die "the local cluster needs root (network namespaces, cgroups, iptables)"
	local c
	for c in kubelet kube-controller-manager kube-scheduler kube-proxy kubectl containerd ctr containerd-shim-runc-v2; do
		[[ -x $CBIN/$c ]] || die "$CBIN/$c is missing: run hack/install-tools.sh cluster"
	done
	command -v runc >/dev/null || die "runc is missing: run hack/install-tools.sh cluster"
	if [[ -d $RUN/pids ]] && compgen -G "$RUN/pids/*" >/dev/null; then
		die "a cluster is already up (or was not brought down): run hack/cluster.sh down"
	fi
	local start_s=$SECONDS
	rm -rf "$RUN"
	mkdir -p "$RUN"
	record_host
	pki
	network_up
	configs
	control_plane_up
	node_up
	log "up in $((SECONDS - start_s))s: export KUBECONFIG=$RUN/kubeconfig (server https://$GW:$API_PORT)"
}

# ---------------------------------------------------------------------------------

cmd_down() {
	[[ -d $RUN ]] || return 0
	stop kube-scheduler
	stop kube-controller-manager
	# The kubelet tears down what it runs (CNI DEL, sandboxes) when Pods go away.
	if running kube-apiserver && running kubelet; then
		"${KUBECTL[@]}" delete pods --all --all-namespaces --grace-period=1 --wait=false >/dev/null 2>&1 || true
		local i
		for ((i = 0; i < 60; i++)); do
			[[ -z $("${KUBECTL[@]}" get pods -A -o name 2>/dev/null) ]] && break
			sleep 0.5
		done
	fi
	stop kubelet
	stop kube-proxy
	"$CBIN/kube-proxy" --cleanup --config "$RUN/kube-proxy.yaml" >/dev/null 2>&1 || true
	if running containerd; then
		local id
		for id in $("${CTR[@]}" tasks list -q 2>/dev/null); do "${CTR[@]}" tasks kill -s KILL "$id" >/dev/null 2>&1 || true; done
	fi
	stop containerd
	# containerd's shims outlive it: stop those started for our socket.
	local pid
	for pid in $(pgrep -f containerd-shim-runc-v2 || true); do
		ours "$pid" && kill -KILL "$pid" 2>/dev/null || true
	done
	stop kube-apiserver
	stop etcd
	# Mounts (overlay rootfs, netns, volumes) left under the run directory.
	local m
	for m in $(findmnt -rn -o TARGET | grep -F -- "$RUN" | sort -r || true); do umount -l "$m" 2>/dev/null || true; done
	# The kubelet's cgroups.
	local d
	for d in $(find /sys/fs/cgroup -maxdepth 2 -name 'kubepods*' -type d 2>/dev/null || true); do
		find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
	done
	network_down
	rm -rf "$(dirname "$SHIM_DIR")"
	restore_host
	mkdir -p "$BIN/cluster-logs"
	cp "$RUN"/logs/*.log "$BIN/cluster-logs/" 2>/dev/null || true
	rm -rf "$RUN"
	log "down (logs of the last run in bin/cluster-logs)"
}

network_down() {
	iptables -t raw -D PREROUTING -s "$POD_CIDR" -j "$GUARD_CHAIN" 2>/dev/null || true
	iptables -t raw -F "$GUARD_CHAIN" 2>/dev/null && iptables -t raw -X "$GUARD_CHAIN" 2>/dev/null || true
	iptables -D FORWARD -j "$FORWARD_CHAIN" 2>/dev/null || true
	iptables -F "$FORWARD_CHAIN" 2>/dev/null && iptables -X "$FORWARD_CHAIN" 2>/dev/null || true
	# What kube-proxy --cleanup leaves: the kubelet's firewall and canary chains.
	local fam t chain
	for fam in iptables ip6tables; do
		for t in filter nat mangle; do
			for chain in $($fam -t "$t" -S 2>/dev/null | awk '$1=="-N" && $2 ~ /^KUBE-/ {print $2}'); do
				$fam -t "$t" -S 2>/dev/null | awk -v c="$chain" '$1=="-A" && $0 ~ "-j "c"( |$)" {sub("^-A", "-D"); print}' |
					while read -r rule; do eval "$fam -t $t $rule" 2>/dev/null || true; done
			done
			for chain in $($fam -t "$t" -S 2>/dev/null | awk '$1=="-N" && $2 ~ /^KUBE-/ {print $2}'); do
				$fam -t "$t" -F "$chain" 2>/dev/null || true
			done
			for chain in $($fam -t "$t" -S 2>/dev/null | awk '$1=="-N" && $2 ~ /^KUBE-/ {print $2}'); do
				$fam -t "$t" -X "$chain" 2>/dev/null || true
			done
		done
	done
	ip link del "$BRIDGE" 2>/dev/null || true
	# Empty nftables tables the iptables calls created (only declarations left).
	if [[ -f $RUN/host/absent-nft-tables ]]; then
		local famt
		while read -r famt; do
			[[ -z $famt ]] && continue
			# shellcheck disable=SC2086
			nft list table $famt >/dev/null 2>&1 || continue
			# shellcheck disable=SC2086
			if ! nft list table $famt | grep -vqE '^\s*(table |chain |\}|type .* hook |policy |$)'; then
				nft delete table $famt 2>/dev/null || true
			fi
		done <"$RUN/host/absent-nft-tables"
	fi
}

restore_host() {
	local s
	for s in "${SYSCTLS[@]}"; do
		[[ -f $RUN/host/sysctl.$s ]] || continue
		# ip_forward stays on when another bridge still needs it.
		if [[ $s == net.ipv4.ip_forward ]] && ip -o link show type bridge | grep -q .; then continue; fi
		sysctl -qw "$s=$(cat "$RUN/host/sysctl.$s")" || true
	done
	# The kubelet's symlinks to our Pods' logs (of Pods it had no time to clean up).
	local l
	for l in /var/log/containers/*.log; do
		[[ -L $l && $(readlink "$l") == "$RUN"/* ]] && rm -f "$l"
	done
	if [[ -f $RUN/host/created-dirs ]]; then
		local d
		while read -r d; do
			[[ -n $d && -d $d ]] || continue
			find "$d" -depth -type d -empty -delete 2>/dev/null || true
		done <"$RUN/host/created-dirs"
	fi
}

cmd_status() {
	local c up=0
	for c in etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy; do
		if running "$c"; then
			printf '%-24s running (pid %s)\n' "$c" "$(cat "$RUN/pids/$c")"
			up=$((up + 1))
		else
			printf '%-24s stopped\n' "$c"
		fi
	done
	((up == 7)) && "${KUBECTL[@]}" get nodes -o wide
	((up == 7))
}

cmd_load() {
	[[ -f ${1:-} ]] || die "usage: hack/cluster.sh load IMAGE.tar"
	running containerd || die "the cluster is not up"
	"${CTR[@]}" images import --local "$1" 2> >(grep -v DEPRECATION >&2)
	digest_aliases
}

# cmd_digest prints the digest the node knows an image by.
cmd_digest() {
	running containerd || die "the cluster is not up"
	"${CTR[@]}" images ls 2>/dev/null | awk -v r="${1:-}" '$1 == r {print $3; found=1} END {exit !found}' ||
		die "image ${1:-} is not loaded"
}

case "${1:-}" in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
load) shift; cmd_load "$@" ;;
digest) shift; cmd_digest "$@" ;;
*) echo "usage: $0 up|down|status|load IMAGE.tar|digest IMAGE" >&2; exit 2 ;;
esac
