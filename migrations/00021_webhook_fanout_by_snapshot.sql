-- The webhook fan-out follows the outbox by snapshots, as PgQ does, not by the horizon.
--
-- Until now the fan-out's cursor was an event id and it read only below the horizon (00014):
-- every transaction of the database that had a transaction id held back every event written
-- after it began, whoever wrote them. A transaction holding a row for 5 s, a 100,000-run
-- create, an operator's open psql session: each delayed every webhook of every endpoint by as
-- long as it ran, although the contract promises an event within 2 s of its commit and
-- promises webhooks no order.
--
-- Now the cursor is the snapshot of the last fan-out that made deliveries (after_snapshot).
-- A fan-out takes the events whose writers its own snapshot sees committed and that snapshot
-- did not: a writer at or past its xmax, or in its list of transactions in flight. An event's
-- id carries its writer's transaction id (id >> 12, 00014), so both are ranges of the primary
-- key. What a long transaction writes is taken when it commits, by whichever fan-out first
-- sees it committed; it holds nothing else back.
--
-- A batch larger than one page is taken in pages in id order, against the snapshot it began
-- with (batch_snapshot), from just after the last id taken (batch_after); when a page comes
-- back short the batch is done and its snapshot becomes the cursor. The set a batch covers is
-- fixed by its two snapshots, so paging through it in id order skips nothing.

-- +goose Up
ALTER TABLE webhook_fanout
    ADD COLUMN after_snapshot pg_snapshot,
    ADD COLUMN batch_snapshot pg_snapshot,
    ADD COLUMN batch_after bigint;
-- Every event up to after_event had its deliveries, and every writer below after_event's
-- had ended when it was taken. A snapshot that sees exactly those writers committed starts
-- at after_event's own writer, which a page may have cut in the middle: the fan-out takes its
-- events again, and ON CONFLICT DO NOTHING keeps the deliveries already made.
UPDATE webhook_fanout
SET after_snapshot = (x::text || ':' || x::text || ':')::pg_snapshot
FROM (SELECT greatest(after_event >> 12, 1) AS x FROM webhook_fanout) AS cut;
ALTER TABLE webhook_fanout ALTER COLUMN after_snapshot SET NOT NULL;
ALTER TABLE webhook_fanout DROP COLUMN after_event;

-- +goose Down
ALTER TABLE webhook_fanout ADD COLUMN after_event bigint;
-- Every writer below the snapshot's xmin had its events taken; the ones above may be taken
-- again, and ON CONFLICT DO NOTHING keeps the deliveries already made.
UPDATE webhook_fanout SET after_event = (pg_snapshot_xmin(after_snapshot)::text::bigint << 12) - 1;
ALTER TABLE webhook_fanout ALTER COLUMN after_event SET NOT NULL;
ALTER TABLE webhook_fanout
    DROP COLUMN after_snapshot,
    DROP COLUMN batch_snapshot,
    DROP COLUMN batch_after;
