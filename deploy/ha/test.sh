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
[ "${HA_KEEP:-}" = 1 ] || deploy/ha/down.sh --purge
line=$(grep '^ha-test: ' "$log" | tail -1)
rm -f "$log"
[ -n "$line" ] || { line="ha-test: did not run to its end"; status=1; }
echo "$line"
exit $status
