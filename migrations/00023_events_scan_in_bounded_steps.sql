-- Every read of the outbox is a bounded step: events_scan looks at most max_rows rows of the
-- primary key after a position, answers the events its filters keep among them, and says how
-- far it got, so that a reader whose filter matches rarely (an old backfill's events, a rare
-- type, a DAG with none) pays a bounded statement and moves its position past the rows it
-- looked at, instead of walking the outbox from its last match to the end at every read.
--
-- The walk is the only plan, as in backfill_events (00022): a function's SET holds while its
-- body is planned and run. Left to itself the planner reads the whole outbox for the range of
-- a step whenever it thinks the table small or has no statistics of it. STABLE: it reads with
-- its caller's snapshot, and cuts at the horizon of that snapshot (00014).
--
-- lo is where the step starts: after_id, or a backfill's bound when that is later (00022; a
-- backfill that never existed has none and reads nothing). hi is the last of the rows looked
-- at, scanned how many there were, horizon the snapshot's (computed exactly only when the
-- step reaches past the snapshot's xmin, as the other readers do), servable the last row
-- below it. Each event kept comes with those in its row; a step without events is one row
-- with a NULL id.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION events_scan(after_id bigint, max_rows integer, backfill bigint, event_type text,
                            dag text, max_events integer)
RETURNS TABLE (hi bigint, scanned bigint, horizon bigint, servable bigint, id bigint)
LANGUAGE sql STABLE
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
    WITH snap AS (SELECT pg_current_snapshot() AS s),
    lo AS MATERIALIZED (
        SELECT greatest(after_id, CASE WHEN backfill IS NULL THEN 0 ELSE coalesce(
            (SELECT b.events_from FROM backfills b WHERE b.id = backfill),
            (SELECT d.events_from FROM deleted_backfills d WHERE d.id = backfill),
            9223372036854775807) - 1 END) AS lo),
    edge AS MATERIALIZED (
        SELECT max(s.id) AS hi, count(*) AS scanned
        FROM (SELECT e.id FROM events e WHERE e.id > (SELECT lo FROM lo) ORDER BY e.id LIMIT max_rows) s),
    bound AS MATERIALIZED (
        SELECT CASE WHEN coalesce(edge.hi < (pg_snapshot_xmin(snap.s)::text::bigint << 12), true)
            THEN pg_snapshot_xmin(snap.s)::text::bigint << 12
            ELSE event_horizon(snap.s) END AS horizon
        FROM snap, edge),
    kept AS (
        SELECT e.id FROM events e
        WHERE e.id > (SELECT lo FROM lo) AND e.id <= (SELECT hi FROM edge)
          AND e.id < (SELECT horizon FROM bound)
          AND (backfill IS NULL OR e.backfill_id = backfill)
          AND (event_type IS NULL OR e.type = event_type)
          AND (dag IS NULL OR e.dag_id = dag)
        ORDER BY e.id LIMIT max_events),
    pos AS (
        SELECT edge.hi, edge.scanned, bound.horizon,
            (SELECT max(e.id) FROM events e
             WHERE e.id > (SELECT lo FROM lo) AND e.id <= (SELECT hi FROM edge)
               AND e.id < (SELECT horizon FROM bound)) AS servable
        FROM edge, bound)
    SELECT pos.hi, pos.scanned, pos.horizon, pos.servable, kept.id
    FROM pos LEFT JOIN kept ON true
    ORDER BY kept.id
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION events_scan(bigint, integer, bigint, text, text, integer);
