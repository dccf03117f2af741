#!/usr/bin/env bash
# The end-to-end suite on a real cluster (make e2e): builds what it needs, brings up the
# local cluster (hack/cluster.sh), builds and loads the operator image (make image),
# starts PostgreSQL, MinIO and Milvus Lite on the cluster bridge's address (which Pods
# reach), runs test/e2e (go test -tags e2e), and tears everything down, also when it
# fails or is interrupted. A failed run leaves a debug bundle in bin/e2e-debug.
#
#   make e2e                       # everything
#   E2E_KEEP=1 make e2e            # leave the cluster and services up afterwards
#   E2E_ARGS='-run TestEndToEnd' make e2e
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export RUN_DIR="$ROOT/bin/e2e-run"
export SERVICES_HOST=10.213.0.1 # the cluster bridge (hack/cluster.sh GW)
E2E_IMAGE=${E2E_IMAGE:-localhost/memory-operator:e2e}

log() { printf '[e2e] %s\n' "$*" >&2; }
cleanup() {
	local code=$?
	if [[ -n ${E2E_KEEP:-} ]]; then
		log "E2E_KEEP is set: the cluster and services stay up (hack/services.sh stop with RUN_DIR=$RUN_DIR; hack/cluster.sh down)"
		exit "$code"
	fi
	hack/services.sh stop || true
	hack/cluster.sh down || true
	exit "$code"
}

# The previous chart version, from git: the chart of the most recent commit that has
# another chart version than this checkout (E2E_PREVIOUS_CHART_REF overrides it). The
# suite installs it first and upgrades to this checkout's chart.
chart_version() { awk '/^version:/ {print $2; exit}'; }
current=$(chart_version <charts/memory-operator/Chart.yaml)
ref=${E2E_PREVIOUS_CHART_REF:-}
if [[ -z $ref ]]; then
	for c in $(git log --format=%H -- charts/memory-operator); do
		if [[ $(git show "$c:charts/memory-operator/Chart.yaml" | chart_version) != "$current" ]]; then ref=$c; break; fi
	done
fi
[[ -n $ref ]] || { log "no previous chart version in git history to upgrade from"; exit 1; }
rm -rf "$RUN_DIR/previous-chart" && mkdir -p "$RUN_DIR/previous-chart"
git archive "$ref" charts/memory-operator | tar -x -C "$RUN_DIR/previous-chart"
export E2E_PREVIOUS_CHART="$RUN_DIR/previous-chart/charts/memory-operator"
log "upgrading from chart $(chart_version <"$E2E_PREVIOUS_CHART/Chart.yaml") (commit ${ref:0:12}) to $current"

# That version's operator too, built from the same commit: the suite installs the
# previous chart with it, so the stores it makes are at its schema version and the
# upgrade migrates them for real. Cached per commit under bin/images.
E2E_PREVIOUS_IMAGE=localhost/memory-operator:previous
previous_tar="$ROOT/bin/images/memory-operator-previous-${ref:0:12}.tar"
if [[ ! -s $previous_tar ]]; then
	src="$RUN_DIR/previous-src"
	rm -rf "$src" && mkdir -p "$src" "$ROOT/bin/images"
	git archive "$ref" | tar -x -C "$src"
	log "building the operator of commit ${ref:0:12}"
	(cd "$src" && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w -X main.version=${ref:0:12}" \
		-o "$ROOT/bin/images/memory-operator-previous" .)
	go run ./hack/image --out "$previous_tar.tmp" --tag "$E2E_PREVIOUS_IMAGE" \
		--entrypoint=/memory-operator --cmd=manager --user=65532:65532 \
		--ca-certs /etc/ssl/certs/ca-certificates.crt --file "$ROOT/bin/images/memory-operator-previous:/memory-operator" \
		--label org.opencontainers.image.title=memory-operator --label "org.opencontainers.image.version=${ref:0:12}" >/dev/null
	mv "$previous_tar.tmp" "$previous_tar"
	rm -rf "$src"
fi
export E2E_PREVIOUS_IMAGE

hack/install-tools.sh all
hack/install-tools.sh cluster
make --no-print-directory image E2E_IMG="$E2E_IMAGE"
# A cluster left by an interrupted run is brought down first.
hack/cluster.sh down
trap cleanup EXIT INT TERM
start=$SECONDS
hack/cluster.sh up
hack/services.sh start
hack/cluster.sh load "$previous_tar"
# shellcheck disable=SC1091
source "$RUN_DIR/env.sh"
E2E_IMAGE_DIGEST=$(hack/cluster.sh digest "$E2E_IMAGE")
export KUBECONFIG="$ROOT/bin/cluster-run/kubeconfig" E2E_IMAGE E2E_IMAGE_DIGEST
log "cluster and services up in $((SECONDS - start))s"
go test -tags e2e ./test/e2e -count=1 -v -timeout 30m ${E2E_ARGS:-}
log "passed in $((SECONDS - start))s"
