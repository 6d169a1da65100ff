-- A pool's pace: at most rate_runs starts per rate_per ('second', 'minute' or 'hour'),
-- exactly, across replicas.
--
-- The pace is a sliding-window log rather than a token bucket: pools.rate_starts holds the
-- start times of the pool's claims within the last period, and a
-- claim starts at most rate_runs minus those still inside the window (t > now - period). A
-- token bucket refilled continuously lets rate_runs start at once and then one more every
-- period/rate_runs, so a window of one period can hold almost twice rate_runs starts; the log
-- holds the promise a system behind the pool is sold ("5 a minute") in every window, with
-- bursts up to rate_runs. Its cost is bounded by rate_runs (at most 1,000 timestamps).
--
-- The claim reads and writes the log under the pool row lock it already takes for slots
-- (00013), in the same statement, so concurrent claimers on any replica see each other's
-- starts: the log is exact because every claim that adds to it holds the lock until it commits.

-- +goose Up
ALTER TABLE pools
    ADD COLUMN rate_runs   integer,
    ADD COLUMN rate_per    text,
    ADD COLUMN rate_starts timestamptz[] NOT NULL DEFAULT '{}',
    ADD CONSTRAINT pools_rate_valid CHECK (
        (rate_runs IS NULL AND rate_per IS NULL)
        OR (rate_runs BETWEEN 1 AND 1000 AND rate_per IN ('second', 'minute', 'hour')));

-- +goose StatementBegin
-- The length of a pace's period: one rate_per.
CREATE FUNCTION pool_rate_period(per text) RETURNS interval
LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT ('1 ' || per)::interval $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- How many more runs the pool may start at `at` under its pace (NULL: no pace).
CREATE FUNCTION pool_rate_room(runs integer, per text, starts timestamptz[], at timestamptz) RETURNS integer
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT runs - (SELECT count(*)::int FROM unnest(starts) s WHERE s > at - pool_rate_period(per))
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- When the pool may start a run again while its pace is used up at `at` (NULL otherwise):
-- when the oldest start inside the window leaves it.
CREATE FUNCTION pool_next_start(runs integer, per text, starts timestamptz[], at timestamptz) RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    -- With room r <= 0 (more starts in the window than the pace allows, after it was
    -- lowered), 1 - r of them must leave: the (1 - r)-th oldest sets the time.
    SELECT CASE WHEN x.r <= 0 THEN
        (SELECT s FROM unnest(starts) s WHERE s > at - x.p ORDER BY s OFFSET -x.r LIMIT 1) + x.p
    END
    FROM (SELECT pool_rate_room(runs, per, starts, at) AS r, pool_rate_period(per) AS p) x
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION pool_next_start(integer, text, timestamptz[], timestamptz);
DROP FUNCTION pool_rate_room(integer, text, timestamptz[], timestamptz);
DROP FUNCTION pool_rate_period(text);
ALTER TABLE pools
    DROP CONSTRAINT pools_rate_valid,
    DROP COLUMN rate_starts,
    DROP COLUMN rate_per,
    DROP COLUMN rate_runs;
