-- A reprocessed run keeps counting its attempts.
--
-- A backfill that takes a run over (a reprocess, a retry) starts it at the attempt after the
-- last one it had, so a program can tell that the slot ran before. MAX_ATTEMPTS still bounds
-- the attempts of one go at the run: first_attempt is the attempt that go started at (1 for a
-- new run), and an expired lease fails the run once attempt - first_attempt + 1 reaches
-- MAX_ATTEMPTS (repo.SweepExpireLeases). Without it a run retried at attempt 4 under the
-- default MAX_ATTEMPTS of 3 would fail on its first expired lease.
--
-- A constant default: PostgreSQL 11+ adds the column without rewriting dag_runs.

-- +goose Up
ALTER TABLE dag_runs ADD COLUMN first_attempt integer NOT NULL DEFAULT 1;
ALTER TABLE dag_runs ADD CONSTRAINT dag_runs_first_attempt_valid
    CHECK (first_attempt >= 1 AND first_attempt <= attempt) NOT VALID;
-- NOT VALID: existing rows hold 1 <= attempt already, and validating them would scan every
-- run under the migration's lock; every write from now on is checked.

-- +goose Down
ALTER TABLE dag_runs DROP COLUMN first_attempt;
