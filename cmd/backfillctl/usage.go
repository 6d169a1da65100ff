package main

const usage = `backfillctl: the command-line client of the backfill service.

Usage:
  backfillctl [global flags] <command> [flags] [arguments]

DAGs:
  dags put DAG_ID --schedule CRON [--timezone TZ] [--max-active-runs N] [--paused] [--description TEXT]
               [--upstream DAG_ID[:overlap|all[:LOOKBACK]]]... [--depends-on-past]
        Creates or replaces the DAG whole: --upstream (repeated) names the DAGs it depends on in
        a backfill group (overlap: the upstream runs whose data interval overlaps; all: every
        one; LOOKBACK widens the interval by that many of its own into the past).
  dags get DAG_ID
  dags list [--limit N] [--offset N]
  dags delete DAG_ID
        Removes the DAG with its runs and backfill history (refused while it has an active
        backfill or a queued or running run, or while other DAGs name it as an upstream).
  dags import --airflow URL [--dag-id ID]... [--airflow-token T | --airflow-user U --airflow-password P]
        Creates or updates DAGs from Airflow 3's (cron schedule, timezone, max_active_runs); others are skipped.

Backfills:
  backfills create --dag-id ID --from-date DATE --to-date DATE [--reprocess-behavior none|failed|completed]
                   [--max-active-runs N] [--run-backwards] [--dag-run-conf JSON] [--description TEXT]
                   [--max-failed-runs N] [--pool NAME] [--if-match PLAN_HASH] [--priority -10..10]
                   [--code-ref REF] [--reason TEXT] [--actor NAME]
                   [--logical-date DATE]... [--logical-dates-file FILE]
                   [--idempotency-key KEY] [--dry-run] [--wait [--interval D] [--timeout 0] [--wait-through-pause]]
        The window takes every slot (schedule tick) whose logical date is from --from-date to
        --to-date, both inclusive: 2024-03-31 is midnight UTC, so @daily's March 31 slot is in
        and an hourly DAG's later ticks on March 31 are not. --code-ref pins the code the
        runs run (fixed; programs get it as BACKFILL_CODE_REF); --reason and --actor (sent
        as X-Actor) are recorded as the backfill's reason and created_by. --logical-date
        (repeated) and --logical-dates-file (one date a line) limit it to those slots, each of
        which must be a slot of the window. --priority (default 0): claims serve higher
        priority first; a backfill passed over gains one per PRIORITY_AGING, so none starves.
  backfills dry-run --dag-id ID --from-date DATE --to-date DATE [same flags as create] [--summary] [--limit N]
        What create would do, writing nothing: a row per slot (at most --limit N), the counts
        by action, the first and last slot, and the plan hash; --summary prints only those.
  backfills get ID
  backfills list [--dag-id ID] [--state STATE] [--active[=false]] [--order-by id|-id] [--limit N] [--offset N]
  backfills runs ID [--state STATE] [--order-by sort_ordinal|-sort_ordinal] [--limit N] [--offset N | --cursor C]
        The slots with their run's state, attempt, skip reason and note (why it failed);
        --state failed lists only the failed ones. A page that has more prints its --cursor.
  backfills pause ID
  backfills unpause ID
  backfills cancel ID
  backfills patch ID [--max-active-runs N] [--max-failed-runs N|none] [--description TEXT] [--priority N]
        Changes a running or paused backfill's settings; the next claim obeys them.
  backfills retry ID [--max-active-runs N] [--max-failed-runs N] [--dag-run-conf JSON]
                   [--description TEXT] [--idempotency-key KEY] [--if-match PLAN_HASH]
                   [--code-ref REF] [--reason TEXT] [--actor NAME] [--priority N]
                   [--logical-date DATE]... [--logical-dates-file FILE]
                   [--wait [--interval D] [--timeout 0] [--wait-through-pause]]
        A new backfill of the failed and canceled slots of a finished backfill, with the
        parent's code_ref unless --code-ref names another; its reason and actor are its own.
        --logical-date / --logical-dates-file retry exactly those slots of its window.
  watch ID [--interval D] [--timeout 0] [--wait-through-pause]
        Live progress until the backfill is succeeded, failed or canceled: a bar of done/total
        (done = success + failed + canceled + skipped), counts per state, the rate this watch
        sees, and the ETA: the service's eta_seconds (the pace of the last few minutes at the
        current limits, as GET and the console show it; "--" while it has none), and at the
        end the backfill's own duration. A pause stops the watch with why and what to do
        (exit code 4) unless --wait-through-pause; the same holds for create --wait.
        Redrawn in place on a terminal. Otherwise (a pipe, a CI log) no replay of past events:
        a line at once, then one per --interval (default 10s; on a terminal it is the poll
        interval against a server without event streams, default 1s), each with its UTC time
        (with --output json the progress goes to stderr and the final backfill, as JSON, to
        stdout). A backfill that is already finished ends the watch at once, with its exit
        code, even when its events have been pruned.

` + groupsUsage + `
Runs (what an executor does, by hand):
  runs list DAG_ID [--state STATE] [--backfill-id ID] [--limit N] [--offset N | --cursor C]
  runs get DAG_ID RUN_ID
  runs claim --worker-id ID [--dag-id ID] [--limit N] [--lease-seconds N]
  runs heartbeat ID --worker-id ID
  runs report DAG_ID RUN_ID --state success|failed|canceled [--worker-id ID] [--note TEXT]
  runs release ID --worker-id ID
        ID is a run's numeric id (the ID column), RUN_ID its run_id. Without --worker-id,
        report marks the run as an operator would.

` + webhooksUsage + `
` + poolsUsage + `
Executor (runs a program per run; docs/EXECUTOR.md):
  executor [--concurrency N] [--dag-id ID] [--pool NAME] [--timeout D] [--grace 10s]
           [--until-idle] [--worker-id ID] [--lease-seconds 60] [--heartbeat D] [--verbose]
           -- PROGRAM [ARGS...]
        Claims runs and runs PROGRAM once per run, directly (no shell unless PROGRAM is one),
        with {{ run_id }}, {{ logical_date }}, {{ ds }}, {{ conf }}, {{ code_ref }} filled
        in ARGS (names are case-sensitive; an unknown one is refused) and BACKFILL_RUN_ID,
        BACKFILL_LOGICAL_DATE, BACKFILL_DS, BACKFILL_CONF, BACKFILL_ATTEMPT,
        BACKFILL_CODE_REF in its environment. A conf over 128 KiB comes as a file named by BACKFILL_CONF_FILE
        instead, and fails a run that puts it in {{ conf }}. Exit 0 reports success;
        anything else failed, with the last 4 KiB of its stderr as the note. A cancel of the
        backfill, or SIGINT/SIGTERM, stops its process group (SIGTERM, SIGKILL after --grace)
        and releases the run. So does a lease that no heartbeat renewed: the program is gone
        by the lease's end less a margin (1 s + 1% of the lease), and the run is never
        reported success. A child that left the group (setsid) is found by
        BACKFILL_RUN_SCOPE in its environment (Linux only) and stopped with the run, at its
        end and on --timeout; one that also drops that variable is not. One line per run
        start and end (JSON lines with -o json); exit 0 on a clean stop. --until-idle exits
        once nothing in the filters is queued or running anywhere: runs waiting for a slot
        another worker holds are waited for.
  executor [--worker-id ID] [--dag-id ID] [--limit N] [--sleep 1s] [--fail-rate 0]
           [--lease-seconds 60] [--heartbeat D] [--verbose]
        Without -- PROGRAM, a demo: "works" on each run for --sleep, heartbeats, and reports
        success (or failed, at random with --fail-rate), until interrupted.
  airflow --url URL [--token T | --user U --password P] [--dag-id ID] [--pool NAME] [--concurrency N] [--until-idle]
        Runs each claimed run as a DAG run in Apache Airflow 3 and reports how it ended (docs/AIRFLOW.md).

DATE is 2024-03-01 (midnight UTC) or an RFC 3339 time (2024-03-01T02:00:00-05:00).

Global flags (also accepted after the command):
  --server URL         the service (env BACKFILL_SERVER, default http://localhost:8080)
  --token TOKEN        bearer token (env BACKFILL_TOKEN)
  --output, -o FORMAT  table (default) or json

Exit codes:
  0    success; for watch and create --wait, the backfill succeeded (groups watch: the group)
  1    the watched backfill (or group) ended failed
  2    the watched backfill (or group) ended canceled
  4    the watched backfill (or group) paused (watch, create --wait, groups watch; not with
       --wait-through-pause): the reason and what to do are printed
  3    any other error: a usage error, an unreachable server, or the service's problem
       (its code and detail are printed on stderr, e.g. backfill_already_running)
  130  interrupted while watching (the backfill itself goes on)

Run 'backfillctl <command> -h' for a command's flags.
`
