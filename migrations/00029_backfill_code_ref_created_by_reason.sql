-- What a backfill runs, who asked for it and why: code_ref, created_by, reason.
--
-- code_ref (an image digest, a git SHA) is set at creation and never changed: claims answer it
-- with each run, and executors give it to programs, so a run always runs the code its backfill
-- was created for. created_by is the principal that created the backfill (the X-Actor header
-- where the service has no per-user identity) and reason why (a ticket). All three are
-- written only by the creating transaction; none is a setting, so the settings trigger that
-- writes backfill.updated does not look at them.
--
-- backfills' row type is events.snapshot's type: the columns are added without defaults
-- (00015). The events render a snapshot through backfill_api_json, which spells every field
-- out, so it is extended here; older snapshots have the columns null, as those backfills do.

-- +goose Up
ALTER TABLE backfills ADD COLUMN code_ref text;
ALTER TABLE backfills ADD COLUMN created_by text;
ALTER TABLE backfills ADD COLUMN reason text;
ALTER TABLE backfills ADD CONSTRAINT backfills_code_ref_length
    CHECK (char_length(code_ref) BETWEEN 1 AND 200);
ALTER TABLE backfills ADD CONSTRAINT backfills_created_by_length
    CHECK (char_length(created_by) BETWEEN 1 AND 200);
ALTER TABLE backfills ADD CONSTRAINT backfills_reason_length
    CHECK (char_length(reason) <= 500);

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
        'is_paused', b.state = 'paused',
        'progress', jsonb_build_object(
            'total', b.num_queued + b.num_running + b.num_success + b.num_failed
                     + b.num_canceled + b.num_skipped,
            'queued', b.num_queued, 'running', b.num_running, 'success', b.num_success,
            'failed', b.num_failed, 'canceled', b.num_canceled, 'skipped', b.num_skipped))
$$;
-- +goose StatementEnd
ALTER TABLE backfills DROP COLUMN reason;
ALTER TABLE backfills DROP COLUMN created_by;
ALTER TABLE backfills DROP COLUMN code_ref;
