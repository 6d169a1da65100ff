-- A partition of the outbox keeps no CHECK of its bound once it is attached.
--
-- outbox_ensure_partitions (00037) adds the bound as a CHECK constraint before ATTACH, so that
-- ATTACH need not scan the table, and left it there. The PATCH inserts its event into the
-- current partition directly (repo/event_leaf.go), where the partition's bound is checked
-- anyway; PostgreSQL reads every CHECK constraint back from its stored text and plans it in
-- each statement that inserts, so the copy cost every event its parse and evaluation. The
-- constraint is now dropped in the transaction that attached the partition, which holds the
-- new table's lock already: no one waits for it. Partitions attached before this migration
-- keep theirs until retention drops them (dropping it would take a lock every reader of the
-- outbox waits behind).

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_ensure_partitions(span interval, min_xids bigint, max_xids bigint) RETURNS integer
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
        -- The partition's own bound checks every row inserted into it directly; the constraint
        -- would be read back from its text and checked again in every such statement.
        EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', p_name, p_name || '_range');
        INSERT INTO outbox_partitions (name, lo, hi, created_at, created_xid)
        VALUES (p_name, p_lo, p_hi, clock_timestamp(), next_xid);
        created := created + 1;
    END LOOP;
    RETURN created;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION outbox_ensure_partitions(span interval, min_xids bigint, max_xids bigint) RETURNS integer
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
