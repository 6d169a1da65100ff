package main

const usage = `backfillctl: the command-line client of the backfill service.

Usage:
  backfillctl [global flags] <command> [flags] [arguments]

DAGs:
  dags put DAG_ID --schedule CRON [--timezone TZ] [--max-active-runs N] [--paused] [--description TEXT]
  dags get DAG_ID
  dags list [--limit N] [--offset N]
  dags delete DAG_ID
        Removes the DAG with its runs and backfill history (refused while it has an active
        backfill or a queued or running run).

Backfills:
  backfills create --dag-id ID --from-date DATE --to-date DATE [--reprocess-behavior none|failed|completed]
                   [--max-active-runs N] [--run-backwards] [--dag-run-conf JSON] [--description TEXT]
                   [--max-failed-runs N] [--if-match PLAN_HASH]
                   [--idempotency-key KEY] [--dry-run] [--wait [--interval 1s] [--timeout 0]]
  backfills dry-run --dag-id ID --from-date DATE --to-date DATE [same flags as create]
  backfills get ID
  backfills list [--dag-id ID] [--state STATE] [--active[=false]] [--order-by id|-id] [--limit N] [--offset N]
  backfills runs ID [--order-by sort_ordinal|-sort_ordinal] [--limit N] [--offset N]
        The slots with their run's state, attempt, skip reason and note (why it failed).
  backfills pause ID
  backfills unpause ID
  backfills cancel ID
  backfills patch ID [--max-active-runs N] [--max-failed-runs N|none] [--description TEXT]
        Changes a running or paused backfill's settings; the next claim obeys them.
  backfills retry ID [--max-active-runs N] [--max-failed-runs N] [--dag-run-conf JSON]
                   [--description TEXT] [--idempotency-key KEY] [--if-match PLAN_HASH] [--wait]
        A new backfill of the failed and canceled slots of a finished backfill.
  watch ID [--interval 1s] [--timeout 0]
        Live progress until the backfill is succeeded, failed or canceled: a bar of done/total
        (done = success + failed + canceled + skipped), counts per state, rate and ETA.
        Redrawn in place on a terminal, one line per change otherwise (with --output json the
        progress goes to stderr and the final backfill, as JSON, to stdout).

` + webhooksUsage + `
` + poolsUsage + `
Executor (runs a program per run; docs/EXECUTOR.md):
  executor [--concurrency N] [--dag-id ID] [--pool NAME] [--timeout D] [--grace 10s]
           [--until-idle] [--worker-id ID] -- PROGRAM [ARGS...]
        Claims runs and runs PROGRAM once per run, directly (no shell unless PROGRAM is one),
        with {{ run_id }}, {{ logical_date }}, {{ ds }}, {{ conf }} filled in ARGS and
        BACKFILL_RUN_ID, BACKFILL_LOGICAL_DATE, BACKFILL_DS, BACKFILL_CONF, BACKFILL_ATTEMPT
        in its environment. Exit 0 reports success; anything else failed, with the last
        4 KiB of its stderr as the note. A cancel of the backfill, or SIGINT/SIGTERM, stops
        its process group (SIGTERM, SIGKILL after --grace) and releases the run. One line
        per run start and end (JSON lines with -o json); exit 0 on a clean stop.
  executor [--worker-id ID] [--dag-id ID] [--limit N] [--sleep 1s] [--fail-rate 0]
        Without -- PROGRAM, a demo: "works" on each run for --sleep, heartbeats, and reports
        success (or failed, at random with --fail-rate), until interrupted.

DATE is 2024-03-01 (midnight UTC) or an RFC 3339 time (2024-03-01T02:00:00-05:00).

Global flags (also accepted after the command):
  --server URL         the service (env BACKFILL_SERVER, default http://localhost:8080)
  --token TOKEN        bearer token (env BACKFILL_TOKEN)
  --output, -o FORMAT  table (default) or json

Exit codes:
  0    success; for watch and create --wait, the backfill succeeded
  1    the watched backfill ended failed
  2    the watched backfill ended canceled
  3    any other error: a usage error, an unreachable server, or the service's problem
       (its code and detail are printed on stderr, e.g. backfill_already_running)
  130  interrupted while watching (the backfill itself goes on)

Run 'backfillctl <command> -h' for a command's flags.
`
