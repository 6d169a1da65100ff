-- The event trigger on backfills becomes two, so that a statement pays only for the part of
-- it that can concern it.
--
-- 00016's one trigger had a WHEN of both parts, a state change or a settings change that its
-- statement did not write itself. PostgreSQL reads a trigger's WHEN back from its stored node
-- tree and prepares it again for every statement that updates the table: 2,426 characters of
-- node text, on every UPDATE of backfills, whatever it changed. A PATCH, which writes its own
-- event, paid about 5 µs for it out of a 101 µs statement (pgbench, one client, 4 runs each:
-- 101–105 µs with the trigger, 95–97 without, 96–100 with the two below), a third of what its
-- event cost; and so did every claim and report, whose counts update the backfill's row.
--
-- Now:
-- - backfills_events_on_settings fires only for a statement that sets a setting's column
--   (UPDATE OF: decided from the statement's SET list, before any WHEN is read), and only when
--   its statement did not raise settings_revision, a WHEN of one comparison; the function
--   checks whether a setting changed. A PATCH reads that one comparison; a claim or a report
--   reads nothing of it. No BEFORE trigger changes a setting, so the SET list is enough.
-- - backfills_events_on_state fires for every UPDATE whose state changed, with no column list:
--   the failure budget pauses a backfill from a BEFORE trigger (00006) inside a statement that
--   sets only its counts, and a column list sees only the SET list.
-- Both are deferred to COMMIT as before. When one statement changes a setting and the state
-- (no statement of the service does; an operator's SQL might), both fire, in name order:
-- backfill.updated first, then the state's event, as the one trigger wrote them.
--
-- A settings event no longer depends on the state staying as its statement left it: its
-- snapshot is the row at COMMIT, whatever a later statement of the transaction did to the
-- state (00016's one firing dropped both events when the state changed again, though only the
-- state's event had a later firing to report it).

-- +goose Up
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

DROP TRIGGER backfills_events_on_update ON backfills;

CREATE CONSTRAINT TRIGGER backfills_events_on_settings
    AFTER UPDATE OF max_active_runs, max_failed_runs, description, pool ON backfills
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (NEW.settings_revision = OLD.settings_revision)
    EXECUTE FUNCTION backfill_events_write('settings');

CREATE CONSTRAINT TRIGGER backfills_events_on_state
    AFTER UPDATE ON backfills
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION backfill_events_write('state');

-- +goose Down
DROP TRIGGER backfills_events_on_state ON backfills;
DROP TRIGGER backfills_events_on_settings ON backfills;

-- 00016's trigger and function.
CREATE CONSTRAINT TRIGGER backfills_events_on_update AFTER UPDATE ON backfills
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state
          OR NEW.settings_revision = OLD.settings_revision
             AND (OLD.max_active_runs, OLD.description, OLD.max_failed_runs, OLD.pool)
                 IS DISTINCT FROM (NEW.max_active_runs, NEW.description, NEW.max_failed_runs, NEW.pool))
    EXECUTE FUNCTION backfill_events_write();

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION backfill_events_write() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    born_terminal constant boolean :=
        current_setting('backfill.born_terminal', true) = NEW.id::text;
    kinds text[] := ARRAY[]::text[];
    kind text;
    first_id bigint;
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF born_terminal THEN
            RETURN NULL;
        END IF;
        kinds := ARRAY['backfill.created'];
    ELSIF born_terminal AND OLD.state = 'running' AND NEW.state = 'succeeded' THEN
        kinds := ARRAY['backfill.created', 'backfill.succeeded'];
    ELSE
        IF NEW.settings_revision = OLD.settings_revision
           AND (OLD.max_active_runs, OLD.description, OLD.max_failed_runs, OLD.pool)
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
    first_id := pg_current_xact_id()::text::bigint << 12;
    SELECT coalesce(max(id) + 1, first_id) INTO first_id FROM events
    WHERE id >= first_id AND id < first_id + 4096;
    IF first_id + cardinality(kinds) > ((first_id >> 12) + 1) << 12 THEN
        RAISE EXCEPTION 'one transaction writes at most 4096 events'
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    IF TG_OP = 'UPDATE' AND current_setting('transaction_isolation') <> 'serializable' THEN
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
            RETURN NULL;
        END IF;
    END IF;
    INSERT INTO events (id, type, backfill_id, dag_id, occurred_at, snapshot)
    SELECT first_id + i - 1, kinds[i], NEW.id, NEW.dag_id, backfill_now(), NEW
    FROM generate_subscripts(kinds, 1) AS i;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
