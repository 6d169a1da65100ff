-- Events never hold the service back.
--
-- 1. The writer (00007) took its ordering lock, then built the snapshot and inserted the
--    event, whose insert trigger (00008) read the matching webhooks FOR KEY SHARE: a writer
--    holding the one global lock could wait on any webhook row (a DELETE cascading through a
--    long delivery log), and every other event writer waited behind it. Now everything that
--    reads or could wait is done first; the lock is the last step before the insert of the
--    events, and nothing after it can wait on a row another transaction holds: the events
--    get fresh ids, and their deliveries reference no webhook row (the foreign key to
--    webhooks is dropped; a deleted webhook is marked, not removed, so the fan-out reads it
--    without a lock and skips it).
-- 2. DELETE /webhooks/{id} marks the webhook (deleted_at) and answers; the delivery log is
--    purged in bounded batches in the background (webhooks.Deliverer).
-- 3. No event shows a state no reader could see: a change that a later statement of the same
--    transaction changed again writes no event of its own (a cancel with nothing running
--    writes only backfill.canceled), and a backfill born terminal (every slot skipped) writes
--    backfill.created and backfill.succeeded together, both with the final row. The creation
--    names such a backfill in the transaction-local setting backfill.born_terminal.

-- +goose Up
ALTER TABLE webhooks ADD COLUMN deleted_at timestamptz;

ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_webhook_id_fkey;

-- The claim takes each endpoint's earliest due deliveries (one queue per endpoint).
DROP INDEX webhook_deliveries_due;
CREATE INDEX webhook_deliveries_due_by_webhook ON webhook_deliveries (webhook_id, next_attempt_at)
    WHERE state = 'pending';

-- The background purge finds deleted webhooks that still have a log.
CREATE INDEX webhooks_deleted ON webhooks (id) WHERE deleted_at IS NOT NULL;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION webhook_deliveries_for_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- A plain read: no row lock is taken or waited for. A webhook whose deletion commits
    -- while this transaction runs may still get this delivery; the purge removes it.
    INSERT INTO webhook_deliveries (webhook_id, event_id, next_attempt_at, created_at)
    SELECT w.id, NEW.id, backfill_now(), backfill_now()
    FROM webhooks w
    WHERE w.deleted_at IS NULL AND NEW.type = ANY (w.event_types);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION backfill_events_write() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    settings constant text[] := ARRAY['max_active_runs', 'description', 'max_failed_runs'];
    born_terminal constant boolean :=
        current_setting('backfill.born_terminal', true) = NEW.id::text;
    kinds text[] := ARRAY[]::text[];
    kind text;
    snap backfills;
    rows jsonb[] := ARRAY[]::jsonb[];
    extra jsonb;
    k text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- A backfill born terminal writes its creation with its final row, below.
        IF born_terminal THEN
            RETURN NULL;
        END IF;
        kinds := ARRAY['backfill.created'];
    ELSIF born_terminal AND OLD.state = 'running' AND NEW.state = 'succeeded' THEN
        kinds := ARRAY['backfill.created', 'backfill.succeeded'];
    ELSE
        FOREACH k IN ARRAY settings LOOP
            IF (to_jsonb(OLD) -> k) IS DISTINCT FROM (to_jsonb(NEW) -> k) THEN
                kinds := ARRAY['backfill.updated'];
                EXIT;
            END IF;
        END LOOP;
        IF NEW.state IS DISTINCT FROM OLD.state THEN
            kind := CASE
                WHEN NEW.state = 'paused' THEN 'backfill.paused'
                WHEN NEW.state = 'running' AND OLD.state = 'paused' THEN 'backfill.unpaused'
                WHEN NEW.state IN ('canceling', 'succeeded', 'failed', 'canceled') THEN 'backfill.' || NEW.state
            END;
            IF kind IS NOT NULL THEN
                kinds := kinds || kind;
            END IF;
        END IF;
    END IF;
    IF cardinality(kinds) = 0 THEN
        RETURN NULL;
    END IF;

    -- The snapshot is the backfill as GET answers it after the transaction: the row as it is
    -- at commit, with the counter changes made later in the same transaction. A state that a
    -- later statement of this transaction changed again was never seen by anyone: that
    -- change's own firing reports it, and this one reports nothing. SERIALIZABLE transactions
    -- (creation, retry) write the row last and use NEW: a read of backfills there would add
    -- predicate locks on index pages that concurrent creations insert into.
    snap := NEW;
    IF TG_OP = 'UPDATE' AND current_setting('transaction_isolation') <> 'serializable' THEN
        SELECT * INTO snap FROM backfills WHERE id = NEW.id;
        IF NOT FOUND THEN
            snap := NEW;
        ELSIF snap.state IS DISTINCT FROM NEW.state THEN
            RETURN NULL;
        END IF;
    END IF;

    -- Everything that reads is done before the lock.
    FOREACH kind IN ARRAY kinds LOOP
        extra := '{}';
        IF kind = 'backfill.paused' THEN
            extra := jsonb_build_object('reason', coalesce(to_jsonb(NEW) ->> 'pause_reason', 'user'));
        END IF;
        rows := rows || (jsonb_build_object('backfill', backfill_api_json(snap)) || extra);
    END LOOP;

    -- Commit order = id order (00007): event writers take their ids one at a time, and hold
    -- the lock to the end of the commit. It is the last step: after it come only the
    -- inserts of these events (fresh ids) and of their deliveries (no foreign key to a row
    -- another transaction may hold), so no holder waits on anything but the commit itself.
    PERFORM pg_advisory_xact_lock(111559182283891);
    INSERT INTO events (type, backfill_id, dag_id, occurred_at, data)
    SELECT kinds[i], NEW.id, NEW.dag_id, backfill_now(), rows[i]
    FROM generate_subscripts(kinds, 1) AS i
    ORDER BY i;
    PERFORM pg_notify('backfill_events', '');
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- The restored foreign key needs every delivery's webhook to exist: the log of deleted
-- webhooks goes with them now.
DELETE FROM webhook_deliveries d WHERE NOT EXISTS (
    SELECT 1 FROM webhooks w WHERE w.id = d.webhook_id AND w.deleted_at IS NULL);
DELETE FROM webhooks WHERE deleted_at IS NOT NULL;
DROP INDEX webhooks_deleted;
DROP INDEX webhook_deliveries_due_by_webhook;
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_webhook_id_fkey
    FOREIGN KEY (webhook_id) REFERENCES webhooks (id) ON DELETE CASCADE;
ALTER TABLE webhooks DROP COLUMN deleted_at;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION webhook_deliveries_for_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_deliveries (webhook_id, event_id, next_attempt_at, created_at)
    SELECT w.id, NEW.id, backfill_now(), backfill_now()
    FROM webhooks w
    WHERE NEW.type = ANY (w.event_types)
    FOR KEY SHARE OF w;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION backfill_events_write() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    settings constant text[] := ARRAY['max_active_runs', 'description', 'max_failed_runs'];
    kinds text[] := ARRAY[]::text[];
    kind text;
    snap backfills;
    extra jsonb;
    k text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        kinds := ARRAY['backfill.created'];
    ELSE
        FOREACH k IN ARRAY settings LOOP
            IF (to_jsonb(OLD) -> k) IS DISTINCT FROM (to_jsonb(NEW) -> k) THEN
                kinds := ARRAY['backfill.updated'];
                EXIT;
            END IF;
        END LOOP;
        IF NEW.state IS DISTINCT FROM OLD.state THEN
            kind := CASE
                WHEN NEW.state = 'paused' THEN 'backfill.paused'
                WHEN NEW.state = 'running' AND OLD.state = 'paused' THEN 'backfill.unpaused'
                WHEN NEW.state IN ('canceling', 'succeeded', 'failed', 'canceled') THEN 'backfill.' || NEW.state
            END;
            IF kind IS NOT NULL THEN
                kinds := kinds || kind;
            END IF;
        END IF;
    END IF;
    IF cardinality(kinds) = 0 THEN
        RETURN NULL;
    END IF;
    snap := NEW;
    IF TG_OP = 'UPDATE' AND current_setting('transaction_isolation') <> 'serializable' THEN
        SELECT * INTO snap FROM backfills WHERE id = NEW.id;
        IF NOT FOUND OR snap.state IS DISTINCT FROM NEW.state THEN
            snap := NEW;
        END IF;
    END IF;
    PERFORM pg_advisory_xact_lock(111559182283891);
    FOREACH kind IN ARRAY kinds LOOP
        extra := '{}';
        IF kind = 'backfill.paused' THEN
            extra := jsonb_build_object('reason', coalesce(to_jsonb(NEW) ->> 'pause_reason', 'user'));
        END IF;
        INSERT INTO events (type, backfill_id, dag_id, occurred_at, data)
        VALUES (kind, NEW.id, NEW.dag_id, backfill_now(),
                jsonb_build_object('backfill', backfill_api_json(snap)) || extra);
    END LOOP;
    PERFORM pg_notify('backfill_events', '');
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
