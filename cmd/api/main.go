// Command api serves the backfill service; with "migrate up|down|status" it manages the
// schema alone, and with "healthcheck" it asks a running server on HTTP_ADDR whether it is
// ready (the container image's healthcheck).
package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/backfillsvc/backfill/events"
	"github.com/backfillsvc/backfill/handlers"
	"github.com/backfillsvc/backfill/metrics"
	"github.com/backfillsvc/backfill/migrations"
	"github.com/backfillsvc/backfill/pgrun"
	"github.com/backfillsvc/backfill/repo"
	"github.com/backfillsvc/backfill/sweeper"
	"github.com/backfillsvc/backfill/webhooks"
	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq"
	// Schedules are evaluated in IANA zones; embedding the zone database makes their
	// answers independent of the host's tzdata.
	_ "time/tzdata"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tuneGC(os.Getenv)
	stdout := newLogBuffer(os.Stdout, logFlushEvery)
	err := run(ctx, os.Args[1:], os.Getenv, stdout)
	stdout.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// run is the whole program; main only wires it to the process. It returns when ctx is done
// (SIGINT/SIGTERM) after draining, or on a startup error.
func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) > 0 && args[0] == "healthcheck" {
		return healthcheck(ctx, getenv, stdout)
	}
	cfg, err := loadConfig(getenv)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	logger := slog.New(newLogHandler(stdout, cfg.LogLevel))
	dsn, err := sessionDSN(cfg.DatabaseURL, cfg.StatementTimeout)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	connector, err := poolSessionDSN(dsn, cfg.LockWait, cfg.DBPooler).connector()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	// pgrun.Connector waits up to DB_RECONNECT_WAIT for a session, and marks the failures
	// that remain so that they are answered 503; behind a transaction pooler it also sends no
	// cancel requests, which crash PgBouncer before 1.20.
	poolConnector := pgrun.Connector
	if cfg.DBPooler == poolerTransaction {
		poolConnector = pgrun.ConnectorBehindPooler
	}
	db := openPool(poolConnector(connector, cfg.DBReconnectWait), cfg.DBMaxConns, cfg.DBConnMaxLifetime)
	defer db.Close()

	// Migrations and LISTEN hold a session; behind a transaction pooler they go direct.
	direct := dsn
	if cfg.DirectDatabaseURL != "" {
		if direct, err = sessionDSN(cfg.DirectDatabaseURL, cfg.StatementTimeout); err != nil {
			return fmt.Errorf("config: DIRECT_DATABASE_URL: %w", err)
		}
	}
	if len(args) > 0 && args[0] == "migrate" {
		return withDirectDB(direct, cfg.DBReconnectWait, func(ddb *sql.DB) error {
			return migrate(ctx, ddb, args[1:], stdout)
		})
	}
	if len(args) > 0 {
		return fmt.Errorf("unknown command %q (want no argument, migrate up|down|status, or healthcheck)", args[0])
	}
	// The lease pool: heartbeats, reports and releases never wait for a connection behind
	// claims or reads, even while those are parked on a held row.
	leaseDB := openPool(poolConnector(connector, cfg.DBReconnectWait), cfg.DBLeaseMaxConns, cfg.DBConnMaxLifetime)
	defer leaseDB.Close()
	// Readiness's own session, opened at the first probe and never waited for: on the main
	// pool a probe queued behind requests riding an outage out (DB_RECONNECT_WAIT) answered
	// only after its 2 s, and behind requests parked on a held row it called a busy replica
	// not ready.
	probeDB := openPool(poolConnector(connector, 0), 1, cfg.DBConnMaxLifetime)
	defer probeDB.Close()
	return serve(ctx, cfg, pools{main: db, lease: leaseDB, probe: probeDB}, direct, logger)
}

// openPool opens a pool of at most maxConns sessions, all kept idle between requests.
func openPool(c driver.Connector, maxConns int, lifetime time.Duration) *sqlx.DB {
	db := sqlx.NewDb(sql.OpenDB(c), "postgres")
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	db.SetConnMaxLifetime(lifetime)
	return db
}

// withDirectDB runs fn on a small pool of direct sessions, closed when fn returns. goose holds
// its advisory lock on one connection and migrates on another.
func withDirectDB(direct dsn, reconnectWait time.Duration, fn func(*sql.DB) error) error {
	connector, err := direct.connector()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	ddb := sql.OpenDB(pgrun.Connector(connector, reconnectWait))
	defer ddb.Close()
	ddb.SetMaxOpenConns(2)
	return fn(ddb)
}

// pools are the service's sessions to PostgreSQL, all through DATABASE_URL (which may be a
// transaction pooler): main for requests and background work, lease for heartbeats, reports
// and releases, probe for readiness alone.
type pools struct {
	main, lease, probe *sqlx.DB
}

// serve runs the service on its pools; direct is where the sessions that migrations and the
// event listener hold are opened.
func serve(ctx context.Context, cfg config, p pools, direct dsn, logger *slog.Logger) error {
	db := p.main
	logger.Info("starting", cfg.logAttrs()...)

	err := withDirectDB(direct, cfg.DBReconnectWait, func(ddb *sql.DB) error { return migrations.Up(ctx, ddb) })
	if err != nil {
		return err
	}
	// Refused rather than served: on such a database every new event would be lost to the
	// feed's readers and the webhooks, silently.
	if err := repo.CheckEventIDsAhead(ctx, db); err != nil {
		return err
	}
	m := metrics.New()
	tracer, err := newTracer(cfg.Tracing)
	if err != nil {
		return err
	}
	// Flushed last, after the drain and the background services have ended their spans.
	defer shutdownTracer(tracer, logger)
	// The wake-up of every replica's event streams after this replica's changes (the outbox's
	// writers send none: it would make them commit one at a time).
	notifier := events.NewNotifier(func(ctx context.Context, statement string) error {
		_, err := db.ExecContext(ctx, statement)
		return err
	}, 0, logger.With("component", "events"))
	if err := notifier.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start event notifier: %w", err)
	}
	defer notifier.Stop()
	// The wake-up of every replica's waiting claims (wait_seconds) after this replica's
	// changes, on a channel of its own: the event hubs need not read the outbox after every
	// report, nor waiting claims wait for an outbox read.
	claimNotifier := events.NewClaimableNotifier(func(ctx context.Context, statement string) error {
		_, err := db.ExecContext(ctx, statement)
		return err
	}, 0, logger.With("component", "claims"))
	if err := claimNotifier.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start claim notifier: %w", err)
	}
	defer claimNotifier.Stop()
	claimWaker := events.NewClaimWaker(direct.listening("/claims").String(), claimNotifier.Kick, logger.With("component", "claims"))
	if err := claimWaker.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start claim waker: %w", err)
	}
	defer claimWaker.Stop()
	store := repo.New(db, repo.Config{
		MaxBackfillRuns:    cfg.MaxBackfillRuns,
		MaxRunDependencies: int64(cfg.MaxRunDependencies),
		MaxAttempts:        cfg.MaxAttempts,
		Observer:           m,
		ReconnectWait:      cfg.DBReconnectWait,
		LockWait:           cfg.LockWait,
		PriorityAging:      cfg.PriorityAging,
		LeaseDB:            p.lease,
		OnEvents:           notifier.Kick,
		OnClaimable:        claimWaker.Kick,
		// Behind a transaction pooler a statement prepared on a server connection is not
		// there for the next transaction.
		PrepareStatements: cfg.DBPooler == poolerNone,
		Tracer:            tracer,
	})
	// The outbox's next partition before the first event: the sweep keeps one ahead, but a
	// database whose transaction ids ran on while no replica ran may have used it up.
	if n, err := store.EnsureEventPartitions(ctx, repo.EventPartitionParams{Span: cfg.EventPartitionSpan}); err != nil {
		logger.Warn("event partitions not checked at start; the sweep tries again", "err", err)
	} else if n > 0 {
		logger.Info("event partitions attached at start", "partitions", n)
	}
	m.WatchStates(store.StateCounts)
	m.WatchPriorities(store.QueuedByPriority)
	m.WatchPools(poolCounter(store))
	ready, err := readiness(p.probe)
	if err != nil {
		return err
	}
	// The replica's one outbox listener: its own LISTEN connection, outside the pool (and
	// past any transaction pooler; without a session it polls every 500 ms).
	hub := events.New(store, events.Config{
		DSN:          direct.listening("/events").String(),
		PollInterval: cfg.EventPollInterval,
		MaxStreams:   cfg.EventStreamsMax,
		Logger:       logger.With("component", "events"),
		Observer:     m,
	})
	if err := hub.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start event listener: %w", err)
	}
	defer hub.Stop()
	handler, err := handlers.New(handlers.Options{
		EventStreams: hub,
		Store:        store,
		Logger:       logger.With("component", "http"),
		Ready:        ready,
		Metrics:      m.Handler(),
		APITokens:    cfg.APITokens,
		Instrument:   m.Instrument,
		Admission: &handlers.Admission{
			MaxInFlight:      cfg.AdmissionMaxInFlight,
			LeaseMaxInFlight: cfg.DBLeaseMaxConns,
			Wait:             cfg.AdmissionWait,
			LongWait:         cfg.AdmissionLongWait,
			Observer:         m,
		},
		WebhookAllowLocal: cfg.WebhookAllowLocal,
		Tracer:            tracer,
		Answers:           m,
		// A page of events ends within what one statement may take (handlers.pageBudgets).
		StatementTimeout: cfg.StatementTimeout,
		ClaimWaker:       claimWaker,
	})
	if err != nil {
		return err
	}
	srv := &http.Server{
		Addr:              cfg.HTTPAddr,
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		// A 100,000-slot creation or dry run takes seconds; leave it room.
		WriteTimeout:   2 * time.Minute,
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 64 << 10,
		// In-flight requests keep their context through SIGTERM so that drain lets them finish.
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	// Streams never end by themselves; Shutdown would wait for them until its timeout. End
	// them as draining begins: clients reconnect elsewhere with Last-Event-ID and lose nothing.
	srv.RegisterOnShutdown(hub.EndStreams)
	srv.RegisterOnShutdown(claimWaker.EndWaits)
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}

	sweep := sweeper.New(store, sweeper.Config{
		Interval:           cfg.SweepInterval,
		EventPartitionSpan: cfg.EventPartitionSpan,
		Logger:             logger.With("component", "sweeper"),
		OnPass:             m.SweepPassed,
		Tracer:             tracer,
	})
	if err := sweep.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start sweeper: %w", err)
	}
	defer sweep.Stop()
	// The outbox's bloom index, summarized every second: reads by backfill look at every
	// unsummarized range whole.
	summarizer := sweeper.NewSummarizer(store.SummarizeEventTail, 0, logger.With("component", "summarizer"))
	if err := summarizer.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start outbox summarizer: %w", err)
	}
	defer summarizer.Stop()

	deliver := webhooks.New(store, webhooks.Config{
		AllowLocal:  cfg.WebhookAllowLocal,
		Concurrency: cfg.WebhookConcurrency,
		Logger:      logger.With("component", "webhooks"),
		Observer:    m,
		Tracer:      tracer,
	})
	if err := deliver.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start webhook delivery: %w", err)
	}
	defer deliver.Stop()

	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	logger.Info("serving", "addr", ln.Addr().String())

	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down: draining requests")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	// Background services stop after the drain, one line each, in this order (the fault
	// tests read it): the sweep, webhook delivery, the event listener.
	logger.Info("stopping sweeper")
	sweep.Stop()
	logger.Info("stopping webhook delivery")
	deliver.Stop()
	logger.Info("stopping event listener")
	hub.Stop()
	logger.Info("stopped")
	return nil
}

// readiness answers, on probeDB, whether the database accepts a write within 2 s and is fully
// migrated. A ping is not enough: a standby, a read-only primary and a primary whose
// synchronous standby is gone all answer pings while every write fails or hangs. The
// provider is built once: probes come every few seconds.
func readiness(probeDB *sqlx.DB) (handlers.ReadinessFunc, error) {
	p, err := migrations.NewProvider(probeDB.DB)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := pgrun.ProbeWrite(ctx, probeDB); err != nil {
			return err
		}
		pending, err := migrations.Pending(ctx, p)
		if err != nil {
			return err
		}
		if pending {
			return errors.New("migrations pending")
		}
		return nil
	}, nil
}

func migrate(ctx context.Context, db *sql.DB, args []string, stdout io.Writer) error {
	if len(args) != 1 {
		return errors.New("usage: api migrate up|down|status")
	}
	p, err := migrations.NewProvider(db)
	if err != nil {
		return err
	}
	switch args[0] {
	case "up":
		results, err := p.Up(ctx)
		for _, r := range results {
			fmt.Fprintln(stdout, r)
		}
		return err
	case "down":
		r, err := p.Down(ctx)
		if r != nil {
			fmt.Fprintln(stdout, r)
		}
		return err
	case "status":
		statuses, err := p.Status(ctx)
		if err != nil {
			return err
		}
		for _, s := range statuses {
			applied := "pending"
			if !s.AppliedAt.IsZero() {
				applied = "applied " + s.AppliedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(stdout, "%d\t%s\t%s\n", s.Source.Version, s.Source.Path, applied)
		}
		return nil
	default:
		return fmt.Errorf("unknown migrate command %q (want up, down or status)", args[0])
	}
}
