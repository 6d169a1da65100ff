-- A run its system deferred: a report may hand a run back with "try again after n seconds".
--
-- dag_runs.not_before holds that time. The claim's run walks skip a queued run whose
-- not_before is still ahead of backfill_now(), so the deferral holds exactly, on every
-- replica, by the one clock. It is meaningful only on a queued run: a trigger clears it
-- whenever a run leaves `queued` (a claim, a cancel, a report that marks it), and a CHECK
-- keeps it so, so that a deferred run that is later reprocessed is not held by a stale time.
-- The trigger's WHEN admits only rows that carry a time, so bulk changes of ordinary runs
-- pay one cheap test per row.

-- +goose Up
ALTER TABLE dag_runs ADD COLUMN not_before timestamptz;

-- +goose StatementBegin
CREATE FUNCTION dag_runs_not_before_clear() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.not_before := NULL;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER dag_runs_not_before_clear BEFORE UPDATE OF state ON dag_runs
    FOR EACH ROW WHEN (NEW.not_before IS NOT NULL AND NEW.state <> 'queued')
    EXECUTE FUNCTION dag_runs_not_before_clear();

ALTER TABLE dag_runs ADD CONSTRAINT dag_runs_not_before_only_queued
    CHECK (not_before IS NULL OR state = 'queued');

-- +goose Down
ALTER TABLE dag_runs DROP CONSTRAINT dag_runs_not_before_only_queued;
DROP TRIGGER dag_runs_not_before_clear ON dag_runs;
DROP FUNCTION dag_runs_not_before_clear();
ALTER TABLE dag_runs DROP COLUMN not_before;
