package tests

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCLIWatch runs backfillctl watch as a subprocess over pipes (no terminal).
func TestCLIWatch(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	t.Run("EndsOnATerminalBackfillWhoseEventsWerePruned", func(t *testing.T) { t.Parallel(); testCLIWatchPrunedEvents(t, bin) })
	t.Run("PrintsOneStampedLinePerIntervalWithoutReplay", func(t *testing.T) { t.Parallel(); testCLIWatchPlainLines(t, bin) })
}

// A canceled backfill whose events were pruned from the outbox: the stream has nothing to
// replay and no terminal event to end on; watch reads the backfill, ends at once with the
// canceled exit code instead of reconnecting forever.
func testCLIWatchPrunedEvents(t *testing.T, bin string) {
	e := newEnv(t)
	b := e.DailyBackfill("pruned_dag", day(1, 1), day(1, 5))
	e.ActionOK(b.Id, "cancel")
	res, err := e.DB.Exec(`DELETE FROM events WHERE backfill_id = $1`, b.Id)
	require.NoError(t, err)
	n, err := res.RowsAffected()
	require.NoError(t, err)
	require.Positive(t, n, "the backfill had events to prune")

	began := time.Now()
	r := runCLI(t, bin, e, "watch", fmt.Sprint(b.Id), "--timeout", "20s")
	require.Equal(t, 2, r.code, "the canceled exit code\nstdout: %s\nstderr: %s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, fmt.Sprintf("backfill %d canceled: 5/5 done", b.Id))
	require.Less(t, time.Since(began), 10*time.Second, "ended at once, not after reconnecting")
}

// Without a terminal: no replay of the events (the first line is the backfill as it is
// now), then one line per --interval with its UTC time, and no rate without two live
// readings.
func testCLIWatchPlainLines(t *testing.T, bin string) {
	e := newEnv(t)
	b := e.DailyBackfill("plain_dag", day(1, 1), day(1, 5))
	e.PatchBackfill(b.Id, map[string]any{"max_active_runs": 3}) // a second event to replay
	for _, s := range e.Slots(b.Id)[:2] {
		e.MarkRun("plain_dag", *s.RunId, "success")
	}

	r := runCLI(t, bin, e, "watch", fmt.Sprint(b.Id), "--interval", "1s", "--timeout", "3500ms")
	require.Equal(t, 3, r.code, "a watch that times out\nstdout: %s\nstderr: %s", r.stdout, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	stamped := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ running\s+40%  2/5  `)
	for _, l := range lines {
		require.Regexp(t, stamped, l, "every line stamped, the backfill as it is now (not a replayed 0/5):\n%s", r.stdout)
	}
	require.Contains(t, lines[0], "2/5  -- runs/s", "one live reading: no rate yet")
	require.GreaterOrEqual(t, len(lines), 3, "one line at once, then one a second:\n%s", r.stdout)
	require.LessOrEqual(t, len(lines), 5, "one line a second, not one per event or message:\n%s", r.stdout)
}
