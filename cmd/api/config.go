package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/backfillsvc/backfill/repo"
)

// config is everything the process reads from its environment; no other package reads it.
type config struct {
	DatabaseURL     string
	HTTPAddr        string
	SweepInterval   time.Duration
	MaxBackfillRuns int
	MaxAttempts     int
	APITokens       []string
	// DBMaxConns bounds the pool: creation holds one connection for seconds at 100k slots,
	// and PostgreSQL's own limit is shared by every replica.
	DBMaxConns int
	// StatementTimeout stops any single statement that runs away.
	StatementTimeout time.Duration
	ShutdownTimeout  time.Duration
	// LogLevel is the least severe level logged (LOG_LEVEL: debug, info, warn, error);
	// health probes and metric scrapes are logged at debug.
	LogLevel slog.Level
}

// defaultHTTPAddr is where the server listens when HTTP_ADDR is unset; the healthcheck
// subcommand probes the same port.
const defaultHTTPAddr = ":8080"

// loadConfig reads the environment over the defaults below, the one place each service default
// is written (the repository's two are its own documented fallbacks, reused here); the tables of
// docs/OPERATIONS.md and README.md are checked against these values (defaults_test.go).
func loadConfig(getenv func(string) string) (config, error) {
	cfg := config{
		DatabaseURL:      getenv("DATABASE_URL"),
		HTTPAddr:         defaultHTTPAddr,
		SweepInterval:    5 * time.Second,
		MaxBackfillRuns:  repo.DefaultMaxBackfillRuns,
		MaxAttempts:      repo.DefaultMaxAttempts,
		DBMaxConns:       20,
		StatementTimeout: 60 * time.Second,
		ShutdownTimeout:  30 * time.Second,
	}
	var errs []error
	if cfg.DatabaseURL == "" {
		errs = append(errs, errors.New("DATABASE_URL is required (e.g. postgres://postgres@127.0.0.1:5432/backfill?sslmode=disable)"))
	}
	if v := getenv("HTTP_ADDR"); v != "" {
		cfg.HTTPAddr = v
	}
	durationVar(getenv, "SWEEP_INTERVAL", &cfg.SweepInterval, &errs)
	durationVar(getenv, "DB_STATEMENT_TIMEOUT", &cfg.StatementTimeout, &errs)
	durationVar(getenv, "SHUTDOWN_TIMEOUT", &cfg.ShutdownTimeout, &errs)
	intVar(getenv, "MAX_BACKFILL_RUNS", &cfg.MaxBackfillRuns, 1, 10_000_000, &errs)
	intVar(getenv, "MAX_ATTEMPTS", &cfg.MaxAttempts, 1, 1000, &errs)
	intVar(getenv, "DB_MAX_CONNS", &cfg.DBMaxConns, 2, 1000, &errs)
	if v := getenv("LOG_LEVEL"); v != "" {
		if err := cfg.LogLevel.UnmarshalText([]byte(v)); err != nil {
			errs = append(errs, fmt.Errorf("LOG_LEVEL=%q: want debug, info, warn or error", v))
		}
	}
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

// redactedDSN masks the password for the startup log.
func redactedDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return "(unparseable DSN, not shown)"
	}
	return u.Redacted()
}

// sessionDSN adds the session settings the service relies on to the operator's DSN: UTC for
// every timestamp, and the statement timeout. lib/pq sends unknown keys as run-time parameters.
func sessionDSN(dsn string, statementTimeout time.Duration) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", fmt.Errorf("DATABASE_URL must be a postgres:// URL")
	}
	q := u.Query()
	q.Set("timezone", "UTC")
	if q.Get("statement_timeout") == "" {
		q.Set("statement_timeout", strconv.FormatInt(statementTimeout.Milliseconds(), 10))
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}
