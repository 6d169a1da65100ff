-- Events that cost what they carry: a thin row per event, in an outbox partitioned by id, read
-- by backfill through a bloom index that costs the writer nothing.
--
-- Thin rows. An event used to store a copy of the backfill's whole row (00015): a settings
-- change wrote 2.2x the WAL of the change alone (pg_walinspect, cmd/bench P12). A backfill's
-- row is mostly what never changes after its creation (its DAG, window, conf, plan hash, who
-- and why); an event now stores only what can change: its state and pause reason, the
-- settings a PATCH changes but the description, the progress counters, updated_at when it is
-- not the event's time, completed_at. The document is rendered when the event is read
-- (event_backfill_json): the unchanging part from the backfill's row, or from the copy
-- deleted_backfills keeps of a deleted one, the rest from the event. A description, which can
-- be long and rarely changes, is kept once per change in backfill_descriptions, keyed by the
-- time of the change that set it (a backfill's change times are its changes' order, 00020;
-- event ids are not: they follow transaction ids), and read back as the one in force at the
-- event's time. The event's type is a smallint (event_type_name), its DAG is its backfill's.
--
-- Partitions. outbox is partitioned by range of id; the sweep (repo/event_partitions.go)
-- attaches the next partition ahead of the ids to come and drops whole partitions once their
-- events are past retention: a day of events goes with DETACH ... CONCURRENTLY and DROP
-- TABLE, not a DELETE that leaves vacuum a day of dead rows. outbox_partitions keeps each
-- partition's range and when it closed (no transaction can write into it any more).
-- The events stored before this migration form the first partition, events_legacy, and go
-- with it when their time comes.
--
-- Reads by backfill. A BRIN bloom index on backfill_id: inserts land in the partition's last,
-- unsummarized page range and write nothing to the index; one replica a second summarizes
-- the ranges that are full (outbox_summarize). A backfill's read looks at each range's
-- filter (a few MB at 10 million events) and the page ranges that may hold its events, not
-- at every event since its creation; a short range is walked along the primary key instead
-- (backfill_event_ids). A B-tree by backfill cost writers 6-10 % of their throughput (00022).
--
-- Rolling. Replicas of the previous version keep working while the new ones start: events is
-- now a view over outbox with every column they read (type and dag_id computed for thin
-- rows), an INSTEAD OF INSERT trigger takes their PATCH's fat row into outbox, DELETE goes
-- through the view, and every function they call (backfill_events, events_scan, event_data)
-- keeps its signature and renders both kinds of row.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION event_type_name(kind smallint) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE kind
        WHEN 1 THEN 'backfill.created' WHEN 2 THEN 'backfill.updated'
        WHEN 3 THEN 'backfill.paused' WHEN 4 THEN 'backfill.unpaused'
        WHEN 5 THEN 'backfill.canceling' WHEN 6 THEN 'backfill.succeeded'
        WHEN 7 THEN 'backfill.failed' WHEN 8 THEN 'backfill.canceled'
        WHEN 21 THEN 'backfill_group.created' WHEN 22 THEN 'backfill_group.paused'
        WHEN 23 THEN 'backfill_group.unpaused' WHEN 24 THEN 'backfill_group.canceling'
        WHEN 25 THEN 'backfill_group.succeeded' WHEN 26 THEN 'backfill_group.failed'
        WHEN 27 THEN 'backfill_group.canceled'
    END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION event_kind(type text) RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE type
        WHEN 'backfill.created' THEN 1 WHEN 'backfill.updated' THEN 2
        WHEN 'backfill.paused' THEN 3 WHEN 'backfill.unpaused' THEN 4
        WHEN 'backfill.canceling' THEN 5 WHEN 'backfill.succeeded' THEN 6
        WHEN 'backfill.failed' THEN 7 WHEN 'backfill.canceled' THEN 8
        WHEN 'backfill_group.created' THEN 21 WHEN 'backfill_group.paused' THEN 22
        WHEN 'backfill_group.unpaused' THEN 23 WHEN 'backfill_group.canceling' THEN 24
        WHEN 'backfill_group.succeeded' THEN 25 WHEN 'backfill_group.failed' THEN 26
        WHEN 'backfill_group.canceled' THEN 27
    END::smallint
$$;
-- +goose StatementEnd

-- The functions whose types follow the table (event_data's argument, backfill_events' rows)
-- are made again on the view below.
DROP FUNCTION event_data(events);
DROP FUNCTION backfill_events(bigint, bigint, text[], integer);

ALTER TABLE events RENAME TO events_legacy;
ALTER TABLE events_legacy
    ADD COLUMN kind smallint,
    ADD COLUMN state text,
    ADD COLUMN pause_reason text,
    ADD COLUMN pool text,
    ADD COLUMN priority smallint,
    ADD COLUMN max_active_runs integer,
    ADD COLUMN max_failed_runs integer,
    ADD COLUMN num_queued integer,
    ADD COLUMN num_running integer,
    ADD COLUMN num_success integer,
    ADD COLUMN num_failed integer,
    ADD COLUMN num_canceled integer,
    ADD COLUMN num_skipped integer,
    ADD COLUMN num_blocked integer,
    ADD COLUMN updated_at timestamptz,
    ADD COLUMN completed_at timestamptz,
    ALTER COLUMN type DROP NOT NULL,
    ADD CONSTRAINT outbox_typed CHECK ((type IS NULL) <> (kind IS NULL));

-- Fixed-width columns first, widest first, so that a thin row packs without padding.
CREATE TABLE outbox (
    id              bigint      NOT NULL DEFAULT events_next_id(),
    backfill_id     bigint,
    group_id        bigint,
    occurred_at     timestamptz NOT NULL,
    updated_at      timestamptz, -- the document's updated_at when it is not occurred_at
    completed_at    timestamptz,
    max_active_runs integer,
    max_failed_runs integer,
    num_queued      integer,
    num_running     integer,
    num_success     integer,
    num_failed      integer,
    num_canceled    integer,
    num_skipped     integer,
    num_blocked     integer,
    kind            smallint,
    priority        smallint,
    state           text,
    pause_reason    text,
    pool            text,
    -- Rows written before 00037 (and by replicas of the previous version): the type's name,
    -- the DAG, the document (a group's event) or the backfill's row.
    type            text,
    dag_id          text,
    data            jsonb,
    snapshot        backfills,
    PRIMARY KEY (id),
    CONSTRAINT events_of_a_backfill_or_a_group CHECK ((backfill_id IS NULL) <> (group_id IS NULL)),
    CONSTRAINT outbox_typed CHECK ((type IS NULL) <> (kind IS NULL))
) PARTITION BY RANGE (id);

CREATE TABLE outbox_partitions (
    name          text        PRIMARY KEY,
    lo            bigint      NOT NULL,
    hi            bigint      NOT NULL,
    -- When it was created, by the database's clock, and the next transaction id then: the
    -- pace of ids that sizes the next partition.
    created_at    timestamptz NOT NULL,
    created_xid   bigint      NOT NULL,
    -- When the sweep first saw every transaction that could write into it ended, by the
    -- service's clock (backfill_now): retention counts from it.
    closed_at     timestamptz,
    -- The page ranges of its bloom index summarized so far, in heap pages.
    summarized_to bigint      NOT NULL DEFAULT 0,
    CHECK (lo < hi)
);

-- +goose StatementBegin
DO $$
DECLARE
    next_xid constant bigint := pg_snapshot_xmax(pg_current_snapshot())::text::bigint;
    -- Every transaction with a smaller id writes below it; this one writes no event.
    boundary constant bigint := (pg_current_xact_id()::text::bigint + 1) << 12;
    first_hi constant bigint := boundary + ((1::bigint << 22) << 12); -- 4M transactions
BEGIN
    EXECUTE format('ALTER TABLE outbox ATTACH PARTITION events_legacy FOR VALUES FROM (MINVALUE) TO (%s)', boundary);
    EXECUTE format('CREATE TABLE outbox_p%s PARTITION OF outbox FOR VALUES FROM (%s) TO (%s)', boundary, boundary, first_hi);
    INSERT INTO outbox_partitions (name, lo, hi, created_at, created_xid)
    VALUES ('events_legacy', 0, boundary, now(), next_xid),
           ('outbox_p' || boundary, boundary, first_hi, now(), next_xid);
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Attaches partitions until one lies wholly ahead of the next transaction id, each as wide as
-- the transaction ids the database used in span at the pace since the last one was made,
-- within [min_xids, max_xids]; answers how many it attached. Replicas take turns (an advisory
-- lock); ATTACH takes SHARE UPDATE EXCLUSIVE on the outbox, so readers and writers go on.
CREATE FUNCTION outbox_ensure_partitions(span interval, min_xids bigint, max_xids bigint) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    top outbox_partitions;
    next_xid bigint;
    elapsed double precision;
    width bigint;
    p_lo bigint;
    p_hi bigint;
    p_name text;
    created integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('outbox_partitions'));
    LOOP
        SELECT * INTO top FROM outbox_partitions ORDER BY hi DESC LIMIT 1;
        next_xid := pg_snapshot_xmax(pg_current_snapshot())::text::bigint;
        -- One ahead is the rule; more than one only after the ids ran past every partition.
        EXIT WHEN next_xid << 12 < top.lo OR created >= 4;
        elapsed := extract(epoch FROM clock_timestamp() - top.created_at);
        width := CASE WHEN elapsed < 1 OR next_xid <= top.created_xid THEN (top.hi - top.lo) >> 12
                      ELSE ((next_xid - top.created_xid) / elapsed * extract(epoch FROM span))::bigint END;
        width := least(greatest(width, min_xids), max_xids);
        p_lo := top.hi;
        p_hi := greatest(p_lo + (width << 12), (next_xid + min_xids) << 12);
        p_name := 'outbox_p' || p_lo;
        EXECUTE format('CREATE TABLE %I (LIKE outbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', p_name);
        -- The bound as a constraint first: ATTACH need not scan the table for it.
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (id >= %s AND id < %s)', p_name, p_name || '_range', p_lo, p_hi);
        EXECUTE format('ALTER TABLE outbox ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)', p_name, p_lo, p_hi);
        INSERT INTO outbox_partitions (name, lo, hi, created_at, created_xid)
        VALUES (p_name, p_lo, p_hi, clock_timestamp(), next_xid);
        created := created + 1;
    END LOOP;
    RETURN created;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Summarizes the bloom index's page ranges that no longer take rows: a closed partition's
-- all, an open one's full ranges but its last margin_pages pages (concurrent writers extend
-- a table by several pages at once and fill them in any order; a summarized range that still
-- takes rows rewrites its filter at each new value). A read looks at every unsummarized range
-- whole, so replicas run this every second; one at a time (the others return at once).
-- Answers how many partitions it summarized.
CREATE FUNCTION outbox_summarize(margin_pages integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    p record;
    upto bigint;
    n integer := 0;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('outbox_summarize')) THEN
        RETURN 0;
    END IF;
    FOR p IN
        SELECT o.name, o.closed_at, o.summarized_to, i.indexrelid::regclass AS idx,
            pg_relation_size(c.oid) / current_setting('block_size')::bigint AS pages,
            coalesce((SELECT substring(opt FROM 'pages_per_range=(\d+)')::bigint
                      FROM unnest(ic.reloptions) opt WHERE opt LIKE 'pages_per_range=%'), 128) AS per_range
        FROM outbox_partitions o
        JOIN pg_class c ON c.relname = o.name AND c.relnamespace = 'public'::regnamespace
        JOIN pg_index i ON i.indrelid = c.oid
        JOIN pg_class ic ON ic.oid = i.indexrelid
        JOIN pg_am a ON a.oid = ic.relam AND a.amname = 'brin'
        WHERE o.summarized_to >= 0
        ORDER BY o.lo
    LOOP
        IF p.closed_at IS NOT NULL THEN
            PERFORM brin_summarize_new_values(p.idx);
            UPDATE outbox_partitions SET summarized_to = -1 WHERE name = p.name;
            n := n + 1;
            CONTINUE;
        END IF;
        upto := (p.pages - margin_pages) / p.per_range * p.per_range;
        IF upto > p.summarized_to THEN
            PERFORM brin_summarize_range(p.idx, b)
            FROM generate_series(p.summarized_to, upto - 1, p.per_range) b;
            UPDATE outbox_partitions SET summarized_to = upto WHERE name = p.name;
            n := n + 1;
        END IF;
    END LOOP;
    RETURN n;
END
$$;
-- +goose StatementEnd

-- The bloom filters are sized for the page range (16 pages: about a thousand thin events),
-- each at most a tenth of them distinct, with one false match in a thousand ranges. The
-- replicas summarize full ranges (outbox_summarize; autosummarize would ask autovacuum, which
-- may be off, and log each request it could not record).
CREATE INDEX outbox_by_backfill ON outbox
    USING brin (backfill_id int8_bloom_ops (false_positive_rate = 0.001))
    WITH (pages_per_range = 16);

ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_event_id_fkey;
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_event_id_fkey
    FOREIGN KEY (event_id) REFERENCES outbox (id) ON DELETE CASCADE;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION events_next_id() RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    first constant bigint := pg_current_xact_id()::text::bigint << 12;
    candidate bigint := first + coalesce(nullif(current_setting('backfill.event_ordinal', true), '')::integer, 0);
BEGIN
    SELECT greatest(candidate, max(id) + 1) INTO candidate FROM outbox WHERE id >= first AND id < first + 4096;
    IF candidate >= first + 4096 THEN
        RAISE EXCEPTION 'one transaction writes at most 4096 events'
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    PERFORM set_config('backfill.event_ordinal', (candidate - first + 1)::text, true);
    RETURN candidate;
END
$$;
-- +goose StatementEnd

-- A deleted backfill's events are still read for their retention: its row is kept with its
-- bound, and its DAG for GET /events?dag_id=.
ALTER TABLE deleted_backfills ADD COLUMN dag_id text, ADD COLUMN final backfills;
CREATE INDEX deleted_backfills_by_dag ON deleted_backfills (dag_id);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION backfills_keep_deleted_bounds() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO deleted_backfills (id, events_from, deleted_at, dag_id, final)
    SELECT g.id, g.events_from, backfill_now(), g.dag_id, jsonb_populate_record(NULL::backfills, to_jsonb(g))
    FROM gone g
    ON CONFLICT (id) DO NOTHING;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- The description in force from a change on: written with the event of the change that set
-- it (a creation with one, a change of it), since its time. Backfills created before 00037
-- have theirs since -infinity.
CREATE TABLE backfill_descriptions (
    backfill_id bigint      NOT NULL,
    since       timestamptz NOT NULL,
    description text,
    PRIMARY KEY (backfill_id, since)
);
INSERT INTO backfill_descriptions (backfill_id, since, description)
SELECT id, '-infinity', description FROM backfills WHERE description IS NOT NULL;

-- Readers see events as they were: a row per event, its type and DAG by name, its group.
CREATE VIEW events AS
SELECT o.id,
    coalesce(o.type, event_type_name(o.kind)) AS type,
    o.backfill_id,
    coalesce(o.dag_id,
        (SELECT b.dag_id FROM backfills b WHERE b.id = o.backfill_id),
        (SELECT d.dag_id FROM deleted_backfills d WHERE d.id = o.backfill_id)) AS dag_id,
    o.occurred_at, o.data, o.snapshot,
    coalesce(o.group_id, (o.snapshot).group_id,
        (SELECT b.group_id FROM backfills b WHERE b.id = o.backfill_id AND o.kind IS NOT NULL),
        (SELECT (d.final).group_id FROM deleted_backfills d WHERE d.id = o.backfill_id AND o.kind IS NOT NULL)) AS group_id,
    o.kind, o.state, o.pause_reason, o.pool, o.priority, o.max_active_runs, o.max_failed_runs,
    o.num_queued, o.num_running, o.num_success, o.num_failed, o.num_canceled, o.num_skipped,
    o.num_blocked, o.updated_at, o.completed_at
FROM outbox o;
ALTER VIEW events ALTER COLUMN id SET DEFAULT events_next_id();

-- +goose StatementBegin
-- A row written as before 00037 (a replica of the previous version, SQL outside the service):
-- stored as it comes. (A view's trigger does not fire under session_replication_role =
-- replica, which bulk loads use: they write to outbox.)
CREATE FUNCTION events_insert_as_written() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox (id, type, backfill_id, dag_id, occurred_at, data, snapshot, group_id)
    VALUES (NEW.id, NEW.type, NEW.backfill_id, NEW.dag_id, NEW.occurred_at, NEW.data, NEW.snapshot,
            CASE WHEN NEW.backfill_id IS NULL THEN NEW.group_id END);
    -- The previous version's PATCH may have changed the description: the thin events written
    -- after it render the one it stored.
    IF NEW.backfill_id IS NOT NULL AND (NEW.snapshot).id IS NOT NULL
       AND (SELECT d.description FROM backfill_descriptions d
            WHERE d.backfill_id = NEW.backfill_id AND d.since <= NEW.occurred_at
            ORDER BY d.since DESC LIMIT 1) IS DISTINCT FROM (NEW.snapshot).description THEN
        INSERT INTO backfill_descriptions (backfill_id, since, description)
        VALUES (NEW.backfill_id, NEW.occurred_at, (NEW.snapshot).description)
        ON CONFLICT (backfill_id, since) DO UPDATE SET description = EXCLUDED.description;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER events_insert_as_written INSTEAD OF INSERT ON events
FOR EACH ROW EXECUTE FUNCTION events_insert_as_written();

-- +goose StatementBegin
-- The backfill as GET answered it right after a thin event: what never changes from its row
-- (or the copy kept when it was deleted), the rest from the event, its description the one in
-- force at the event.
CREATE FUNCTION event_backfill_json(e events) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
-- PL/pgSQL keeps its statements' plans for the session: as a SQL function (not inlined: it
-- reads tables) its body was planned again in every statement that read events, 2 ms a page.
DECLARE
    b backfills;
BEGIN
    SELECT x.* INTO b FROM backfills x WHERE x.id = e.backfill_id;
    IF NOT FOUND THEN
        SELECT (d.final).* INTO b FROM deleted_backfills d WHERE d.id = e.backfill_id;
        IF b.id IS NULL THEN
            RETURN NULL;
        END IF;
    END IF;
    RETURN backfill_api_json(b) || jsonb_build_object(
        'max_active_runs', e.max_active_runs, 'max_failed_runs', e.max_failed_runs,
        'description', (SELECT d.description FROM backfill_descriptions d
                        WHERE d.backfill_id = e.backfill_id AND d.since <= e.occurred_at
                        ORDER BY d.since DESC LIMIT 1),
        'state', e.state, 'pause_reason', e.pause_reason, 'is_paused', e.state = 'paused',
        'pool', e.pool, 'priority', coalesce(e.priority, 0),
        'updated_at', api_timestamp(coalesce(e.updated_at, e.occurred_at)),
        'completed_at', api_timestamp(e.completed_at),
        'progress', jsonb_build_object(
            'total', coalesce(e.num_queued, 0) + coalesce(e.num_running, 0) + coalesce(e.num_success, 0)
                     + coalesce(e.num_failed, 0) + coalesce(e.num_canceled, 0) + coalesce(e.num_skipped, 0),
            'queued', coalesce(e.num_queued, 0), 'running', coalesce(e.num_running, 0),
            'success', coalesce(e.num_success, 0), 'failed', coalesce(e.num_failed, 0),
            'canceled', coalesce(e.num_canceled, 0), 'skipped', coalesce(e.num_skipped, 0),
            'blocked', coalesce(e.num_blocked, 0)));
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION event_data(e events) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT coalesce(e.data,
        jsonb_build_object('backfill',
            CASE WHEN e.kind IS NULL THEN backfill_api_json(e.snapshot) ELSE event_backfill_json(e) END)
        || CASE WHEN e.type = 'backfill.paused'
                THEN jsonb_build_object('reason', coalesce(e.pause_reason, (e.snapshot).pause_reason, 'user'))
                ELSE '{}'::jsonb END)
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The ids of the events of backfills members in (lo, cut), the first max_events in id order,
-- of the given types (NULL: all). A range of fewer than 2,048 transactions is walked along
-- the primary key, 2,000 rows at most; a longer one, or one the walk did not get through, is
-- read through the bloom index of each partition that overlaps it, by a query that gives the
-- planner no other way in: each partition is read with the members alone as its condition
-- (behind OFFSET 0, so the range is not pushed down to it), and sequential scans are off, so
-- it is a bitmap scan of the bloom index, which looks at each page range's filter and reads
-- the ranges that may hold the members' events. Left to itself, the planner takes the
-- primary key's range whenever the partition has no statistics yet (a new one, where
-- autovacuum is slow or off): every event since the backfill's creation.
CREATE FUNCTION backfill_event_ids(members bigint[], lo bigint, cut bigint, types text[], max_events integer)
RETURNS SETOF bigint
LANGUAGE plpgsql STABLE
ROWS 50
SET enable_seqscan = off
SET enable_bitmapscan = off
SET max_parallel_workers_per_gather = 0
SET jit = off
AS $$
DECLARE
    v_end constant bigint := least(cut, pg_snapshot_xmax(pg_current_snapshot())::text::bigint << 12);
    v_walked bigint;
    v_ids bigint[];
    parts text;
BEGIN
    IF members IS NULL OR cardinality(members) = 0 OR lo >= cut THEN
        RETURN;
    END IF;
    IF (v_end - lo) >> 12 < 2048 THEN
        SELECT count(*), array_agg(w.id ORDER BY w.id) FILTER (
                WHERE w.backfill_id = ANY (members) AND (types IS NULL OR w.type = ANY (types)))
        INTO v_walked, v_ids
        FROM (SELECT o.id, o.backfill_id, coalesce(o.type, event_type_name(o.kind)) AS type
              FROM outbox o WHERE o.id > lo AND o.id < cut ORDER BY o.id LIMIT 2000) w;
        IF v_walked < 2000 THEN
            RETURN QUERY SELECT unnest(v_ids[1:max_events]);
            RETURN;
        END IF;
    END IF;
    SELECT string_agg(format(
        '(SELECT o.id, coalesce(o.type, event_type_name(o.kind)) AS type FROM %s o WHERE o.backfill_id = ANY ($1) OFFSET 0)',
        i.inhrelid::regclass), ' UNION ALL ')
    INTO parts
    FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    LEFT JOIN outbox_partitions p ON p.name = c.relname
    WHERE i.inhparent = 'outbox'::regclass AND NOT i.inhdetachpending
      AND (p.name IS NULL OR (p.hi > backfill_event_ids.lo AND p.lo < backfill_event_ids.cut));
    IF parts IS NULL THEN
        RETURN;
    END IF;
    PERFORM set_config('enable_bitmapscan', 'on', true);
    RETURN QUERY EXECUTE
        'SELECT e.id FROM (' || parts || ') e WHERE e.id > $2 AND e.id < $3'
        || ' AND ($4::text[] IS NULL OR e.type = ANY ($4)) ORDER BY e.id LIMIT $5'
        USING members, lo, cut, types, max_events;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- A backfill's events after after_id, from the backfill's bound (00022) on, which also
-- leaves out the partitions before it. PL/pgSQL keeps its plans between calls; a SQL
-- function with SET clauses was planned again at every call (2 ms).
CREATE FUNCTION backfill_events(backfill bigint, after_id bigint, types text[], max_events integer) RETURNS SETOF events
LANGUAGE plpgsql STABLE
ROWS 50
SET enable_seqscan = off
SET max_parallel_workers_per_gather = 0
SET jit = off
AS $$
BEGIN
    RETURN QUERY
    SELECT e.* FROM backfill_event_ids(ARRAY[backfill],
        greatest(after_id, coalesce(
            (SELECT b.events_from FROM backfills b WHERE b.id = backfill),
            (SELECT d.events_from FROM deleted_backfills d WHERE d.id = backfill),
            9223372036854775807) - 1),
        9223372036854775807, types, max_events) AS k(id)
    -- Each event by its id (OFFSET 0 keeps it a lookup: as a join, the planner merges with a
    -- walk of the whole outbox).
    CROSS JOIN LATERAL (SELECT * FROM events e WHERE e.id = k.id OFFSET 0) e
    ORDER BY e.id;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- One step of a filtered read of the outbox (00023). A step filtered on a backfill, or on a
-- DAG, reads through the bloom index to the end in one statement (the backfills of the DAG,
-- deleted ones included, that may have events after the reader's position); other steps look
-- at max_rows rows after the position, as before. Every step answers the position it reached.
CREATE OR REPLACE FUNCTION events_scan(after_id bigint, max_rows integer, backfill bigint, event_type text, dag text, max_events integer)
RETURNS TABLE(hi bigint, scanned bigint, horizon bigint, servable bigint, id bigint)
LANGUAGE plpgsql STABLE
-- A page's worth of rows, not the default thousand, for the plans of the statements that
-- join on it.
ROWS 50
-- Each branch sets the scans it may use; these restore them after the call.
SET enable_seqscan = off
SET enable_bitmapscan = on
SET max_parallel_workers_per_gather = 0
SET jit = off
AS $$
DECLARE
    v_snap constant pg_snapshot := pg_current_snapshot();
    v_floor constant bigint := pg_snapshot_xmin(v_snap)::text::bigint << 12;
    v_lo bigint := after_id;
    v_edge bigint;
    v_cut bigint;
    v_servable bigint;
    v_members bigint[];
BEGIN
    IF backfill IS NULL AND dag IS NULL THEN
        -- Along the primary key, max_rows rows at the most.
        PERFORM set_config('enable_bitmapscan', 'off', true);
        RETURN QUERY
        WITH edge AS MATERIALIZED (
            SELECT max(s.id) AS hi, count(*) AS scanned
            FROM (SELECT o.id FROM outbox o WHERE o.id > after_id ORDER BY o.id LIMIT max_rows) s),
        bound AS MATERIALIZED (
            SELECT CASE WHEN coalesce(edge.hi < v_floor, true) THEN v_floor
                ELSE event_horizon(v_snap) END AS horizon
            FROM edge),
        kept AS (
            SELECT o.id FROM outbox o
            WHERE o.id > after_id AND o.id <= (SELECT edge.hi FROM edge)
              AND o.id < (SELECT bound.horizon FROM bound)
              AND (event_type IS NULL OR coalesce(o.type, event_type_name(o.kind)) = event_type)
            ORDER BY o.id LIMIT max_events),
        pos AS (
            SELECT edge.hi, edge.scanned, bound.horizon,
                (SELECT max(o.id) FROM outbox o
                 WHERE o.id > after_id AND o.id <= (SELECT edge.hi FROM edge)
                   AND o.id < (SELECT bound.horizon FROM bound)) AS servable
            FROM edge, bound)
        SELECT pos.hi, pos.scanned, pos.horizon, pos.servable, kept.id
        FROM pos LEFT JOIN kept ON true
        ORDER BY kept.id;
        RETURN;
    END IF;

    IF backfill IS NOT NULL THEN
        v_members := ARRAY[backfill];
        v_lo := greatest(after_id, coalesce(
            (SELECT b.events_from FROM backfills b WHERE b.id = backfill),
            (SELECT d.events_from FROM deleted_backfills d WHERE d.id = backfill),
            9223372036854775807) - 1);
    ELSE
        -- The DAG's backfills that may have an event after the position: not ended an hour
        -- before the event at it was written (a backfill writes none after its end).
        SELECT coalesce(array_agg(m.id), '{}'), greatest(after_id, min(m.events_from) - 1)
        INTO v_members, v_lo
        FROM (SELECT b.id, b.events_from FROM backfills b
              WHERE b.dag_id = dag
                AND (b.completed_at IS NULL OR b.updated_at >= coalesce(
                    (SELECT o.occurred_at FROM outbox o WHERE o.id <= after_id ORDER BY o.id DESC LIMIT 1),
                    '-infinity') - interval '1 hour')
              UNION ALL
              SELECT d.id, d.events_from FROM deleted_backfills d WHERE d.dag_id = dag) m;
        v_lo := coalesce(v_lo, after_id);
    END IF;

    -- The position: everything up to the horizon is looked at, through the index.
    SELECT max(o.id) INTO v_edge FROM outbox o WHERE o.id > after_id;
    v_cut := CASE WHEN coalesce(v_edge < v_floor, true) THEN v_floor ELSE event_horizon(v_snap) END;
    SELECT max(o.id) INTO v_servable FROM outbox o WHERE o.id > after_id AND o.id < v_cut;
    RETURN QUERY
    WITH kept AS (
        SELECT k.id FROM backfill_event_ids(v_members, v_lo, v_cut,
            CASE WHEN event_type IS NULL THEN NULL ELSE ARRAY[event_type] END, max_events) AS k(id))
    SELECT v_edge, 0::bigint, v_cut, v_servable, kept.id
    FROM (SELECT 1) one LEFT JOIN kept ON true
    ORDER BY kept.id;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Writes a backfill's thin events: kinds[i] with id first_id + i - 1, from the row b as it is
-- after the change (a zero count or priority as NULL: a bit of the row's null bitmap, not four
-- bytes); and the description in force from the change's time when the change set
-- it (or it is a creation with one). Answers how many events it wrote.
CREATE FUNCTION backfill_events_insert(b backfills, first_id bigint, kinds text[], change_at timestamptz, described boolean)
RETURNS integer
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox (id, kind, backfill_id, occurred_at, updated_at, completed_at, state, pause_reason,
        max_active_runs, max_failed_runs, priority, pool, num_queued, num_running, num_success,
        num_failed, num_canceled, num_skipped, num_blocked)
    SELECT first_id + i - 1, event_kind(kinds[i]), b.id, change_at, nullif(b.updated_at, change_at),
        b.completed_at, b.state, b.pause_reason, b.max_active_runs, b.max_failed_runs,
        nullif(b.priority, 0), b.pool, nullif(b.num_queued, 0), nullif(b.num_running, 0),
        nullif(b.num_success, 0), nullif(b.num_failed, 0), nullif(b.num_canceled, 0),
        nullif(b.num_skipped, 0), nullif(b.num_blocked, 0)
    FROM generate_subscripts(kinds, 1) AS i;
    IF described THEN
        INSERT INTO backfill_descriptions (backfill_id, since, description)
        VALUES (b.id, change_at, b.description)
        ON CONFLICT (backfill_id, since) DO UPDATE SET description = EXCLUDED.description;
    END IF;
    RETURN cardinality(kinds);
END
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
    described boolean := false;
    -- The change's time: the updated_at its statement set (backfill_change_time, which
    -- orders a backfill's changes), or now for a statement that set none (the foreign key's
    -- SET NULL, a creation's final row).
    change_at constant timestamptz := CASE
        WHEN TG_OP = 'UPDATE' AND NEW.updated_at IS NOT DISTINCT FROM OLD.updated_at THEN backfill_now()
        ELSE NEW.updated_at END;
    cur backfills;
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- A backfill born terminal writes its creation with its final row, below.
        IF born_terminal THEN
            RETURN NULL;
        END IF;
        kinds := ARRAY['backfill.created'];
        described := NEW.description IS NOT NULL;
    ELSIF part = 'settings' THEN
        -- Its statement set a setting without writing the event itself (the trigger's WHEN):
        -- the foreign key's SET NULL when a pool is deleted, a group's PATCH, or SQL outside
        -- the service.
        IF (OLD.max_active_runs, OLD.description, OLD.max_failed_runs, OLD.pool)
           IS DISTINCT FROM (NEW.max_active_runs, NEW.description, NEW.max_failed_runs, NEW.pool) THEN
            kinds := ARRAY['backfill.updated'];
            described := OLD.description IS DISTINCT FROM NEW.description;
        END IF;
    ELSIF born_terminal AND OLD.state = 'running' AND NEW.state = 'succeeded' THEN
        kinds := ARRAY['backfill.created', 'backfill.succeeded'];
        described := NEW.description IS NOT NULL;
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
    SELECT coalesce(max(o.id) + 1, first_id) INTO first_id FROM outbox o
    WHERE o.id >= first_id AND o.id < first_id + 4096;
    IF first_id + cardinality(kinds) > ((first_id >> 12) + 1) << 12 THEN
        RAISE EXCEPTION 'one transaction writes at most 4096 events'
            USING ERRCODE = 'program_limit_exceeded';
    END IF;

    -- The event is the backfill as GET answers it after the transaction (00015): the row as it
    -- is at COMMIT. A state's event is not written when a later statement of this transaction
    -- changed the state again (that change's firing reports it). SERIALIZABLE transactions,
    -- INSERTs, and an UPDATE whose row a later statement deleted use NEW.
    IF TG_OP = 'UPDATE' AND current_setting('transaction_isolation') <> 'serializable' THEN
        SELECT b.* INTO cur FROM backfills b WHERE b.id = NEW.id;
        IF FOUND THEN
            IF part = 'settings' OR cur.state = NEW.state THEN
                PERFORM backfill_events_insert(cur, first_id, kinds, change_at, described);
            END IF;
            RETURN NULL; -- or its state changed again later in this transaction
        END IF;
    END IF;
    PERFORM backfill_events_insert(NEW, first_id, kinds, change_at, described);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION backfill_group_events_write() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    kind text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        kind := 'backfill_group.created';
    ELSE
        kind := CASE
            WHEN NEW.state = 'paused' THEN 'backfill_group.paused'
            WHEN NEW.state = 'running' AND OLD.state = 'paused' THEN 'backfill_group.unpaused'
            WHEN NEW.state IN ('canceling', 'succeeded', 'failed', 'canceled') THEN 'backfill_group.' || NEW.state
        END;
        -- A later statement of this transaction changed the state again: its firing reports it.
        IF kind IS NULL OR NOT EXISTS (SELECT 1 FROM backfill_groups g WHERE g.id = NEW.id AND g.state = NEW.state) THEN
            RETURN NULL;
        END IF;
    END IF;
    -- A group's events are few: each keeps its whole document.
    INSERT INTO outbox (kind, group_id, occurred_at, data)
    VALUES (event_kind(kind), NEW.id, NEW.updated_at,
            jsonb_build_object('group', backfill_group_api_json(NEW.id))
            || CASE WHEN kind = 'backfill_group.paused'
                    THEN jsonb_build_object('reason', coalesce(NEW.pause_reason, 'user'))
                    ELSE '{}'::jsonb END);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION backfill_events(bigint, bigint, text[], integer);
DROP FUNCTION event_data(events);

-- One plain table again: a thin event is stored with its document rendered.
CREATE TABLE events_plain (
    id bigint NOT NULL,
    type text NOT NULL,
    backfill_id bigint,
    dag_id text,
    occurred_at timestamptz NOT NULL,
    data jsonb,
    snapshot backfills,
    group_id bigint
);
INSERT INTO events_plain (id, type, backfill_id, dag_id, occurred_at, data, snapshot, group_id)
SELECT e.id, e.type, e.backfill_id, e.dag_id, e.occurred_at,
    CASE WHEN e.kind IS NULL THEN e.data ELSE coalesce(e.data,
        jsonb_build_object('backfill', event_backfill_json(e))
        || CASE WHEN e.type = 'backfill.paused' THEN jsonb_build_object('reason', coalesce(e.pause_reason, 'user'))
                ELSE '{}'::jsonb END) END,
    e.snapshot, CASE WHEN e.backfill_id IS NULL THEN e.group_id END
FROM events e;
DROP FUNCTION event_backfill_json(events);
DROP VIEW events;
DROP FUNCTION events_insert_as_written();
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_event_id_fkey;
DROP TABLE outbox;
DROP TABLE outbox_partitions;
DROP TABLE backfill_descriptions;
ALTER TABLE events_plain RENAME TO events;
ALTER TABLE events ALTER COLUMN id SET DEFAULT events_next_id();
ALTER TABLE events ADD CONSTRAINT events_pkey PRIMARY KEY (id);
ALTER TABLE events ADD CONSTRAINT events_of_a_backfill_or_a_group CHECK ((backfill_id IS NULL) <> (group_id IS NULL));
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_event_id_fkey
    FOREIGN KEY (event_id) REFERENCES events (id) ON DELETE CASCADE;
DROP INDEX deleted_backfills_by_dag;
ALTER TABLE deleted_backfills DROP COLUMN dag_id, DROP COLUMN final;
DROP FUNCTION backfill_events_insert(backfills, bigint, text[], timestamptz, boolean);
DROP FUNCTION outbox_ensure_partitions(interval, bigint, bigint);
DROP FUNCTION outbox_summarize(integer);
DROP FUNCTION backfill_event_ids(bigint[], bigint, bigint, text[], integer);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION events_next_id() RETURNS bigint
    LANGUAGE plpgsql
    AS $$
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
CREATE OR REPLACE FUNCTION backfills_keep_deleted_bounds() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO deleted_backfills (id, events_from, deleted_at)
    SELECT id, events_from, backfill_now() FROM gone
    ON CONFLICT (id) DO NOTHING;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION backfill_events_write() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION backfill_group_events_write() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    kind text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        kind := 'backfill_group.created';
    ELSE
        kind := CASE
            WHEN NEW.state = 'paused' THEN 'backfill_group.paused'
            WHEN NEW.state = 'running' AND OLD.state = 'paused' THEN 'backfill_group.unpaused'
            WHEN NEW.state IN ('canceling', 'succeeded', 'failed', 'canceled') THEN 'backfill_group.' || NEW.state
        END;
        -- A later statement of this transaction changed the state again: its firing reports it.
        IF kind IS NULL OR NOT EXISTS (SELECT 1 FROM backfill_groups g WHERE g.id = NEW.id AND g.state = NEW.state) THEN
            RETURN NULL;
        END IF;
    END IF;
    INSERT INTO events (type, group_id, occurred_at, data)
    VALUES (kind, NEW.id, NEW.updated_at,
            jsonb_build_object('group', backfill_group_api_json(NEW.id))
            || CASE WHEN kind = 'backfill_group.paused'
                    THEN jsonb_build_object('reason', coalesce(NEW.pause_reason, 'user'))
                    ELSE '{}'::jsonb END);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION event_data(e events) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
    SELECT coalesce(e.data,
        jsonb_build_object('backfill', backfill_api_json(e.snapshot))
        || CASE WHEN e.type = 'backfill.paused'
                THEN jsonb_build_object('reason', coalesce((e.snapshot).pause_reason, 'user'))
                ELSE '{}'::jsonb END)
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION backfill_events(backfill bigint, after_id bigint, types text[], max_events integer) RETURNS SETOF events
    LANGUAGE sql STABLE
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
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

DROP FUNCTION events_scan(bigint, integer, bigint, text, text, integer);
-- +goose StatementBegin
CREATE FUNCTION events_scan(after_id bigint, max_rows integer, backfill bigint, event_type text, dag text, max_events integer) RETURNS TABLE(hi bigint, scanned bigint, horizon bigint, servable bigint, id bigint)
    LANGUAGE sql STABLE
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    AS $$
    WITH snap AS (SELECT pg_current_snapshot() AS s),
    lo AS MATERIALIZED (
        SELECT greatest(after_id, CASE WHEN backfill IS NULL THEN 0 ELSE coalesce(
            (SELECT b.events_from FROM backfills b WHERE b.id = backfill),
            (SELECT d.events_from FROM deleted_backfills d WHERE d.id = backfill),
            9223372036854775807) - 1 END) AS lo),
    edge AS MATERIALIZED (
        SELECT max(s.id) AS hi, count(*) AS scanned
        FROM (SELECT e.id FROM events e WHERE e.id > (SELECT lo FROM lo) ORDER BY e.id LIMIT max_rows) s),
    bound AS MATERIALIZED (
        SELECT CASE WHEN coalesce(edge.hi < (pg_snapshot_xmin(snap.s)::text::bigint << 12), true)
            THEN pg_snapshot_xmin(snap.s)::text::bigint << 12
            ELSE event_horizon(snap.s) END AS horizon
        FROM snap, edge),
    kept AS (
        SELECT e.id FROM events e
        WHERE e.id > (SELECT lo FROM lo) AND e.id <= (SELECT hi FROM edge)
          AND e.id < (SELECT horizon FROM bound)
          AND (backfill IS NULL OR e.backfill_id = backfill)
          AND (event_type IS NULL OR e.type = event_type)
          AND (dag IS NULL OR e.dag_id = dag)
        ORDER BY e.id LIMIT max_events),
    pos AS (
        SELECT edge.hi, edge.scanned, bound.horizon,
            (SELECT max(e.id) FROM events e
             WHERE e.id > (SELECT lo FROM lo) AND e.id <= (SELECT hi FROM edge)
               AND e.id < (SELECT horizon FROM bound)) AS servable
        FROM edge, bound)
    SELECT pos.hi, pos.scanned, pos.horizon, pos.servable, kept.id
    FROM pos LEFT JOIN kept ON true
    ORDER BY kept.id
$$;
-- +goose StatementEnd

DROP FUNCTION event_kind(text);
DROP FUNCTION event_type_name(smallint);
