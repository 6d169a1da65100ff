#!/usr/bin/env bash
# Stops what up.sh started, in reverse order: the service, PgBouncer, HAProxy, Patroni (which
# stops its PostgreSQL), etcd. Each by the pid up.sh recorded, nothing by name. The data stay
# under $HA_DIR for the next up.sh; `down.sh --purge` removes them too.
set -euo pipefail
HA_DIR=${HA_DIR:-/tmp/backfill-ha}

stop() { # pidfile [seconds]
	local f=$1 wait=${2:-30} pid
	[ -s "$f" ] || return 0
	pid=$(cat "$f")
	if kill -0 "$pid" 2>/dev/null; then
		printf 'ha: stopping %s (%s)\n' "$(basename "$f" .pid)" "$pid" >&2
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 $((wait * 5))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
		kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
	fi
	rm -f "$f"
}

[ -d "$HA_DIR" ] || exit 0
for f in "$HA_DIR"/run/api-*.pid; do [ -e "$f" ] && stop "$f"; done
stop "$HA_DIR/run/pgbouncer.pid"
stop "$HA_DIR/run/haproxy.pid"
stop "$HA_DIR/pg2/patroni.pid" 60
stop "$HA_DIR/pg1/patroni.pid" 60
# A postmaster whose patroni was killed outright outlives it: stop it by its own pid file.
for n in pg1 pg2; do
	pm="$HA_DIR/$n/data/postmaster.pid"
	[ -s "$pm" ] && head -1 "$pm" >"$HA_DIR/run/postmaster-$n.pid" && stop "$HA_DIR/run/postmaster-$n.pid" 30
done
stop "$HA_DIR/run/etcd.pid"
if [ "${1:-}" = "--purge" ]; then
	rm -rf "$HA_DIR"
	printf 'ha: removed %s\n' "$HA_DIR" >&2
fi
