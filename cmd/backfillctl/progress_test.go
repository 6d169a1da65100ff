package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/backfillsvc/backfill/client"
	"github.com/stretchr/testify/require"
)

// fakeClock steps a second per reading, so that every poll is a second after the last.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { c.t = c.t.Add(time.Second); return c.t }

func backfillAt(state client.BackfillState, success, failed, queued int64) client.Backfill {
	return client.Backfill{Id: 9, State: state, Progress: client.BackfillProgress{
		Total: success + failed + queued, Success: success, Failed: failed, Queued: queued}}
}

func TestRenderBarFillsInProportion(t *testing.T) {
	require.Equal(t, "[░░░░]", renderBar(0, 10, 4))
	require.Equal(t, "[██░░]", renderBar(5, 10, 4))
	require.Equal(t, "[████]", renderBar(10, 10, 4))
	require.Equal(t, "[████]", renderBar(0, 0, 4), "an empty backfill is complete")
}

func TestTerminalProgressRedrawsInPlaceWithRateAndETA(t *testing.T) {
	var out bytes.Buffer
	clk := &fakeClock{t: time.Unix(0, 0)}
	p := newProgress(&out, true, 120, clk.now)
	p.update(backfillAt(client.BackfillStateRunning, 0, 0, 10))
	first := out.String()
	require.Contains(t, first, "running   [░░░░")
	require.Contains(t, first, "0%  0/10  -- runs/s  ETA --")
	require.NotContains(t, first, "\x1b[1A", "nothing to redraw yet")

	// The ETA is the service's eta_seconds, not one of the watch's own (which the rate,
	// 5 runs/s with 5 left, would make 1s).
	eta := 84.0
	p.serverEstimate(&eta)
	p.update(backfillAt(client.BackfillStateRunning, 4, 1, 5))
	second := strings.TrimPrefix(out.String(), first)
	require.True(t, strings.HasPrefix(second, "\r\x1b[2K\x1b[1A\x1b[2K"), "moves back over both lines: %q", second)
	require.Contains(t, second, " 50%  5/10  5.0 runs/s  ETA 1m24s")
	require.Contains(t, second, "success 4  failed 1  canceled 0  skipped 0  running 0  queued 5")

	p.update(backfillAt(client.BackfillStateRunning, 9, 1, 0))
	require.Contains(t, out.String(), "100%  10/10  5.0 runs/s  finishing")

	p.finish(backfillAt(client.BackfillStateFailed, 9, 1, 0))
	require.True(t, strings.HasSuffix(out.String(), "\nbackfill 9 failed: 10/10 done (success 9, failed 1, canceled 0, skipped 0) in 4s\n"), out.String())
}

func TestTerminalProgressCutsLinesToTheWidth(t *testing.T) {
	var out bytes.Buffer
	clk := &fakeClock{t: time.Unix(0, 0)}
	p := newProgress(&out, true, 30, clk.now)
	p.update(backfillAt(client.BackfillStateRunning, 123456, 0, 654321))
	for _, line := range strings.Split(out.String(), "\n") {
		require.LessOrEqual(t, len([]rune(line)), 29, "line %q", line)
	}
}

// Without a terminal: the first reading at once, then one line per tick (the watch's
// --interval) whatever happened in between, each stamped with its UTC time; a rate only from
// the second live reading.
func TestPlainProgressPrintsOneStampedLinePerTick(t *testing.T) {
	var out bytes.Buffer
	clk := &fakeClock{t: time.Unix(0, 0)}
	p := newProgress(&out, false, 0, clk.now)
	p.update(backfillAt(client.BackfillStateRunning, 0, 0, 4))
	p.update(backfillAt(client.BackfillStateRunning, 1, 0, 3))
	eta := 6.0
	p.serverEstimate(&eta)
	p.update(backfillAt(client.BackfillStateRunning, 2, 0, 2))
	require.Equal(t, 1, strings.Count(out.String(), "\n"), "nothing between ticks: %s", out.String())
	p.tick()
	p.tick()
	p.finish(backfillAt(client.BackfillStateSucceeded, 4, 0, 0))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 4, out.String())
	require.Equal(t, "1970-01-01T00:00:03Z running     0%  0/4  -- runs/s  ETA --  success 0  failed 0  canceled 0  skipped 0  running 0  queued 4", lines[0])
	require.Regexp(t, `^1970-01-01T00:00:\d\dZ running    50%  2/4  \d+\.\d runs/s  ETA 6s  `, lines[1])
	require.NotEqual(t, lines[1][:20], lines[2][:20], "each line has its own time")
	require.NotContains(t, out.String(), "\r")
	require.Equal(t, "backfill 9 succeeded: 4/4 done (success 4, failed 0, canceled 0, skipped 0) in 7s", lines[3])
}

func TestRateLooksAtTheRecentWindowOnly(t *testing.T) {
	clk := &fakeClock{t: time.Unix(0, 0)}
	p := newProgress(&bytes.Buffer{}, false, 0, clk.now)
	for i := range 60 { // 60 s at 10 runs/s ...
		p.update(backfillAt(client.BackfillStateRunning, int64(i*10), 0, 10000))
	}
	for i := range 40 { // ... then 40 s at 1 run/s
		p.update(backfillAt(client.BackfillStateRunning, int64(590+i+1), 0, 10000))
	}
	rate, ok := p.rate()
	require.True(t, ok)
	require.InDelta(t, 1.0, rate, 0.01)
}

func TestDurationsReadWell(t *testing.T) {
	require.Equal(t, "850ms", duration(850*time.Millisecond))
	require.Equal(t, "12s", duration(12400*time.Millisecond))
	require.Equal(t, "3m05s", duration(185*time.Second))
	require.Equal(t, "2h10m", duration(2*time.Hour+10*time.Minute))
	require.Equal(t, "<1s", etaString(300*time.Millisecond))
}

func TestPausedAndCanceledProgressShowNoRateOrETA(t *testing.T) {
	for _, state := range []client.BackfillState{client.BackfillStatePaused, client.BackfillStateCanceling, client.BackfillStateCanceled} {
		var out bytes.Buffer
		clk := &fakeClock{t: time.Unix(0, 0)}
		p := newProgress(&out, false, 120, clk.now)
		p.update(backfillAt(client.BackfillStateRunning, 0, 0, 10))
		clk.t = clk.t.Add(time.Second)
		p.update(backfillAt(state, 5, 0, 5))
		p.tick()
		require.Contains(t, out.String(), string(state), state)
		require.NotRegexp(t, `(?m)^\S+ `+string(state)+`.*runs/s`, out.String(), "%s shows no rate", state)
		require.NotRegexp(t, `(?m)^\S+ `+string(state)+`.*ETA [0-9]`, out.String(), "%s shows no ETA", state)
	}
}
