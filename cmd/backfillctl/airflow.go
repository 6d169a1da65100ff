package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// airflowSynopsis is what follows `backfillctl airflow` in its usage.
const airflowSynopsis = "--url URL [--token T | --user U --password P] [--dag-id ID] [--pool NAME] [--concurrency N] [--until-idle]"

// airflowCommand is `backfillctl airflow --url URL`: the SDK's RunExecutor with a work
// function that runs each claimed run as a DAG run in an Apache Airflow 3 deployment
// (docs/AIRFLOW.md). Its --token is Airflow's: the service's token comes from
// BACKFILL_TOKEN, --token before the command's name, or --service-token.
func airflowCommand(ctx context.Context, c *cli, _ *flag.FlagSet, args []string) error {
	fs := flag.NewFlagSet("airflow", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.StringVar(&c.g.server, "server", c.g.server, "the backfill service's base URL (env BACKFILL_SERVER)")
	fs.StringVar(&c.g.token, "service-token", c.g.token, "the backfill service's bearer token (env BACKFILL_TOKEN)")
	fs.StringVar(&c.g.output, "output", c.g.output, "output format: table or json")
	fs.StringVar(&c.g.output, "o", c.g.output, "shorthand for --output")
	baseURL := fs.String("url", "", "Airflow's base URL, e.g. https://airflow.example.com (required; the API is under /api/v2)")
	token := fs.String("token", c.getenv("BACKFILL_AIRFLOW_TOKEN"), "Airflow's bearer token (env BACKFILL_AIRFLOW_TOKEN)")
	user := fs.String("user", "", "Airflow user whose password buys tokens at POST /auth/token")
	password := fs.String("password", c.getenv("BACKFILL_AIRFLOW_PASSWORD"), "that user's password (env BACKFILL_AIRFLOW_PASSWORD, which keeps it out of ps)")
	w := addWorkerFlags(fs, workerUsage{
		concurrency: "Airflow runs followed at once, 1..100",
		heartbeat:   "time between heartbeats (default a third of the lease); also how soon a cancel reaches Airflow",
		untilIdle:   "exit once nothing in the filters is queued or running anywhere",
		verbose:     "also log claims and Airflow calls",
	})
	poll := fs.Duration("poll", 5*time.Second, "time between reads of an Airflow run's state")
	queuedWarn := fs.Duration("queued-warning", 5*time.Minute, "warn when an Airflow run stays queued this long (a paused DAG in Airflow keeps it queued); 0 never warns")
	fs.Usage = func() {
		fmt.Fprintf(c.stderr, "Usage: backfillctl airflow %s\n\nFlags (--token is Airflow's here):\n", airflowSynopsis)
		fs.VisitAll(func(f *flag.Flag) {
			name, usage := flag.UnquoteUsage(f)
			fmt.Fprintf(c.stderr, "  --%s\n    \t%s\n", strings.TrimSpace(f.Name+" "+name), usage)
		})
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := checkAirflowFlags(pos, bridgeFlagNames, *baseURL, *token, *user, *password, *poll); err != nil {
		return err
	}
	api, err := c.client()
	if err != nil {
		return err
	}
	af := newAirflowAPI(*baseURL, *token, *user, *password)
	if err := af.check(ctx); err != nil {
		return err
	}

	logger, lines, _ := w.workerOutput(c)
	bridge := &airflowBridge{api: af, poll: *poll, log: logger, lines: lines, queuedWarn: *queuedWarn}
	cfg := w.executorConfig(logger, lines)
	// Stopped by SIGINT/SIGTERM (every run released, Airflow's runs left going) or idle.
	return executorStopped(api.RunExecutor(ctx, cfg, bridge.work))
}

// airflowFlagNames are the names of a command's flags for Airflow's URL and credentials.
type airflowFlagNames struct{ url, token, user, password string }

var bridgeFlagNames = airflowFlagNames{"--url", "--token", "--user", "--password"}

func checkAirflowFlags(pos []string, n airflowFlagNames, baseURL, token, user, password string, poll time.Duration) error {
	u, err := url.Parse(baseURL)
	switch {
	case len(pos) != 0:
		return usageErrorf("unexpected arguments %q", pos)
	case baseURL == "":
		return usageErrorf("%s is required (Airflow's base URL)", n.url)
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return usageErrorf("%s must be an http or https URL, not %q", n.url, baseURL)
	case token != "" && user != "":
		return usageErrorf("give %s or %s, not both", n.token, n.user)
	case token == "" && user == "":
		return usageErrorf("Airflow's API needs %s, or %s with %s", n.token, n.user, n.password)
	case user != "" && password == "":
		return usageErrorf("%s needs %s (or BACKFILL_AIRFLOW_PASSWORD)", n.user, n.password)
	case poll <= 0:
		return usageErrorf("--poll must be positive")
	}
	return nil
}

// check reads one DAG, so that a wrong URL or credentials stop the bridge before it claims
// anything, rather than failing every run it claims.
func (a *airflowAPI) check(ctx context.Context) error {
	err := a.do(ctx, http.MethodGet, "/api/v2/dags", url.Values{"limit": {"1"}}, nil, nil)
	switch s := airflowStatus(err); {
	case err == nil:
		return nil
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		return usageErrorf("Airflow at %s refused the credentials: %v", a.base, err)
	case s == http.StatusNotFound:
		return usageErrorf("no Airflow 3 API at %s (GET /api/v2/dags answered 404): --url is Airflow's base URL", a.base)
	case strings.HasPrefix(err.Error(), "airflow login"):
		return usageErrorf("%v", err)
	}
	return fmt.Errorf("cannot reach Airflow at %s: %w", a.base, err)
}
