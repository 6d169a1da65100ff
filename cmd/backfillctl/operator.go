package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	"github.com/backfillsvc/backfill/client"
)

// budgetValue is --max-failed-runs: a count of at least 1, or "none" for no limit.
type budgetValue struct {
	n    *int32
	none bool
}

func (b *budgetValue) String() string {
	switch {
	case b == nil || (b.n == nil && !b.none):
		return ""
	case b.none:
		return "none"
	}
	return strconv.Itoa(int(*b.n))
}

func (b *budgetValue) Set(s string) error {
	if s == "none" {
		b.n, b.none = nil, true
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n < 1 {
		return fmt.Errorf("must be a count of at least 1, or none")
	}
	v := int32(n)
	b.n, b.none = &v, false
	return nil
}

// field is the flag as a field of a patch or retry: left out when not given, null for
// "none".
func (b *budgetValue) field(fs *flag.FlagSet, name string) client.Field[int32] {
	switch {
	case !isSet(fs, name):
		return client.Field[int32]{}
	case b.n == nil:
		return client.Null[int32]()
	}
	return client.Set(*b.n)
}

// given is v as a field when the flag was given, else left out.
func given[T any](fs *flag.FlagSet, name string, v T) client.Field[T] {
	if !isSet(fs, name) {
		return client.Field[T]{}
	}
	return client.Set(v)
}

const priorityUsage = "claims serve higher `PRIORITY` first, -10..10 (server default 0); a backfill passed over gains one per PRIORITY_AGING, so none starves"

const budgetUsage = "pause the backfill when a run fails while `N` runs have failed (none: no limit)"

var backfillsPatch = do(backfillID, func(fs *flag.FlagSet) action[int64] {
	maxActive := fs.Int("max-active-runs", 0, "most runs of the backfill at once, 1..1000; the next claim obeys it")
	var budget budgetValue
	fs.Var(&budget, "max-failed-runs", budgetUsage)
	description := fs.String("description", "", "free text (an empty one clears it)")
	priority := fs.Int("priority", 0, priorityUsage+"; the next claim ranks the backfill by it")
	return func(ctx context.Context, c *cli, api *client.Client, id int64) error {
		changes := client.BackfillChanges{
			MaxActiveRuns: given(fs, "max-active-runs", int32(*maxActive)),
			MaxFailedRuns: budget.field(fs, "max-failed-runs"),
			Description:   given(fs, "description", *description),
			Priority:      given(fs, "priority", int32(*priority)),
		}
		if *description == "" && changes.Description.IsSet() {
			changes.Description = client.Null[string]()
		}
		if !changes.MaxActiveRuns.IsSet() && !changes.MaxFailedRuns.IsSet() && !changes.Description.IsSet() && !changes.Priority.IsSet() {
			return usageErrorf("nothing to change: give --max-active-runs, --max-failed-runs, --description or --priority")
		}
		b, err := api.PatchBackfill(ctx, id, changes)
		if err != nil {
			return err
		}
		return c.printBackfill(b)
	}
})

var backfillsRetry = do(backfillID, func(fs *flag.FlagSet) action[int64] {
	maxActive := fs.Int("max-active-runs", 0, "most runs at once, 1..1000 (default: the parent's)")
	var budget budgetValue
	fs.Var(&budget, "max-failed-runs", budgetUsage+" (default: the parent's)")
	var conf confValue
	fs.Var(&conf, "dag-run-conf", "a `JSON` object given to every retried run as its conf (default: the parent's)")
	description := fs.String("description", "", "free text (default: the parent's)")
	key := fs.String("idempotency-key", "", "the request's key (default: a random one); it is retried with it after a 503 or a network error")
	ifMatch := fs.String("if-match", "", "create only if the plan still has this `PLAN_HASH`")
	codeRef := fs.String("code-ref", "", "the code the retried runs are to run (default: the parent's)")
	reason := fs.String("reason", "", "why the retry is made (the retry's own; never the parent's)")
	priority := fs.Int("priority", 0, priorityUsage+" (default: the parent's)")
	actor := fs.String("actor", "", "who asks (sent as X-Actor): recorded as created_by where the service has no per-user identity")
	var chosen logicalDates
	chosen.register(fs)
	wf := registerWait(fs, "watch the new backfill's progress until it is terminal")
	return func(ctx context.Context, c *cli, api *client.Client, id int64) error {
		// Fields left out take the parent's values.
		req := client.RetryRequest{
			MaxActiveRuns: given(fs, "max-active-runs", int32(*maxActive)),
			MaxFailedRuns: budget.field(fs, "max-failed-runs"),
			Description:   given(fs, "description", *description),
			CodeRef:       given(fs, "code-ref", *codeRef),
			Reason:        given(fs, "reason", *reason),
			Priority:      given(fs, "priority", int32(*priority)),
		}
		if conf.conf != nil {
			req.DagRunConf = client.Set(*conf.conf)
		}
		dates, err := chosen.list()
		if err != nil {
			return err
		}
		if dates != nil {
			req.LogicalDates = client.Set(dates)
		}
		b, err := api.RetryBackfill(ctx, id, req, client.RetryOptions{IdempotencyKey: *key, IfPlan: *ifMatch, Actor: *actor})
		if err != nil {
			return err
		}
		return c.showOrWatch(ctx, api, b, wf,
			fmt.Sprintf("backfill %d created, retrying %d failed or canceled slots of backfill %d", b.Id, b.Progress.Total, id))
	}
})
