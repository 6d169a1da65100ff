-- The ETA from counters on the backfill row, so that a status read no longer queries dag_runs.
--
-- backfill_eta_seconds (00031, 00033) counted b's successes in its window (since pace_since,
-- at most the last 5 minutes, at most the newest 500) by reading them from
-- dag_runs_successes_by_end on every call: 0.03 ms of PostgreSQL's CPU for a backfill with no
-- success yet, up to 500 heap rows for a busy one, on every status read and every progress
-- message. Now the report's counter trigger, which already updates the backfill row, also
-- counts successes in 15-second buckets aligned to pace_since (eta_last: the newest bucket's
-- start; eta_buckets: the counts, oldest first, at most 21, 5 minutes and the current one),
-- and the ETA is arithmetic on the row, done by the service (domain.ETA). A bucket is counted whole and the span taken from its
-- start, so the count and the span always match: the rate is exact over a window at most
-- 15 seconds longer than before (the bucket that holds the window's start). A pace that restarts (pace_since moves, backfills_clocks)
-- leaves older buckets behind: a count from before it is never read.

-- +goose Up
ALTER TABLE backfills ADD COLUMN eta_last timestamptz;
ALTER TABLE backfills ADD COLUMN eta_buckets integer[];

-- +goose StatementBegin
-- eta_record adds n successes at `at` to a backfill's buckets: (last, buckets) as they become.
CREATE FUNCTION eta_record(last timestamptz, buckets integer[], pace_since timestamptz, n integer,
                           at timestamptz, OUT new_last timestamptz, OUT new_buckets integer[])
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    width constant interval := interval '15 seconds';
    keep constant integer := 21;
    shift integer;
BEGIN
    IF last IS NULL OR buckets IS NULL OR last < pace_since THEN
        new_last := pace_since + width * floor(greatest(extract(epoch FROM at - pace_since), 0) / 15);
        new_buckets := ARRAY[n];
        RETURN;
    END IF;
    -- A transaction that began before the newest bucket counts in it.
    shift := greatest(floor(extract(epoch FROM at - last) / 15)::integer, 0);
    new_last := last + width * shift;
    new_buckets := buckets;
    IF shift > 0 THEN
        new_buckets := new_buckets || array_fill(0, ARRAY[least(shift, keep)]);
    END IF;
    IF cardinality(new_buckets) > keep THEN
        new_buckets := new_buckets[cardinality(new_buckets) - keep + 1 :];
    END IF;
    new_buckets[cardinality(new_buckets)] := new_buckets[cardinality(new_buckets)] + n;
END
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

-- The ETA is read in the service now (domain.ETA, from the columns above and the database's
-- now): one implementation of the reader, beside this one of the counting.
DROP FUNCTION backfill_eta_seconds(backfills);

-- +goose Down
-- +goose StatementBegin
CREATE FUNCTION backfill_eta_seconds(b backfills) RETURNS double precision
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF b.state <> 'running' THEN
        RETURN NULL;
    END IF;
    IF b.num_queued + b.num_running = 0 THEN
        RETURN 0;
    END IF;
    RETURN (
        SELECT CASE WHEN w.n >= 2 AND w.span > 0 THEN
            round(((b.num_queued + b.num_running) * w.span / w.n)::numeric, 1)::double precision
        END
        FROM (
            SELECT count(*) AS n,
                   extract(epoch FROM backfill_now() - CASE
                       WHEN count(*) = 500 THEN min(s.end_date)
                       ELSE greatest(b.pace_since, backfill_now() - interval '5 minutes')
                   END)::double precision AS span
            FROM (
                SELECT r.end_date FROM dag_runs r
                WHERE r.dag_id = b.dag_id AND r.state = 'success' AND r.backfill_id = b.id
                  AND r.end_date >= greatest(b.pace_since, backfill_now() - interval '5 minutes')
                ORDER BY r.end_date DESC LIMIT 500
            ) s
        ) w);
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
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
        UPDATE backfills SET
            num_queued   = num_queued   + d.queued,
            num_running  = num_running  + d.running,
            num_success  = num_success  + d.success,
            num_failed   = num_failed   + d.failed,
            num_canceled = num_canceled + d.canceled
        WHERE id = d.backfill_id AND state IN ('running', 'paused', 'canceling');
    END LOOP;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
DROP FUNCTION eta_record(timestamptz, integer[], timestamptz, integer, timestamptz);
ALTER TABLE backfills DROP COLUMN eta_buckets;
ALTER TABLE backfills DROP COLUMN eta_last;
