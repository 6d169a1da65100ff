-- Backfill groups (contract: "Backfilling a pipeline"): one lifecycle over several DAGs and one
-- window. Each DAG of a group gets an ordinary member backfill (backfills.group_id); the runs
-- of the members wait for each other through run-to-run dependencies, all written in the
-- creating transaction.
--
-- A run is blocked while blocked_by (how many of the runs it waits for have not succeeded) is
-- above zero, and a claim never hands it out. The claim walks a backfill's queued runs through
-- dag_runs_unfinished_by_backfill, which now leads with blocked_by after backfill_id: the
-- claimable runs (blocked_by = 0) are one range of it in sort_ordinal order, and blocked runs
-- cost a claim nothing however many wait.
--
-- What follows a run's end is a trigger, so that every path that ends a run (a report, a lease
-- that expires at MAX_ATTEMPTS, a release or a deferral of a canceling backfill's run, an
-- operator's SQL) does it in the same transaction: a success takes one off blocked_by of each
-- run that waited for it; a failure or a cancel cancels every run that waits on it, directly or
-- transitively, with note 'upstream_failed: <dag_id> <run_id>'.

-- +goose Up
CREATE TABLE backfill_groups (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- The DAGs asked for, as asked; the members are these and those include_downstream adds.
    dag_ids            text[]      NOT NULL,
    include_downstream text        NOT NULL CHECK (include_downstream IN ('none', 'direct', 'all')),
    from_date          timestamptz NOT NULL,
    to_date            timestamptz NOT NULL,
    run_backwards      boolean     NOT NULL,
    dag_run_conf       jsonb,
    reprocess_behavior text        NOT NULL CHECK (reprocess_behavior IN ('none', 'failed', 'completed')),
    max_active_runs    integer     NOT NULL CHECK (max_active_runs BETWEEN 1 AND 1000),
    max_failed_runs    integer     CHECK (max_failed_runs >= 1),
    description        text,
    pool               text,
    priority           smallint    NOT NULL DEFAULT 0 CHECK (priority BETWEEN -10 AND 10),
    code_ref           text        CHECK (char_length(code_ref) BETWEEN 1 AND 200),
    created_by         text        CHECK (char_length(created_by) BETWEEN 1 AND 200),
    reason             text        CHECK (char_length(reason) <= 500),
    state              text        NOT NULL CHECK (state IN ('running', 'paused', 'canceling', 'succeeded', 'failed', 'canceled')),
    pause_reason       text        CHECK (pause_reason IN ('user', 'failure_budget')),
    plan_hash          text        NOT NULL,
    -- The run-to-run dependencies written at creation.
    num_dependencies   bigint      NOT NULL,
    -- Failed runs across the members: the group's failure budget counts these.
    num_failed         integer     NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    completed_at       timestamptz,
    CONSTRAINT backfill_groups_pause_reason_iff_paused CHECK ((pause_reason IS NOT NULL) = (state = 'paused')),
    CONSTRAINT backfill_groups_completed_at_iff_terminal CHECK ((completed_at IS NOT NULL) = (state IN ('succeeded', 'failed', 'canceled'))),
    CONSTRAINT backfill_groups_window_valid CHECK (from_date <= to_date)
);
-- The sweep finalizes active groups; their number, not history, bounds its read.
CREATE INDEX backfill_groups_active_by_id ON backfill_groups (id) WHERE state IN ('running', 'paused', 'canceling');

ALTER TABLE backfills ADD COLUMN group_id bigint REFERENCES backfill_groups (id);
-- The member's distance from the top of the group's graph: 0 for a DAG with no upstream in it.
ALTER TABLE backfills ADD COLUMN group_depth smallint;
ALTER TABLE backfills ADD CONSTRAINT backfills_group_depth_iff_member CHECK ((group_id IS NULL) = (group_depth IS NULL));
CREATE INDEX backfills_by_group ON backfills (group_id, id) WHERE group_id IS NOT NULL;

ALTER TABLE dag_runs ADD COLUMN blocked_by integer NOT NULL DEFAULT 0;
ALTER TABLE dag_runs ADD CONSTRAINT dag_runs_blocked_by_not_negative CHECK (blocked_by >= 0);

DROP INDEX dag_runs_unfinished_by_backfill;
CREATE INDEX dag_runs_unfinished_by_backfill ON dag_runs (backfill_id, blocked_by, backfill_sort_ordinal)
    WHERE state IN ('queued', 'running');

-- A slot's record shows how many runs its queued run still waits for while the backfill owns
-- it, 0 otherwise (a run that started or ended waits for nothing), so that a terminal
-- backfill's record never changes again.
CREATE OR REPLACE VIEW backfill_slot_records AS
SELECT s.backfill_id, s.sort_ordinal, s.logical_date, s.dag_run_id, s.exception_reason, r.run_id,
       nx.backfill_id IS NOT NULL AS taken_over,
       CASE WHEN nx.backfill_id IS NULL THEN r.state ELSE nx.prior_state END AS state,
       CASE WHEN nx.backfill_id IS NULL THEN r.attempt ELSE nx.prior_attempt END AS attempt,
       CASE WHEN nx.backfill_id IS NULL THEN r.note ELSE nx.prior_note END AS note,
       CASE WHEN s.dag_run_id IS NULL THEN NULL
            WHEN nx.backfill_id IS NULL AND r.state = 'queued' THEN r.blocked_by
            ELSE 0 END AS blocked_by
FROM backfill_dag_runs s
LEFT JOIN dag_runs r ON r.id = s.dag_run_id
LEFT JOIN backfill_dag_runs nx ON nx.dag_run_id = s.dag_run_id AND nx.prior_backfill_id = s.backfill_id;


-- run_id waits for upstream_run_id. The primary key finds what waits for a run that ends; the
-- index by run_id finds what a run waits for (a reprocess drops a taken run's old edges).
-- No foreign keys: a group writes up to MAX_RUN_DEPENDENCIES of these in its creating
-- transaction, and a check per row would double that cost. Run ids are never reused, and a
-- DAG's delete removes the edges of its runs.
CREATE TABLE dag_run_dependencies (
    upstream_run_id bigint NOT NULL,
    run_id          bigint NOT NULL,
    group_id        bigint NOT NULL,
    PRIMARY KEY (upstream_run_id, run_id)
);
CREATE INDEX dag_run_dependencies_by_run ON dag_run_dependencies (run_id);

-- A group's creation takes an Idempotency-Key like a backfill's.
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_operation_valid,
    ADD CONSTRAINT idempotency_keys_operation_valid
        CHECK (operation IN ('backfill', 'claim', 'webhook', 'dag_run', 'backfill_group'));

-- +goose StatementBegin
CREATE FUNCTION dag_runs_follow_dependencies() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- The cascade below cancels the whole transitive set in one statement: its own rows
    -- have nothing left to follow. A group's cancel sets this too, for every member at once.
    IF current_setting('backfill.cascade', true) = 'on' THEN
        RETURN NULL;
    END IF;
    IF NEW.state = 'success' THEN
        -- Lock the waiting runs in id order first: two upstreams of one run (a diamond's
        -- sink) that succeed together then queue on it instead of deadlocking.
        PERFORM 1 FROM dag_runs r
        WHERE r.id IN (SELECT d.run_id FROM dag_run_dependencies d WHERE d.upstream_run_id = NEW.id)
          AND r.state = 'queued'
        ORDER BY r.id FOR NO KEY UPDATE;
        UPDATE dag_runs r SET blocked_by = r.blocked_by - 1
        WHERE r.id IN (SELECT d.run_id FROM dag_run_dependencies d WHERE d.upstream_run_id = NEW.id)
          AND r.state = 'queued' AND r.blocked_by > 0;
        RETURN NULL;
    END IF;
    PERFORM set_config('backfill.cascade', 'on', true);
    -- Every dependent of one run is estimated at the edges' fan-out squared (a run that
    -- 30,000 wait for: 450 million rows), past jit_above_cost: compiling took 0.3 s of a
    -- 0.7 s cascade. The setting lasts to the end of the ending transaction.
    PERFORM set_config('jit', 'off', true);
    WITH RECURSIVE down (id) AS (
        SELECT d.run_id FROM dag_run_dependencies d WHERE d.upstream_run_id = NEW.id
        UNION
        SELECT d.run_id FROM down JOIN dag_run_dependencies d ON d.upstream_run_id = down.id
    )
    UPDATE dag_runs r SET state = 'canceled', end_date = backfill_now(),
        note = 'upstream_failed: ' || NEW.dag_id || ' ' || NEW.run_id
    FROM down
    WHERE r.id = down.id AND r.state = 'queued';
    PERFORM set_config('backfill.cascade', 'off', true);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER dag_runs_follow_dependencies AFTER UPDATE OF state ON dag_runs
    FOR EACH ROW
    WHEN (OLD.state IN ('queued', 'running') AND NEW.state IN ('success', 'failed', 'canceled'))
    EXECUTE FUNCTION dag_runs_follow_dependencies();

-- The group's failure budget: a member's failed runs count on the group row, under its lock;
-- the run that reaches max_failed_runs pauses the group and every running member in its own
-- transaction, as a backfill's budget does.
-- +goose StatementBegin
CREATE FUNCTION backfill_groups_count_failures() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    g backfill_groups;
BEGIN
    UPDATE backfill_groups SET num_failed = num_failed + (NEW.num_failed - OLD.num_failed)
    WHERE id = NEW.group_id
    RETURNING * INTO g;
    IF g.state = 'running' AND g.max_failed_runs IS NOT NULL AND g.num_failed >= g.max_failed_runs THEN
        UPDATE backfill_groups SET state = 'paused', pause_reason = 'failure_budget',
            updated_at = backfill_change_time(updated_at)
        WHERE id = g.id;
        UPDATE backfills SET state = 'paused', pause_reason = 'failure_budget',
            updated_at = backfill_change_time(updated_at)
        WHERE group_id = g.id AND state = 'running';
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER backfills_count_group_failures AFTER UPDATE OF num_failed ON backfills
    FOR EACH ROW
    WHEN (NEW.group_id IS NOT NULL AND NEW.num_failed > OLD.num_failed)
    EXECUTE FUNCTION backfill_groups_count_failures();

-- +goose Down
DELETE FROM idempotency_keys WHERE operation = 'backfill_group';
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_operation_valid,
    ADD CONSTRAINT idempotency_keys_operation_valid
        CHECK (operation IN ('backfill', 'claim', 'webhook', 'dag_run'));
DROP TRIGGER backfills_count_group_failures ON backfills;
DROP FUNCTION backfill_groups_count_failures();
DROP TRIGGER dag_runs_follow_dependencies ON dag_runs;
DROP FUNCTION dag_runs_follow_dependencies();
DROP TABLE dag_run_dependencies;
DROP VIEW backfill_slot_records;
CREATE VIEW backfill_slot_records AS
SELECT s.backfill_id, s.sort_ordinal, s.logical_date, s.dag_run_id, s.exception_reason, r.run_id,
       nx.backfill_id IS NOT NULL AS taken_over,
       CASE WHEN nx.backfill_id IS NULL THEN r.state ELSE nx.prior_state END AS state,
       CASE WHEN nx.backfill_id IS NULL THEN r.attempt ELSE nx.prior_attempt END AS attempt,
       CASE WHEN nx.backfill_id IS NULL THEN r.note ELSE nx.prior_note END AS note
FROM backfill_dag_runs s
LEFT JOIN dag_runs r ON r.id = s.dag_run_id
LEFT JOIN backfill_dag_runs nx ON nx.dag_run_id = s.dag_run_id AND nx.prior_backfill_id = s.backfill_id;
DROP INDEX dag_runs_unfinished_by_backfill;
CREATE INDEX dag_runs_unfinished_by_backfill ON dag_runs (backfill_id, backfill_sort_ordinal)
    WHERE state IN ('queued', 'running');
ALTER TABLE dag_runs DROP COLUMN blocked_by;
ALTER TABLE backfills DROP COLUMN group_depth;
ALTER TABLE backfills DROP COLUMN group_id;
DROP TABLE backfill_groups;
