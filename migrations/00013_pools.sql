-- Pools: a shared limit on running runs across backfills (and manual runs) that name it.
--
-- A pool row carries its own counters, kept exact by triggers in the same transaction as every
-- change they count, for the same reason the backfill row does: the claim locks the pool row
-- and reads room from it. Under READ COMMITTED a statement's snapshot is taken when it starts,
-- so only a locked row is re-read at its newest version; a sum over backfills read in the
-- claim would miss a concurrent claimer's commit, a counter on the locked row cannot.
--
-- A backfill's runs are in the backfill's pool (PATCH may move them), so the backfill row's
-- num_running/num_queued feed the pool's; a manual run names its pool itself (dag_runs.pool).
-- Lock order stays backfill, then run, then pool on every path, and the claim takes pools
-- last and with SKIP LOCKED, so it never waits while it holds one.

-- +goose Up
CREATE TABLE pools (
    name        text        PRIMARY KEY,
    slots       integer     NOT NULL,
    description text,
    num_running integer     NOT NULL DEFAULT 0,
    num_queued  integer     NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    CONSTRAINT pools_name_valid CHECK (name ~ '^[A-Za-z0-9_.-]{1,250}$'),
    CONSTRAINT pools_slots_valid CHECK (slots BETWEEN 1 AND 100000),
    CONSTRAINT pools_counts_not_negative CHECK (LEAST(num_running, num_queued) >= 0)
);

-- ON DELETE SET NULL: a pool may be deleted once nothing unfinished names it (the repository
-- checks that under the pool's row lock); finished backfills then simply name no pool.
ALTER TABLE backfills ADD COLUMN pool text REFERENCES pools (name) ON DELETE SET NULL;
ALTER TABLE dag_runs ADD COLUMN pool text REFERENCES pools (name) ON DELETE SET NULL;

-- The delete's "is it in use" probe and the foreign keys' ON DELETE scans.
CREATE INDEX backfills_by_pool ON backfills (pool) WHERE pool IS NOT NULL;
CREATE INDEX dag_runs_by_pool ON dag_runs (pool) WHERE pool IS NOT NULL;

-- +goose StatementBegin
-- Moves a pool's counters with its backfills' counters, and moves a backfill's counts from
-- one pool to another when its pool changes. Two pools are updated in name order, so that two
-- moves in opposite directions cannot deadlock.
CREATE FUNCTION backfills_pool_counts() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    old_pool text;
    old_q integer := 0;
    old_r integer := 0;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        old_pool := OLD.pool;
        old_q := OLD.num_queued;
        old_r := OLD.num_running;
    END IF;
    IF old_pool IS NOT DISTINCT FROM NEW.pool THEN
        IF NEW.num_queued <> old_q OR NEW.num_running <> old_r THEN
            UPDATE pools SET num_queued = num_queued + NEW.num_queued - old_q,
                num_running = num_running + NEW.num_running - old_r
            WHERE name = NEW.pool;
        END IF;
        RETURN NULL;
    END IF;
    IF old_pool IS NOT NULL AND (old_pool < NEW.pool OR NEW.pool IS NULL) THEN
        UPDATE pools SET num_queued = num_queued - old_q, num_running = num_running - old_r
        WHERE name = old_pool AND (old_q <> 0 OR old_r <> 0);
        old_pool := NULL;
    END IF;
    IF NEW.pool IS NOT NULL THEN
        UPDATE pools SET num_queued = num_queued + NEW.num_queued, num_running = num_running + NEW.num_running
        WHERE name = NEW.pool AND (NEW.num_queued <> 0 OR NEW.num_running <> 0);
    END IF;
    IF old_pool IS NOT NULL THEN
        UPDATE pools SET num_queued = num_queued - old_q, num_running = num_running - old_r
        WHERE name = old_pool AND (old_q <> 0 OR old_r <> 0);
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER backfills_pool_counts_insert AFTER INSERT ON backfills
    FOR EACH ROW WHEN (NEW.pool IS NOT NULL)
    EXECUTE FUNCTION backfills_pool_counts();

CREATE TRIGGER backfills_pool_counts_update AFTER UPDATE OF num_queued, num_running, pool ON backfills
    FOR EACH ROW WHEN ((OLD.pool IS NOT NULL OR NEW.pool IS NOT NULL)
        AND (OLD.pool IS DISTINCT FROM NEW.pool OR OLD.num_queued <> NEW.num_queued
             OR OLD.num_running <> NEW.num_running))
    EXECUTE FUNCTION backfills_pool_counts();

-- +goose StatementBegin
-- Moves a pool's counters for one manual run (outside backfills) that names the pool and
-- entered or left `queued`/`running`. A run's pool never changes except to NULL when the pool
-- is deleted, which the repository allows only while no unfinished run names it.
CREATE FUNCTION dag_runs_pool_counts() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    dq integer := 0;
    dr integer := 0;
    p  text;
BEGIN
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.backfill_id IS NULL AND NEW.pool IS NOT NULL THEN
        dq := dq + (NEW.state = 'queued')::int;
        dr := dr + (NEW.state = 'running')::int;
        p := NEW.pool;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.backfill_id IS NULL AND OLD.pool IS NOT NULL THEN
        dq := dq - (OLD.state = 'queued')::int;
        dr := dr - (OLD.state = 'running')::int;
        p := OLD.pool;
    END IF;
    IF dq <> 0 OR dr <> 0 THEN
        UPDATE pools SET num_queued = num_queued + dq, num_running = num_running + dr WHERE name = p;
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER dag_runs_pool_counts_insert AFTER INSERT ON dag_runs
    FOR EACH ROW WHEN (NEW.pool IS NOT NULL AND NEW.backfill_id IS NULL AND NEW.state IN ('queued', 'running'))
    EXECUTE FUNCTION dag_runs_pool_counts();

CREATE TRIGGER dag_runs_pool_counts_update AFTER UPDATE OF state, backfill_id ON dag_runs
    FOR EACH ROW WHEN (
        (OLD.pool IS NOT NULL OR NEW.pool IS NOT NULL)
        AND (OLD.state IS DISTINCT FROM NEW.state OR OLD.backfill_id IS DISTINCT FROM NEW.backfill_id))
    EXECUTE FUNCTION dag_runs_pool_counts();

CREATE TRIGGER dag_runs_pool_counts_delete AFTER DELETE ON dag_runs
    FOR EACH ROW WHEN (OLD.pool IS NOT NULL AND OLD.backfill_id IS NULL AND OLD.state IN ('queued', 'running'))
    EXECUTE FUNCTION dag_runs_pool_counts();


-- A backfill's pool is one of its settings: a PATCH that moves it writes backfill.updated like
-- any other setting's change. The event writer (00011) is redefined with pool among the
-- settings it compares, and its trigger fires on a change of pool.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION backfill_events_write() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    settings constant text[] := ARRAY['max_active_runs', 'description', 'max_failed_runs', 'pool'];
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

-- +goose Down
-- The event writer and its trigger as 00011 left them.
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

DROP TRIGGER backfills_events_on_update ON backfills;
CREATE CONSTRAINT TRIGGER backfills_events_on_update AFTER UPDATE ON backfills
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state
          OR OLD.updated_at IS DISTINCT FROM NEW.updated_at
          OR OLD.max_active_runs IS DISTINCT FROM NEW.max_active_runs
          OR OLD.max_failed_runs IS DISTINCT FROM NEW.max_failed_runs
          OR OLD.description IS DISTINCT FROM NEW.description)
    EXECUTE FUNCTION backfill_events_write();

DROP TRIGGER dag_runs_pool_counts_delete ON dag_runs;
DROP TRIGGER dag_runs_pool_counts_update ON dag_runs;
DROP TRIGGER dag_runs_pool_counts_insert ON dag_runs;
DROP FUNCTION dag_runs_pool_counts();
DROP TRIGGER backfills_pool_counts_update ON backfills;
DROP TRIGGER backfills_pool_counts_insert ON backfills;
DROP FUNCTION backfills_pool_counts();
DROP INDEX dag_runs_by_pool;
DROP INDEX backfills_by_pool;
ALTER TABLE dag_runs DROP COLUMN pool;
ALTER TABLE backfills DROP COLUMN pool;
DROP TABLE pools;
