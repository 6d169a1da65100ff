package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/backfillsvc/backfill/client"
)

// waitFlags are the flags of watch and create --wait.
type waitFlags struct {
	wait              bool
	interval, timeout time.Duration
}

func (w *waitFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&w.interval, "interval", time.Second, "time between polls of the backfill, against a server without event streams")
	fs.DurationVar(&w.timeout, "timeout", 0, "stop watching after this long, exit code 3 (0: never)")
}

func watch(ctx context.Context, c *cli, args []string) error {
	fs := newFlagSet("watch", "watch ID [--interval 1s] [--timeout 0]", &c.g, c.stderr)
	var wf waitFlags
	wf.register(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	id, err := oneID(pos, "backfill ID")
	if err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	return c.watchBackfill(ctx, api, id, wf)
}

var errWatchTimeout = errors.New("watch timeout")

// watchBackfill shows a backfill's progress until it is terminal. It follows the server's
// event stream, and polls every --interval against a server that has none. It answers nil
// when the backfill succeeded and a *stateExit when it failed or was canceled. With
// --output json the progress goes to stderr and the final backfill to stdout.
func (c *cli) watchBackfill(ctx context.Context, api *client.Client, id int64, wf waitFlags) error {
	if wf.interval <= 0 {
		return usageErrorf("--interval must be positive")
	}
	out := c.stdout
	if c.g.output == "json" {
		out = c.stderr
	}
	width, tty := terminalWidth(out)
	tty = tty && c.getenv("TERM") != "dumb"
	p := newProgress(out, tty, width, time.Now)
	wctx := ctx
	if wf.timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeoutCause(ctx, wf.timeout, errWatchTimeout)
		defer cancel()
	}
	b, err := followBackfill(wctx, api, id, p.update)
	if errors.Is(err, client.ErrStreamUnsupported) {
		b, err = api.WaitBackfill(wctx, id, wf.interval, p.update)
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
// event's snapshot, and progress messages applied to the last snapshot. It answers the
// terminal snapshot, or the last one seen with the error that ended the stream.
func followBackfill(ctx context.Context, api *client.Client, id int64, update func(client.Backfill)) (client.Backfill, error) {
	var last client.Backfill
	for msg, err := range api.FollowBackfill(ctx, id, 0) {
		if err != nil {
			return last, err
		}
		switch {
		case msg.Event != nil:
			last = msg.Event.Data.Backfill
			update(last)
		case msg.Progress != nil && last.Id != 0:
			last.State = msg.Progress.State
			last.Progress = msg.Progress.Progress
			update(last)
		}
	}
	if !last.State.Terminal() {
		return last, fmt.Errorf("the event stream of backfill %d ended before the backfill did", id)
	}
	return last, nil
}
