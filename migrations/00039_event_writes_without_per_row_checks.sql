-- An event's INSERT and a PATCH's UPDATE no longer prepare expressions they cannot need.
--
-- PostgreSQL reads a CHECK constraint, and a trigger's WHEN, back from its stored node text and
-- plans it again in every statement that writes the table; nothing carries over from one
-- execution of a prepared statement to the next. Counted with callgrind on the PATCH's
-- prepared statement (one backend, 200 executions, instructions per execution; the floor is
-- the same statement without its event and with the event triggers disabled):
--
--   floor                                            1,255,553
--   event triggers enabled                           1,283,408   (+27,855)
--   with its event (as shipped before this)          1,424,000   (+168,400 over the floor)
--   backfills_events_on_state as below               1,411,530
--   and without the outbox's two CHECKs              1,353,831   (+98,300 over the floor)
--
-- 1. backfills_events_on_state fires only for a statement that sets state or num_failed.
--    Its WHEN (the state changed) was prepared for every UPDATE of backfills, a PATCH's and
--    the counter trigger's for every claim and report included. A state changes either in a
--    statement that sets it, or in the one BEFORE trigger that sets NEW.state,
--    backfills_pause_rules, which does so only when num_failed rose, that is in a statement
--    that sets num_failed (no BEFORE trigger changes num_failed). A column list sees only the statement's SET list, not what a BEFORE
--    trigger changes, which is why 00018 had none: num_failed in it covers the failure
--    budget's pause. TestStateEventTriggerCoversEveryBeforeTriggerThatChangesState
--    (tests/events_shape_test.go) fails when a BEFORE UPDATE trigger is added to backfills, so
--    that its author checks this list.
-- 2. The outbox keeps no CHECK: events_of_a_backfill_or_a_group and outbox_typed cost every
--    event 58,000 instructions, a third of what writing it costs, to check what its four
--    writers build by construction (the PATCH's statement, backfill_events_insert, the group
--    trigger and events_insert_as_written: each sets exactly one of backfill_id and
--    group_id and one of kind and type). The test invariants (internal/testkit/invariants)
--    check both over the whole outbox after the fault, chaos, history and HA runs, and
--    tests/events_shape_test.go after each writer.
--
-- The ALTER takes the outbox's and its partitions' locks for a catalog change only (no scan):
-- every partition's copy of the two is inherited, and goes with the parent's.

-- +goose Up
ALTER TABLE outbox DROP CONSTRAINT events_of_a_backfill_or_a_group, DROP CONSTRAINT outbox_typed;

DROP TRIGGER backfills_events_on_state ON backfills;
CREATE CONSTRAINT TRIGGER backfills_events_on_state
    AFTER UPDATE OF state, num_failed ON backfills
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION backfill_events_write('state');

-- +goose Down
DROP TRIGGER backfills_events_on_state ON backfills;
CREATE CONSTRAINT TRIGGER backfills_events_on_state
    AFTER UPDATE ON backfills
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION backfill_events_write('state');

ALTER TABLE outbox
    ADD CONSTRAINT events_of_a_backfill_or_a_group CHECK ((backfill_id IS NULL) <> (group_id IS NULL)),
    ADD CONSTRAINT outbox_typed CHECK ((type IS NULL) <> (kind IS NULL));
