package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/backfillsvc/backfill/client"
)

// executor is a demo worker on the SDK's RunExecutor: each run "works" for --sleep and
// succeeds, or fails at random with --fail-rate. It lets a newcomer watch a backfill finish
// without writing an executor; a real one calls RunExecutor with its own work function.
func executor(ctx context.Context, c *cli, fs *flag.FlagSet, args []string) error {
	if i := slices.Index(args, "--"); i >= 0 {
		return executorCommand(ctx, c, args[:i], args[i+1:])
	}
	host, _ := os.Hostname()
	workerID := fs.String("worker-id", fmt.Sprintf("%s-%d", host, os.Getpid()), "this worker's id in claims, heartbeats and reports")
	dagID := fs.String("dag-id", "", "claim only runs of this DAG (default: any)")
	limit := fs.Int("limit", 1, "runs worked on at once, 1..100")
	lease := fs.Int("lease-seconds", 60, "lease asked for with each claim, 10..3600")
	heartbeat := fs.Duration("heartbeat", 0, "time between heartbeats (default a third of the lease)")
	sleep := fs.Duration("sleep", time.Second, "how long each run pretends to work")
	failRate := fs.Float64("fail-rate", 0, "fraction of runs that fail, 0..1")
	verbose := fs.Bool("verbose", false, "also log each claim and report")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usageErrorf("unexpected arguments %q", pos)
	}
	if *failRate < 0 || *failRate > 1 {
		return usageErrorf("--fail-rate must be within 0..1")
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: level}))
	cfg := client.ExecutorConfig{
		WorkerID: *workerID, DagID: *dagID, Limit: *limit, LeaseSeconds: *lease,
		HeartbeatEvery: *heartbeat, Logger: logger,
	}
	logger.Info("executor started; Ctrl-C stops it", "worker_id", *workerID, "server", c.g.server)
	err = api.RunExecutor(ctx, cfg, func(ctx context.Context, run client.DagRun) error {
		t := time.NewTimer(*sleep)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
		}
		if rand.Float64() < *failRate {
			return errors.New("simulated failure (--fail-rate)")
		}
		return nil
	})
	if err != nil {
		var cfgErr *client.ProblemError
		if !errors.As(err, &cfgErr) {
			return usageErrorf("%v", err)
		}
		return err
	}
	logger.Info("executor stopped")
	return nil
}
