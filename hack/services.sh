#!/usr/bin/env bash
# Starts and stops the real backing services on loopback for tests and the demo:
# PostgreSQL 15 (a throwaway cluster, the system of record), PostgreSQL 16 with pgvector
# (pgserver's build, the PGVector engine), MinIO, Milvus Lite, a Milvus server with
# authentication on, Redis with ACLs on, and Toxiproxy. State lives in a run
# directory (default bin/run); `start` writes $RUN_DIR/env.sh with the connection
# settings the tests read (MEMORY_TEST_*), `stop` ends the processes and removes the state.
#
#   hack/services.sh start        # start all, print the env file path
#   hack/services.sh stop
#   hack/services.sh run CMD...   # start, run CMD with the env, always stop
#
# SERVICES_HOST (default 127.0.0.1) is the address they listen on: the end-to-end
# tests use the local cluster's bridge address, which its Pods reach. SERVICES, a
# comma-separated subset of postgres,pgvector,minio,milvus,milvus-server,redis,toxiproxy,
# starts only those (default: all), for a quick run of one package's tests.
# MEMORY_PG_OPTS adds server settings to both PostgreSQL servers, e.g. to see where a
# benchmark's database time goes:
#   MEMORY_PG_OPTS="-c shared_preload_libraries=pg_stat_statements"
# PG_SHARED_BUFFERS and PGVECTOR_SHARED_BUFFERS size the two servers' shared_buffers
# (default 256MB; the benchmarks ask for a production server's).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN="$ROOT/bin"
# Absolute: milvus-server changes directory before it reads its data and etcd paths.
RUN_DIR=$(realpath -m "${RUN_DIR:-$BIN/run}")
HOST=${SERVICES_HOST:-127.0.0.1}
PG_BIN=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)}
# pgserver's PostgreSQL 16 with the vector extension, installed by hack/install-tools.sh.
PGVECTOR_BIN=${PGVECTOR_BIN:-$(ls -d "$BIN"/engines-venv/lib/python3*/site-packages/pgserver/pginstall/bin 2>/dev/null | head -n1)}

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

# start_postgres NAME BINDIR VAR [SHARED_BUFFERS]: a throwaway cluster from BINDIR
# (shared_buffers 256MB unless given), its settings in MEMORY_TEST_<VAR>_*. Its state
# is in a directory of its own under /tmp (PostgreSQL's socket path must stay short).
start_postgres() {
	local name=$1 bindir=$2 var=$3 buffers=${4:-256MB} dir port pw
	[[ -x "$bindir/initdb" ]] || die "$name: PostgreSQL server binaries not found in $bindir; run hack/install-tools.sh"
	dir=$(mktemp -d /tmp/memory-operator-pg.XXXXXX)
	chmod 755 "$dir"
	[[ $(id -u) == 0 ]] && chown postgres "$dir"
	port=$(free_port); pw=$(secret)
	echo "$pw" >"$dir/pwfile"
	[[ $(id -u) == 0 ]] && chown postgres "$dir/pwfile"
	as_pg "$bindir/initdb" -D "$dir/data" -U postgres --pwfile="$dir/pwfile" \
		--auth-local=trust --auth-host=scram-sha-256 -E UTF8 --no-sync >"$RUN_DIR/$name-init.log" 2>&1 ||
		{ cat "$RUN_DIR/$name-init.log" >&2; die "$name: initdb failed"; }
	rm -f "$dir/pwfile"
	if [[ $HOST != 127.0.0.1 ]]; then
		# Clients on HOST's /24 (the local cluster's Pods) log in with a password too.
		echo "host all all ${HOST%.*}.0/24 scram-sha-256" >>"$dir/data/pg_hba.conf"
	fi
	as_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 \
		-o "-c listen_addresses=$HOST -p $port -k $dir -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 -c shared_buffers=$buffers ${MEMORY_PG_OPTS:-}" \
		start >/dev/null || { cat "$dir/postgres.log" >&2; die "$name did not start"; }
	ln -sf "$dir/postgres.log" "$RUN_DIR/$name.log"
	echo "$bindir $dir" >"$RUN_DIR/$name.dir"
	cat >>"$RUN_DIR/env.sh" <<ENV
export MEMORY_TEST_${var}_DSN='postgres://postgres:$pw@$HOST:$port/postgres?sslmode=disable'
export MEMORY_TEST_${var}_HOST=$HOST MEMORY_TEST_${var}_PORT=$port MEMORY_TEST_${var}_USER=postgres MEMORY_TEST_${var}_PASSWORD='$pw'
ENV
	log "$name on $HOST:$port"
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

# A Milvus 2.3 standalone server with authentication on (the PyPI package milvus, its
# etcd embedded; it picks free ports for its coordinators and nodes itself): what
# production runs, beside Milvus Lite, which has no users. Its admin is root with
# Milvus's default password, which the tests use as a platform team's admin login.
start_milvus_server() {
	[[ -x "$BIN/engines-venv/bin/milvus-server" ]] || die "milvus-server missing; run hack/install-tools.sh"
	local port etcd peer; port=$(free_port); etcd=$(free_port); peer=$(free_port)
	mkdir -p "$RUN_DIR/milvus-server-data"
	# Its embedded etcd listens for peers on 2380 unless told otherwise: two servers (two
	# run directories) would collide.
	cat >"$RUN_DIR/milvus-server-etcd.yaml" <<ETCD
listen-client-urls: http://127.0.0.1:$etcd
advertise-client-urls: http://127.0.0.1:$etcd
listen-peer-urls: http://127.0.0.1:$peer
initial-advertise-peer-urls: http://127.0.0.1:$peer
initial-cluster: default=http://127.0.0.1:$peer
ETCD
	# PROXY_MAXROLENUM: Milvus allows 10 roles by default (admin and public among them),
	# and every store gets one of its own.
	PROXY_MAXROLENUM=1000 ETCD_CONFIG_PATH="$RUN_DIR/milvus-server-etcd.yaml" nohup "$BIN/engines-venv/bin/milvus-server" --data "$RUN_DIR/milvus-server-data" --proxy-port "$port" \
		--etcd-port "$etcd" --authorization-enabled true >"$RUN_DIR/milvus-server.log" 2>&1 &
	echo $! >"$RUN_DIR/milvus-server.pid"
	# The proxy's REST API answers once the coordinators are up (the port opens earlier).
	wait_for milvus-server 120 curl -sf -u root:Milvus "http://$HOST:$port/v1/vector/collections"
	cat >>"$RUN_DIR/env.sh" <<ENV
export MEMORY_TEST_MILVUS_AUTH_ADDR=$HOST:$port MEMORY_TEST_MILVUS_AUTH_USER=root MEMORY_TEST_MILVUS_AUTH_PASSWORD=Milvus
ENV
	log "Milvus server (authentication on) on $HOST:$port"
}

# Redis with ACLs on (Debian's redis-server 7.0), the short-term tier: its default
# user is off, and its admin login (MEMORY_TEST_REDIS_USER, _PASSWORD) is the platform
# team's, which provisioning uses to create each store's own user. Nothing persists:
# a restart of this one loses every session (a store's Redis says its own policy).
start_redis() {
	command -v redis-server >/dev/null || die "redis-server missing; run hack/install-tools.sh (Debian's redis-server)"
	local port pw; port=$(free_port); pw=$(secret)
	mkdir -p "$RUN_DIR/redis-data"
	cat >"$RUN_DIR/redis.conf" <<CONF
bind $HOST
port $port
dir $RUN_DIR/redis-data
save ""
appendonly no
daemonize no
user default off
user admin on >$pw ~* &* +@all
CONF
	nohup redis-server "$RUN_DIR/redis.conf" >"$RUN_DIR/redis.log" 2>&1 &
	echo $! >"$RUN_DIR/redis.pid"
	wait_for redis 30 port_open "$port"
	echo "export MEMORY_TEST_REDIS_ADDR=$HOST:$port MEMORY_TEST_REDIS_USER=admin MEMORY_TEST_REDIS_PASSWORD='$pw'" >>"$RUN_DIR/env.sh"
	log "Redis (ACLs on) on $HOST:$port"
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

# stop_tree PID: ends PID and its children (milvus-server runs Milvus as a child).
stop_tree() {
	local pid=$1 kids
	kids=$(pgrep -P "$pid" 2>/dev/null || true)
	kill "$pid" 2>/dev/null || true
	# shellcheck disable=SC2086
	[[ -n $kids ]] && kill $kids 2>/dev/null || true
}

# wanted NAME: whether SERVICES (default: all) names the service.
wanted() { [[ -z ${SERVICES:-} || ,$SERVICES, == *,$1,* ]]; }

stop() {
	local f
	for f in "$RUN_DIR"/minio.pid "$RUN_DIR"/milvus.pid "$RUN_DIR"/milvus-server.pid "$RUN_DIR"/redis.pid "$RUN_DIR"/toxiproxy.pid; do
		[[ -f $f ]] && { stop_tree "$(cat "$f")"; rm -f "$f"; }
	done
	for f in "$RUN_DIR"/postgres.dir "$RUN_DIR"/pgvector.dir; do
		[[ -f $f ]] || continue
		local bindir dir; read -r bindir dir <"$f"
		as_pg "$bindir/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
		rm -rf "$dir" "$f"
	done
	rm -rf "$RUN_DIR/minio-data" "$RUN_DIR/milvus-data" "$RUN_DIR/milvus-server-data" "$RUN_DIR/redis-data" "$RUN_DIR/redis.conf" "$RUN_DIR/env.sh"
}

start() {
	stop
	mkdir -p "$RUN_DIR"
	: >"$RUN_DIR/env.sh"
	echo "export KUBEBUILDER_ASSETS='$BIN/k8s'" >>"$RUN_DIR/env.sh"
	# PG_SHARED_BUFFERS: make bench sizes the system of record as a production server
	# would be sized for its tables (see the Makefile's BENCH_PG_SHARED_BUFFERS).
	wanted postgres && start_postgres postgres "$PG_BIN" PG "${PG_SHARED_BUFFERS:-256MB}"
	# PGVECTOR_SHARED_BUFFERS: the benchmarks size it as a production server would, to
	# hold a million-vector HNSW index (make bench-engines, bench-hnsw).
	wanted pgvector && start_postgres pgvector "$PGVECTOR_BIN" PGVECTOR "${PGVECTOR_SHARED_BUFFERS:-256MB}"
	wanted minio && start_minio
	wanted milvus && start_milvus
	wanted milvus-server && start_milvus_server
	wanted redis && start_redis
	wanted toxiproxy && start_toxiproxy
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
