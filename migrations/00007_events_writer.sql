-- The outbox's writer (the table is 00003). Events are written by triggers on backfills, so
-- that every path that changes a backfill's state or settings, whatever code issues the
-- statement, writes its event in the same transaction, and no path can forget to.
--
-- Ordering. Readers page by id ("after the last id I saw"), and an identity column hands ids
-- out before commit, so transactions could commit out of id order and a reader could serve
-- id 11 while id 10 is still in flight, then skip 10 for good. A filter on the writer's xid
-- against pg_snapshot_xmin does not close that gap when pages are cut by id: a transaction
-- with an OLDER xid can take a LARGER id than one still in flight and commit first. So the
-- writer runs at COMMIT (a deferred constraint trigger) and takes a transaction-level
-- advisory lock before it takes an id: event-writing transactions take their ids in commit
-- order, one at a time, and a snapshot that sees id N sees every committed id below N. The
-- lock is held from the first event's insert to the end of the commit only, never during
-- the work of the transaction (a 100,000-run cancel holds it for the commit alone), and
-- transactions that write no event (claims, reports, counter updates) never take it.

-- +goose Up

-- +goose StatementBegin
-- A timestamp as the API writes it (Go's RFC 3339 with trailing fractional zeros dropped,
-- in UTC with "Z"), so that an event's snapshot is byte-for-byte the JSON GET answers.
CREATE FUNCTION api_timestamp(t timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
        || coalesce('.' || nullif(rtrim(to_char(t AT TIME ZONE 'UTC', 'US'), '0'), ''), '')
        || 'Z'
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- A backfill row as GET /backfills/{id} answers it (handlers/convert.go backfillOut): its
-- columns under their own names, timestamps in API form, the counters folded into
-- "progress", and "is_paused". Columns are taken generically (to_jsonb of the row), so a
-- column that a later migration adds for the API appears here without a change; the test
-- TestEventSnapshotEqualsGet fails if the two ever disagree.
CREATE FUNCTION backfill_api_json(b backfills) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT jsonb_object_agg(
               e.key,
               CASE WHEN a.atttypid = 'timestamptz'::regtype AND jsonb_typeof(e.value) = 'string'
                    THEN to_jsonb(api_timestamp((e.value #>> '{}')::timestamptz))
                    ELSE e.value END)
        || jsonb_build_object(
               'is_paused', b.state = 'paused',
               'progress', jsonb_build_object(
                   'total', b.num_queued + b.num_running + b.num_success + b.num_failed
                            + b.num_canceled + b.num_skipped,
                   'queued', b.num_queued, 'running', b.num_running, 'success', b.num_success,
                   'failed', b.num_failed, 'canceled', b.num_canceled, 'skipped', b.num_skipped))
    -- Internal columns are not part of the API's backfill: the counters (answered as
    -- progress) and the claim index's flag (migrations/00005_fair_claims.sql).
    FROM jsonb_each(to_jsonb(b) - ARRAY['num_queued', 'num_running', 'num_success', 'num_failed',
                                        'num_canceled', 'num_skipped', 'claimable']) e
    LEFT JOIN pg_attribute a
        ON a.attrelid = 'backfills'::regclass AND a.attname = e.key AND NOT a.attisdropped
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Writes the events of one change of a backfill row. It runs at COMMIT (deferred), with OLD
-- and NEW as the change left them.
CREATE FUNCTION backfill_events_write() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    -- Settings a PATCH may change. Read through jsonb so that a setting whose column a later
    -- migration adds (max_failed_runs) is compared without naming a column that may not exist.
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

    -- The snapshot is the backfill as GET answers it after the transaction: the row as it is
    -- now, at commit, which includes counter changes made later in the same transaction (a
    -- cancel changes the state, then cancels the queued runs). When a later statement of the
    -- transaction changed the state again (canceling, then canceled at once), this change's
    -- own row version is kept instead, so that no event shows a state it did not report.
    -- Inserts and SERIALIZABLE transactions (creation, retry) write the row last and use NEW
    -- as it is: a read of backfills there would add predicate locks on the index pages that
    -- concurrent creations insert into, and with them serialization failures.
    snap := NEW;
    IF TG_OP = 'UPDATE' AND current_setting('transaction_isolation') <> 'serializable' THEN
        SELECT * INTO snap FROM backfills WHERE id = NEW.id;
        IF NOT FOUND OR snap.state IS DISTINCT FROM NEW.state THEN
            snap := NEW;
        END IF;
    END IF;

    -- Commit order = id order: see the head of this file. The key spells "events" in ASCII.
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
    -- Wakes each replica's stream listener; delivered at commit, and collapsed by PostgreSQL
    -- when a transaction sends it several times. Listeners also poll, so a lost
    -- notification delays an event but never loses it.
    PERFORM pg_notify('backfill_events', '');
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE CONSTRAINT TRIGGER backfills_events_on_insert AFTER INSERT ON backfills
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION backfill_events_write();

-- The WHEN clause is evaluated as each row changes, not at commit: the counter updates that
-- every claim and report makes (num_* only) queue nothing and cost a few comparisons. Every
-- setting a PATCH may change is named here: updated_at alone is no proof of a change, since
-- two changes can carry the same instant (one transaction, or a stopped test clock).
CREATE CONSTRAINT TRIGGER backfills_events_on_update AFTER UPDATE ON backfills
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state
          OR OLD.updated_at IS DISTINCT FROM NEW.updated_at
          OR OLD.max_active_runs IS DISTINCT FROM NEW.max_active_runs
          OR OLD.max_failed_runs IS DISTINCT FROM NEW.max_failed_runs
          OR OLD.description IS DISTINCT FROM NEW.description)
    EXECUTE FUNCTION backfill_events_write();

-- +goose Down
DROP TRIGGER backfills_events_on_update ON backfills;
DROP TRIGGER backfills_events_on_insert ON backfills;
DROP FUNCTION backfill_events_write();
DROP FUNCTION backfill_api_json(backfills);
DROP FUNCTION api_timestamp(timestamptz);
