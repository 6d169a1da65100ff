-- What blocked runs change on a backfill's row, and the groups' events.
--
-- num_blocked counts a backfill's queued runs that wait for another (blocked_by > 0), kept by
-- the counter trigger like num_queued, under the backfill row's lock. The generated column
-- claimable stays as it is (it cannot be redefined while events.snapshot uses the row type,
-- and an index predicate on num_queued would make every counter update a non-HOT one): a
-- claim that reaches a member whose every queued run waits finds no run in its index range
-- and goes on. claim_wait_since restarts when the first run of such a member is unblocked,
-- as it does when a run is queued into an empty backfill, so that waiting blocked does not
-- count as waiting for a claim.
--
-- Events: a member's events carry its group_id (in the backfill document, and beside it); a
-- group's changes write backfill_group.* events with the group as GET answers it, rendered at
-- COMMIT like a backfill's snapshot. Those have no backfill_id or dag_id.

-- +goose Up
-- backfills' row type is events.snapshot's type (00015): a column is added without a default,
-- which is set in a second statement; snapshots written before read num_blocked null, as 0.
ALTER TABLE backfills ADD COLUMN num_blocked integer;
ALTER TABLE backfills ALTER COLUMN num_blocked SET DEFAULT 0;
UPDATE backfills SET num_blocked = 0;
ALTER TABLE backfills ALTER COLUMN num_blocked SET NOT NULL;
ALTER TABLE backfills ADD CONSTRAINT backfills_blocked_within_queued CHECK (num_blocked BETWEEN 0 AND num_queued);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION backfill_clocks() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.num_running > OLD.num_running
       OR (NEW.state = 'running' AND NEW.num_queued > NEW.num_blocked AND NEW.num_running < NEW.max_active_runs
           AND NOT (OLD.state = 'running' AND OLD.num_queued > OLD.num_blocked AND OLD.num_running < OLD.max_active_runs)) THEN
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

DROP TRIGGER backfills_clocks ON backfills;
CREATE TRIGGER backfills_clocks BEFORE UPDATE ON backfills
    FOR EACH ROW
    WHEN (NEW.num_running > OLD.num_running
          OR OLD.state IS DISTINCT FROM NEW.state
          OR OLD.max_active_runs IS DISTINCT FROM NEW.max_active_runs
          OR OLD.pool IS DISTINCT FROM NEW.pool
          OR (OLD.num_queued <= OLD.num_blocked AND NEW.num_queued > NEW.num_blocked)
          OR (OLD.num_running >= OLD.max_active_runs AND NEW.num_running < NEW.max_active_runs))
    EXECUTE FUNCTION backfill_clocks();

-- +goose StatementBegin
-- 00034's counters, with the blocked runs.
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
               coalesce(sum(delta) FILTER (WHERE state = 'canceled'), 0) AS canceled,
               coalesce(sum(delta) FILTER (WHERE blocked), 0)            AS blocked
        FROM (
            SELECT backfill_id, state, state = 'queued' AND blocked_by > 0 AS blocked, -count(*) AS delta
            FROM old_rows WHERE backfill_id IS NOT NULL GROUP BY 1, 2, 3
            UNION ALL
            SELECT backfill_id, state, state = 'queued' AND blocked_by > 0 AS blocked, count(*) AS delta
            FROM new_rows WHERE backfill_id IS NOT NULL GROUP BY 1, 2, 3
        ) moves
        GROUP BY backfill_id
        ORDER BY backfill_id
    LOOP
        -- A change that moves no counter (a heartbeat) touches no backfill row.
        CONTINUE WHEN d.queued = 0 AND d.running = 0 AND d.success = 0 AND d.failed = 0 AND d.canceled = 0
            AND d.blocked = 0;
        IF d.success > 0 THEN
            UPDATE backfills SET
                num_queued   = num_queued   + d.queued,
                num_running  = num_running  + d.running,
                num_success  = num_success  + d.success,
                num_failed   = num_failed   + d.failed,
                num_canceled = num_canceled + d.canceled,
                num_blocked  = num_blocked  + d.blocked,
                (eta_last, eta_buckets) = (SELECT r.new_last, r.new_buckets
                    FROM eta_record(eta_last, eta_buckets, pace_since, d.success::integer, backfill_now()) r)
            WHERE id = d.backfill_id AND state IN ('running', 'paused', 'canceling');
        ELSE
            UPDATE backfills SET
                num_queued   = num_queued   + d.queued,
                num_running  = num_running  + d.running,
                num_success  = num_success  + d.success,
                num_failed   = num_failed   + d.failed,
                num_canceled = num_canceled + d.canceled,
                num_blocked  = num_blocked  + d.blocked
            WHERE id = d.backfill_id AND state IN ('running', 'paused', 'canceling');
        END IF;
    END LOOP;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- 00031's document, with the group.
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
        'priority', coalesce(b.priority, 0), 'group_id', b.group_id,
        'is_paused', b.state = 'paused',
        'progress', jsonb_build_object(
            'total', b.num_queued + b.num_running + b.num_success + b.num_failed
                     + b.num_canceled + b.num_skipped,
            'queued', b.num_queued, 'running', b.num_running, 'success', b.num_success,
            'failed', b.num_failed, 'canceled', b.num_canceled, 'skipped', b.num_skipped,
            'blocked', coalesce(b.num_blocked, 0)))
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- A group as GET /backfill_groups/{id} answers it (handlers keep the two in step; the spec
-- test checks both).
CREATE FUNCTION backfill_group_api_json(group_id bigint) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_build_object(
        'id', g.id, 'dag_ids', to_jsonb(g.dag_ids), 'include_downstream', g.include_downstream,
        'from_date', api_timestamp(g.from_date), 'to_date', api_timestamp(g.to_date),
        'run_backwards', g.run_backwards, 'dag_run_conf', g.dag_run_conf,
        'reprocess_behavior', g.reprocess_behavior, 'max_active_runs', g.max_active_runs,
        'max_failed_runs', g.max_failed_runs, 'description', g.description, 'pool', g.pool,
        'priority', g.priority, 'code_ref', g.code_ref, 'created_by', g.created_by,
        'reason', g.reason, 'state', g.state, 'pause_reason', g.pause_reason,
        'plan_hash', g.plan_hash, 'dependencies', g.num_dependencies,
        'created_at', api_timestamp(g.created_at), 'updated_at', api_timestamp(g.updated_at),
        'completed_at', api_timestamp(g.completed_at),
        'members', coalesce(m.members, '[]'::jsonb),
        'progress', jsonb_build_object(
            'total', coalesce(m.total, 0), 'queued', coalesce(m.queued, 0),
            'running', coalesce(m.running, 0), 'success', coalesce(m.success, 0),
            'failed', coalesce(m.failed, 0), 'canceled', coalesce(m.canceled, 0),
            'skipped', coalesce(m.skipped, 0), 'blocked', coalesce(m.blocked, 0)))
    FROM backfill_groups g
    LEFT JOIN LATERAL (
        SELECT jsonb_agg(jsonb_build_object(
                   'dag_id', b.dag_id, 'backfill_id', b.id, 'depth', b.group_depth, 'state', b.state,
                   'progress', jsonb_build_object(
                       'total', b.num_queued + b.num_running + b.num_success + b.num_failed
                                + b.num_canceled + b.num_skipped,
                       'queued', b.num_queued, 'running', b.num_running, 'success', b.num_success,
                       'failed', b.num_failed, 'canceled', b.num_canceled,
                       'skipped', b.num_skipped, 'blocked', b.num_blocked))
                   ORDER BY b.group_depth, b.dag_id) AS members,
               sum(b.num_queued + b.num_running + b.num_success + b.num_failed + b.num_canceled + b.num_skipped) AS total,
               sum(b.num_queued) AS queued, sum(b.num_running) AS running, sum(b.num_success) AS success,
               sum(b.num_failed) AS failed, sum(b.num_canceled) AS canceled, sum(b.num_skipped) AS skipped,
               sum(b.num_blocked) AS blocked
        FROM backfills b WHERE b.group_id = g.id) m ON true
    WHERE g.id = group_id
$$;
-- +goose StatementEnd

ALTER TABLE events ALTER COLUMN backfill_id DROP NOT NULL;
ALTER TABLE events ALTER COLUMN dag_id DROP NOT NULL;
ALTER TABLE events ADD COLUMN group_id bigint;
ALTER TABLE events ADD CONSTRAINT events_of_a_backfill_or_a_group CHECK ((backfill_id IS NULL) <> (group_id IS NULL));

-- +goose StatementBegin
CREATE FUNCTION backfill_group_events_write() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    kind text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        kind := 'backfill_group.created';
    ELSE
        kind := CASE
            WHEN NEW.state = 'paused' THEN 'backfill_group.paused'
            WHEN NEW.state = 'running' AND OLD.state = 'paused' THEN 'backfill_group.unpaused'
            WHEN NEW.state IN ('canceling', 'succeeded', 'failed', 'canceled') THEN 'backfill_group.' || NEW.state
        END;
        -- A later statement of this transaction changed the state again: its firing reports it.
        IF kind IS NULL OR NOT EXISTS (SELECT 1 FROM backfill_groups g WHERE g.id = NEW.id AND g.state = NEW.state) THEN
            RETURN NULL;
        END IF;
    END IF;
    INSERT INTO events (type, group_id, occurred_at, data)
    VALUES (kind, NEW.id, NEW.updated_at,
            jsonb_build_object('group', backfill_group_api_json(NEW.id))
            || CASE WHEN kind = 'backfill_group.paused'
                    THEN jsonb_build_object('reason', coalesce(NEW.pause_reason, 'user'))
                    ELSE '{}'::jsonb END);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE CONSTRAINT TRIGGER backfill_groups_events_on_insert AFTER INSERT ON backfill_groups
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION backfill_group_events_write();
CREATE CONSTRAINT TRIGGER backfill_groups_events_on_state AFTER UPDATE ON backfill_groups
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION backfill_group_events_write();

-- +goose Down
DROP TRIGGER backfill_groups_events_on_state ON backfill_groups;
DROP TRIGGER backfill_groups_events_on_insert ON backfill_groups;
DROP FUNCTION backfill_group_events_write();
DELETE FROM events WHERE group_id IS NOT NULL;
ALTER TABLE events DROP CONSTRAINT events_of_a_backfill_or_a_group;
ALTER TABLE events DROP COLUMN group_id;
ALTER TABLE events ALTER COLUMN dag_id SET NOT NULL;
ALTER TABLE events ALTER COLUMN backfill_id SET NOT NULL;
DROP FUNCTION backfill_group_api_json(bigint);
DROP TRIGGER backfills_clocks ON backfills;
CREATE TRIGGER backfills_clocks BEFORE UPDATE ON backfills
    FOR EACH ROW
    WHEN (NEW.num_running > OLD.num_running
          OR OLD.state IS DISTINCT FROM NEW.state
          OR OLD.max_active_runs IS DISTINCT FROM NEW.max_active_runs
          OR OLD.pool IS DISTINCT FROM NEW.pool
          OR (OLD.num_queued = 0 AND NEW.num_queued > 0)
          OR (OLD.num_running >= OLD.max_active_runs AND NEW.num_running < NEW.max_active_runs))
    EXECUTE FUNCTION backfill_clocks();
-- The functions as 00031 and 00034 left them.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION backfill_clocks() RETURNS trigger
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
-- +goose StatementBegin
-- The counters of 00004 (00013's form), with the successes' buckets.
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
        IF d.success > 0 THEN
            UPDATE backfills SET
                num_queued   = num_queued   + d.queued,
                num_running  = num_running  + d.running,
                num_success  = num_success  + d.success,
                num_failed   = num_failed   + d.failed,
                num_canceled = num_canceled + d.canceled,
                (eta_last, eta_buckets) = (SELECT r.new_last, r.new_buckets
                    FROM eta_record(eta_last, eta_buckets, pace_since, d.success::integer, backfill_now()) r)
            WHERE id = d.backfill_id AND state IN ('running', 'paused', 'canceling');
        ELSE
            UPDATE backfills SET
                num_queued   = num_queued   + d.queued,
                num_running  = num_running  + d.running,
                num_success  = num_success  + d.success,
                num_failed   = num_failed   + d.failed,
                num_canceled = num_canceled + d.canceled
            WHERE id = d.backfill_id AND state IN ('running', 'paused', 'canceling');
        END IF;
    END LOOP;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
ALTER TABLE backfills DROP CONSTRAINT backfills_blocked_within_queued;
ALTER TABLE backfills DROP COLUMN num_blocked;
