-- The earliest deferral still ahead, for claims that wait: a waiting claim that found nothing
-- sets its next try at the earliest not_before of a queued run (or a pace's next start)
-- instead of its next one-second poll. Only deferred runs carry a not_before, so the index
-- holds those alone and costs ordinary runs nothing.

-- +goose Up
CREATE INDEX dag_runs_deferred_until ON dag_runs (not_before) WHERE not_before IS NOT NULL;

-- +goose Down
DROP INDEX dag_runs_deferred_until;
