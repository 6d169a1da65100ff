package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/backfillsvc/backfill/client"
)

// waitFlags are the flags of watch and create --wait.
type waitFlags struct {
	wait              bool
	throughPause      bool
	interval, timeout time.Duration
}

func (w *waitFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&w.interval, "interval", 0, "without a terminal, time between progress lines (default 10s); on a terminal, time between polls against a server without event streams (default 1s)")
	fs.DurationVar(&w.timeout, "timeout", 0, "stop watching after this long, exit code 3 (0: never)")
	fs.BoolVar(&w.throughPause, "wait-through-pause", false, "keep watching while the backfill is paused, instead of exiting with code 4 and why it paused")
}

// registerWait adds --wait (what it does: usage) and the flags of watch to a command that
// creates a backfill.
func registerWait(fs *flag.FlagSet, usage string) *waitFlags {
	var w waitFlags
	fs.BoolVar(&w.wait, "wait", false, usage)
	w.register(fs)
	return &w
}

var watch = do(backfillID, func(fs *flag.FlagSet) action[int64] {
	var wf waitFlags
	wf.register(fs)
	return func(ctx context.Context, c *cli, api *client.Client, id int64) error {
		return c.watchBackfill(ctx, api, id, wf)
	}
})

var errWatchTimeout = errors.New("watch timeout")

// Default --interval: a terminal redraws in place and can poll every second; a log gets a
// line every ten, enough to see it move without burying everything else in it.
const (
	ttyInterval   = time.Second
	plainInterval = 10 * time.Second
)

// idleCheck is how long the event stream may bring nothing before the watch reads the
// backfill itself: a backfill that ended while its terminal event was already pruned from
// the outbox would otherwise be followed forever, one reconnect (two outbox scans) every
// few seconds.
var idleCheck = 15 * time.Second

// errEndedWithoutEvent stops following a backfill that a read found terminal.
var errEndedWithoutEvent = errors.New("the backfill ended; its stream has no terminal event")

// watchBackfill shows a backfill's progress until it is terminal. It follows the server's
// event stream, and polls every --interval against a server that has none. It answers nil
// when the backfill succeeded and a *stateExit when it failed or was canceled. With
// --output json the progress goes to stderr and the final backfill to stdout.
func (c *cli) watchBackfill(ctx context.Context, api *client.Client, id int64, wf waitFlags) error {
	if wf.interval < 0 {
		return usageErrorf("--interval must be positive")
	}
	out := c.stdout
	if c.g.output == "json" {
		out = c.stderr
	}
	width, tty := terminalWidth(out)
	tty = tty && c.getenv("TERM") != "dumb"
	if wf.interval == 0 {
		wf.interval = plainInterval
		if tty {
			wf.interval = ttyInterval
		}
	}
	p := newProgress(out, tty, width, time.Now)
	wctx := ctx
	if wf.timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeoutCause(ctx, wf.timeout, errWatchTimeout)
		defer cancel()
	}
	// A pause stops the watch (unless --wait-through-pause): nothing is handed out until
	// someone acts, so waiting would look like a hang. The snapshot that shows it may be a
	// replayed one from long ago, so the pause is confirmed with a read of the backfill now.
	fctx, stopFollowing := context.WithCancelCause(wctx)
	defer stopFollowing(nil)
	var paused *client.Backfill
	checkPause := func(b client.Backfill) {
		if wf.throughPause || paused != nil || b.State != client.BackfillStatePaused {
			return
		}
		if now, err := api.GetBackfill(fctx, id); err == nil && now.State == client.BackfillStatePaused {
			paused = &now
			stopFollowing(errPausedWatch)
		}
	}
	// The backfill as it is now: the first live reading, and the end at once for a backfill
	// that is already terminal (its events may be long pruned; none need replaying).
	b, err := api.GetBackfill(wctx, id)
	if err != nil {
		return err
	}
	p.serverEstimate(b.EtaSeconds)
	p.update(b)
	checkPause(b)
	if !tty {
		stopTicks := tickEvery(wf.interval, p.tick)
		defer stopTicks()
	}
	if !b.State.Terminal() && paused == nil {
		var heard atomic.Int64 // when the stream last brought anything, UnixNano
		heard.Store(time.Now().UnixNano())
		var ended *client.Backfill
		stopIdle := tickEvery(idleCheck, func() {
			if time.Since(time.Unix(0, heard.Load())) < idleCheck {
				return
			}
			if now, err := api.GetBackfill(fctx, id); err == nil && now.State.Terminal() {
				ended = &now
				stopFollowing(errEndedWithoutEvent)
			}
		})
		seen := b.UpdatedAt
		live := func(b client.Backfill) { heard.Store(time.Now().UnixNano()); p.update(b); checkPause(b) }
		snapshot := func(b client.Backfill) {
			heard.Store(time.Now().UnixNano())
			// A replayed event is older than the reading above: it is history, not news.
			if !b.UpdatedAt.After(seen) {
				return
			}
			p.show(b)
			checkPause(b)
		}
		b, err = followBackfill(fctx, api, id, b, live, snapshot, p.serverEstimate)
		if errors.Is(err, client.ErrStreamUnsupported) {
			// Polls read the backfill with its eta_seconds.
			b, err = api.WaitBackfill(fctx, id, wf.interval, func(b client.Backfill) { p.serverEstimate(b.EtaSeconds); live(b) })
		}
		stopIdle()
		if ended != nil && errors.Is(context.Cause(fctx), errEndedWithoutEvent) {
			b, err = *ended, nil
		}
	}
	if paused != nil {
		p.end()
		p.drawNow(*paused)
		p.end()
		fmt.Fprintln(out, pauseExplanation(*paused))
		if c.g.output == "json" {
			if err := c.printJSON(*paused); err != nil {
				return err
			}
		}
		return &pauseExit{}
	}
	if err != nil {
		p.end()
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("stopped watching backfill %d, which goes on: %w", id, ctx.Err())
		case errors.Is(context.Cause(wctx), errWatchTimeout):
			if b.Id == 0 {
				return fmt.Errorf("gave up watching backfill %d after %s", id, wf.timeout)
			}
			return fmt.Errorf("gave up watching backfill %d after %s; it is still %s", id, wf.timeout, b.State)
		}
		return err
	}
	p.finish(b)
	if c.g.output == "json" {
		if err := c.printJSON(b); err != nil {
			return err
		}
	}
	if b.State != client.BackfillStateSucceeded {
		return &stateExit{state: b.State}
	}
	return nil
}

// followBackfill shows the backfill from its event stream until the terminal event: each
// event's snapshot (as it was then: snapshot), and progress messages (as it is now: live)
// applied to the last snapshot, or to from (the backfill as read before following) while
// no event has come, with the service's estimate (eta). It answers the terminal snapshot, or
// the last one seen with the error that ended the stream.
func followBackfill(ctx context.Context, api *client.Client, id int64, from client.Backfill, live, snapshot func(client.Backfill), eta func(*float64)) (client.Backfill, error) {
	last := from
	for msg, err := range api.FollowBackfill(ctx, id, 0) {
		if err != nil {
			return last, err
		}
		switch {
		case msg.Event != nil && msg.Event.Data.Backfill != nil:
			last = *msg.Event.Data.Backfill
			snapshot(last)
		case msg.Progress != nil && last.Id != 0:
			last.State = msg.Progress.State
			last.Progress = msg.Progress.Progress
			eta(msg.Progress.EtaSeconds)
			live(last)
		}
	}
	if !last.State.Terminal() {
		return last, fmt.Errorf("the event stream of backfill %d ended before the backfill did", id)
	}
	return last, nil
}

// tickEvery calls f every d in a goroutine until the returned stop, which waits for it.
func tickEvery(d time.Duration, f func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				f()
			}
		}
	}()
	return sync.OnceFunc(func() { close(done); wg.Wait() })
}

// errPausedWatch ends a watch that met a pause.
var errPausedWatch = errors.New("the backfill is paused")

// pauseExit ends watch or create --wait on a paused backfill (exit code 4); the reason and
// what to do are already printed.
type pauseExit struct{}

func (*pauseExit) Error() string { return "backfill paused" }

// pauseExplanation says why a backfill is paused and what can be done about it.
func pauseExplanation(b client.Backfill) string {
	why := "paused"
	switch {
	case b.PauseReason != nil && *b.PauseReason == client.BackfillPauseReasonFailureBudget && b.MaxFailedRuns != nil:
		why = fmt.Sprintf("paused by the failure budget: %d failed ≥ max_failed_runs %d", b.Progress.Failed, *b.MaxFailedRuns)
	case b.PauseReason != nil && *b.PauseReason == client.BackfillPauseReasonFailureBudget:
		why = fmt.Sprintf("paused by the failure budget: %d failed", b.Progress.Failed)
	case b.PauseReason != nil && *b.PauseReason == client.BackfillPauseReasonUser:
		why = "paused by a pause request"
	}
	todo := fmt.Sprintf("see why runs failed with 'backfillctl backfills runs %d --state failed'; "+
		"resume with 'backfillctl backfills unpause %d' (raise the budget first with "+
		"'backfillctl backfills patch %d --max-failed-runs N'), or stop with 'backfillctl backfills cancel %d'",
		b.Id, b.Id, b.Id, b.Id)
	if b.PauseReason == nil || *b.PauseReason != client.BackfillPauseReasonFailureBudget {
		todo = fmt.Sprintf("resume with 'backfillctl backfills unpause %d', or stop with 'backfillctl backfills cancel %d'", b.Id, b.Id)
	}
	return fmt.Sprintf("backfill %d %s.\nnext: %s", b.Id, why, todo)
}
