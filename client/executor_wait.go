package client

import (
	"context"
	"log/slog"
	"time"
)

// claimWaitRenewAfter is how long a claim may take before its runs are heartbeated once
// before their work starts (see RunExecutor): a claim answered at once needs no renewal.
const claimWaitRenewAfter = time.Second

// renewClaimed heartbeats a run just claimed by a claim that waited, so that its lease is
// reckoned from this heartbeat's sending rather than the claim's. It reports whether the
// work may start: on a lost lease it reports nothing (the run is no longer this worker's);
// on another failure it releases the run (its lease cannot be reckoned).
func (c *Client) renewClaimed(ctx context.Context, cfg ExecutorConfig, log *slog.Logger, run DagRun, lease *leaseClock) bool {
	log = log.With("dag_id", run.DagId, "run_id", run.RunId)
	sent := time.Now()
	_, err := c.HeartbeatRun(ctx, run.Id, cfg.WorkerID)
	switch {
	case err == nil:
		lease.renewed(sent)
		return true
	case IsCode(err, ProblemCodeLeaseLost) || IsCode(err, ProblemCodeRunNotFound):
		log.Warn("lease lost before the work started; not reporting", "err", err)
		cfg.runEnded(run, OutcomeLeaseLost, "")
	default:
		log.Warn("could not renew the lease of a run claimed after a wait; releasing it", "err", err)
		cfg.runEnded(run, c.release(ctx, log, run, cfg.WorkerID), "")
	}
	return false
}
