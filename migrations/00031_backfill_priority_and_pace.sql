-- Priority with aging, and an ETA from the recent pace.
--
-- priority (-10..10, default 0) orders the backfills a claim serves: higher effective priority
-- first, where effective priority = priority + floor(wait / PRIORITY_AGING) (repo/claim.go).
-- wait is measured from claim_wait_since: the last time the backfill was handed a run, or
-- became claimable again (unpaused, a run queued into an empty backfill, a slot freed under
-- max_active_runs), whichever is later. Measuring from the creation of the runs instead would
-- let a long priority-10 backfill starve a priority -10 one created after it for ever: both
-- age at the same rate, the gap stays 20. Measured from the last claim, a backfill that is
-- being served does not age, and one that is passed over rises by one per PRIORITY_AGING
-- until it is served.
--
-- pace_since is when the backfill's pace last restarted: creation, a state change (pause,
-- unpause), a change of max_active_runs or pool. backfill_eta_seconds reads the successes
-- since then (at most the last 5 minutes) and answers the remaining runs at that rate.
--
-- Both clocks are kept by one BEFORE UPDATE trigger whose WHEN admits only the updates that
-- move them; it sets the new row's columns, so it writes no row version of its own, and the
-- counter updates of reports that do not free a slot of a saturated backfill never call it.
--
-- backfills' row type is events.snapshot's type (00015): columns are added without defaults
-- and the defaults are set in a second statement. The events render a snapshot through
-- backfill_api_json, redefined here to add priority (00029's version otherwise); snapshots
-- written before this migration have priority null, which reads as 0.

-- +goose Up
ALTER TABLE backfills ADD COLUMN priority smallint;
ALTER TABLE backfills ADD COLUMN claim_wait_since timestamptz;
ALTER TABLE backfills ADD COLUMN pace_since timestamptz;
ALTER TABLE backfills ALTER COLUMN priority SET DEFAULT 0;
ALTER TABLE backfills ALTER COLUMN claim_wait_since SET DEFAULT backfill_now();
ALTER TABLE backfills ALTER COLUMN pace_since SET DEFAULT backfill_now();
UPDATE backfills SET priority = 0, claim_wait_since = backfill_now(), pace_since = backfill_now();
ALTER TABLE backfills ALTER COLUMN priority SET NOT NULL;
ALTER TABLE backfills ALTER COLUMN claim_wait_since SET NOT NULL;
ALTER TABLE backfills ALTER COLUMN pace_since SET NOT NULL;
ALTER TABLE backfills ADD CONSTRAINT backfills_priority_range CHECK (priority BETWEEN -10 AND 10);

-- +goose StatementBegin
CREATE FUNCTION backfill_clocks() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.num_running > OLD.num_running
       OR (NEW.state = 'running' AND NEW.num_queued > 0 AND NEW.num_running < NEW.max_active_runs
           AND NOT (OLD.state = 'running' AND OLD.num_queued > 0 AND OLD.num_running < OLD.max_active_runs)) THEN
        NEW.claim_wait_since := backfill_now();
    END IF;
    IF NEW.state IS DISTINCT FROM OLD.state
       OR NEW.max_active_runs IS DISTINCT FROM OLD.max_active_runs
       OR NEW.pool IS DISTINCT FROM OLD.pool THEN
        NEW.pace_since := backfill_now();
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER backfills_clocks BEFORE UPDATE ON backfills
    FOR EACH ROW
    WHEN (NEW.num_running > OLD.num_running
          OR OLD.state IS DISTINCT FROM NEW.state
          OR OLD.max_active_runs IS DISTINCT FROM NEW.max_active_runs
          OR OLD.pool IS DISTINCT FROM NEW.pool
          OR (OLD.num_queued = 0 AND NEW.num_queued > 0)
          OR (OLD.num_running >= OLD.max_active_runs AND NEW.num_running < NEW.max_active_runs))
    EXECUTE FUNCTION backfill_clocks();

-- The seconds until no run of b is left queued or running, at the pace of its successes since
-- its pace last restarted (at most the last 5 minutes; the newest 500 successes, so a read
-- costs at most 500 entries of dag_runs_successes_by_end, 00030). A DAG has one active
-- backfill and the window starts after b's creation, so the DAG's successes in the window are
-- b's, manual runs aside (filtered out by backfill_id). Null while b is not running (a
-- finished backfill has no ETA), 0 when nothing is left, null until 2 successes give a pace.
-- +goose StatementBegin
CREATE FUNCTION backfill_eta_seconds(b backfills) RETURNS double precision
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN b.state <> 'running' THEN NULL
        WHEN b.num_queued + b.num_running = 0 THEN 0::double precision
        ELSE (
            SELECT CASE WHEN w.n >= 2 AND w.span > 0 THEN
                round(((b.num_queued + b.num_running) * w.span / w.n)::numeric, 1)::double precision
            END
            FROM (
                SELECT count(*) AS n,
                       extract(epoch FROM backfill_now() - CASE
                           WHEN count(*) = 500 THEN min(s.end_date)
                           ELSE greatest(b.pace_since, backfill_now() - interval '5 minutes')
                       END)::double precision AS span
                FROM (
                    SELECT r.end_date FROM dag_runs r
                    WHERE r.dag_id = b.dag_id AND r.state = 'success' AND r.backfill_id = b.id
                      AND r.end_date >= greatest(b.pace_since, backfill_now() - interval '5 minutes')
                    ORDER BY r.end_date DESC LIMIT 500
                ) s
            ) w)
    END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION backfill_api_json(b backfills) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', b.id, 'dag_id', b.dag_id,
        'from_date', api_timestamp(b.from_date), 'to_date', api_timestamp(b.to_date),
        'run_backwards', b.run_backwards, 'dag_run_conf', b.dag_run_conf,
        'reprocess_behavior', b.reprocess_behavior, 'max_active_runs', b.max_active_runs,
        'description', b.description, 'state', b.state,
        'created_at', api_timestamp(b.created_at), 'updated_at', api_timestamp(b.updated_at),
        'completed_at', api_timestamp(b.completed_at),
        'max_failed_runs', b.max_failed_runs, 'pause_reason', b.pause_reason,
        'plan_hash', b.plan_hash, 'parent_backfill_id', b.parent_backfill_id, 'pool', b.pool,
        'code_ref', b.code_ref, 'created_by', b.created_by, 'reason', b.reason,
        'priority', coalesce(b.priority, 0),
        'is_paused', b.state = 'paused',
        'progress', jsonb_build_object(
            'total', b.num_queued + b.num_running + b.num_success + b.num_failed
                     + b.num_canceled + b.num_skipped,
            'queued', b.num_queued, 'running', b.num_running, 'success', b.num_success,
            'failed', b.num_failed, 'canceled', b.num_canceled, 'skipped', b.num_skipped))
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION backfill_api_json(b backfills) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', b.id, 'dag_id', b.dag_id,
        'from_date', api_timestamp(b.from_date), 'to_date', api_timestamp(b.to_date),
        'run_backwards', b.run_backwards, 'dag_run_conf', b.dag_run_conf,
        'reprocess_behavior', b.reprocess_behavior, 'max_active_runs', b.max_active_runs,
        'description', b.description, 'state', b.state,
        'created_at', api_timestamp(b.created_at), 'updated_at', api_timestamp(b.updated_at),
        'completed_at', api_timestamp(b.completed_at),
        'max_failed_runs', b.max_failed_runs, 'pause_reason', b.pause_reason,
        'plan_hash', b.plan_hash, 'parent_backfill_id', b.parent_backfill_id, 'pool', b.pool,
        'code_ref', b.code_ref, 'created_by', b.created_by, 'reason', b.reason,
        'is_paused', b.state = 'paused',
        'progress', jsonb_build_object(
            'total', b.num_queued + b.num_running + b.num_success + b.num_failed
                     + b.num_canceled + b.num_skipped,
            'queued', b.num_queued, 'running', b.num_running, 'success', b.num_success,
            'failed', b.num_failed, 'canceled', b.num_canceled, 'skipped', b.num_skipped))
$$;
-- +goose StatementEnd
DROP FUNCTION backfill_eta_seconds(backfills);
DROP TRIGGER backfills_clocks ON backfills;
DROP FUNCTION backfill_clocks();
ALTER TABLE backfills DROP CONSTRAINT backfills_priority_range;
ALTER TABLE backfills DROP COLUMN pace_since;
ALTER TABLE backfills DROP COLUMN claim_wait_since;
ALTER TABLE backfills DROP COLUMN priority;
