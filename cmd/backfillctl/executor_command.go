package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"time"

	"github.com/backfillsvc/backfill/client"
)

// executorCommand is `backfillctl executor [flags] -- <program> [args...]`: the SDK's
// RunExecutor with a work function that runs the program once per claimed run (see
// docs/EXECUTOR.md). It prints one line per run start and end on stdout; the programs' own
// output and the executor's log go to stderr.
func executorCommand(ctx context.Context, c *cli, flagArgs, program []string) error {
	fs := newFlagSet("executor",
		"executor [--concurrency N] [--dag-id ID] [--pool NAME] [--timeout D] [--grace 10s] [--defer 60s] [--until-idle] -- <program> [args...]",
		&c.g, c.stderr)
	w := addWorkerFlags(fs, workerUsage{
		concurrency: "programs run at once, 1..100",
		heartbeat:   "time between heartbeats (default a third of the lease)",
		untilIdle:   "exit once nothing in the filters is queued or running anywhere (runs waiting for another worker's slot are waited for)",
		verbose:     "also log claims",
	})
	timeout := fs.Duration("timeout", 0, "stop a program that runs longer and report its run failed (default: no limit)")
	grace := fs.Duration("grace", 10*time.Second, "time between SIGTERM and SIGKILL when a program is stopped (a lease no heartbeat renewed starts the stop this long before its end)")
	deferFor := fs.Duration("defer", 60*time.Second, "how long a run whose program exits 75 (EX_TEMPFAIL) waits before it is claimed again, 1s..24h; its attempt is not charged")
	claimWait := fs.Duration("claim-wait", 20*time.Second, "how long a claim that finds nothing waits on the service for work, 0..30s (0: poll); the service answers as soon as a run is claimable")
	pos, err := parse(fs, flagArgs)
	if err != nil {
		return err
	}
	switch {
	case len(pos) != 0:
		return usageErrorf("unexpected arguments %q before --", pos)
	case len(program) == 0:
		return usageErrorf("no program after --")
	case *timeout < 0 || *grace < 0:
		return usageErrorf("--timeout and --grace cannot be negative")
	case *claimWait < 0 || *claimWait > 30*time.Second:
		return usageErrorf("--claim-wait must be 0..30s, not %s", *claimWait)
	case *deferFor < time.Second || *deferFor > 24*time.Hour:
		return usageErrorf("--defer must be 1s..24h, not %s", *deferFor)
	}
	if err := checkTemplates(program[1:]); err != nil {
		return err
	}
	path, err := exec.LookPath(program[0])
	if err != nil {
		return usageErrorf("program %q: %v", program[0], err)
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	logger, lines, errOut := w.workerOutput(c)

	cfg := w.executorConfig(logger, lines)
	cfg.StopGrace, cfg.ClaimWait = *grace, *claimWait
	if *claimWait == 0 {
		cfg.ClaimWait = -1 // the SDK's "no wait"
	}
	err = api.RunExecutor(ctx, cfg, func(ctx context.Context, run client.DagRun) error {
		v := valuesOf(run)
		args, err := v.expandArgs(program[1:])
		if err != nil {
			return err
		}
		env, cleanup, err := v.runEnv()
		if err != nil {
			return &programError{what: err.Error()}
		}
		defer cleanup()
		err = programRun{
			path: path, args: args, env: env,
			stdout: errOut, stderr: errOut,
			timeout: *timeout, grace: *grace, scope: newScopeToken(),
			started: func(pid int) { lines.start(run, pid) },
		}.run(ctx)
		if pe, ok := errors.AsType[*programError](err); ok && pe.exitCode == exTempFail {
			return client.Defer(*deferFor, pe.Error())
		}
		return err
	})
	// Stopped by SIGINT/SIGTERM (every run released) or idle: a clean stop either way.
	return executorStopped(err)
}

// executorStopped is what an executor command answers when RunExecutor returns: nil for a
// clean stop, the service's problem as it is, and any other error (a configuration the SDK
// refused) as a usage error.
func executorStopped(err error) error {
	if err == nil {
		return nil
	}
	var prob *client.ProblemError
	if !errors.As(err, &prob) {
		return usageErrorf("%v", err)
	}
	return err
}

// runLines prints the line of each run's start and end.
type runLines struct {
	json    bool
	w       lockedWriter
	mu      sync.Mutex
	started map[int64]time.Time
}

func (l *runLines) start(run client.DagRun, pid int) {
	l.startLine(run, map[string]any{"pid": pid}, fmt.Sprintf("pid %d", pid))
}

// startLine records the run's start and prints its line: in JSON with the fields extra adds,
// else as text ending in tail.
func (l *runLines) startLine(run client.DagRun, extra map[string]any, tail string) {
	now := time.Now()
	l.mu.Lock()
	l.started[run.Id] = now
	l.mu.Unlock()
	if l.json {
		line := map[string]any{
			"event": "start", "time": now.UTC().Format(time.RFC3339Nano), "id": run.Id, "dag_id": run.DagId,
			"run_id": run.RunId, "logical_date": instant(run.LogicalDate), "attempt": run.Attempt,
		}
		for k, v := range extra {
			line[k] = v
		}
		fmt.Fprintln(l.w, jsonLine(line))
		return
	}
	fmt.Fprintf(l.w, "start  %s %s attempt %d %s\n", run.DagId, run.RunId, run.Attempt, tail)
}

func (l *runLines) end(run client.DagRun, outcome client.RunOutcome, note string) {
	l.mu.Lock()
	began, ok := l.started[run.Id]
	delete(l.started, run.Id)
	l.mu.Unlock()
	var took time.Duration
	if ok {
		took = time.Since(began)
	}
	if l.json {
		line := map[string]any{
			"event": "end", "time": time.Now().UTC().Format(time.RFC3339Nano), "id": run.Id, "dag_id": run.DagId,
			"run_id": run.RunId, "logical_date": instant(run.LogicalDate), "attempt": run.Attempt,
			"outcome": outcome, "duration_seconds": took.Seconds(),
		}
		if note != "" {
			line["note"] = note
		}
		fmt.Fprintln(l.w, jsonLine(line))
		return
	}
	fmt.Fprintf(l.w, "end    %s %s %s in %s", run.DagId, run.RunId, outcome, took.Round(time.Millisecond))
	if note != "" {
		fmt.Fprintf(l.w, ": %s", oneLine(note))
	}
	fmt.Fprintln(l.w)
}
