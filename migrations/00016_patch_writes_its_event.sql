-- A PATCH writes its backfill.updated event in its own statement.
--
-- After 00015 an event cost a PATCH about as much PostgreSQL CPU as the trigger machinery
-- around it: the UPDATE queued a deferred trigger event, and at COMMIT PostgreSQL fetched both
-- row versions again, entered PL/pgSQL, read and set transaction-local settings, and ran the
-- INSERT through SPI with an executor of its own (perf, P9). Writing the same row from the
-- PATCH's statement (a data-modifying WITH: UPDATE ... RETURNING feeds the INSERT) costs the
-- row and its index entries and little else.
--
-- Rule: a statement that changes a backfill's settings and writes its own backfill.updated
-- says so by adding 1 to settings_revision in the same UPDATE. The trigger writes the event of
-- every other settings change (the foreign key's SET NULL when a pool is deleted, any
-- statement that does not follow the rule) and of every state change, as before. So a change
-- still never goes without its event, and the PATCH's is not written twice.
--
-- Ids: an event's id is its transaction's id shifted left 12 bits plus its ordinal in the
-- transaction (00014). The ordinal is now found in the table rather than kept in a
-- transaction-local setting: the first id of the transaction's range that no event has taken
-- (one step down the primary key), so every writer of a transaction agrees on it, whichever
-- statement it is. The PATCH is its own transaction and writes its event first: it takes the
-- range's first id without looking (after another event it would fail on the primary key,
-- never write a wrong id). The column default, which a statement inserting many events at
-- once uses (a multi-row INSERT cannot see its own rows), keeps the setting and takes the
-- larger of the two.

-- +goose Up
-- No default in ADD COLUMN: events.snapshot uses backfills' row type (00015).
ALTER TABLE backfills ADD COLUMN settings_revision integer;
ALTER TABLE backfills ALTER COLUMN settings_revision SET DEFAULT 0;
UPDATE backfills SET settings_revision = 0;
ALTER TABLE backfills ALTER COLUMN settings_revision SET NOT NULL;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION events_next_id() RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    first constant bigint := pg_current_xact_id()::text::bigint << 12;
    candidate bigint := first + coalesce(nullif(current_setting('backfill.event_ordinal', true), '')::integer, 0);
BEGIN
    SELECT greatest(candidate, max(id) + 1) INTO candidate FROM events WHERE id >= first AND id < first + 4096;
    IF candidate >= first + 4096 THEN
        RAISE EXCEPTION 'one transaction writes at most 4096 events'
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    PERFORM set_config('backfill.event_ordinal', (candidate - first + 1)::text, true);
    RETURN candidate;
END
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
        -- A settings change whose statement raised settings_revision wrote its own event.
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

    -- The transaction's first free id.
    first_id := pg_current_xact_id()::text::bigint << 12;
    SELECT coalesce(max(id) + 1, first_id) INTO first_id FROM events
    WHERE id >= first_id AND id < first_id + 4096;
    IF first_id + cardinality(kinds) > ((first_id >> 12) + 1) << 12 THEN
        RAISE EXCEPTION 'one transaction writes at most 4096 events'
            USING ERRCODE = 'program_limit_exceeded';
    END IF;

    -- The snapshot is the backfill as GET answers it after the transaction (00015): the row as
    -- it is at commit, read by the INSERT itself; nothing when a later statement of this
    -- transaction changed the state again (that change's firing reports it). SERIALIZABLE
    -- transactions, INSERTs, and an UPDATE whose row a later statement deleted use NEW.
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

-- The trigger is queued only for a change that may write an event: a PATCH's row (settings
-- changed, revision raised, state unchanged) queues nothing.
DROP TRIGGER backfills_events_on_update ON backfills;
CREATE CONSTRAINT TRIGGER backfills_events_on_update AFTER UPDATE ON backfills
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state
          OR NEW.settings_revision = OLD.settings_revision
             AND (OLD.max_active_runs, OLD.description, OLD.max_failed_runs, OLD.pool)
                 IS DISTINCT FROM (NEW.max_active_runs, NEW.description, NEW.max_failed_runs, NEW.pool))
    EXECUTE FUNCTION backfill_events_write();

-- +goose Down
DROP TRIGGER backfills_events_on_update ON backfills;
CREATE CONSTRAINT TRIGGER backfills_events_on_update AFTER UPDATE ON backfills
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state
          OR OLD.updated_at IS DISTINCT FROM NEW.updated_at
          OR OLD.max_active_runs IS DISTINCT FROM NEW.max_active_runs
          OR OLD.max_failed_runs IS DISTINCT FROM NEW.max_failed_runs
          OR OLD.description IS DISTINCT FROM NEW.description
          OR OLD.pool IS DISTINCT FROM NEW.pool)
    EXECUTE FUNCTION backfill_events_write();

-- The writer as 00015 left it (the ordinal in the transaction-local setting).
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
    ordinal := coalesce(nullif(current_setting('backfill.event_ordinal', true), '')::integer, 0);
    IF ordinal + cardinality(kinds) > 4096 THEN
        RAISE EXCEPTION 'one transaction writes at most 4096 events'
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    PERFORM set_config('backfill.event_ordinal', (ordinal + cardinality(kinds))::text, true);
    first_id := (pg_current_xact_id()::text::bigint << 12) + ordinal;
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION events_next_id() RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    n integer := coalesce(nullif(current_setting('backfill.event_ordinal', true), '')::integer, 0);
BEGIN
    IF n >= 4096 THEN
        RAISE EXCEPTION 'one transaction writes at most 4096 events'
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    PERFORM set_config('backfill.event_ordinal', (n + 1)::text, true);
    RETURN (pg_current_xact_id()::text::bigint << 12) + n;
END
$$;
-- +goose StatementEnd

ALTER TABLE backfills DROP COLUMN settings_revision;
