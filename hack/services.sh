#!/usr/bin/env bash
# Starts and stops the real backing services on loopback for tests and the demo:
# PostgreSQL 15 (a throwaway cluster), MinIO, Milvus Lite and Toxiproxy. State lives in a run
# directory (default bin/run); `start` writes $RUN_DIR/env.sh with the connection
# settings the tests read (MEMORY_TEST_*), `stop` ends the processes and removes the state.
#
#   hack/services.sh start        # start all, print the env file path
#   hack/services.sh stop
#   hack/services.sh run CMD...   # start, run CMD with the env, always stop
#
# SERVICES_HOST (default 127.0.0.1) is the address they listen on: the end-to-end
# tests use the local cluster's bridge address, which its Pods reach.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN="$ROOT/bin"
RUN_DIR=${RUN_DIR:-$BIN/run}
HOST=${SERVICES_HOST:-127.0.0.1}
PG_BIN=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)}

log() { printf '[services] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("'"$HOST"'",0)); print(s.getsockname()[1])'; }
secret() { head -c 18 /dev/urandom | base64 | tr -d '/+=' | head -c 20; }

# wait_for NAME SECONDS CMD...: polls CMD until it succeeds.
wait_for() {
	local name=$1 deadline=$((SECONDS + $2)); shift 2
	until "$@" >/dev/null 2>&1; do
		((SECONDS < deadline)) || { log "$name did not become ready; its log:"; tail -n 30 "$RUN_DIR/$name.log" >&2 || true; return 1; }
		sleep 0.3
	done
}
port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# PostgreSQL refuses to run as root, so as root the cluster belongs to the postgres user.
as_pg() { if [[ $(id -u) == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi; }

start_postgres() {
	[[ -x "$PG_BIN/initdb" ]] || die "PostgreSQL server binaries not found (looked in /usr/lib/postgresql/*/bin); install postgresql-15"
	local dir port pw
	dir=$(mktemp -d /tmp/memory-operator-pg.XXXXXX)
	chmod 755 "$dir"
	[[ $(id -u) == 0 ]] && chown postgres "$dir"
	port=$(free_port); pw=$(secret)
	echo "$pw" >"$dir/pwfile"
	[[ $(id -u) == 0 ]] && chown postgres "$dir/pwfile"
	as_pg "$PG_BIN/initdb" -D "$dir/data" -U postgres --pwfile="$dir/pwfile" \
		--auth-local=trust --auth-host=scram-sha-256 -E UTF8 --no-sync >"$RUN_DIR/postgres-init.log" 2>&1 ||
		{ cat "$RUN_DIR/postgres-init.log" >&2; die "initdb failed"; }
	rm -f "$dir/pwfile"
	if [[ $HOST != 127.0.0.1 ]]; then
		# Clients on HOST's /24 (the local cluster's Pods) log in with a password too.
		echo "host all all ${HOST%.*}.0/24 scram-sha-256" >>"$dir/data/pg_hba.conf"
	fi
	as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 \
		-o "-c listen_addresses=$HOST -p $port -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 -c shared_buffers=256MB" \
		start >/dev/null || { cat "$dir/postgres.log" >&2; die "PostgreSQL did not start"; }
	ln -sf "$dir/postgres.log" "$RUN_DIR/postgres.log"
	echo "$dir" >"$RUN_DIR/postgres.dir"
	cat >>"$RUN_DIR/env.sh" <<ENV
export MEMORY_TEST_PG_DSN='postgres://postgres:$pw@$HOST:$port/postgres?sslmode=disable'
export MEMORY_TEST_PG_HOST=$HOST MEMORY_TEST_PG_PORT=$port MEMORY_TEST_PG_USER=postgres MEMORY_TEST_PG_PASSWORD='$pw'
ENV
	log "PostgreSQL on $HOST:$port"
}

start_minio() {
	[[ -x "$BIN/minio" ]] || die "bin/minio missing; run hack/install-tools.sh"
	local port cport user pw
	port=$(free_port); cport=$(free_port); user="minio$(secret | head -c 8)"; pw=$(secret)
	mkdir -p "$RUN_DIR/minio-data"
	MINIO_ROOT_USER=$user MINIO_ROOT_PASSWORD=$pw MINIO_BROWSER=off MINIO_UPDATE=off \
		nohup "$BIN/minio" server --quiet --address "$HOST:$port" --console-address "$HOST:$cport" \
		"$RUN_DIR/minio-data" >"$RUN_DIR/minio.log" 2>&1 &
	echo $! >"$RUN_DIR/minio.pid"
	wait_for minio 60 curl -sf "http://$HOST:$port/minio/health/live"
	cat >>"$RUN_DIR/env.sh" <<ENV
export MEMORY_TEST_S3_ENDPOINT=$HOST:$port MEMORY_TEST_S3_ACCESS_KEY='$user' MEMORY_TEST_S3_SECRET_KEY='$pw'
ENV
	log "MinIO on $HOST:$port"
}

start_milvus() {
	[[ -x "$BIN/venv/bin/milvus-lite" ]] || die "Milvus Lite missing; run hack/install-tools.sh"
	local port; port=$(free_port)
	mkdir -p "$RUN_DIR/milvus-data"
	nohup "$BIN/venv/bin/milvus-lite" server --data-dir "$RUN_DIR/milvus-data" --host $HOST --port "$port" \
		>"$RUN_DIR/milvus.log" 2>&1 &
	echo $! >"$RUN_DIR/milvus.pid"
	wait_for milvus 90 port_open "$port"
	echo "export MEMORY_TEST_MILVUS_ADDR=$HOST:$port" >>"$RUN_DIR/env.sh"
	log "Milvus Lite on $HOST:$port"
}

# Toxiproxy's API server: the fault-injection tests put proxies between the workers or
# the gateway and each backend through it (MEMORY_TEST_TOXIPROXY_ADDR).
start_toxiproxy() {
	[[ -x "$BIN/toxiproxy-server" ]] || die "Toxiproxy missing; run hack/install-tools.sh"
	local port; port=$(free_port)
	nohup "$BIN/toxiproxy-server" -host "$HOST" -port "$port" >"$RUN_DIR/toxiproxy.log" 2>&1 &
	echo $! >"$RUN_DIR/toxiproxy.pid"
	wait_for toxiproxy 30 port_open "$port"
	echo "export MEMORY_TEST_TOXIPROXY_ADDR=$HOST:$port" >>"$RUN_DIR/env.sh"
	log "Toxiproxy on $HOST:$port"
}

stop() {
	local f
	for f in "$RUN_DIR"/minio.pid "$RUN_DIR"/milvus.pid "$RUN_DIR"/toxiproxy.pid; do
		[[ -f $f ]] && { kill "$(cat "$f")" 2>/dev/null || true; rm -f "$f"; }
	done
	if [[ -f "$RUN_DIR/postgres.dir" ]]; then
		local dir; dir=$(cat "$RUN_DIR/postgres.dir")
		as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
		rm -rf "$dir" "$RUN_DIR/postgres.dir"
	fi
	rm -rf "$RUN_DIR/minio-data" "$RUN_DIR/milvus-data" "$RUN_DIR/env.sh"
}

start() {
	stop
	mkdir -p "$RUN_DIR"
	: >"$RUN_DIR/env.sh"
	echo "export KUBEBUILDER_ASSETS='$BIN/k8s'" >>"$RUN_DIR/env.sh"
	start_postgres
	start_minio
	start_milvus
	start_toxiproxy
	log "environment in $RUN_DIR/env.sh"
}

case ${1:-} in
start) start ;;
stop) stop ;;
run)
	shift
	start
	trap stop EXIT
	# shellcheck disable=SC1091
	source "$RUN_DIR/env.sh"
	"$@"
	;;
*) echo "usage: $0 start|stop|run CMD..." >&2; exit 2 ;;
esac
