package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/backfillsvc/backfill/client"
	"github.com/backfillsvc/backfill/internal/ctxwait"
)

// airflowRunID is the dag_run_id under which a service run is triggered in Airflow:
// backfillsvc__<backfill_id>__<logical_date in UTC RFC 3339> (backfillsvc__manual__<...>
// for a run no backfill owns). A slot always gets the same id, so a bridge that claims it
// again (after a restart, a release, an expired lease) meets Airflow's 409 and follows the
// run already triggered instead of starting a second. A retry of a finished backfill is a
// new backfill, so it runs the slot again under a new id. Every character is within
// Airflow's default allowed_run_id_pattern, ^[A-Za-z0-9_.~:+-]+$.
func airflowRunID(run client.DagRun) string {
	owner := "manual"
	if run.BackfillId != nil {
		owner = fmt.Sprint(*run.BackfillId)
	}
	return "backfillsvc__" + owner + "__" + run.LogicalDate.UTC().Format(time.RFC3339Nano)
}

// airflowBridge is the work function of `backfillctl airflow`: one service run, one Airflow
// DAG run, followed until it ends.
type airflowBridge struct {
	api   *airflowAPI
	poll  time.Duration
	log   *slog.Logger
	lines *runLines
	// queuedWarn is how long Airflow's run may stay queued before the bridge warns that
	// the DAG may be paused in Airflow (where a triggered run waits for ever).
	queuedWarn time.Duration
}

// work triggers the run in Airflow (or finds the one already triggered) and follows it:
// nil when Airflow's run succeeded, an error naming the failed tasks when it failed.
func (b *airflowBridge) work(ctx context.Context, run client.DagRun) error {
	id := airflowRunID(run)
	log := b.log.With("dag_id", run.DagId, "run_id", run.RunId, "dag_run_id", id)
	adopted, err := b.trigger(ctx, log, run, id)
	if err != nil {
		return err
	}
	b.lines.startAirflow(run, id, adopted)
	return b.follow(ctx, log, run, id)
}

// trigger creates Airflow's run, sending the same request again while Airflow is away
// (the id makes that safe: a trigger that landed unheard answers 409 the next time). It
// reports whether the run existed already.
func (b *airflowBridge) trigger(ctx context.Context, log *slog.Logger, run client.DagRun, id string) (bool, error) {
	conf := json.RawMessage("null")
	if run.Conf != nil {
		conf = *run.Conf
	}
	body := afTrigger{
		DagRunID: id, LogicalDate: run.LogicalDate.UTC(), Conf: conf,
		DataIntervalStart: run.DataIntervalStart.UTC(), DataIntervalEnd: run.DataIntervalEnd.UTC(),
		Note: fmt.Sprintf("backfill service run %d (%s), attempt %d", run.Id, run.RunId, run.Attempt),
	}
	wait := b.poll
	for {
		_, err := b.api.trigger(ctx, run.DagId, body)
		switch {
		case err == nil:
			log.Info("triggered Airflow's run")
			return false, nil
		case ctx.Err() != nil:
			return false, b.stop(ctx, log, run, id)
		case airflowStatus(err) == http.StatusConflict:
			// The id exists: this slot's run, triggered by an earlier claim. Follow it, once
			// Airflow confirms it: a 409 for another reason (another run of the DAG holding
			// the logical date) would otherwise be followed as a run that does not exist.
			_, gerr := b.api.getRun(ctx, run.DagId, id)
			if airflowStatus(gerr) == http.StatusNotFound {
				return false, fmt.Errorf("airflow refused to trigger %s of DAG %s: %w", id, run.DagId, err)
			}
			log.Info("Airflow's run exists already; following it")
			return true, nil
		case !airflowTemporary(err):
			return false, fmt.Errorf("airflow refused to trigger %s of DAG %s: %w", id, run.DagId, err)
		}
		log.Warn("trigger failed; sending it again", "err", err)
		if !ctxwait.Sleep(ctx, wait) {
			return false, b.stop(ctx, log, run, id)
		}
		wait = min(wait*2, time.Minute)
	}
}

// follow polls Airflow's run until it ends. The SDK heartbeats the service's run meanwhile;
// a failure to read Airflow's run is waited out, since the run goes on there regardless.
func (b *airflowBridge) follow(ctx context.Context, log *slog.Logger, run client.DagRun, id string) error {
	warnAt := time.Now().Add(b.queuedWarn)
	for {
		got, err := b.api.getRun(ctx, run.DagId, id)
		switch {
		case err == nil && got.State == "queued" && b.queuedWarn > 0 && time.Now().After(warnAt):
			log.Warn("Airflow's run is still queued: is the DAG paused in Airflow, or at its max_active_runs there?",
				"queued_for", b.queuedWarn.String())
			warnAt = time.Now().Add(b.queuedWarn)
		case ctx.Err() != nil:
			return b.stop(ctx, log, run, id)
		case airflowStatus(err) == http.StatusNotFound:
			return fmt.Errorf("the Airflow run %s of DAG %s is gone (deleted in Airflow?): %w", id, run.DagId, err)
		case err != nil:
			log.Warn("could not read Airflow's run; polling on", "err", err)
		case got.State == "success":
			return nil
		case got.State == "failed":
			return b.failure(ctx, log, run, id)
		}
		if !ctxwait.Sleep(ctx, b.poll) {
			return b.stop(ctx, log, run, id)
		}
	}
}

// failure is the error (the run's note) of an Airflow run that ended failed.
func (b *airflowBridge) failure(ctx context.Context, log *slog.Logger, run client.DagRun, id string) error {
	tasks, err := b.api.failedTasks(ctx, run.DagId, id)
	switch {
	case err != nil:
		log.Warn("could not read the failed tasks", "err", err)
		return fmt.Errorf("the Airflow run %s of DAG %s failed (its failed tasks could not be read: %v)", id, run.DagId, err)
	case len(tasks) == 0:
		return fmt.Errorf("the Airflow run %s of DAG %s failed (no task instance is failed: the run was marked failed)", id, run.DagId)
	}
	return fmt.Errorf("the Airflow run %s of DAG %s failed; failed tasks: %s", id, run.DagId, strings.Join(tasks, ", "))
}

// cancelTimeout bounds the PATCH that fails Airflow's run on a cancel.
const cancelTimeout = 10 * time.Second

// stop is the end of work cut short. A cancel of the backfill fails Airflow's run too, so
// that it stops taking workers there; anything else (SIGTERM, the lease running out on
// this machine) leaves Airflow's run alone: the slot's next claim follows it by its id.
func (b *airflowBridge) stop(ctx context.Context, log *slog.Logger, run client.DagRun, id string) error {
	cause := context.Cause(ctx)
	if !errors.Is(cause, client.ErrCancelRequested) {
		log.Info("stopped following Airflow's run; it goes on in Airflow", "cause", cause)
		return cause
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
	defer cancel()
	err := b.api.failRun(pctx, run.DagId, id, fmt.Sprintf("canceled in the backfill service (run %d)", run.Id))
	switch {
	case err == nil:
		log.Info("the backfill is being canceled; Airflow's run set to failed")
	case airflowStatus(err) == http.StatusNotFound:
		// Never triggered: nothing runs there.
	default:
		log.Warn("the backfill is being canceled, but Airflow's run could not be set to failed", "err", err)
	}
	return cause
}

// startAirflow prints the start line of a run handed to Airflow.
func (l *runLines) startAirflow(run client.DagRun, dagRunID string, adopted bool) {
	how := "triggered"
	if adopted {
		how = "following"
	}
	l.startLine(run, map[string]any{"airflow_dag_run_id": dagRunID, "adopted": adopted},
		fmt.Sprintf("airflow %s %s", how, dagRunID))
}
