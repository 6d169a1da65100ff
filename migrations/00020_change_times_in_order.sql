-- A backfill's changes carry times in the order they were made.
--
-- updated_at, and the occurred_at of the change's event, were now(): the start of the
-- change's transaction. Two changes of one backfill are made one after the other (the second
-- waits for the first's row lock), but the one that waits may have started first: its time
-- was the earlier one although its change came second (an audit, 2026-12-06: 16 pauses,
-- unpauses and PATCHes at once on one backfill, 649 of 4,000 events with an occurred_at
-- before their predecessor's; a webhook receiver ordering by occurred_at, as the contract
-- tells it it may, ended on the wrong state). Event ids do not order them either: a
-- transaction's id is taken before it waits.
--
-- Now every statement that changes a backfill's state or settings sets
-- updated_at = backfill_change_time(updated_at): now, or one microsecond after the time of the
-- change it follows when that is later. The row is read after its lock is taken (READ
-- COMMITTED re-reads the row version the UPDATE waited for), so each change's time is later
-- than its predecessor's, and the event's occurred_at is that time, the snapshot's updated_at.
-- The failure budget's pause (00006) does the same.

-- +goose Up
-- +goose StatementBegin
-- A SQL function of one expression: the planner inlines it, so it costs what the expression does.
CREATE FUNCTION backfill_change_time(previous timestamptz) RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT greatest(backfill_now(), previous + interval '1 microsecond')
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION backfills_pause_rules() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'running' AND NEW.num_failed > OLD.num_failed
       AND NEW.max_failed_runs IS NOT NULL AND NEW.num_failed >= NEW.max_failed_runs THEN
        NEW.state := 'paused';
        NEW.pause_reason := 'failure_budget';
        NEW.updated_at := backfill_change_time(OLD.updated_at);
    ELSIF NEW.state <> 'paused' THEN
        NEW.pause_reason := NULL;
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION backfill_events_write() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    -- 'settings' or 'state' for the UPDATE triggers; none for the INSERT trigger.
    part constant text := TG_ARGV[0];
    born_terminal constant boolean :=
        current_setting('backfill.born_terminal', true) = NEW.id::text;
    kinds text[] := ARRAY[]::text[];
    kind text;
    first_id bigint;
    -- The change's time: the updated_at its statement set (backfill_change_time, which
    -- orders a backfill's changes), or now for a statement that set none (the foreign key's
    -- SET NULL, a creation's final row).
    change_at constant timestamptz := CASE
        WHEN TG_OP = 'UPDATE' AND NEW.updated_at IS NOT DISTINCT FROM OLD.updated_at THEN backfill_now()
        ELSE NEW.updated_at END;
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- A backfill born terminal writes its creation with its final row, below.
        IF born_terminal THEN
            RETURN NULL;
        END IF;
        kinds := ARRAY['backfill.created'];
    ELSIF part = 'settings' THEN
        -- Its statement set a setting without writing the event itself (the trigger's WHEN):
        -- the foreign key's SET NULL when a pool is deleted, or SQL outside the service.
        IF (OLD.max_active_runs, OLD.description, OLD.max_failed_runs, OLD.pool)
           IS DISTINCT FROM (NEW.max_active_runs, NEW.description, NEW.max_failed_runs, NEW.pool) THEN
            kinds := ARRAY['backfill.updated'];
        END IF;
    ELSIF born_terminal AND OLD.state = 'running' AND NEW.state = 'succeeded' THEN
        kinds := ARRAY['backfill.created', 'backfill.succeeded'];
    ELSE
        kind := CASE
            WHEN NEW.state = 'paused' THEN 'backfill.paused'
            WHEN NEW.state = 'running' AND OLD.state = 'paused' THEN 'backfill.unpaused'
            WHEN NEW.state IN ('canceling', 'succeeded', 'failed', 'canceled') THEN 'backfill.' || NEW.state
        END;
        IF kind IS NOT NULL THEN
            kinds := ARRAY[kind];
        END IF;
    END IF;
    IF cardinality(kinds) = 0 THEN
        RETURN NULL;
    END IF;

    -- The transaction's first free id (00016).
    first_id := pg_current_xact_id()::text::bigint << 12;
    SELECT coalesce(max(id) + 1, first_id) INTO first_id FROM events
    WHERE id >= first_id AND id < first_id + 4096;
    IF first_id + cardinality(kinds) > ((first_id >> 12) + 1) << 12 THEN
        RAISE EXCEPTION 'one transaction writes at most 4096 events'
            USING ERRCODE = 'program_limit_exceeded';
    END IF;

    -- The snapshot is the backfill as GET answers it after the transaction (00015): the row as
    -- it is at COMMIT, read by the INSERT itself. A state's event is not written when a later
    -- statement of this transaction changed the state again (that change's firing reports
    -- it). SERIALIZABLE transactions, INSERTs, and an UPDATE whose row a later statement
    -- deleted use NEW.
    IF TG_OP = 'UPDATE' AND current_setting('transaction_isolation') <> 'serializable' THEN
        IF cardinality(kinds) = 1 THEN
            INSERT INTO events (id, type, backfill_id, dag_id, occurred_at, snapshot)
            SELECT first_id, kinds[1], NEW.id, NEW.dag_id, change_at, b
            FROM backfills b
            WHERE b.id = NEW.id AND (part = 'settings' OR b.state = NEW.state);
        ELSE
            INSERT INTO events (id, type, backfill_id, dag_id, occurred_at, snapshot)
            SELECT first_id + i - 1, kinds[i], NEW.id, NEW.dag_id, change_at, b
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
    SELECT first_id + i - 1, kinds[i], NEW.id, NEW.dag_id, change_at, NEW
    FROM generate_subscripts(kinds, 1) AS i;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION backfills_pause_rules() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state = 'running' AND NEW.num_failed > OLD.num_failed
       AND NEW.max_failed_runs IS NOT NULL AND NEW.num_failed >= NEW.max_failed_runs THEN
        NEW.state := 'paused';
        NEW.pause_reason := 'failure_budget';
        NEW.updated_at := backfill_now();
    ELSIF NEW.state <> 'paused' THEN
        NEW.pause_reason := NULL;
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

-- 00018's function.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION backfill_events_write() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    -- 'settings' or 'state' for the UPDATE triggers; none for the INSERT trigger.
    part constant text := TG_ARGV[0];
    born_terminal constant boolean :=
        current_setting('backfill.born_terminal', true) = NEW.id::text;
    kinds text[] := ARRAY[]::text[];
    kind text;
    first_id bigint;
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- A backfill born terminal writes its creation with its final row, below.
        IF born_terminal THEN
            RETURN NULL;
        END IF;
        kinds := ARRAY['backfill.created'];
    ELSIF part = 'settings' THEN
        -- Its statement set a setting without writing the event itself (the trigger's WHEN):
        -- the foreign key's SET NULL when a pool is deleted, or SQL outside the service.
        IF (OLD.max_active_runs, OLD.description, OLD.max_failed_runs, OLD.pool)
           IS DISTINCT FROM (NEW.max_active_runs, NEW.description, NEW.max_failed_runs, NEW.pool) THEN
            kinds := ARRAY['backfill.updated'];
        END IF;
    ELSIF born_terminal AND OLD.state = 'running' AND NEW.state = 'succeeded' THEN
        kinds := ARRAY['backfill.created', 'backfill.succeeded'];
    ELSE
        kind := CASE
            WHEN NEW.state = 'paused' THEN 'backfill.paused'
            WHEN NEW.state = 'running' AND OLD.state = 'paused' THEN 'backfill.unpaused'
            WHEN NEW.state IN ('canceling', 'succeeded', 'failed', 'canceled') THEN 'backfill.' || NEW.state
        END;
        IF kind IS NOT NULL THEN
            kinds := ARRAY[kind];
        END IF;
    END IF;
    IF cardinality(kinds) = 0 THEN
        RETURN NULL;
    END IF;

    -- The transaction's first free id (00016).
    first_id := pg_current_xact_id()::text::bigint << 12;
    SELECT coalesce(max(id) + 1, first_id) INTO first_id FROM events
    WHERE id >= first_id AND id < first_id + 4096;
    IF first_id + cardinality(kinds) > ((first_id >> 12) + 1) << 12 THEN
        RAISE EXCEPTION 'one transaction writes at most 4096 events'
            USING ERRCODE = 'program_limit_exceeded';
    END IF;

    -- The snapshot is the backfill as GET answers it after the transaction (00015): the row as
    -- it is at COMMIT, read by the INSERT itself. A state's event is not written when a later
    -- statement of this transaction changed the state again (that change's firing reports
    -- it). SERIALIZABLE transactions, INSERTs, and an UPDATE whose row a later statement
    -- deleted use NEW.
    IF TG_OP = 'UPDATE' AND current_setting('transaction_isolation') <> 'serializable' THEN
        IF cardinality(kinds) = 1 THEN
            INSERT INTO events (id, type, backfill_id, dag_id, occurred_at, snapshot)
            SELECT first_id, kinds[1], NEW.id, NEW.dag_id, backfill_now(), b
            FROM backfills b
            WHERE b.id = NEW.id AND (part = 'settings' OR b.state = NEW.state);
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

DROP FUNCTION backfill_change_time(timestamptz);
