-- A backfill's events are read from a bound kept on the backfill, not through an index by
-- backfill.
--
-- events_by_backfill (backfill_id, id) cost every event writer a second B-tree entry: a
-- descent, an exclusive lock on a leaf and a WAL record in every change's transaction. In P9
-- (PATCH throughput with events over without; docs/BENCHMARKS.md, 2026-12-06) the outbox
-- without it ran at 0.94-0.96 of no events at 32 clients, with it at 0.84-0.94: the contract's
-- "at least 90 % of the throughput without events" did not hold reliably.
--
-- What the index served: a backfill's events (GET /backfills/{id}/events, its SSE stream's
-- replay, GET /events?backfill_id=) without a scan of the whole outbox. They now scan the
-- primary key from events_from, a lower bound of the ids of the backfill's events, and stop
-- at the page's limit: a read costs the events written since the backfill was created (or
-- since the reader's position, if later), all backfills' together. Streams that follow live
-- are fed by each replica's hub, which reads the outbox once for all streams; they come here
-- only to replay.
--
-- events_from is the outbox's horizon (00014) at the backfill's creation, of the creating
-- transaction's snapshot: every transaction of this database with a smaller id had ended
-- before the backfill existed and can write none of its events, whatever statement comes
-- later in it. (The creating transaction's own id is not a bound: a READ COMMITTED
-- transaction that took its id before the backfill was created can change the backfill in a
-- later statement, as a pool's deletion does through its foreign key. Nor is the snapshot's
-- xmin a good one: a transaction of another database would pull it down.) A transaction held
-- open across a creation leaves the bound at its id, so the backfill's reads start there. It
-- is the column's default, so every writer of a backfill, old code included, sets it.
--
-- A backfill deleted with its DAG leaves its events in the outbox for their retention: its
-- bound goes to deleted_backfills, by a trigger on every deletion, and stays there twice the
-- events' retention (the sweep prunes it). So a read of a backfill that has neither a row nor
-- a tombstone, which never existed, finds nothing at once, rather than walking the whole
-- outbox for events that cannot be there: an id in GET /events?backfill_id= costs what the
-- backfill's own history costs, whoever asks.
--
-- backfills' row type is events.snapshot's type: the column is added without a default and
-- gets it in a second statement (00015).

-- +goose Up
ALTER TABLE backfills ADD COLUMN events_from bigint;
-- Existing backfills: their oldest event still stored, or, for one whose events are all
-- pruned (or that has none yet), the horizon of now, below any event a transaction still to
-- commit can write. Read through events_by_backfill, before it goes.
UPDATE backfills b SET events_from = least(
    (SELECT min(e.id) FROM events e WHERE e.backfill_id = b.id),
    event_horizon(pg_current_snapshot()));
ALTER TABLE backfills ALTER COLUMN events_from SET DEFAULT event_horizon(pg_current_snapshot());
ALTER TABLE backfills ALTER COLUMN events_from SET NOT NULL;

CREATE TABLE deleted_backfills (
    id          bigint      PRIMARY KEY,
    events_from bigint      NOT NULL,
    deleted_at  timestamptz NOT NULL
);
-- Backfills deleted before now whose events are still stored (a DAG deleted in the last days).
INSERT INTO deleted_backfills (id, events_from, deleted_at)
SELECT e.backfill_id, min(e.id), backfill_now() FROM events e
WHERE NOT EXISTS (SELECT 1 FROM backfills b WHERE b.id = e.backfill_id)
GROUP BY e.backfill_id;

-- +goose StatementBegin
CREATE FUNCTION backfills_keep_deleted_bounds() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO deleted_backfills (id, events_from, deleted_at)
    SELECT id, events_from, backfill_now() FROM gone
    ON CONFLICT (id) DO NOTHING;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER backfills_keep_deleted_bounds AFTER DELETE ON backfills
    REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION backfills_keep_deleted_bounds();

DROP INDEX events_by_backfill;

-- The events of one backfill after after_id, of the given types (NULL: all), in id order, at
-- most max_events (NULL: all): a walk of the primary key from the backfill's events_from (a
-- deleted backfill's tombstone's; nothing for a backfill that never existed: its bound is the
-- largest id). The walk is the only plan: left to itself,
-- the planner scans the whole outbox and sorts whenever it has no statistics of events to
-- tell it that ids follow the table's order (a database that autovacuum does not analyze),
-- which is every read costing the whole outbox. A function's SET holds while its body is
-- planned and run, for this read alone. STABLE: it reads with its caller's snapshot, so a
-- caller that cuts the page at the horizon of its own snapshot (repo.eventList) cuts it right.
-- +goose StatementBegin
CREATE FUNCTION backfill_events(backfill bigint, after_id bigint, types text[], max_events integer)
RETURNS SETOF events
LANGUAGE sql STABLE
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
    SELECT e.* FROM events e
    WHERE e.id > after_id
      AND e.id >= coalesce(
          (SELECT b.events_from FROM backfills b WHERE b.id = backfill),
          (SELECT d.events_from FROM deleted_backfills d WHERE d.id = backfill),
          9223372036854775807)
      AND e.backfill_id = backfill
      AND (types IS NULL OR e.type = ANY (types))
    ORDER BY e.id
    LIMIT max_events
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION backfill_events(bigint, bigint, text[], integer);
CREATE INDEX events_by_backfill ON events (backfill_id, id);
DROP TRIGGER backfills_keep_deleted_bounds ON backfills;
DROP FUNCTION backfills_keep_deleted_bounds();
DROP TABLE deleted_backfills;
ALTER TABLE backfills DROP COLUMN events_from;
