package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/backfillsvc/backfill/internal/ctxwait"
)

// Causes of a work function's context ending, read with context.Cause.
var (
	// ErrCancelRequested: the run's backfill is being canceled. The run is reported
	// canceled, unless the work still returns nil.
	ErrCancelRequested = errors.New("client: the backfill is being canceled")
	// ErrLeaseLost: the run is no longer leased to this worker (it expired and the run was
	// handed out again, or an operator marked it). Nothing is reported for it.
	ErrLeaseLost = errors.New("client: lease lost")
	// ErrLeaseExpired: no heartbeat was answered for so long that the lease may be over on
	// the service's side (see LeaseMargin), so the run may be handed to another worker: the
	// work must stop now. The run is released, or left to its lease; never reported success.
	ErrLeaseExpired = errors.New("client: the lease ran out on this worker's clock (no heartbeat answered)")
)

// ExecutorConfig configures RunExecutor. Only WorkerID is required.
type ExecutorConfig struct {
	// WorkerID names this worker in claims, heartbeats and reports (1-255 chars).
	WorkerID string
	// DagID, when set, claims only runs of that DAG.
	DagID string
	// Pool, when set, claims only runs in that pool.
	Pool string
	// Limit is how many runs may be worked on at once (1..100, default 1).
	Limit int
	// LeaseSeconds is the lease each claim asks for (10..3600, default 60). A run whose
	// worker stops heartbeating is handed out again this long after the last heartbeat.
	LeaseSeconds int
	// HeartbeatEvery is the time between heartbeats of a running run (default a third of
	// the lease). It is also how soon a cancel of the backfill reaches the work.
	HeartbeatEvery time.Duration
	// StopGrace is how long the work may take to stop once its context ends (a program's
	// time between SIGTERM and SIGKILL). A lease not renewed is ended this much earlier on
	// the work's context, so that the work is gone by the lease's local deadline. Heartbeat
	// period + StopGrace + LeaseMargin must be shorter than the lease.
	StopGrace time.Duration
	// IdleBackoff is the first wait after a claim found nothing (default 250ms); it doubles,
	// with jitter, up to MaxIdleBackoff (default 5s), and resets once runs are claimed.
	IdleBackoff    time.Duration
	MaxIdleBackoff time.Duration
	// ClaimWait is how long a claim that finds nothing waits on the service for work
	// (wait_seconds, whole seconds up to 30; default 20s, negative for none): the service
	// answers as soon as something becomes claimable, so a freed slot is taken at once
	// instead of at the next poll. IdleBackoff then applies only to claims that failed or
	// did not wait. With UntilIdle it is at most 2s, so that the executor notices soon that
	// everything is done.
	ClaimWait time.Duration
	// Logger receives claims, reports and errors; nil discards them.
	Logger *slog.Logger
	// UntilIdle makes RunExecutor return once a claim finds nothing, no work it started still
	// runs, and nothing within DagID and Pool is queued or running on any worker, instead of
	// backing off and claiming again. Runs waiting behind a slot another worker holds keep it
	// polling until they are done, so that it runs them when the slot frees. So do the queued
	// runs of a paused backfill or DAG, until it is unpaused or canceled.
	UntilIdle bool
	// ReleaseOnCancel releases a run whose work stopped because its backfill is being
	// canceled, instead of reporting it canceled: the service then ends it canceled, and the
	// work's error (a program's output, say) is not recorded as the run's note.
	ReleaseOnCancel bool
	// OnRunEnd, when set, is called once for each run the loop is done with, after its
	// report or release, with what became of it and the note reported (failed runs only).
	OnRunEnd func(run DagRun, outcome RunOutcome, note string)

	// reportWait is the first wait before a report is sent again (200ms; tests shorten it).
	reportWait time.Duration
}

// RunOutcome is what became of a claimed run, as OnRunEnd hears it.
type RunOutcome string

// Outcomes of a run. A report or release that did not land is OutcomeUnreported: the run
// waits for its lease.
const (
	OutcomeSuccess    RunOutcome = "success"
	OutcomeFailed     RunOutcome = "failed"
	OutcomeCanceled   RunOutcome = "canceled"
	OutcomeReleased   RunOutcome = "released"
	OutcomeLeaseLost  RunOutcome = "lease_lost"
	OutcomeUnreported RunOutcome = "unreported"
)

func (cfg *ExecutorConfig) defaults() error {
	if cfg.WorkerID == "" || len(cfg.WorkerID) > 255 {
		return fmt.Errorf("client: ExecutorConfig.WorkerID must be 1-255 characters")
	}
	if cfg.Limit == 0 {
		cfg.Limit = 1
	}
	if cfg.Limit < 1 || cfg.Limit > 100 {
		return fmt.Errorf("client: ExecutorConfig.Limit must be 1..100, not %d", cfg.Limit)
	}
	if cfg.LeaseSeconds == 0 {
		cfg.LeaseSeconds = 60
	}
	if cfg.LeaseSeconds < 10 || cfg.LeaseSeconds > 3600 {
		return fmt.Errorf("client: ExecutorConfig.LeaseSeconds must be 10..3600, not %d", cfg.LeaseSeconds)
	}
	lease := time.Duration(cfg.LeaseSeconds) * time.Second
	if cfg.HeartbeatEvery <= 0 {
		cfg.HeartbeatEvery = lease / 3
	}
	if cfg.HeartbeatEvery >= lease {
		// The lease would run out between two heartbeats: every run longer than the lease
		// would be handed out again while it runs, and never be reported.
		return fmt.Errorf("client: ExecutorConfig.HeartbeatEvery (%s) must be shorter than the lease (%s)", cfg.HeartbeatEvery, lease)
	}
	if cfg.StopGrace < 0 {
		return fmt.Errorf("client: ExecutorConfig.StopGrace cannot be negative")
	}
	if margin := LeaseMargin(cfg.LeaseSeconds); cfg.HeartbeatEvery+cfg.StopGrace+margin >= lease {
		// The work would be told to stop before a single heartbeat could renew the lease.
		return fmt.Errorf("client: the heartbeat period (%s) + the stop grace (%s) + the lease margin (%s) must be shorter than the lease (%s)",
			cfg.HeartbeatEvery, cfg.StopGrace, margin, lease)
	}
	if cfg.reportWait <= 0 {
		cfg.reportWait = 200 * time.Millisecond
	}
	if cfg.IdleBackoff <= 0 {
		cfg.IdleBackoff = 250 * time.Millisecond
	}
	if cfg.MaxIdleBackoff < cfg.IdleBackoff {
		cfg.MaxIdleBackoff = max(5*time.Second, cfg.IdleBackoff)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case cfg.ClaimWait == 0:
		cfg.ClaimWait = defaultClaimWait
	case cfg.ClaimWait < 0:
		cfg.ClaimWait = 0
	}
	cfg.ClaimWait = min(cfg.ClaimWait.Truncate(time.Second), maxClaimWait)
	if cfg.UntilIdle {
		cfg.ClaimWait = min(cfg.ClaimWait, untilIdleClaimWait)
	}
	return nil
}

// The bounds of ExecutorConfig.ClaimWait: the service's (wait_seconds ≤ 30), the default,
// and the most an UntilIdle executor waits in one claim.
const (
	maxClaimWait       = 30 * time.Second
	defaultClaimWait   = 20 * time.Second
	untilIdleClaimWait = 2 * time.Second
)

// RunExecutor is a worker loop: it claims runs (up to cfg.Limit at once), calls work for
// each on its own goroutine, heartbeats the run's lease while work runs, and reports the
// outcome as cfg.WorkerID: success when work returns nil, failed when it returns an error,
// canceled when it returns an error after the backfill was canceled, deferred when it returns
// a DeferError (see Defer) while the run is still its own. When nothing is
// claimable it backs off.
//
// work's context is canceled, with context.Cause ErrCancelRequested, when a heartbeat
// answers that the backfill is being canceled, and with ErrLeaseLost when the lease is
// gone (nothing is reported then: the run is no longer this worker's). A panic in work is
// reported as failed.
//
// The lease is the work's own deadline: when no heartbeat has been answered for so long that
// the lease may have run out on the service (its length after the last answered request was
// sent, less LeaseMargin and cfg.StopGrace), work's context is canceled with ErrLeaseExpired,
// whatever the network says, so that work stops before the run can be handed to another
// worker. Whatever work then returns, even nil, the run is not reported success: it is
// released if the service still hears this worker, else left to its lease (OutcomeLeaseLost).
//
// A failed run is reported with the work's error as its note (at most 4,096 characters, NUL
// and invalid UTF-8 replaced by U+FFFD). A report the service does not take for a temporary
// reason (a network error, a 503) is sent again for as long as the run's lease lasts; the
// heartbeats go on until the work returns, even after ctx ends.
//
// RunExecutor returns when ctx is done, after every work function has returned. A run whose
// work was cut short by ctx (or that was claimed just as ctx ended) is released: handed back
// queued with the same attempt, so another worker takes it at once instead of after its lease
// expires, and a clean stop costs no attempt. A release that fails leaves the run to its
// lease. It returns nil then, or an error for an invalid cfg or a claim the service refuses
// for good (400, 401).
func (c *Client) RunExecutor(ctx context.Context, cfg ExecutorConfig, work func(ctx context.Context, run DagRun) error) error {
	if err := cfg.defaults(); err != nil {
		return err
	}
	log := cfg.Logger.With("worker_id", cfg.WorkerID)
	slots := make(chan struct{}, cfg.Limit) // one token per run being worked on
	var wg sync.WaitGroup
	defer wg.Wait()
	idle := cfg.IdleBackoff
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		free := 1
	more:
		for free < cfg.Limit {
			select {
			case slots <- struct{}{}:
				free++
			default:
				break more
			}
		}
		// Every run the claim answers was leased at or after this instant: the lease's end
		// is reckoned from it on this machine's clock, never from the server's.
		claimSent := time.Now()
		runs, err := c.claim(ctx, cfg, log, free, &idle)
		for range free - len(runs) {
			<-slots
		}
		if ctx.Err() != nil {
			// Runs claimed just as ctx ended go back at once, like cut-short work.
			for _, run := range runs {
				outcome := c.release(ctx, log.With("dag_id", run.DagId, "run_id", run.RunId), run, cfg.WorkerID)
				cfg.runEnded(run, outcome, "")
			}
			return nil
		}
		if err != nil {
			var p *ProblemError
			if errors.As(err, &p) && !p.Temporary() && p.Status < 500 {
				return fmt.Errorf("client: claim refused: %w", err)
			}
			log.Warn("claim failed; backing off", "err", err)
		}
		if len(runs) == 0 {
			// Every slot token is back once no work of this worker runs; idle means that
			// nothing in the filters is queued or running on any worker either.
			if cfg.UntilIdle && err == nil && len(slots) == 0 {
				idleAll, ierr := c.idleEverywhere(ctx, cfg)
				switch {
				case ierr != nil && ctx.Err() == nil:
					log.Warn("could not tell whether runs are still queued or running; polling on", "err", ierr)
				case idleAll:
					log.Info("nothing queued or running in this executor's filters; stopping (until idle)")
					return nil
				default:
					log.Debug("nothing to claim, but runs in this executor's filters are queued or running; polling on (until idle)")
				}
			}
			if err == nil && cfg.ClaimWait > 0 && time.Since(claimSent) >= cfg.ClaimWait {
				continue // the claim waited on the service already
			}
			// An empty answer before the wait was over (a service that does not wait, or one
			// draining) backs off as a claim that did not wait.
			if !ctxwait.Sleep(ctx, jitter(idle)) {
				return nil
			}
			idle = min(idle*2, cfg.MaxIdleBackoff)
			continue
		}
		idle = cfg.IdleBackoff
		// A claim that waited on the service leased its runs at some instant between its
		// sending and its answer: reckoned from the sending, as always, the lease would look
		// nearly spent after a long wait. Such runs are heartbeated once before their work
		// starts, which restarts the lease from a known instant.
		renewFirst := time.Since(claimSent) > claimWaitRenewAfter
		for _, run := range runs {
			log.Debug("claimed run", "dag_id", run.DagId, "run_id", run.RunId, "attempt", run.Attempt)
			wg.Go(func() {
				defer func() { <-slots }()
				lease := newLeaseClock(claimSent, cfg.LeaseSeconds)
				if renewFirst && !c.renewClaimed(ctx, cfg, log, run, lease) {
					return
				}
				c.execute(ctx, cfg, log, run, lease, work)
			})
		}
	}
}

// claim claims up to free runs under one Idempotency-Key, and does not give up on a claim
// whose outcome is unknown (a 503 or a network error: it may have leased runs to this worker
// that nobody else will run until their leases expire). It sends the same request with the
// same key again, backing off like an idle worker, until the answer is known: the retry
// answers the runs the lost claim handed out, or claims afresh if it was not applied. When
// ctx ends first, it asks once more, detached from ctx and bounded by releaseTimeout, so that
// the caller releases whatever the claim leased.
func (c *Client) claim(ctx context.Context, cfg ExecutorConfig, log *slog.Logger, free int, idle *time.Duration) ([]DagRun, error) {
	key, req := NewIdempotencyKey(), claimRequest(cfg, free)
	runs, err := c.ClaimRuns(ctx, req, KeyOptions{IdempotencyKey: key})
	for err != nil && Retryable(err) && ctx.Err() == nil {
		log.Warn("claim failed; sending it again with its key", "err", err)
		if !ctxwait.Sleep(ctx, jitter(*idle)) {
			break
		}
		*idle = min(*idle*2, cfg.MaxIdleBackoff)
		runs, err = c.ClaimRuns(ctx, req, KeyOptions{IdempotencyKey: key})
	}
	if err != nil && ctx.Err() != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		runs, err = c.ClaimRuns(rctx, req, KeyOptions{IdempotencyKey: key})
	}
	return runs, err
}

func claimRequest(cfg ExecutorConfig, limit int) ClaimRequest {
	req := ClaimRequest{WorkerId: cfg.WorkerID, Limit: &limit, LeaseSeconds: &cfg.LeaseSeconds}
	if cfg.ClaimWait > 0 {
		secs := int(cfg.ClaimWait / time.Second)
		req.WaitSeconds = &secs
	}
	if cfg.DagID != "" {
		req.DagId = &cfg.DagID
	}
	if cfg.Pool != "" {
		req.Pool = &cfg.Pool
	}
	return req
}

func (cfg ExecutorConfig) runEnded(run DagRun, outcome RunOutcome, note string) {
	if cfg.OnRunEnd != nil {
		cfg.OnRunEnd(run, outcome, note)
	}
}

// execute works on one claimed run: work, heartbeats alongside, then the report.
//
// The heartbeats go on until the work returns, even after ctx ends: work told to stop may
// take its grace period to do so (a program given SIGTERM), and a lease that ran out
// meanwhile would hand the run to another worker while this one still runs it.
func (c *Client) execute(ctx context.Context, cfg ExecutorConfig, log *slog.Logger, run DagRun, lease *leaseClock, work func(context.Context, DagRun) error) {
	log = log.With("dag_id", run.DagId, "run_id", run.RunId)
	workCtx, cancelWork := context.WithCancelCause(ctx)
	defer cancelWork(nil)
	hbCtx, stopHeartbeats := context.WithCancel(context.WithoutCancel(ctx))
	var hbDone sync.WaitGroup
	hbDone.Go(func() { c.heartbeats(hbCtx, cfg, log, run, lease, cancelWork) })
	hbDone.Go(func() {
		lease.expire(hbCtx, LeaseMargin(cfg.LeaseSeconds)+cfg.StopGrace, func() { cancelWork(ErrLeaseExpired) })
	})

	started := time.Now()
	err := callWork(workCtx, run, work)
	stopHeartbeats()
	hbDone.Wait()

	cause := context.Cause(workCtx)
	var state DagRunState
	switch {
	case errors.Is(cause, ErrLeaseLost):
		log.Warn("lease lost; not reporting", "work_err", err)
		cfg.runEnded(run, OutcomeLeaseLost, "")
		return
	case errors.Is(cause, ErrLeaseExpired):
		// The work may have run past the lease: its result cannot be trusted to be the
		// run's only one, so it is never reported success. A release hands the run back if
		// the service still counts it as this worker's; it refuses it otherwise.
		log.Warn("the lease ran out on this worker's clock; the work was stopped and is not reported", "work_err", err)
		outcome := c.release(ctx, log, run, cfg.WorkerID)
		if outcome == OutcomeUnreported {
			outcome = OutcomeLeaseLost
		}
		cfg.runEnded(run, outcome, "")
		return
	case err != nil && ctx.Err() != nil:
		log.Info("stopped before the run finished; releasing it", "work_err", err)
		cfg.runEnded(run, c.release(ctx, log, run, cfg.WorkerID), "")
		return
	case err != nil && cfg.ReleaseOnCancel && errors.Is(cause, ErrCancelRequested):
		log.Info("the backfill is being canceled; releasing the run", "work_err", err)
		cfg.runEnded(run, c.release(ctx, log, run, cfg.WorkerID), "")
		return
	case err == nil:
		state = DagRunStateSuccess
	case errors.Is(cause, ErrCancelRequested):
		state = DagRunStateCanceled
	case deferralOf(err) != nil:
		state = ReportDeferred
	default:
		state = DagRunStateFailed
	}
	// A finished run is reported even while the executor stops.
	report := RunReport{State: state, WorkerID: cfg.WorkerID, Traceparent: traceparentOf(run)}
	switch state {
	case DagRunStateFailed:
		report.Note = noteOf(err.Error())
	case ReportDeferred:
		d := deferralOf(err)
		report.Note, report.RetryAfter = d.Note, d.After
	}
	note := report.Note
	if err := c.report(ctx, cfg, log, run, report, lease); err != nil {
		log.Error("report failed", "state", state, "err", err)
		cfg.runEnded(run, OutcomeUnreported, note)
		return
	}
	log.Debug("reported run", "state", state, "duration", time.Since(started).Round(time.Millisecond), "work_err", err)
	cfg.runEnded(run, RunOutcome(state), note)
}

// callWork runs work, turning a panic into an error so that the run is reported failed.
func callWork(ctx context.Context, run DagRun, work func(context.Context, DagRun) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("client: work panicked: %v", r)
		}
	}()
	return work(ctx, run)
}

// heartbeats keeps the run's lease until ctx ends, telling the work to stop when the
// backfill is being canceled or the lease is gone.
func (c *Client) heartbeats(ctx context.Context, cfg ExecutorConfig, log *slog.Logger, run DagRun, lease *leaseClock, cancelWork context.CancelCauseFunc) {
	t := time.NewTicker(cfg.HeartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := time.Now()
		hb, err := c.HeartbeatRun(ctx, run.Id, cfg.WorkerID)
		switch {
		case ctx.Err() != nil:
			return
		case IsCode(err, ProblemCodeLeaseLost) || IsCode(err, ProblemCodeRunNotFound):
			cancelWork(ErrLeaseLost)
			return
		case err != nil:
			// Transient: the lease outlasts several missed heartbeats.
			log.Warn("heartbeat failed", "err", err)
			continue
		case hb.CancelRequested:
			// Keep heartbeating: the lease must hold until the work stops and reports.
			cancelWork(ErrCancelRequested)
		}
		lease.renewed(sent)
	}
}

// reportMaxWait bounds the wait between two sends of a report.
const reportMaxWait = 5 * time.Second

// report sends the run's outcome, and sends it again after a temporary failure (a network
// error, a 503) for as long as this worker's lease lasts: until then the run is still this
// worker's, its work is done, and a report that lands saves running it again (a restart or a
// failover of the service takes seconds; the lease, a minute by default). A report sent
// twice is answered like the first (the service takes the same outcome from the same worker
// again). After the lease the run may be another worker's, and the report is given up.
// ctx is the executor's: a finished run is reported even while the executor stops, but once
// it stops the report has releaseTimeout more at the most, as a release has, so that a
// stopping executor exits in time.
func (c *Client) report(ctx context.Context, cfg ExecutorConfig, log *slog.Logger, run DagRun, report RunReport, lease *leaseClock) error {
	wait := cfg.reportWait
	var stopBy time.Time // set once ctx has ended
	giveUpAt := func() time.Time {
		if ctx.Err() != nil && stopBy.IsZero() {
			stopBy = time.Now().Add(releaseTimeout)
		}
		if end := lease.until(); stopBy.IsZero() || end.Before(stopBy) {
			return end
		}
		return stopBy
	}
	for {
		rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), giveUpAt())
		_, err := c.ReportRun(rctx, run.DagId, run.RunId, report)
		cancel()
		var p *ProblemError
		if err == nil || (errors.As(err, &p) && !p.Temporary()) {
			return err
		}
		if p != nil {
			wait = max(wait, p.RetryAfter)
		}
		if time.Now().Add(wait).After(giveUpAt()) {
			return fmt.Errorf("%w (given up: the lease has run out, or the executor is stopping)", err)
		}
		log.Warn("report failed; sending it again", "err", err)
		time.Sleep(jitter(wait))
		wait = min(wait*2, reportMaxWait)
	}
}

// releaseTimeout bounds a release at shutdown: a stopping process must not hang on it, and
// a release that does not land only costs the wait for the lease.
const releaseTimeout = 5 * time.Second

// release hands a run back to the service (after ctx, the executor's, ended, or when its
// backfill is being canceled) and answers what became of it.
func (c *Client) release(ctx context.Context, log *slog.Logger, run DagRun, workerID string) RunOutcome {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	got, err := c.ReleaseRun(rctx, run.Id, workerID)
	if err != nil {
		log.Warn("release failed; the run waits for its lease", "err", err)
		return OutcomeUnreported
	}
	log.Info("released run", "state", got.State)
	if got.State == DagRunStateCanceled {
		return OutcomeCanceled
	}
	return OutcomeReleased
}

// maxNoteRunes is the service's limit on a report's note.
const maxNoteRunes = 4096

// noteOf makes a work's error text a note the service stores: valid UTF-8 without NUL
// (PostgreSQL's text cannot hold either, and the service refuses them with 400, which no
// retry mends: the run would wait for its lease and run again), within the service's limit,
// cut at a character boundary.
func noteOf(s string) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	if utf8.RuneCountInString(s) <= maxNoteRunes {
		return s
	}
	r := []rune(s)
	return string(r[:maxNoteRunes-1]) + "…"
}

// jitter spreads d over [0.75d, 1.25d) so that idle workers do not claim in lockstep.
func jitter(d time.Duration) time.Duration {
	return d*3/4 + rand.N(d/2+1)
}

// traceparentOf is the run's traceparent, "" when the service does not trace.
func traceparentOf(run DagRun) string {
	if run.Traceparent == nil {
		return ""
	}
	return *run.Traceparent
}
