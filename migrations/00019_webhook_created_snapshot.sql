-- A webhook remembers the snapshot of the transaction that created it, so that the fan-out
-- can tell exactly which events committed before it.
--
-- 00015 gave a webhook first_event, the horizon when it was created, and delivered it every
-- event at or above. Transaction ids do not commit in order: an event can commit before the
-- webhook while an older transaction is still open, and then the horizon sits below the
-- event and the webhook is delivered it. The horizon also counts, as this database's, a
-- transaction of another database that ended between the snapshot and its read of
-- pg_stat_activity; CI saw that once (2026-12-06): a webhook delivered an event that had
-- committed before it was created.
--
-- An event's id carries its transaction id (id >> 12, 00014). The event committed before the
-- webhook's snapshot exactly when that transaction is visible in it. An event whose
-- transaction was still open when the webhook was created is delivered: it commits after the
-- snapshot, and may commit before or after the webhook itself; delivering is the side that
-- loses nothing. first_event stays as the cheap bound (every event below it is visible in
-- the snapshot) and is the whole rule for webhooks created before this migration.

-- +goose Up
ALTER TABLE webhooks ADD COLUMN created_snapshot pg_snapshot;

-- +goose Down
ALTER TABLE webhooks DROP COLUMN created_snapshot;
