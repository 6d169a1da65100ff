package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/backfillsvc/backfill/client"
	"github.com/backfillsvc/backfill/internal/ctxwait"
)

var groupsWatch = do(groupID, func(fs *flag.FlagSet) action[int64] {
	var wf waitFlags
	fs.DurationVar(&wf.interval, "interval", 0, "without a terminal, time between progress lines (default 10s); on a terminal, time between polls (default 1s)")
	fs.DurationVar(&wf.timeout, "timeout", 0, "stop watching after this long, exit code 3 (0: never)")
	fs.BoolVar(&wf.throughPause, "wait-through-pause", false, "keep watching while the group is paused, instead of exiting with code 4 and why it paused")
	return func(ctx context.Context, c *cli, api *client.Client, id int64) error {
		return c.watchGroup(ctx, api, id, wf)
	}
})

// watchGroup shows a group's members until the group is terminal, and ends as watchBackfill
// ends for a backfill: nil when it succeeded, a *stateExit when it failed or was canceled, a
// *pauseExit when it paused (unless --wait-through-pause). A group has no event stream of its
// own, so this polls: every --interval on a terminal; elsewhere, where --interval spaces the
// printed lines, at least every second, so that the end is seen within a second of the sweep.
func (c *cli) watchGroup(ctx context.Context, api *client.Client, id int64, wf waitFlags) error {
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
	poll := wf.interval
	if !tty {
		poll = min(wf.interval, ttyInterval)
	}
	v := newGroupView(out, tty, width, time.Now)
	wctx := ctx
	if wf.timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeoutCause(ctx, wf.timeout, errWatchTimeout)
		defer cancel()
	}
	stopTicks := func() {}
	defer func() { stopTicks() }()
	var last *client.BackfillGroup
	for {
		wait := poll
		g, err := getGroup(api, wctx, id)
		var prob *client.ProblemError
		switch {
		case err == nil:
			v.draw(g)
			if last == nil && !tty {
				stopTicks = tickEvery(wf.interval, v.tick)
			}
			last = &g
			if g.State.Terminal() {
				stopTicks()
				return c.endGroupWatch(v, g)
			}
			if g.State == client.BackfillStatePaused && !wf.throughPause {
				stopTicks()
				return c.pausedGroupWatch(v, g)
			}
		case wctx.Err() != nil: // interrupted or timed out: the Sleep below ends the loop
		case errors.As(err, &prob) && prob.Temporary():
			wait = max(wait, prob.RetryAfter) // the service is busy: wait it out
		default:
			v.end()
			return err
		}
		if !ctxwait.Sleep(wctx, wait) {
			break
		}
	}
	stopTicks()
	v.end()
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("stopped watching group %d, which goes on: %w", id, ctx.Err())
	case last == nil:
		return fmt.Errorf("gave up watching group %d after %s", id, wf.timeout)
	}
	return fmt.Errorf("gave up watching group %d after %s; it is still %s", id, wf.timeout, last.State)
}

// endGroupWatch ends the watch of a terminal group with its summary, and its exit code.
func (c *cli) endGroupWatch(v *groupView, g client.BackfillGroup) error {
	v.finish(g)
	if c.g.output == "json" {
		if err := c.printJSON(g); err != nil {
			return err
		}
	}
	if g.State != client.BackfillStateSucceeded {
		return &stateExit{state: g.State}
	}
	return nil
}

// pausedGroupWatch stops at a pause: nothing is handed out until someone acts, so waiting
// would look like a hang.
func (c *cli) pausedGroupWatch(v *groupView, g client.BackfillGroup) error {
	v.flush()
	fmt.Fprintln(v.w, groupPauseExplanation(g))
	if c.g.output == "json" {
		if err := c.printJSON(g); err != nil {
			return err
		}
	}
	return &pauseExit{}
}

// groupPauseExplanation says why a group is paused and what can be done about it: for the
// failure budget, which members' runs failed and where to read why.
func groupPauseExplanation(g client.BackfillGroup) string {
	resume := fmt.Sprintf("resume with 'backfillctl groups unpause %d', or stop with 'backfillctl groups cancel %d'", g.Id, g.Id)
	if g.PauseReason == nil || *g.PauseReason != client.BackfillGroupPauseReasonFailureBudget {
		return fmt.Sprintf("group %d paused by a pause request.\nnext: %s", g.Id, resume)
	}
	why := fmt.Sprintf("%d failed", g.Progress.Failed)
	if g.MaxFailedRuns != nil {
		why += fmt.Sprintf(" ≥ max_failed_runs %d", *g.MaxFailedRuns)
	}
	var see []string
	for _, m := range g.Members {
		if m.Progress.Failed > 0 {
			see = append(see, fmt.Sprintf("'backfillctl backfills runs %d --state failed' (%s)", m.BackfillId, m.DagId))
		}
	}
	todo := resume
	if len(see) > 0 {
		todo = "see why runs failed with " + strings.Join(see, ", ") + "; " + resume
	}
	return fmt.Sprintf("group %d paused by the failure budget: %s.\nnext: %s", g.Id, why, todo)
}

// memberBarWidth is narrower than a backfill's bar: a member's row carries its counts too.
const memberBarWidth = 12

// groupView draws a watched group: on a terminal, the group's bar and a row per member (by
// depth) with its own bar, redrawn in place; elsewhere, the same without bars, stamped with
// its UTC time, at once and then once per tick. Its methods may be called from the watch and
// from its ticker at once.
type groupView struct {
	mu sync.Mutex
	w  io.Writer
	// screen is a backfill's progress used only for its in-place redraw, so that both watches
	// clear and fit their lines the same way.
	screen *progress
	tty    bool
	now    func() time.Time
	start  time.Time
	// latest is the group the next tick prints; unprinted, whether it is not printed yet;
	// printed, whether any group was.
	latest    *client.BackfillGroup
	unprinted bool
	printed   bool
}

func newGroupView(w io.Writer, tty bool, width int, now func() time.Time) *groupView {
	return &groupView{w: w, screen: newProgress(w, tty, width, now), tty: tty, now: now, start: now()}
}

// draw shows the group as read now: redrawn on a terminal; otherwise kept for the next tick,
// and printed at once if it is the first.
func (v *groupView) draw(g client.BackfillGroup) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.tty {
		v.screen.redraw(groupLines(g, true))
		return
	}
	v.latest, v.unprinted = &g, true
	if !v.printed {
		v.printLocked()
	}
}

// tick prints the latest group; nothing on a terminal, which redraws as it goes.
func (v *groupView) tick() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.tty && v.latest != nil {
		v.printLocked()
	}
}

func (v *groupView) printLocked() {
	v.printed, v.unprinted = true, false
	lines := groupLines(*v.latest, false)
	fmt.Fprintln(v.w, v.now().UTC().Format(time.RFC3339)+" "+strings.Join(lines, "\n"))
}

// flush ends the drawing with the last group shown: on a fresh line below it on a terminal,
// printed elsewhere unless it already was.
func (v *groupView) flush() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.tty && v.unprinted {
		v.printLocked()
	}
	v.screen.end()
}

// end leaves the cursor on a fresh line below the drawing.
func (v *groupView) end() { v.screen.end() }

// finish ends the view with the terminal group and a summary line.
func (v *groupView) finish(g client.BackfillGroup) {
	v.flush()
	p := g.Progress
	took := v.now().Sub(v.start)
	if g.CompletedAt != nil && g.CompletedAt.After(g.CreatedAt) {
		took = g.CompletedAt.Sub(g.CreatedAt) // the group's own time, however long this watch lasted
	}
	fmt.Fprintf(v.w, "group %d %s: %d/%d done (success %d, failed %d, canceled %d, skipped %d) in %s\n",
		g.Id, g.State, p.Done(), p.Total, p.Success, p.Failed, p.Canceled, p.Skipped, duration(took))
}

// groupLines renders the view: the group's state, bar, percentage, done/total and blocked
// runs, then its members by depth, in aligned columns. BLOCKED comes early so that a narrow
// terminal, which cuts the rows, keeps it.
func groupLines(g client.BackfillGroup, bar bool) []string {
	p := g.Progress
	head := fmt.Sprintf("group %d %-9s ", g.Id, g.State)
	if bar {
		head += renderBar(p.Done(), p.Total, barWidth) + " "
	}
	head += fmt.Sprintf("%4s  %d/%d  blocked %d", percent(p.Done(), p.Total), p.Done(), p.Total, p.Blocked)
	if !g.State.Terminal() && p.Done() == p.Total {
		head += "  finishing" // every run is finished; the service's sweep ends the group shortly
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DAG_ID\tDEPTH\tSTATE\tPROGRESS\tDONE\tBLOCKED\tRUNNING\tQUEUED\tSUCCESS\tFAILED\tCANCELED\tSKIPPED")
	for _, m := range g.Members {
		mp := m.Progress
		progress := percent(mp.Done(), mp.Total)
		if bar {
			progress = renderBar(mp.Done(), mp.Total, memberBarWidth) + " " + fmt.Sprintf("%4s", progress)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d/%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", m.DagId, m.Depth, m.State, progress,
			mp.Done(), mp.Total, mp.Blocked, mp.Running, mp.Queued, mp.Success, mp.Failed, mp.Canceled, mp.Skipped)
	}
	_ = tw.Flush()
	lines := []string{head}
	for _, l := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		lines = append(lines, "  "+strings.TrimRight(l, " "))
	}
	return lines
}
