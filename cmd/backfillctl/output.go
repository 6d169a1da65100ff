package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/backfillsvc/backfill/client"
)

// printJSON writes v as indented JSON, the SDK's (and so the API's) field names.
func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes rows aligned in columns; the first row is the header.
func (c *cli) table(rows [][]string) error {
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// printPage tells, under a table, that it shows a page of a longer list.
func (c *cli) printPage(n, offset int, total int64) {
	if int64(n) < total {
		if n == 0 {
			fmt.Fprintf(c.stdout, "(no entries at offset %d of %d)\n", offset, total)
			return
		}
		fmt.Fprintf(c.stdout, "(%d-%d of %d; see --limit and --offset)\n", offset+1, offset+n, total)
	}
}

// printBackfill shows one backfill: JSON, or a vertical table with its progress.
func (c *cli) printBackfill(b client.Backfill) error {
	if c.g.output == "json" {
		return c.printJSON(b)
	}
	p := b.Progress
	conf := "null"
	if b.DagRunConf != nil {
		raw, _ := json.Marshal(b.DagRunConf)
		conf = string(raw)
	}
	completed := "-"
	if b.CompletedAt != nil {
		completed = stamp(*b.CompletedAt)
	}
	state := string(b.State)
	if b.PauseReason != nil {
		state += " (" + string(*b.PauseReason) + ")"
	}
	budget := "none"
	if b.MaxFailedRuns != nil {
		budget = fmt.Sprint(*b.MaxFailedRuns)
	}
	parent := "-"
	if b.ParentBackfillId != nil {
		parent = fmt.Sprint(*b.ParentBackfillId)
	}
	return c.table([][]string{
		{"ID:", fmt.Sprint(b.Id)},
		{"DAG ID:", b.DagId},
		{"STATE:", state},
		{"FROM DATE:", instant(b.FromDate)},
		{"TO DATE:", instant(b.ToDate)},
		{"PROGRESS:", fmt.Sprintf("%d/%d done (%s)", p.Done(), p.Total, percent(p.Done(), p.Total))},
		{"RUNS:", countsLine(p)},
		{"REPROCESS BEHAVIOR:", string(b.ReprocessBehavior)},
		{"MAX ACTIVE RUNS:", fmt.Sprint(b.MaxActiveRuns)},
		{"PRIORITY:", fmt.Sprint(b.Priority)},
		{"MAX FAILED RUNS:", budget},
		{"RETRY OF:", parent},
		{"PLAN HASH:", deref(b.PlanHash)},
		{"RUN BACKWARDS:", fmt.Sprint(b.RunBackwards)},
		{"DAG RUN CONF:", conf},
		{"DESCRIPTION:", deref(b.Description)},
		{"CODE REF:", deref(b.CodeRef)},
		{"CREATED BY:", deref(b.CreatedBy)},
		{"REASON:", deref(b.Reason)},
		{"CREATED AT:", stamp(b.CreatedAt)},
		{"UPDATED AT:", stamp(b.UpdatedAt)},
		{"COMPLETED AT:", completed},
	})
}

// dryRunView is how much of a plan dry-run prints: every slot (the default), the first
// limit of them, or only the summary.
type dryRunView struct {
	summary bool
	limit   int
}

// dryRunSummary is a plan in a few numbers: the --summary of dry-run, also its JSON.
type dryRunSummary struct {
	TotalEntries int64                       `json:"total_entries"`
	Actions      map[client.DryRunAction]int `json:"actions"`
	First        *client.DryRunEntry         `json:"first"`
	Last         *client.DryRunEntry         `json:"last"`
	PlanHash     string                      `json:"plan_hash"`
}

func summarize(l client.DryRunCollection) dryRunSummary {
	s := dryRunSummary{TotalEntries: l.TotalEntries, PlanHash: l.PlanHash, Actions: map[client.DryRunAction]int{
		client.DryRunActionCreate: 0, client.DryRunActionReprocess: 0, client.DryRunActionSkip: 0}}
	for _, e := range l.Runs {
		s.Actions[e.Action]++
	}
	if n := len(l.Runs); n > 0 {
		s.First, s.Last = &l.Runs[0], &l.Runs[n-1]
	}
	return s
}

func (c *cli) printDryRun(l client.DryRunCollection, view dryRunView) error {
	sum := summarize(l)
	if view.limit > 0 && len(l.Runs) > view.limit {
		l.Runs = l.Runs[:view.limit]
	}
	if c.g.output == "json" {
		if view.summary {
			return c.printJSON(sum)
		}
		return c.printJSON(l)
	}
	if !view.summary {
		rows := [][]string{{"SORT_ORDINAL", "LOGICAL_DATE", "ACTION", "REASON"}}
		for _, e := range l.Runs {
			rows = append(rows, []string{fmt.Sprint(e.SortOrdinal), instant(e.LogicalDate), string(e.Action), deref(e.ExceptionReason)})
		}
		if err := c.table(rows); err != nil {
			return err
		}
		if more := sum.TotalEntries - int64(len(l.Runs)); more > 0 {
			fmt.Fprintf(c.stdout, "... and %d more slots (--limit 0 prints them all)\n", more)
		}
	}
	fmt.Fprintf(c.stdout, "%d slots: %d create, %d reprocess, %d skip (nothing was written)\n", sum.TotalEntries,
		sum.Actions[client.DryRunActionCreate], sum.Actions[client.DryRunActionReprocess], sum.Actions[client.DryRunActionSkip])
	if sum.First != nil {
		fmt.Fprintf(c.stdout, "first slot #%d %s (%s), last slot #%d %s (%s)\n",
			sum.First.SortOrdinal, instant(sum.First.LogicalDate), sum.First.Action,
			sum.Last.SortOrdinal, instant(sum.Last.LogicalDate), sum.Last.Action)
	}
	if e := l.Estimate; e != nil {
		fmt.Fprintf(c.stdout, "estimate: %s runner-seconds, %s wall clock at %d at once (p50 %ss of the last %d successful runs)\n",
			fmt.Sprint(e.RunnerSeconds), fmt.Sprint(e.WallClockSeconds), e.Concurrency, fmt.Sprint(e.P50RunSeconds), e.SampleRuns)
	} else if l.EstimateBasis != "" { // "": a server older than estimates
		fmt.Fprintf(c.stdout, "estimate: none (%s)\n", l.EstimateBasis)
	}
	_, err := fmt.Fprintf(c.stdout, "plan hash %s (create exactly this plan with --if-match %s)\n", l.PlanHash, l.PlanHash)
	return err
}

var slotColumns = columns[client.BackfillDagRun]{
	header: []string{"SORT_ORDINAL", "LOGICAL_DATE", "RUN_ID", "STATE", "ATTEMPT", "REASON", "NOTE"},
	row: func(s client.BackfillDagRun) []string {
		state, attempt := "-", "-"
		if s.State != nil {
			state = string(*s.State)
		}
		if s.Attempt != nil {
			attempt = fmt.Sprint(*s.Attempt)
		}
		return []string{fmt.Sprint(s.SortOrdinal), instant(s.LogicalDate), deref(s.RunId), state, attempt,
			deref(s.ExceptionReason), oneLine(deref(s.Note))}
	},
}

// countsLine is a backfill's slots per state.
func countsLine(p client.BackfillProgress) string {
	return fmt.Sprintf("success %d  failed %d  canceled %d  skipped %d  running %d  queued %d",
		p.Success, p.Failed, p.Canceled, p.Skipped, p.Running, p.Queued)
}

func percent(done, total int64) string {
	if total == 0 {
		return "100%"
	}
	return fmt.Sprintf("%d%%", done*100/total)
}

// oneLine keeps a table row on one line: a note may hold newlines and be long.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 80 {
		s = string(r[:79]) + "…"
	}
	return s
}

// stamp is a moment of the service's bookkeeping (created, updated, completed), to the second.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// instant is a moment that names something (a logical date, a window's bound), whole: two
// runs a microsecond apart are two runs.
func instant(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func deref(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}
