-- Event writers that write one small row and nothing else.
--
-- Until now a change's event cost as much PostgreSQL CPU as the change itself, and more WAL
-- (docs/BENCHMARKS.md, P9): the writer built the backfill's API form as a 748-byte jsonb
-- (backfill_api_json, five timestamps formatted), and an AFTER INSERT trigger on events read
-- the webhooks and inserted one delivery row per matching webhook (three more index entries,
-- a foreign-key check) before the change could commit. Event-writing PATCHes reached 0.65 of
-- their throughput without events.
--
-- Now:
-- * The event stores the backfill's row as it was at commit (snapshot, of the table's own row
--   type: a copy of the tuple, nothing formatted). Readers render it with event_data(), the
--   same backfill_api_json as before, so the document served is byte for byte the one the
--   writer used to store. Events written before this migration keep their data.
-- * Webhook deliveries are no longer made by the writer. The deliverer makes them in the
--   background (repo.WebhookDeliveryClaim): it reads the events after the cursor kept here,
--   below the horizon (00014), as every reader of the outbox does, so none is missed, and
--   inserts their deliveries. One replica at a time advances the cursor (it holds a
--   transaction-level advisory lock taken with pg_try_advisory_xact_lock: the others skip,
--   and nobody waits; a fan-out with nothing to do writes nothing).
--
-- The snapshot column uses backfills' row type, so PostgreSQL refuses to change a column's
-- type in backfills, or to add one with a default, while it exists: such a migration adds the
-- column without a default and sets the default in a second statement (ALTER COLUMN ... SET
-- DEFAULT), and the refusal is loud, at migration time, never silent.

-- +goose Up
ALTER TABLE events ADD COLUMN snapshot backfills;
ALTER TABLE events ALTER COLUMN data DROP NOT NULL;
-- No CHECK on events: PostgreSQL deserialises a table's CHECK expressions for every
-- statement that writes it (ExecConstraints; a trigger's cached INSERT too), and the type
-- list's was a measurable part of an event's cost (perf, P9). The event writer below is the
-- only writer of events, and writes only the types of its CASE.
ALTER TABLE events DROP CONSTRAINT events_type_valid;

-- The event's data as the API, the streams and the webhooks send it.
-- +goose StatementBegin
CREATE FUNCTION event_data(e events) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT coalesce(e.data,
        jsonb_build_object('backfill', backfill_api_json(e.snapshot))
        || CASE WHEN e.type = 'backfill.paused'
                THEN jsonb_build_object('reason', coalesce((e.snapshot).pause_reason, 'user'))
                ELSE '{}'::jsonb END)
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION backfill_events_write() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    born_terminal constant boolean :=
        current_setting('backfill.born_terminal', true) = NEW.id::text;
    kinds text[] := ARRAY[]::text[];
    kind text;
    ordinal integer;
    first_id bigint;
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
        IF (OLD.max_active_runs, OLD.description, OLD.max_failed_runs, OLD.pool)
           IS DISTINCT FROM (NEW.max_active_runs, NEW.description, NEW.max_failed_runs, NEW.pool) THEN
            kinds := ARRAY['backfill.updated'];
        END IF;
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

    -- No lock, no NOTIFY, no webhook read; the API form and the deliveries are made by the
    -- readers. The ids are events_next_id()'s (00014), reserved here for all of this firing's
    -- events at once: the column default would call a function per event, which was a sixth
    -- of the writer's cost (perf, P9).
    ordinal := coalesce(nullif(current_setting('backfill.event_ordinal', true), '')::integer, 0);
    IF ordinal + cardinality(kinds) > 4096 THEN
        RAISE EXCEPTION 'one transaction writes at most 4096 events'
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    PERFORM set_config('backfill.event_ordinal', (ordinal + cardinality(kinds))::text, true);

    -- The snapshot is the backfill as GET answers it after the transaction: the row as it is
    -- at commit, with the counter changes made later in the same transaction, read by the
    -- INSERT itself (one statement, not a read and then a write). A state that a later
    -- statement of this transaction changed again was never seen by anyone: that change's own
    -- firing reports it, and this one inserts nothing. SERIALIZABLE transactions (creation,
    -- retry) write the row last and use NEW: a read of backfills there would add predicate
    -- locks on index pages that concurrent creations insert into. So does an INSERT, and an
    -- UPDATE whose row a later statement deleted.
    first_id := (pg_current_xact_id()::text::bigint << 12) + ordinal;
    IF TG_OP = 'UPDATE' AND current_setting('transaction_isolation') <> 'serializable' THEN
        -- One event is the common case (a PATCH, a pause): a plain INSERT ... SELECT, whose
        -- plan costs least to start; more take a join with their subscripts.
        IF cardinality(kinds) = 1 THEN
            INSERT INTO events (id, type, backfill_id, dag_id, occurred_at, snapshot)
            SELECT first_id, kinds[1], NEW.id, NEW.dag_id, backfill_now(), b
            FROM backfills b
            WHERE b.id = NEW.id AND b.state = NEW.state;
        ELSE
            INSERT INTO events (id, type, backfill_id, dag_id, occurred_at, snapshot)
            SELECT first_id + i - 1, kinds[i], NEW.id, NEW.dag_id, backfill_now(), b
            FROM backfills b, generate_subscripts(kinds, 1) AS i
            WHERE b.id = NEW.id AND b.state = NEW.state;
        END IF;
        IF FOUND THEN
            RETURN NULL;
        END IF;
        PERFORM FROM backfills WHERE id = NEW.id;
        IF FOUND THEN
            RETURN NULL; -- its state changed again later in this transaction
        END IF;
    END IF;
    INSERT INTO events (id, type, backfill_id, dag_id, occurred_at, snapshot)
    SELECT first_id + i - 1, kinds[i], NEW.id, NEW.dag_id, backfill_now(), NEW
    FROM generate_subscripts(kinds, 1) AS i;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

DROP TRIGGER events_schedule_webhook_deliveries ON events;

-- One index fewer for every event: pruning walks the primary key, whose order (the writer's
-- transaction id) is the order in which events occurred, give or take a transaction's length
-- (repo.pruneEvents).
DROP INDEX events_by_age;

-- A webhook is delivered the events that commit after it is created: those at or above the
-- horizon of its creation (00014). An event below it committed before the webhook existed.
-- The trigger gave a webhook the events inserted after it committed; those that existed
-- before this migration are delivered everything from the fan-out's start on.
ALTER TABLE webhooks ADD COLUMN first_event bigint NOT NULL DEFAULT 0;
ALTER TABLE webhooks ALTER COLUMN first_event DROP DEFAULT;

-- The fan-out's cursor: every event with a smaller or equal id has its deliveries. It starts
-- below the horizon of now (taken after DROP TRIGGER, which waited for every transaction that
-- had inserted events): older events got theirs from the trigger; an event at or above it may
-- have too, and the fan-out's ON CONFLICT DO NOTHING skips those.
CREATE TABLE webhook_fanout (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    after_event bigint NOT NULL
);
INSERT INTO webhook_fanout (after_event) SELECT event_horizon(pg_current_snapshot()) - 1;

-- +goose Down
CREATE INDEX events_by_age ON events (occurred_at);
DROP TABLE webhook_fanout;
ALTER TABLE webhooks DROP COLUMN first_event;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION webhook_deliveries_for_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_deliveries (webhook_id, event_id, next_attempt_at, created_at)
    SELECT w.id, NEW.id, backfill_now(), backfill_now()
    FROM webhooks w
    WHERE w.deleted_at IS NULL AND NEW.type = ANY (w.event_types);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER events_schedule_webhook_deliveries
AFTER INSERT ON events
FOR EACH ROW EXECUTE FUNCTION webhook_deliveries_for_event();

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION backfill_events_write() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    born_terminal constant boolean :=
        current_setting('backfill.born_terminal', true) = NEW.id::text;
    kinds text[] := ARRAY[]::text[];
    kind text;
    snap backfills;
    rows jsonb[] := ARRAY[]::jsonb[];
    extra jsonb;
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF born_terminal THEN
            RETURN NULL;
        END IF;
        kinds := ARRAY['backfill.created'];
    ELSIF born_terminal AND OLD.state = 'running' AND NEW.state = 'succeeded' THEN
        kinds := ARRAY['backfill.created', 'backfill.succeeded'];
    ELSE
        IF (OLD.max_active_runs, OLD.description, OLD.max_failed_runs, OLD.pool)
           IS DISTINCT FROM (NEW.max_active_runs, NEW.description, NEW.max_failed_runs, NEW.pool) THEN
            kinds := ARRAY['backfill.updated'];
        END IF;
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
        IF NOT FOUND THEN
            snap := NEW;
        ELSIF snap.state IS DISTINCT FROM NEW.state THEN
            RETURN NULL;
        END IF;
    END IF;
    FOREACH kind IN ARRAY kinds LOOP
        extra := '{}';
        IF kind = 'backfill.paused' THEN
            extra := jsonb_build_object('reason', coalesce(NEW.pause_reason, 'user'));
        END IF;
        rows := rows || (jsonb_build_object('backfill', backfill_api_json(snap)) || extra);
    END LOOP;
    INSERT INTO events (type, backfill_id, dag_id, occurred_at, data)
    SELECT kinds[i], NEW.id, NEW.dag_id, backfill_now(), rows[i]
    FROM generate_subscripts(kinds, 1) AS i
    ORDER BY i;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

UPDATE events SET data = event_data(events) WHERE data IS NULL;
DROP FUNCTION event_data(events);
ALTER TABLE events ALTER COLUMN data SET NOT NULL;
ALTER TABLE events ADD CONSTRAINT events_type_valid CHECK (type IN ('backfill.created',
    'backfill.updated', 'backfill.paused', 'backfill.unpaused', 'backfill.canceling',
    'backfill.succeeded', 'backfill.failed', 'backfill.canceled'));
ALTER TABLE events DROP COLUMN snapshot;
