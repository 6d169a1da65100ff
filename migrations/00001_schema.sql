-- The whole data model. State rules live here as named constraints so that no code path,
-- however it is written, can store a state the contract forbids.

-- +goose Up
CREATE TABLE dags (
    dag_id          text        PRIMARY KEY,
    schedule        text        NOT NULL,
    timezone        text        NOT NULL,
    max_active_runs integer     NOT NULL,
    is_paused       boolean     NOT NULL,
    description     text,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    CONSTRAINT dags_dag_id_valid CHECK (dag_id ~ '^[A-Za-z0-9_.-]{1,250}$'),
    CONSTRAINT dags_max_active_runs_valid CHECK (max_active_runs BETWEEN 1 AND 1000)
);

CREATE TABLE backfills (
    id                 bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dag_id             text        NOT NULL REFERENCES dags (dag_id),
    from_date          timestamptz NOT NULL,
    to_date            timestamptz NOT NULL,
    run_backwards      boolean     NOT NULL,
    dag_run_conf       jsonb,
    reprocess_behavior text        NOT NULL,
    max_active_runs    integer     NOT NULL,
    description        text,
    state              text        NOT NULL,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    completed_at       timestamptz,
    -- Slot counts by run state, written by creation and then kept exact by the
    -- dag_runs_count_by_backfill trigger in the same transaction as every run change. They
    -- make a status read one primary-key lookup and let the sweep decide completion from
    -- this row alone.
    num_queued         integer     NOT NULL DEFAULT 0,
    num_running        integer     NOT NULL DEFAULT 0,
    num_success        integer     NOT NULL DEFAULT 0,
    num_failed         integer     NOT NULL DEFAULT 0,
    num_canceled       integer     NOT NULL DEFAULT 0,
    num_skipped        integer     NOT NULL DEFAULT 0,
    CONSTRAINT backfills_state_valid
        CHECK (state IN ('running', 'paused', 'canceling', 'succeeded', 'failed', 'canceled')),
    CONSTRAINT backfills_reprocess_behavior_valid
        CHECK (reprocess_behavior IN ('none', 'failed', 'completed')),
    CONSTRAINT backfills_max_active_runs_valid CHECK (max_active_runs BETWEEN 1 AND 1000),
    CONSTRAINT backfills_window_valid CHECK (from_date <= to_date),
    CONSTRAINT backfills_completed_at_iff_terminal
        CHECK ((completed_at IS NOT NULL) = (state IN ('succeeded', 'failed', 'canceled'))),
    -- The bug this service exists to remove: a backfill finished while it still has work.
    CONSTRAINT backfills_terminal_has_no_unfinished_runs
        CHECK (state NOT IN ('succeeded', 'failed', 'canceled') OR (num_queued = 0 AND num_running = 0)),
    CONSTRAINT backfills_counts_not_negative
        CHECK (LEAST(num_queued, num_running, num_success, num_failed, num_canceled, num_skipped) >= 0)
);

-- The only arbiter of "one active backfill per DAG": creation inserts blindly and maps the
-- 23505 this index raises to 409. It also serves the sweep's scan of active backfills.
CREATE UNIQUE INDEX backfills_one_active_per_dag ON backfills (dag_id)
    WHERE state IN ('running', 'paused', 'canceling');

-- Active backfills in id order: the sweep's and the claim's scan, whose cost must grow with
-- the active backfills, never with finished history.
CREATE INDEX backfills_active_by_id ON backfills (id) WHERE state IN ('running', 'paused', 'canceling');

CREATE INDEX backfills_by_dag ON backfills (dag_id, id);

CREATE TABLE dag_runs (
    id                    bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- No foreign key to dags: DAGs are never deleted and every insert path reads the DAG in
    -- its own transaction; the key would add about a quarter to a 100k-run creation.
    dag_id                text        NOT NULL,
    run_id                text        NOT NULL,
    logical_date          timestamptz NOT NULL,
    data_interval_start   timestamptz NOT NULL,
    data_interval_end     timestamptz NOT NULL,
    state                 text        NOT NULL,
    run_type              text        NOT NULL,
    -- No foreign key here, nor from backfill_dag_runs to backfills or dag_runs: these references
    -- are only written inside the creating transaction, next to the rows they point at. Under
    -- SERIALIZABLE a key check is a read that takes page-level predicate locks on the parent
    -- index's newest pages, the very pages every concurrent creation inserts into, so the keys
    -- made creations for unrelated DAGs abort each other (40001). They also cost a third of a
    -- 100,000-run creation.
    backfill_id           bigint,
    -- The run's place in its backfill's order, copied from its slot so that a claim walks one
    -- index in order instead of joining slots.
    backfill_sort_ordinal integer,
    conf                  jsonb,
    attempt               integer     NOT NULL,
    worker_id             text,
    queued_at             timestamptz,
    start_date            timestamptz,
    end_date              timestamptz,
    lease_expires_at      timestamptz,
    lease_seconds         integer,
    CONSTRAINT dag_runs_dag_id_logical_date_key UNIQUE (dag_id, logical_date),
    CONSTRAINT dag_runs_dag_id_run_id_key UNIQUE (dag_id, run_id),
    CONSTRAINT dag_runs_state_valid
        CHECK (state IN ('queued', 'running', 'success', 'failed', 'canceled')),
    CONSTRAINT dag_runs_run_type_valid CHECK (run_type IN ('manual', 'backfill')),
    CONSTRAINT dag_runs_backfill_has_ordinal
        CHECK ((backfill_id IS NULL) = (backfill_sort_ordinal IS NULL)),
    CONSTRAINT dag_runs_running_has_lease
        CHECK (state <> 'running' OR (worker_id IS NOT NULL AND lease_expires_at IS NOT NULL AND lease_seconds IS NOT NULL)),
    CONSTRAINT dag_runs_attempt_positive CHECK (attempt >= 1)
);

-- Unfinished runs of a backfill in claim order. The claim reads the first queued ones and the
-- cancel finds the queued ones without touching finished history.
CREATE INDEX dag_runs_unfinished_by_backfill ON dag_runs (backfill_id, backfill_sort_ordinal)
    WHERE state IN ('queued', 'running');

-- Unfinished runs outside backfills, for claims against a DAG's own max_active_runs.
CREATE INDEX dag_runs_unfinished_outside_backfills ON dag_runs (dag_id, logical_date)
    WHERE backfill_id IS NULL AND state IN ('queued', 'running');

-- The sweep's lease expiry probe.
CREATE INDEX dag_runs_lease_expiry ON dag_runs (lease_expires_at) WHERE state = 'running';

CREATE INDEX dag_runs_by_backfill ON dag_runs (backfill_id) WHERE backfill_id IS NOT NULL;

-- One row per slot of a backfill: created, reprocessed or skipped.
CREATE TABLE backfill_dag_runs (
    backfill_id      bigint      NOT NULL,
    sort_ordinal     integer     NOT NULL,
    logical_date     timestamptz NOT NULL,
    dag_run_id       bigint,
    exception_reason text,
    -- Set when a later backfill takes the run over, to the state the run had then, so that
    -- this (terminal) backfill's record keeps telling the truth.
    frozen_state     text,
    PRIMARY KEY (backfill_id, sort_ordinal),
    CONSTRAINT backfill_dag_runs_skipped_iff_no_run
        CHECK ((dag_run_id IS NULL) = (exception_reason IS NOT NULL)),
    CONSTRAINT backfill_dag_runs_frozen_state_valid
        CHECK (frozen_state IS NULL OR frozen_state IN ('success', 'failed', 'canceled'))
);

CREATE INDEX backfill_dag_runs_by_run ON backfill_dag_runs (dag_run_id) WHERE dag_run_id IS NOT NULL;

CREATE TABLE idempotency_keys (
    key          text        PRIMARY KEY,
    request_hash text        NOT NULL,
    backfill_id  bigint,
    created_at   timestamptz NOT NULL
);

CREATE INDEX idempotency_keys_by_age ON idempotency_keys (created_at);

-- +goose StatementBegin
-- Keeps the num_* counters of backfills exact for every run change after creation (claims,
-- reports, cancels, lease expiry). Creation writes its new backfill's counters itself, so a
-- run whose backfill_id changes (taken over by a new backfill) is ignored here on both sides:
-- the new backfill counted it when it was created, and the old, terminal backfill keeps
-- showing the state the run had when it was taken over. Each affected backfill is updated by
-- primary key; a change that moves no counter touches no backfill row.
CREATE FUNCTION dag_runs_count_by_backfill() RETURNS trigger
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

CREATE TRIGGER dag_runs_count_updates AFTER UPDATE ON dag_runs
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION dag_runs_count_by_backfill();

-- +goose Down
DROP TRIGGER dag_runs_count_updates ON dag_runs;
DROP FUNCTION dag_runs_count_by_backfill();
DROP TABLE idempotency_keys;
DROP TABLE backfill_dag_runs;
DROP TABLE dag_runs;
DROP TABLE backfills;
DROP TABLE dags;
