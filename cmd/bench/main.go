// Command bench measures the backfill service against the floor PostgreSQL sets for the same
// work, side by side in one run, and prints one table of ratios (P1–P5), and drives it past
// its capacity to see it shed load (P7).
//
// It creates scratch databases on one PostgreSQL server, builds ./cmd/api and starts it as a
// child process against one of them, drives it over HTTP with its own load generator, and
// measures the floor (COPY, a primary-key SELECT, a minimal SKIP LOCKED claim) on tables made
// by the same migrations, through the same driver. Targets are ratios because the machines
// these run on are noisy; only numbers from one run are compared with each other.
//
//	go run ./cmd/bench                 # full run, a few minutes
//	go run ./cmd/bench -smoke          # tiny sizes, well under 30 s (CI)
//	go run ./cmd/bench -chart docs/bench-creation.svg
//
// The server is BENCH_DATABASE_URL, else -db, else PostgreSQL on 127.0.0.1:5432 as postgres.
// Every database it creates is dropped at the end, also after an error or Ctrl-C.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

const defaultServerURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 && os.Args[1] == "floor-server" {
		if err := serveFloor(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench floor-server:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// config holds the sizes of one run; smoke mode shrinks every one of them.
type config struct {
	serverURL string
	smoke     bool
	chartPath string
	apiBin    string

	sizes          []int         // P1 slot counts, ascending; the last one carries the targets
	rounds         int           // P1 rounds per size for the service and the COPY floor
	rowByRowRounds int           // P1 rounds per size for row-by-row (the largest runs once)
	rowByRowLimit  time.Duration // the largest row-by-row run is measured only below this estimate
	loadDuration   time.Duration // P2 and P4, per measurement
	statusClients  int           // P2 concurrency
	activeFills    int           // P3 active backfills
	historySmall   int           // P3 finished runs in history, first pass
	historyLarge   int           // P3 finished runs in history, second pass
	sweepPasses    int           // P3 measured passes per history size
	workers        []int         // P4 worker counts; the target is at 4
	claimRuns      int           // P4 queued runs available to each side
	bulkSizes      []int         // P6 backfill sizes, ascending; the last one carries the targets
	bulkRounds     int           // P6 rounds per size in each of its two runs
	cpuRequests    int           // P2 GETs per side and round of the CPU measure
	cpuCycles      int           // P4 claim + report cycles per side and round of the CPU measure
	only           map[string]bool
}

// runs reports whether scenario p (P1..P4, P6..P12; P5 comes with P1) is to run.
func (c config) runs(p string) bool { return len(c.only) == 0 || c.only[p] }

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := defaultServerURL
	if v := getenv("BENCH_DATABASE_URL"); v != "" {
		def = v
	}
	db := fs.String("db", def, "lib/pq URL of any database on the PostgreSQL server to use (env BENCH_DATABASE_URL)")
	smoke := fs.Bool("smoke", false, "tiny sizes, for CI: checks that the benchmarks run, measures nothing useful")
	chart := fs.String("chart", "", "write an SVG chart of creation time against N to this file")
	apiBin := fs.String("api-bin", "", "use this api binary instead of building ./cmd/api")
	rounds := fs.Int("rounds", 0, "P1 rounds per size (default 5, smoke 1)")
	duration := fs.Duration("duration", 0, "P2/P4 load per measurement (default 5s, smoke 1s)")
	only := fs.String("only", "", "run only these scenarios, e.g. P1,P4,P7 (P5 is measured with P1; P7: overload; P8: event streams; P9: event writers; P10: pool busy with waiting claims; P11: backfill groups; P12: events' cost)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg := config{
		serverURL: *db, smoke: *smoke, chartPath: *chart, apiBin: *apiBin,
		sizes: []int{1_000, 10_000, 100_000}, rounds: 5, rowByRowRounds: 3, rowByRowLimit: 60 * time.Second,
		loadDuration: 5 * time.Second, statusClients: 32,
		activeFills: 1_000, historySmall: 10_000, historyLarge: 1_000_000, sweepPasses: 50,
		workers: []int{1, 4, 16}, claimRuns: 100_000,
		bulkSizes: []int{10_000, 100_000}, bulkRounds: 3,
		cpuRequests: 20_000, cpuCycles: 3_000,
	}
	if cfg.smoke {
		cfg.sizes = []int{100, 1_000}
		cfg.rounds, cfg.rowByRowRounds = 1, 1
		cfg.loadDuration = time.Second
		cfg.activeFills, cfg.historySmall, cfg.historyLarge, cfg.sweepPasses = 100, 1_000, 10_000, 20
		cfg.claimRuns = 10_000
		cfg.bulkSizes, cfg.bulkRounds = []int{100, 1_000}, 1
		cfg.cpuRequests, cfg.cpuCycles = 300, 100
	}
	if *rounds > 0 {
		cfg.rounds = *rounds
	}
	if *duration > 0 {
		cfg.loadDuration = *duration
	}
	if *only != "" {
		cfg.only = map[string]bool{}
		for _, p := range strings.Split(strings.ToUpper(*only), ",") {
			switch p = strings.TrimSpace(p); p {
			case "P1", "P2", "P3", "P4", "P6", "P7", "P8", "P9", "P10", "P11", "P12":
				cfg.only[p] = true
			case "P5":
				cfg.only["P1"] = true
			default:
				return config{}, fmt.Errorf("-only: unknown scenario %q (want P1..P12)", p)
			}
		}
	}
	return cfg, nil
}

// run is the whole command; main only wires it to the process, and the smoke test calls it.
// The table goes to stdout, progress to stderr.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) (err error) {
	cfg, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	logger := log.New(stderr, "bench: ", log.Ltime)
	start := time.Now()

	env, err := newScratch(ctx, cfg.serverURL, logger)
	if err != nil {
		return err
	}
	// Cleanup gets its own context: after Ctrl-C ctx is already done, and the databases must
	// still be dropped.
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		err = errors.Join(err, env.close(cctx))
	}()

	hw, err := collectHardware(ctx, env.admin)
	if err != nil {
		return err
	}
	svcDSN, err := env.create(ctx, "svc", false)
	if err != nil {
		return err
	}
	floorDSN, err := env.create(ctx, "floor", true)
	if err != nil {
		return err
	}

	svc, err := startService(ctx, cfg.apiBin, "", svcDSN, logger)
	if err != nil {
		return err
	}
	env.onClose(svc.stop)

	b := &bench{cfg: cfg, log: logger, svc: svc, svcDSN: svcDSN, client: newHTTPClient(64)}
	if b.floor, err = openDB(floorDSN, 32); err != nil {
		return err
	}
	env.onClose(func() error { return b.floor.Close() })
	if b.triggerCounts, err = insertTriggerCounts(ctx, b.floor); err != nil {
		return err
	}
	if b.svcDB, err = openDB(svcDSN, cfg.statusClients); err != nil {
		return err
	}
	env.onClose(func() error { return b.svcDB.Close() })

	// The floor handlers of the CPU measures (P2, P4) read the service's database and claim
	// from the floor's.
	if b.floorSrv, err = startFloorServer(ctx, svcDSN, floorDSN); err != nil {
		return err
	}
	env.onClose(b.floorSrv.stop)
	b.svcDBName, b.floorDBName = dbNameOf(svcDSN), dbNameOf(floorDSN)

	var res results
	if err := b.warmUp(ctx); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if cfg.runs("P1") {
		c, m, err := b.scenarioCreate(ctx)
		if err != nil {
			return fmt.Errorf("P1: %w", err)
		}
		res.create, res.memory = &c, &m
	}
	if cfg.runs("P2") {
		var largeID int64
		if res.create != nil {
			largeID = res.create.lastServiceID
		}
		s, err := b.scenarioStatus(ctx, largeID)
		if err != nil {
			return fmt.Errorf("P2: %w", err)
		}
		res.status = &s
		c, err := b.scenarioStatusCPU(ctx, b.floorSrv, b.svcDBName, s.largeID)
		if err != nil {
			return fmt.Errorf("P2 CPU: %w", err)
		}
		res.statusCPU = &c
	}
	if cfg.runs("P4") {
		c, err := b.scenarioClaims(ctx)
		if err != nil {
			return fmt.Errorf("P4: %w", err)
		}
		res.claims = &c
	}
	if cfg.runs("P6") {
		r, err := b.scenarioBulk(ctx)
		if err != nil {
			return fmt.Errorf("P6: %w", err)
		}
		res.bulk = &r
	}
	if cfg.runs("P8") {
		st, err := b.scenarioStreams(ctx)
		if err != nil {
			return fmt.Errorf("P8: %w", err)
		}
		res.streams = &st
	}
	if cfg.runs("P9") {
		ew, err := b.scenarioEventWriters(ctx)
		if err != nil {
			return fmt.Errorf("P9: %w", err)
		}
		res.eventWriters = &ew
	}
	if cfg.runs("P10") {
		pb, err := b.scenarioPoolBusy(ctx)
		if err != nil {
			return fmt.Errorf("P10: %w", err)
		}
		res.poolBusy = &pb
	}
	if cfg.runs("P11") {
		g, err := b.scenarioGroups(ctx, env)
		if err != nil {
			return fmt.Errorf("P11: %w", err)
		}
		res.groups = &g
	}
	// Overload last of the service's scenarios: nothing measured after it should inherit what
	// it leaves behind (open connections, a grown heap).
	if cfg.runs("P7") {
		o, err := b.scenarioOverload(ctx)
		if err != nil {
			return fmt.Errorf("P7: %w", err)
		}
		res.overload = &o
	}
	// The sweep is measured in-process on its own database: the service has nothing to do
	// with it, so it is stopped first to leave both cores to PostgreSQL.
	if err := svc.stop(); err != nil {
		return err
	}
	if cfg.runs("P3") {
		sweepDSN, err := env.create(ctx, "sweep", true)
		if err != nil {
			return err
		}
		s, err := b.scenarioSweep(ctx, sweepDSN)
		if err != nil {
			return fmt.Errorf("P3: %w", err)
		}
		res.sweep = &s
	}
	// Events' cost runs in-process on a database of its own, after the service is stopped,
	// as P3 does: its 10 million events and their reads want both cores.
	if cfg.runs("P12") {
		e, err := b.scenarioEventsCost(ctx, env)
		if err != nil {
			return fmt.Errorf("P12: %w", err)
		}
		res.eventsCost = &e
	}

	hw.Elapsed = time.Since(start)
	printReport(stdout, cfg, hw, &res)
	if cfg.chartPath != "" && res.create != nil {
		if err := writeChart(cfg.chartPath, *res.create); err != nil {
			return err
		}
		logger.Printf("chart written to %s", cfg.chartPath)
	}
	return nil
}
