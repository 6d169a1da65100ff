-- The counter trigger of 00001 joined old_rows to new_rows. PL/pgSQL caches a query's plan per
-- connection the first time it runs; the sweep ran it first, with zero rows, so the cached
-- plan was a nested loop over transition tables (which have no statistics), and a later bulk
-- update on that warm connection cost n²: a 15,000-run cancel took 49.7 s warm against 1.3 s
-- fresh, holding the backfill's row lock throughout.
--
-- This version has no join. It counts old_rows and new_rows each on its own, grouped by
-- (backfill_id, state), and adds the differences: one pass over each transition table and a
-- hash or sort aggregate, whatever plan is cached. Counting and subtracting per side would
-- also move a run whose backfill_id changed (a takeover by a new backfill), which the join
-- used to leave out; here that is left out by the backfill's state instead: only active
-- backfills' counters move. A takeover moves a run from a terminal backfill (whose counters
-- are frozen: its record keeps the state the run had) to the backfill being created (whose
-- row is inserted after its runs, with counters that already include them, so it does not
-- exist yet when the trigger runs). A run of an active backfill is never taken over: the
-- creating transaction would fail on backfills_one_active_per_dag and roll back. And a
-- terminal backfill has no queued or running run (backfills_terminal_has_no_unfinished_runs),
-- so nothing else changes its runs' states.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION dag_runs_count_by_backfill() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    d record;
BEGIN
    FOR d IN
        SELECT backfill_id,
               coalesce(sum(delta) FILTER (WHERE state = 'queued'), 0)   AS queued,
               coalesce(sum(delta) FILTER (WHERE state = 'running'), 0)  AS running,
               coalesce(sum(delta) FILTER (WHERE state = 'success'), 0)  AS success,
               coalesce(sum(delta) FILTER (WHERE state = 'failed'), 0)   AS failed,
               coalesce(sum(delta) FILTER (WHERE state = 'canceled'), 0) AS canceled
        FROM (
            SELECT backfill_id, state, -count(*) AS delta
            FROM old_rows WHERE backfill_id IS NOT NULL GROUP BY backfill_id, state
            UNION ALL
            SELECT backfill_id, state, count(*) AS delta
            FROM new_rows WHERE backfill_id IS NOT NULL GROUP BY backfill_id, state
        ) moves
        GROUP BY backfill_id
        ORDER BY backfill_id
    LOOP
        -- A change that moves no counter (a heartbeat) touches no backfill row.
        CONTINUE WHEN d.queued = 0 AND d.running = 0 AND d.success = 0 AND d.failed = 0 AND d.canceled = 0;
        UPDATE backfills SET
            num_queued   = num_queued   + d.queued,
            num_running  = num_running  + d.running,
            num_success  = num_success  + d.success,
            num_failed   = num_failed   + d.failed,
            num_canceled = num_canceled + d.canceled
        WHERE id = d.backfill_id AND state IN ('running', 'paused', 'canceling');
    END LOOP;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION dag_runs_count_by_backfill() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    d record;
BEGIN
    FOR d IN
        SELECT backfill_id,
               coalesce(sum(delta) FILTER (WHERE state = 'queued'), 0)   AS queued,
               coalesce(sum(delta) FILTER (WHERE state = 'running'), 0)  AS running,
               coalesce(sum(delta) FILTER (WHERE state = 'success'), 0)  AS success,
               coalesce(sum(delta) FILTER (WHERE state = 'failed'), 0)   AS failed,
               coalesce(sum(delta) FILTER (WHERE state = 'canceled'), 0) AS canceled
        FROM (
            SELECT n.backfill_id, n.state, 1 AS delta
            FROM old_rows o JOIN new_rows n ON n.id = o.id
            WHERE n.backfill_id = o.backfill_id AND n.state <> o.state
            UNION ALL
            SELECT o.backfill_id, o.state, -1 AS delta
            FROM old_rows o JOIN new_rows n ON n.id = o.id
            WHERE n.backfill_id = o.backfill_id AND n.state <> o.state
        ) moves
        GROUP BY backfill_id
        ORDER BY backfill_id
    LOOP
        UPDATE backfills SET
            num_queued   = num_queued   + d.queued,
            num_running  = num_running  + d.running,
            num_success  = num_success  + d.success,
            num_failed   = num_failed   + d.failed,
            num_canceled = num_canceled + d.canceled
        WHERE id = d.backfill_id;
    END LOOP;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
