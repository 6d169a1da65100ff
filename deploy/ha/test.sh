#!/usr/bin/env bash
# make ha-test: brings the HA stack up (deploy/ha/up.sh), runs tests/ha against it (a steady
# load through a planned switchover and a crash of the leader), takes the stack down unless
# HA_KEEP=1 (removing its directory: each run starts afresh), and prints the test's summary as its last line.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PATH="/usr/local/go/bin:$PATH"
export HA_DIR=${HA_DIR:-/tmp/backfill-ha}
log=$(mktemp)
status=0
deploy/ha/up.sh || status=$?
if [ $status = 0 ]; then
	go test -tags ha -count=1 -v -timeout 10m ./tests/ha/ 2>&1 | tee "$log"
	status=${PIPESTATUS[0]}
fi
# A failed run's cause is in the services' logs, which --purge removes: its 500s first (each
# distinct error once, numbers masked), then the last lines of Patroni's.
if [ $status != 0 ] && [ -d "$HA_DIR/log" ]; then
	echo "ha: the services' internal errors (count, error):"
	grep -h '"msg":"internal error"' "$HA_DIR"/log/api-*.log 2>/dev/null |
		sed -E -e 's/.*"err":"(([^"\\]|\\.)*)".*/\1/' -e 's/[0-9]+/N/g' | sort | uniq -c | sort -rn | head -n 20
	for f in "$HA_DIR"/log/patroni-*.log; do
		[ -e "$f" ] && { echo "ha: the end of $f:"; tail -n 30 "$f"; }
	done
fi
[ "${HA_KEEP:-}" = 1 ] || deploy/ha/down.sh --purge
line=$(grep '^ha-test: ' "$log" | tail -1)
rm -f "$log"
[ -n "$line" ] || { line="ha-test: did not run to its end"; status=1; }
echo "$line"
exit $status
