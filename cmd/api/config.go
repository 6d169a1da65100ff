package main

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
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
	// AdmissionWait is the longest a request waits for an admission slot before 503 busy.
	AdmissionWait time.Duration
	// AdmissionMaxInFlight bounds the requests served at once; by default the pool less
	// admissionPoolReserve, so that an admitted request never queues for a connection.
	AdmissionMaxInFlight int
}

// admissionPoolReserve is the pool's share kept out of admission: the sweep and the
// readiness probe use connections outside of any admitted request.
const admissionPoolReserve = 2

func loadConfig(getenv func(string) string) (config, error) {
	cfg := config{
		DatabaseURL:      getenv("DATABASE_URL"),
		HTTPAddr:         ":8080",
		SweepInterval:    5 * time.Second,
		MaxBackfillRuns:  100000,
		MaxAttempts:      3,
		DBMaxConns:       20,
		StatementTimeout: 60 * time.Second,
		ShutdownTimeout:  30 * time.Second,
		AdmissionWait:    100 * time.Millisecond,
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
	durationVar(getenv, "ADMISSION_WAIT", &cfg.AdmissionWait, &errs)
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
