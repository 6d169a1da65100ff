package main

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/backfillsvc/backfill/events"
	"github.com/backfillsvc/backfill/handlers"
	"github.com/backfillsvc/backfill/repo"
	"github.com/backfillsvc/backfill/sweeper"
	"github.com/backfillsvc/backfill/tracing"
	"github.com/backfillsvc/backfill/webhooks"
)

// config is everything the process reads from its environment; no other package reads it.
type config struct {
	DatabaseURL string
	// DirectDatabaseURL, when set, reaches PostgreSQL without a transaction pooler: migrations
	// (a session advisory lock) and the event listener (LISTEN) need a session of their own,
	// which PgBouncer in transaction mode does not give. DATABASE_URL otherwise.
	DirectDatabaseURL string
	// DBPooler says what sits between the service and PostgreSQL on DATABASE_URL: "none" (a
	// direct connection, or a session pooler) prepares the hot statements once per pooled
	// connection; "transaction" (PgBouncer in transaction mode) sends every statement
	// unnamed, since a prepared statement would outlive the transaction that made it.
	DBPooler      string
	HTTPAddr      string
	SweepInterval time.Duration
	// EventPartitionSpan is how long a new partition of the outbox is meant to last at the
	// database's pace of transactions (EVENT_PARTITION_SPAN); retention drops whole ones.
	EventPartitionSpan time.Duration
	MaxBackfillRuns    int
	// MaxRunDependencies caps one group's run-to-run dependencies (MAX_RUN_DEPENDENCIES).
	MaxRunDependencies int
	MaxAttempts        int
	APITokens          []string
	// DBMaxConns bounds the pool: creation holds one connection for seconds at 100k slots,
	// and PostgreSQL's own limit is shared by every replica.
	DBMaxConns int
	// StatementTimeout stops any single statement that runs away.
	StatementTimeout time.Duration
	ShutdownTimeout  time.Duration
	// LogLevel is the least severe level logged (LOG_LEVEL: debug, info, warn, error);
	// health probes and metric scrapes are logged at debug.
	LogLevel slog.Level

	// DBReconnectWait bounds how long a request whose transaction could not reach the
	// database (failed to connect, to BEGIN, or lost its connection before COMMIT) is retried
	// inside the server before it is answered 503: long enough to ride a failover.
	DBReconnectWait time.Duration
	// DBConnMaxLifetime retires pooled connections, so that a pool drifts off an old primary
	// that stayed up after a failover instead of staying on it for ever.
	DBConnMaxLifetime time.Duration
	// WebhookAllowLocal lets webhook targets resolve to loopback, link-local and unspecified
	// addresses (WEBHOOK_ALLOW_LOCAL=true), for development and tests.
	WebhookAllowLocal bool
	// WebhookConcurrency is the most delivery attempts in flight per webhook endpoint on this
	// replica (WEBHOOK_CONCURRENCY): an endpoint that hangs holds this many and no more.
	WebhookConcurrency int
	// EventStreamsMax bounds the Server-Sent Events streams of this replica (503 beyond).
	EventStreamsMax int
	// EventPollInterval is how often the event listener reads the outbox when no NOTIFY
	// woke it: the most a lost notification can delay an event.
	EventPollInterval time.Duration
	// AdmissionWait is the admission queue's interval: a queue that has not been empty for
	// that long is standing, and a request that arrives at it waits at most that long for a
	// slot before 503 busy.
	AdmissionWait time.Duration
	// AdmissionLongWait is the longest a request that arrives at a queue that is not
	// standing (a burst) waits for a slot.
	AdmissionLongWait time.Duration
	// DBLeaseMaxConns is the lease pool (heartbeats, reports, releases), kept apart from
	// DBMaxConns, and the number of lease requests admitted at once.
	DBLeaseMaxConns int
	// LockWait bounds every wait of a transaction for a row lock (lock_timeout).
	LockWait time.Duration
	// PriorityAging is how long a passed-over backfill waits for each point of effective
	// priority in claims (repo.Config.PriorityAging).
	PriorityAging time.Duration
	// AdmissionMaxInFlight bounds the requests served at once; by default the pool less
	// admissionPoolReserve, so that an admitted request never queues for a connection.
	AdmissionMaxInFlight int
	// Tracing is where traces go (the OTEL_* variables, tracing_config.go); nil is off.
	Tracing  *tracing.Config
	otelVars tracingSettings
}

// admissionPoolReserve is the pool's share kept out of admission: the sweep and the
// readiness probe use connections outside of any admitted request.
const admissionPoolReserve = 2

// The values of DB_POOLER.
const (
	poolerNone        = "none"
	poolerTransaction = "transaction"
)

// defaultHTTPAddr is where the server listens when HTTP_ADDR is unset; the healthcheck
// subcommand probes the same port.
const defaultHTTPAddr = ":8080"

// loadConfig reads the environment over the defaults below. A default a package applies itself
// (the repository's, the sweeper's, the event hub's, webhook delivery's) is that package's
// exported constant, so that each is written once; the rest are written here. The tables of
// docs/OPERATIONS.md and README.md are checked against these values (defaults_test.go).
func loadConfig(getenv func(string) string) (config, error) {
	cfg := config{
		DatabaseURL:        getenv("DATABASE_URL"),
		DirectDatabaseURL:  getenv("DIRECT_DATABASE_URL"),
		DBPooler:           poolerNone,
		HTTPAddr:           defaultHTTPAddr,
		SweepInterval:      sweeper.DefaultInterval,
		EventPartitionSpan: repo.DefaultEventPartitionSpan,
		MaxBackfillRuns:    repo.DefaultMaxBackfillRuns,
		MaxRunDependencies: repo.DefaultMaxRunDependencies,
		MaxAttempts:        repo.DefaultMaxAttempts,
		DBMaxConns:         20,
		StatementTimeout:   60 * time.Second,
		ShutdownTimeout:    30 * time.Second,

		DBReconnectWait:    5 * time.Second,
		DBConnMaxLifetime:  time.Minute,
		EventStreamsMax:    events.DefaultMaxStreams,
		WebhookConcurrency: webhooks.DefaultConcurrency,
		EventPollInterval:  events.DefaultPollInterval,
		AdmissionWait:      100 * time.Millisecond,
		AdmissionLongWait:  time.Second,
		DBLeaseMaxConns:    handlers.DefaultLeaseMaxInFlight,
		LockWait:           repo.DefaultLockWait,
		PriorityAging:      repo.DefaultPriorityAging,
	}
	var errs []error
	if cfg.DatabaseURL == "" {
		errs = append(errs, errors.New("DATABASE_URL is required (e.g. postgres://postgres@127.0.0.1:5432/backfill?sslmode=disable)"))
	}
	switch v := getenv("DB_POOLER"); v {
	case "":
	case poolerNone, poolerTransaction:
		cfg.DBPooler = v
	default:
		errs = append(errs, fmt.Errorf("DB_POOLER=%q: want none or transaction", v))
	}
	if v := getenv("HTTP_ADDR"); v != "" {
		cfg.HTTPAddr = v
	}
	var err error
	if cfg.Tracing, cfg.otelVars, err = loadTracing(getenv); err != nil {
		errs = append(errs, err)
	}
	durationVar(getenv, "SWEEP_INTERVAL", &cfg.SweepInterval, &errs)
	durationVar(getenv, "EVENT_PARTITION_SPAN", &cfg.EventPartitionSpan, &errs)
	durationVar(getenv, "DB_STATEMENT_TIMEOUT", &cfg.StatementTimeout, &errs)
	durationVar(getenv, "SHUTDOWN_TIMEOUT", &cfg.ShutdownTimeout, &errs)
	durationVar(getenv, "DB_RECONNECT_WAIT", &cfg.DBReconnectWait, &errs)
	durationVar(getenv, "DB_CONN_MAX_LIFETIME", &cfg.DBConnMaxLifetime, &errs)
	intVar(getenv, "MAX_BACKFILL_RUNS", &cfg.MaxBackfillRuns, 1, 10_000_000, &errs)
	intVar(getenv, "MAX_RUN_DEPENDENCIES", &cfg.MaxRunDependencies, 1, 100_000_000, &errs)
	intVar(getenv, "MAX_ATTEMPTS", &cfg.MaxAttempts, 1, 1000, &errs)
	intVar(getenv, "DB_MAX_CONNS", &cfg.DBMaxConns, 2, 1000, &errs)
	if v := getenv("LOG_LEVEL"); v != "" {
		if err := cfg.LogLevel.UnmarshalText([]byte(v)); err != nil {
			errs = append(errs, fmt.Errorf("LOG_LEVEL=%q: want debug, info, warn or error", v))
		}
	}
	switch v := getenv("WEBHOOK_ALLOW_LOCAL"); v {
	case "", "false":
	case "true":
		cfg.WebhookAllowLocal = true
	default:
		errs = append(errs, fmt.Errorf("WEBHOOK_ALLOW_LOCAL=%q: want true or false", v))
	}
	intVar(getenv, "WEBHOOK_CONCURRENCY", &cfg.WebhookConcurrency, 1, 1000, &errs)
	intVar(getenv, "EVENT_STREAMS_MAX", &cfg.EventStreamsMax, 1, 1_000_000, &errs)
	durationVar(getenv, "EVENT_POLL_INTERVAL", &cfg.EventPollInterval, &errs)
	durationVar(getenv, "ADMISSION_WAIT", &cfg.AdmissionWait, &errs)
	durationVar(getenv, "ADMISSION_LONG_WAIT", &cfg.AdmissionLongWait, &errs)
	// A burst never waits less than a standing queue's request: a long ADMISSION_WAIT alone
	// (as some deployments and tests set) raises the long wait with it.
	cfg.AdmissionLongWait = max(cfg.AdmissionLongWait, cfg.AdmissionWait)
	intVar(getenv, "DB_LEASE_MAX_CONNS", &cfg.DBLeaseMaxConns, 1, 1000, &errs)
	durationVar(getenv, "LOCK_WAIT", &cfg.LockWait, &errs)
	durationVar(getenv, "PRIORITY_AGING", &cfg.PriorityAging, &errs)
	cfg.AdmissionMaxInFlight = max(3, cfg.DBMaxConns-admissionPoolReserve)
	intVar(getenv, "ADMISSION_MAX_IN_FLIGHT", &cfg.AdmissionMaxInFlight, 3, 10_000, &errs)
	for _, t := range strings.Split(getenv("API_TOKEN"), ",") {
		if t = strings.TrimSpace(t); t != "" {
			cfg.APITokens = append(cfg.APITokens, t)
		}
	}
	return cfg, errors.Join(errs...)
}

func durationVar(getenv func(string) string, name string, dst *time.Duration, errs *[]error) {
	v := getenv(name)
	if v == "" {
		return
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		*errs = append(*errs, fmt.Errorf("%s=%q: want a positive duration such as 5s", name, v))
		return
	}
	*dst = d
}

func intVar(getenv func(string) string, name string, dst *int, lo, hi int, errs *[]error) {
	v := getenv(name)
	if v == "" {
		return
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		*errs = append(*errs, fmt.Errorf("%s=%q: want an integer in %d..%d", name, v, lo, hi))
		return
	}
	*dst = n
}

// defaultConnectTimeout (seconds) bounds a connection attempt to each host when the DSN
// does not: without it a host that accepts TCP but never answers hangs a connect for as long
// as the kernel keeps trying, whatever the request's deadline.
const defaultConnectTimeout = "2"

// sessionDSN reads the operator's DSN (see dsn.go for the forms) and adds the session
// settings the service relies on: UTC for every timestamp, the statement timeout, a
// connect timeout and lib/pq's single-exchange mode. lib/pq sends unknown keys as run-time parameters.
func sessionDSN(raw string, statementTimeout time.Duration) (dsn, error) {
	d, err := parseDSN(raw)
	if err != nil {
		return dsn{}, err
	}
	d.params["timezone"] = "UTC"
	d = d.withDefault("statement_timeout", strconv.FormatInt(statementTimeout.Milliseconds(), 10))
	d = d.withDefault("connect_timeout", defaultConnectTimeout)
	// lib/pq otherwise sends a statement with parameters in two exchanges (Parse+Describe,
	// Sync, then Bind+Execute): outside a transaction a transaction pooler may hand the second
	// to another server connection, where the unnamed statement does not exist. Binary mode
	// sends all in one exchange (and saves a round trip); it sends []byte parameters as binary,
	// which only bytea columns receive (the repository passes JSON as text).
	d = d.withDefault("binary_parameters", "yes")
	return d, nil
}

// poolSessionDSN is the DSN of the pools that serve requests: d with lock_timeout = LOCK_WAIT
// as every session's default. Transactions and the writes of one statement set their own
// share of LOCK_WAIT for the row locks they wait for (repo.lockBudget), but they do so once
// the statement runs: the table locks a statement takes first (an operator's LOCK TABLE, a
// migration's ALTER TABLE queued for its lock, which every later statement queues behind)
// and every read would be bounded only by statement_timeout (PATCHes and reads would wait
// 7–12 s behind a held table lock, then answer 200 or nothing at all). Not
// behind a transaction pooler, which refuses unknown startup parameters (there the
// database's own setting applies, docs/HA.md), and not for the direct sessions: a migration
// waits for its locks as long as it must.
//
// The same sessions run with JIT off unless the DSN says otherwise: every statement of the
// service is a short OLTP statement, and JIT only ever added the compilation of one whose
// rows the planner overestimated (the webhook fan-out: 0.6-1 s of a 1.6 ms statement; that
// one turns it off itself, behind a pooler too).
func poolSessionDSN(d dsn, lockWait time.Duration, pooler string) dsn {
	if pooler == poolerTransaction {
		return d
	}
	return d.withDefault("lock_timeout", strconv.FormatInt(max(lockWait.Milliseconds(), 1), 10)).
		withDefault("jit", "off")
}

// logAttrs is every setting for the startup line, keyed by its variable's name in lower case,
// so that an operator can read from the log what the process runs with. The password in
// DATABASE_URL is masked and API_TOKEN is only counted.
func (c config) logAttrs() []any {
	return append([]any{
		"database_url", redactedDSN(c.DatabaseURL),
		"direct_database_url", redactedDSN(c.DirectDatabaseURL),
		"db_pooler", c.DBPooler,
		"http_addr", c.HTTPAddr,
		"sweep_interval", c.SweepInterval.String(),
		"event_partition_span", c.EventPartitionSpan.String(),
		"max_backfill_runs", c.MaxBackfillRuns,
		"max_run_dependencies", c.MaxRunDependencies,
		"max_attempts", c.MaxAttempts,
		"api_token", fmt.Sprintf("%d token(s)", len(c.APITokens)),
		"db_max_conns", c.DBMaxConns,
		"db_statement_timeout", c.StatementTimeout.String(),
		"shutdown_timeout", c.ShutdownTimeout.String(),
		"log_level", c.LogLevel.String(),
		"db_reconnect_wait", c.DBReconnectWait.String(),
		"db_conn_max_lifetime", c.DBConnMaxLifetime.String(),
		"webhook_allow_local", c.WebhookAllowLocal,
		"webhook_concurrency", c.WebhookConcurrency,
		"event_streams_max", c.EventStreamsMax,
		"event_poll_interval", c.EventPollInterval.String(),
		"admission_wait", c.AdmissionWait.String(),
		"admission_max_in_flight", c.AdmissionMaxInFlight,
		"admission_long_wait", c.AdmissionLongWait.String(),
		"db_lease_max_conns", c.DBLeaseMaxConns,
		"lock_wait", c.LockWait.String(),
		"priority_aging", c.PriorityAging.String(),
	}, c.otelVars.logAttrs()...)
}
