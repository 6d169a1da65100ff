#!/usr/bin/env bash
# Brings up, on this machine, a highly available PostgreSQL and the service over it, from
# Debian's packages, without systemd or Docker, every port on loopback, everything under
# $HA_DIR (default /tmp/backfill-ha):
#
#   etcd (one member)                         127.0.0.1:23790 (peer 23800)
#   PostgreSQL 15 under Patroni, node pg1      127.0.0.1:25432, Patroni REST 28008
#   PostgreSQL 15 under Patroni, node pg2      127.0.0.1:25433, Patroni REST 28009
#   HAProxy, to the node whose /primary is 200 127.0.0.1:25000
#   PgBouncer, transaction mode, over HAProxy 127.0.0.1:26432
#   the service, $HA_REPLICAS replicas         127.0.0.1:28080, 28081, ...
#
# Idempotent: what runs is left running, what is missing is started. Installs the packages it
# needs when missing. Stop with down.sh. See docs/HA.md.
set -euo pipefail

HA_DIR=${HA_DIR:-/tmp/backfill-ha}
HA_REPLICAS=${HA_REPLICAS:-2}
HA_DB_MAX_CONNS=${HA_DB_MAX_CONNS:-20}
HA_DB_LEASE_MAX_CONNS=${HA_DB_LEASE_MAX_CONNS:-4}
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
PG_USER=postgres
REPO=$(cd "$(dirname "$0")/../.." && pwd)
export PATH="/usr/local/go/bin:$PATH"

log() { printf 'ha: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# --- packages ---------------------------------------------------------------------------
need=()
command -v etcd >/dev/null || need+=(etcd-server)
command -v patroni >/dev/null || need+=(patroni)
command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || need+=(haproxy)
command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || need+=(pgbouncer)
[ -x "$PG_BIN/postgres" ] || need+=(postgresql-15)
command -v curl >/dev/null || need+=(curl)
command -v psql >/dev/null || need+=(postgresql-client-15)
if [ ${#need[@]} -gt 0 ]; then
	[ "$(id -u)" = 0 ] || die "missing ${need[*]}: run as root, or apt-get install them"
	log "installing ${need[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
PATH="$PATH:/usr/sbin"

# as_pg runs a command as the postgres user when this script runs as root (PostgreSQL refuses
# to run as root), as the current user otherwise.
as_pg() {
	if [ "$(id -u)" = 0 ]; then runuser -u "$PG_USER" -- "$@"; else "$@"; fi
}
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
wait_until() { # seconds, description, command...
	local n=$1 what=$2; shift 2
	for _ in $(seq 1 $((n * 5))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
	die "$what not ready after ${n}s (logs in $HA_DIR/log)"
}

mkdir -p "$HA_DIR"/{log,run,bin,etcd}
chmod 755 "$HA_DIR"
[ "$(id -u)" = 0 ] && chown "$PG_USER" "$HA_DIR/log" "$HA_DIR/run"

# --- etcd -------------------------------------------------------------------------------
if alive "$HA_DIR/run/etcd.pid"; then
	log "etcd already running"
else
	log "starting etcd"
	setsid etcd --name ha1 --data-dir "$HA_DIR/etcd" \
		--listen-client-urls http://127.0.0.1:23790 --advertise-client-urls http://127.0.0.1:23790 \
		--listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
		--initial-cluster ha1=http://127.0.0.1:23800 --initial-cluster-state new \
		--initial-cluster-token backfill-ha >"$HA_DIR/log/etcd.log" 2>&1 </dev/null &
	echo $! >"$HA_DIR/run/etcd.pid"
fi
wait_until 30 etcd curl -fsS http://127.0.0.1:23790/health

# --- PostgreSQL under Patroni -------------------------------------------------------------
# ttl 10 / loop_wait 1 / retry_timeout 4: a dead leader's key expires within 10 s
# (loop_wait + 2 × retry_timeout must stay below ttl).
patroni_conf() { # name pg_port rest_port
	local name=$1 port=$2 rest=$3 dir="$HA_DIR/$1"
	cat <<YAML
scope: backfill-ha
name: $name
log:
  level: INFO
restapi:
  listen: 127.0.0.1:$rest
  connect_address: 127.0.0.1:$rest
etcd3:
  hosts: 127.0.0.1:23790
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 4
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_level: replica
        hot_standby: "on"
        wal_log_hints: "on"
        max_connections: 300
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 256MB
  initdb:
    - encoding: UTF8
    - locale: C.UTF-8
    - data-checksums
  pg_hba:
    - local all all trust
    - host replication replicator 127.0.0.1/32 trust
    - host all all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:$port
  connect_address: 127.0.0.1:$port
  data_dir: $dir/data
  bin_dir: $PG_BIN
  pgpass: $dir/pgpass
  authentication:
    superuser:
      username: postgres
      password: postgres
    replication:
      username: replicator
      password: replicator
    rewind:
      username: postgres
      password: postgres
  parameters:
    unix_socket_directories: '$dir'
YAML
}
start_patroni() { # name pg_port rest_port
	local name=$1 dir="$HA_DIR/$1"
	if alive "$dir/patroni.pid"; then
		log "patroni $name already running"
		return
	fi
	mkdir -p "$dir"
	patroni_conf "$@" >"$dir/patroni.yml"
	[ "$(id -u)" = 0 ] && chown -R "$PG_USER" "$dir"
	chmod 700 "$dir"
	log "starting patroni $name"
	# The inner shell records patroni's own pid (not runuser's), for down.sh and the tests.
	as_pg sh -c "cd '$dir' && setsid patroni '$dir/patroni.yml' >>'$HA_DIR/log/patroni-$name.log' 2>&1 </dev/null & echo \$! >'$dir/patroni.pid'"
}
start_patroni pg1 25432 28008
wait_until 60 "the first PostgreSQL leader" sh -c 'curl -fsS http://127.0.0.1:28008/primary || curl -fsS http://127.0.0.1:28009/primary'
start_patroni pg2 25433 28009
wait_until 120 "the synchronous standby" sh -c 'curl -fsS http://127.0.0.1:28008/sync || curl -fsS http://127.0.0.1:28009/sync'

# --- HAProxy ------------------------------------------------------------------------------
# Patroni's /primary answers 200 only on the leader. Checks every 500 ms, down after 2 misses;
# a node marked down has its connections closed, so no pooled connection stays on a demoted
# primary.
cat >"$HA_DIR/haproxy.cfg" <<CFG
global
    maxconn 2000
defaults
    mode tcp
    timeout connect 2s
    timeout client 30m
    timeout server 30m
    timeout check 2s
listen postgres_primary
    bind 127.0.0.1:25000
    option httpchk GET /primary
    http-check expect status 200
    default-server inter 500ms fastinter 250ms downinter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
    server pg1 127.0.0.1:25432 maxconn 300 check port 28008
    server pg2 127.0.0.1:25433 maxconn 300 check port 28009
CFG
if alive "$HA_DIR/run/haproxy.pid"; then
	log "haproxy already running"
else
	log "starting haproxy"
	haproxy -D -f "$HA_DIR/haproxy.cfg" -p "$HA_DIR/run/haproxy.pid" >"$HA_DIR/log/haproxy.log" 2>&1
fi
# HAProxy starts every server as up and marks the standby down only after its first failed
# checks, closing the sessions it holds (on-marked-down shutdown-sessions). So "port 25000
# answers" is not enough: wait until four connections in a row (round robin would reach both
# servers) land on a primary, then give the checks one more interval to settle.
psql_leader() { psql -X -q -v ON_ERROR_STOP=1 "postgres://postgres@127.0.0.1:25000/postgres?sslmode=disable" "$@"; }
only_leader_behind_haproxy() {
	local i
	for i in 1 2 3 4; do
		[ "$(psql_leader -tAc 'SELECT pg_is_in_recovery()')" = f ] || return 1
	done
}
wait_until 30 "haproxy to the leader" "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p 25000
wait_until 30 "haproxy to route only to the leader" only_leader_behind_haproxy
sleep 1

# The service's database, and the statement timeout PgBouncer does not pass on (the service
# asks for it as a startup parameter, which PgBouncer is told to ignore).
backfill_dbs=$(psql_leader -tAc "SELECT count(*) FROM pg_database WHERE datname = 'backfill'") ||
	die "cannot ask the leader for its databases (logs in $HA_DIR/log)"
if [ "$backfill_dbs" = 0 ]; then
	log "creating database backfill"
	psql_leader -c "CREATE DATABASE backfill"
fi
psql_leader -c "ALTER DATABASE backfill SET statement_timeout = '60s'" -c "ALTER DATABASE backfill SET jit = off"

# --- PgBouncer ----------------------------------------------------------------------------
# Transaction pooling: each transaction gets any server connection. The pool is sized for
# every replica's sessions through it: its main and lease pools and readiness's session
# (docs/HA.md), so that none of them waits for a server connection.
pool=$((HA_REPLICAS * (HA_DB_MAX_CONNS + HA_DB_LEASE_MAX_CONNS + 1)))
cat >"$HA_DIR/pgbouncer.ini" <<INI
[databases]
backfill = host=127.0.0.1 port=25000 dbname=backfill user=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = 26432
unix_socket_dir =
auth_type = any
pool_mode = transaction
max_client_conn = 2000
default_pool_size = $pool
max_db_connections = $pool
server_login_retry = 1
server_connect_timeout = 2
query_wait_timeout = 30
ignore_startup_parameters = extra_float_digits, statement_timeout
logfile = $HA_DIR/log/pgbouncer.log
pidfile = $HA_DIR/run/pgbouncer.pid
INI
if alive "$HA_DIR/run/pgbouncer.pid"; then
	log "pgbouncer already running"
else
	log "starting pgbouncer"
	as_pg pgbouncer -d "$HA_DIR/pgbouncer.ini"
fi
wait_until 30 pgbouncer "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p 26432 -d backfill

# --- the service --------------------------------------------------------------------------
log "building the service"
(cd "$REPO" && go build -o "$HA_DIR/bin/api.new" ./cmd/api) && mv "$HA_DIR/bin/api.new" "$HA_DIR/bin/api"
urls=()
for i in $(seq 0 $((HA_REPLICAS - 1))); do
	port=$((28080 + i))
	pidf="$HA_DIR/run/api-$i.pid"
	urls+=("http://127.0.0.1:$port")
	if alive "$pidf"; then
		log "service $i already running"
		continue
	fi
	log "starting service $i on 127.0.0.1:$port"
	DATABASE_URL="postgres://postgres@127.0.0.1:26432/backfill?sslmode=disable" \
		DIRECT_DATABASE_URL="postgres://postgres@127.0.0.1:25000/backfill?sslmode=disable" \
		DB_POOLER=transaction \
		HTTP_ADDR="127.0.0.1:$port" DB_MAX_CONNS="$HA_DB_MAX_CONNS" \
		DB_LEASE_MAX_CONNS="$HA_DB_LEASE_MAX_CONNS" \
		DB_RECONNECT_WAIT="${HA_DB_RECONNECT_WAIT:-15s}" LOG_LEVEL=warn \
		setsid "$HA_DIR/bin/api" >>"$HA_DIR/log/api-$i.log" 2>&1 </dev/null &
	echo $! >"$pidf"
done
for u in "${urls[@]}"; do wait_until 60 "service $u" curl -fsS "$u/readyz"; done

cat <<OUT
etcd        http://127.0.0.1:23790
patroni     http://127.0.0.1:28008  http://127.0.0.1:28009   (patronictl -c $HA_DIR/pg1/patroni.yml list)
postgresql  postgres://postgres@127.0.0.1:25432  postgres://postgres@127.0.0.1:25433
haproxy     postgres://postgres@127.0.0.1:25000/backfill   (the leader)
pgbouncer   postgres://postgres@127.0.0.1:26432/backfill   (transaction pooling)
service     ${urls[*]}
OUT
