-- Fair claims. A claim without dag_id must reach every owner of a claimable run (a DAG for its
-- runs outside backfills, a backfill for its own) at a cost that does not grow with the owners
-- that have nothing to hand out: idle ones, paused ones and ones already at max_active_runs.
-- Before this, a claim read 64 candidate DAGs that merely had queued runs, saturated or not, so
-- the 65th claim could come back empty while runs were still claimable.
--
-- Each owner row now says whether it can hand out a run right now (`claimable`,
-- `manual_claimable`), and a partial index lists exactly those rows in claim order. A claim
-- walks that index and locks the first row it finds; the lock re-reads the row at its newest
-- version and re-checks the flag (READ COMMITTED re-evaluates the predicate on the locked row),
-- so a row that filled up meanwhile is passed over for the next one.
--
-- The flags are stored generated columns rather than index predicates over the counters: an
-- UPDATE is HOT (no new index entries) only when no indexed column, predicate columns included,
-- changes value. Counters change on every claim and report; the flags change only when an owner
-- becomes or stops being claimable, so the counter updates of a busy owner stay HOT.

-- +goose Up

-- Runs outside backfills (backfill_id IS NULL) of each DAG, queued and running, kept exact in
-- the same transaction as every change of such a run by the row triggers below. They are the
-- DAG's counterpart of backfills.num_queued/num_running, for the DAG's own max_active_runs.
ALTER TABLE dags
    ADD COLUMN num_manual_queued  integer NOT NULL DEFAULT 0,
    ADD COLUMN num_manual_running integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT dags_manual_counts_not_negative CHECK (LEAST(num_manual_queued, num_manual_running) >= 0);

ALTER TABLE dags ADD COLUMN manual_claimable boolean NOT NULL
    GENERATED ALWAYS AS (NOT is_paused AND num_manual_queued > 0 AND num_manual_running < max_active_runs) STORED;

ALTER TABLE backfills ADD COLUMN claimable boolean NOT NULL
    GENERATED ALWAYS AS (state = 'running' AND num_queued > 0 AND num_running < max_active_runs) STORED;

-- The claim's walks: DAGs with a claimable run outside backfills in dag_id order, backfills
-- with a claimable run oldest first. Each holds only owners that can hand out a run.
CREATE INDEX dags_manual_claimable ON dags (dag_id) WHERE manual_claimable;
CREATE INDEX backfills_claimable ON backfills (id) WHERE claimable;

-- +goose StatementBegin
-- Moves a DAG's manual counters for one run that entered or left `queued`/`running` outside
-- backfills. A row trigger whose WHEN clause admits only such runs: bulk changes of backfill
-- runs (creation, cancel, reprocess) never call it, and cost one cheap WHEN test per row. A run
-- never changes dag_id, so one UPDATE of one DAG row carries both sides of a move.
CREATE FUNCTION dag_runs_manual_counts() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    dq integer := 0;
    dr integer := 0;
BEGIN
    IF NEW.backfill_id IS NULL THEN
        dq := dq + (NEW.state = 'queued')::int;
        dr := dr + (NEW.state = 'running')::int;
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.backfill_id IS NULL THEN
        dq := dq - (OLD.state = 'queued')::int;
        dr := dr - (OLD.state = 'running')::int;
    END IF;
    IF dq <> 0 OR dr <> 0 THEN
        UPDATE dags SET num_manual_queued = num_manual_queued + dq, num_manual_running = num_manual_running + dr
        WHERE dag_id = NEW.dag_id;
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER dag_runs_manual_counts_insert AFTER INSERT ON dag_runs
    FOR EACH ROW WHEN (NEW.backfill_id IS NULL AND NEW.state IN ('queued', 'running'))
    EXECUTE FUNCTION dag_runs_manual_counts();

CREATE TRIGGER dag_runs_manual_counts_update AFTER UPDATE OF state, backfill_id ON dag_runs
    FOR EACH ROW WHEN (
        (OLD.state IS DISTINCT FROM NEW.state OR OLD.backfill_id IS DISTINCT FROM NEW.backfill_id)
        AND ((OLD.backfill_id IS NULL AND OLD.state IN ('queued', 'running'))
          OR (NEW.backfill_id IS NULL AND NEW.state IN ('queued', 'running'))))
    EXECUTE FUNCTION dag_runs_manual_counts();

-- Count what exists. CREATE TRIGGER above locked dag_runs against writes until this
-- transaction commits, so no run can change between this count and the triggers taking over.
UPDATE dags d SET num_manual_queued = c.queued, num_manual_running = c.running
FROM (
    SELECT dag_id, count(*) FILTER (WHERE state = 'queued') AS queued,
           count(*) FILTER (WHERE state = 'running') AS running
    FROM dag_runs
    WHERE backfill_id IS NULL AND state IN ('queued', 'running')
    GROUP BY dag_id
) c
WHERE d.dag_id = c.dag_id;

-- +goose Down
DROP TRIGGER dag_runs_manual_counts_update ON dag_runs;
DROP TRIGGER dag_runs_manual_counts_insert ON dag_runs;
DROP FUNCTION dag_runs_manual_counts();
DROP INDEX backfills_claimable;
DROP INDEX dags_manual_claimable;
ALTER TABLE backfills DROP COLUMN claimable;
ALTER TABLE dags DROP COLUMN manual_claimable;
ALTER TABLE dags
    DROP CONSTRAINT dags_manual_counts_not_negative,
    DROP COLUMN num_manual_running,
    DROP COLUMN num_manual_queued;
