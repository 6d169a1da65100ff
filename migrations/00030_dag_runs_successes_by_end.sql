-- The dry runs' estimate reads a DAG's last 20 successful runs (repo.backfillEstimate).
--
-- Without an index the read walks every run of the DAG, a cost that grows with its history;
-- this one makes it 20 index entries at any size. It is partial, so it costs a write only when
-- a run becomes success (one entry), and nothing for the runs that are queued, running or
-- failed, which are most of the churn.

-- +goose Up
CREATE INDEX dag_runs_successes_by_end ON dag_runs (dag_id, end_date) WHERE state = 'success';

-- +goose Down
DROP INDEX dag_runs_successes_by_end;
