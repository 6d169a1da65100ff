package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/backfillsvc/backfill/client"
)

// workerFlags are the flags of the CLI's workers (executor, airflow): who the worker is, which
// runs it claims, how many it follows at once and under what lease, and its output.
type workerFlags struct {
	workerID, dagID, pool *string
	concurrency, lease    *int
	heartbeat             *time.Duration
	untilIdle, verbose    *bool
}

// workerUsage is what differs between the workers' flags: what "at once" counts, what a
// heartbeat also does, when idle is reached and what verbose adds.
type workerUsage struct{ concurrency, heartbeat, untilIdle, verbose string }

func addWorkerFlags(fs *flag.FlagSet, u workerUsage) workerFlags {
	host, _ := os.Hostname()
	return workerFlags{
		workerID:    fs.String("worker-id", fmt.Sprintf("%s-%d", host, os.Getpid()), "this worker's id in claims, heartbeats and reports"),
		dagID:       fs.String("dag-id", "", "claim only runs of this DAG (default: any)"),
		pool:        fs.String("pool", "", "claim only runs in this pool (default: any)"),
		concurrency: fs.Int("concurrency", 1, u.concurrency),
		lease:       fs.Int("lease-seconds", 60, "lease asked for with each claim, 10..3600"),
		heartbeat:   fs.Duration("heartbeat", 0, u.heartbeat),
		untilIdle:   fs.Bool("until-idle", false, u.untilIdle),
		verbose:     fs.Bool("verbose", false, u.verbose),
	}
}

// workerOutput is a worker's log on stderr (warnings, everything with --verbose) and its run
// lines on stdout, behind one lock so that their lines never interleave; errOut is stderr
// behind that lock.
func (w workerFlags) workerOutput(c *cli) (logger *slog.Logger, lines *runLines, errOut lockedWriter) {
	level := slog.LevelWarn
	if *w.verbose {
		level = slog.LevelDebug
	}
	var outMu sync.Mutex
	errOut = lockedWriter{mu: &outMu, w: c.stderr}
	logger = slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: level}))
	lines = &runLines{json: c.g.output == "json", w: lockedWriter{mu: &outMu, w: c.stdout}, started: map[int64]time.Time{}}
	return logger, lines, errOut
}

// executorConfig is the SDK executor's configuration these flags ask for: runs released on
// a cancel, each run's end printed as a line.
func (w workerFlags) executorConfig(logger *slog.Logger, lines *runLines) client.ExecutorConfig {
	return client.ExecutorConfig{
		WorkerID: *w.workerID, DagID: *w.dagID, Pool: *w.pool, Limit: *w.concurrency, LeaseSeconds: *w.lease,
		HeartbeatEvery: *w.heartbeat, Logger: logger, UntilIdle: *w.untilIdle,
		ReleaseOnCancel: true, OnRunEnd: lines.end,
	}
}
