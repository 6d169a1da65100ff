package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/backfillsvc/backfill/client"
)

const (
	// rateWindow is how far back the rate looks: long enough to smooth the steps of the
	// sweep and of polling, short enough to follow a change of pace.
	rateWindow = 30 * time.Second
	barWidth   = 24
)

// progress draws a watched backfill: on a terminal, a bar and the counts per state redrawn
// in place; elsewhere (a pipe, a CI log), one plain line stamped with its UTC time at once,
// then one per tick (the watch's --interval), however often the counts change. Its methods
// may be called from the watch and from its ticker at once.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	width int // terminal columns; lines are cut to fit so that the redraw stays in place
	now   func() time.Time

	start   time.Time
	samples []sample
	// serverETA is the service's eta_seconds from the last progress message or read; nil
	// when it has none. The ETA shown is this figure, never one of the watch's own, so that
	// the watch, the console and the API agree.
	serverETA *float64
	drawn     int // lines on the terminal from the last draw
	// latest is the backfill a plain line shows at the next tick; printed, whether any
	// plain line was printed yet.
	latest  *client.Backfill
	printed bool
}

type sample struct {
	at   time.Time
	done int64
}

func newProgress(w io.Writer, tty bool, width int, now func() time.Time) *progress {
	if width <= 0 {
		width = 80
	}
	return &progress{w: w, tty: tty, width: width, now: now, start: now()}
}

// update takes the backfill as it is now (a poll, or a progress message): a sample of the
// rate as well as what to draw.
func (p *progress) update(b client.Backfill) {
	p.mu.Lock()
	defer p.mu.Unlock()
	at := p.now()
	p.samples = append(p.samples, sample{at: at, done: b.Progress.Done()})
	for len(p.samples) > 2 && at.Sub(p.samples[1].at) >= rateWindow {
		p.samples = p.samples[1:]
	}
	p.drawLocked(b)
}

// show draws a backfill as it was at some moment, not necessarily now: an event's snapshot,
// replayed from the outbox when the watch starts. It is no sample of the rate: a snapshot
// taken at creation and read a millisecond before the current counts would make a rate of
// thousands of runs a second.
func (p *progress) show(b client.Backfill) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drawLocked(b)
}

// serverEstimate keeps the service's eta_seconds from a progress message or a read of the
// backfill (nil for none).
func (p *progress) serverEstimate(eta *float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.serverETA = eta
}

// drawNow is draw that also prints a plain line at once (the backfill a watch ends on).
func (p *progress) drawNow(b client.Backfill) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drawLocked(b)
	if !p.tty && p.latest != nil {
		p.printLocked(*p.latest)
	}
}

// drawLocked shows b: redrawn on a terminal; otherwise kept for the next tick, and printed
// at once if it is the first. p.mu is held.
func (p *progress) drawLocked(b client.Backfill) {
	if p.tty {
		p.redraw(p.lines(b, true))
		return
	}
	p.latest = &b
	if !p.printed {
		p.printLocked(b)
	}
}

// tick prints the latest plain line; nothing on a terminal, which redraws as it goes.
func (p *progress) tick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.tty && p.latest != nil {
		p.printLocked(*p.latest)
	}
}

func (p *progress) printLocked(b client.Backfill) {
	p.printed = true
	fmt.Fprintln(p.w, p.now().UTC().Format(time.RFC3339)+" "+strings.Join(p.lines(b, false), "  "))
}

// finish ends the view with the terminal backfill and a summary line.
func (p *progress) finish(b client.Backfill) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endLocked()
	pr := b.Progress
	fmt.Fprintf(p.w, "backfill %d %s: %d/%d done (success %d, failed %d, canceled %d, skipped %d) in %s\n",
		b.Id, b.State, pr.Done(), pr.Total, pr.Success, pr.Failed, pr.Canceled, pr.Skipped, duration(p.took(b)))
}

// took is how long the backfill ran: from its creation to its completion, as the service
// recorded them, however long this watch lasted; the watch's own time only when the
// backfill carries no completion time.
func (p *progress) took(b client.Backfill) time.Duration {
	if b.CompletedAt != nil && !b.CreatedAt.IsZero() && b.CompletedAt.After(b.CreatedAt) {
		return b.CompletedAt.Sub(b.CreatedAt)
	}
	return p.now().Sub(p.start)
}

// end leaves the cursor on a fresh line below the drawing.
func (p *progress) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endLocked()
}

func (p *progress) endLocked() {
	if p.tty && p.drawn > 0 {
		fmt.Fprintln(p.w)
		p.drawn = 0
	}
}

// lines renders the view: the state, bar, percentage, done/total, rate and the service's
// ETA, then the counts per state.
func (p *progress) lines(b client.Backfill, bar bool) []string {
	pr := b.Progress
	done := pr.Done()
	head := fmt.Sprintf("%-9s ", b.State)
	if bar {
		head += renderBar(done, pr.Total, barWidth) + " "
	}
	head += fmt.Sprintf("%4s  %d/%d", percent(done, pr.Total), done, pr.Total)
	rate, ok := p.rate()
	switch {
	case b.State == client.BackfillStatePaused:
		// Nothing is handed out while paused: a rate or an ETA would be a guess.
		head += "  paused, ETA --"
	case b.State == client.BackfillStateCanceling || b.State == client.BackfillStateCanceled:
		// A canceled backfill never reaches its total: there is nothing to estimate.
		head += "  canceled, no ETA"
	case b.State.Terminal() && ok:
		head += fmt.Sprintf("  %.1f runs/s", rate)
	case b.State.Terminal():
		head += "  -- runs/s"
	case done == pr.Total && ok:
		// Every run is finished; the service's sweep makes the backfill terminal shortly.
		head += fmt.Sprintf("  %.1f runs/s  finishing", rate)
	default:
		speed := "--"
		if ok {
			speed = fmt.Sprintf("%.1f", rate)
		}
		head += "  " + speed + " runs/s  ETA " + p.etaLocked()
	}
	return []string{head, countsLine(pr)}
}

// rate is runs done per second over the window, once two polls are apart in time.
func (p *progress) rate() (float64, bool) {
	if len(p.samples) < 2 {
		return 0, false
	}
	first, last := p.samples[0], p.samples[len(p.samples)-1]
	span := last.at.Sub(first.at).Seconds()
	if span <= 0 {
		return 0, false
	}
	return float64(last.done-first.done) / span, true
}

// redraw replaces the previous drawing: back to its first line, clearing each line.
func (p *progress) redraw(lines []string) {
	var sb strings.Builder
	if p.drawn > 0 {
		sb.WriteString("\r\x1b[2K")
		for range p.drawn - 1 {
			sb.WriteString("\x1b[1A\x1b[2K")
		}
	}
	for i, l := range lines {
		if i > 0 {
			sb.WriteString("\n")
		}
		sb.WriteString(fit(l, p.width-1))
	}
	p.drawn = len(lines)
	io.WriteString(p.w, sb.String())
}

// renderBar is a bar of width cells, filled in proportion to done/total.
func renderBar(done, total int64, width int) string {
	filled := width
	if total > 0 {
		filled = int(done * int64(width) / total)
	}
	return "[" + strings.Repeat("█", filled) + strings.Repeat("░", width-filled) + "]"
}

// fit cuts s to at most n characters: a line that wraps would break the redraw.
func fit(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:max(n, 0)])
}

// etaString is an estimate to the second.
func etaString(d time.Duration) string {
	if d < time.Second {
		return "<1s"
	}
	return duration(d)
}

// duration is d for people: 850ms, 12s, 3m05s, 2h10m.
func duration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	default:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
}

// etaLocked is the service's eta_seconds as the watch prints it: "--" while the service has
// none (before its pace is known).
func (p *progress) etaLocked() string {
	if p.serverETA == nil {
		return "--"
	}
	return etaString(time.Duration(*p.serverETA * float64(time.Second)))
}
