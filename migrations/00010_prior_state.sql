-- A slot whose run a later backfill takes over keeps showing the state the run had then, so
-- that a terminal backfill's record never changes. Until now the takeover wrote that state
-- onto the old owner's slot (frozen_state, frozen_attempt, frozen_note): an UPDATE of one
-- more row per run taken over, about a fifth of a 100,000-run reprocess. The takeover now
-- records it on the row it inserts anyway, the new owner's slot, with the backfill it took
-- the run from (prior_backfill_id). The old slot finds it through backfill_dag_runs_by_run:
-- a run has one slot per backfill that owned it, and leaves a backfill at most once (only a
-- terminal backfill's runs are taken over, and a terminal backfill takes nothing back).
--
-- backfill_slot_records is what a slot shows, in one place: the listing, a retry's choice of
-- slots and the invariant checks all read it. A skipped slot (no run) shows no state.

-- +goose Up
ALTER TABLE backfill_dag_runs
    ADD COLUMN prior_backfill_id bigint,
    ADD COLUMN prior_state       text,
    ADD COLUMN prior_attempt     integer,
    ADD COLUMN prior_note        text,
    ADD CONSTRAINT backfill_dag_runs_prior_state_valid
        CHECK (prior_state IS NULL OR prior_state IN ('success', 'failed', 'canceled')),
    ADD CONSTRAINT backfill_dag_runs_prior_iff_owner
        CHECK ((prior_backfill_id IS NULL) = (prior_state IS NULL));

-- Each frozen slot's record moves to the slot of the run's next owner: the backfill with the
-- lowest id above the frozen slot's among the run's slots.
UPDATE backfill_dag_runs n
SET prior_backfill_id = o.backfill_id, prior_state = o.frozen_state,
    prior_attempt = o.frozen_attempt, prior_note = o.frozen_note
FROM backfill_dag_runs o
WHERE o.frozen_state IS NOT NULL
  AND n.dag_run_id = o.dag_run_id
  AND n.backfill_id = (SELECT min(x.backfill_id) FROM backfill_dag_runs x
                       WHERE x.dag_run_id = o.dag_run_id AND x.backfill_id > o.backfill_id);

ALTER TABLE backfill_dag_runs
    DROP CONSTRAINT backfill_dag_runs_frozen_state_valid,
    DROP COLUMN frozen_state,
    DROP COLUMN frozen_attempt,
    DROP COLUMN frozen_note;

CREATE VIEW backfill_slot_records AS
SELECT s.backfill_id, s.sort_ordinal, s.logical_date, s.dag_run_id, s.exception_reason, r.run_id,
       nx.backfill_id IS NOT NULL AS taken_over,
       CASE WHEN nx.backfill_id IS NULL THEN r.state ELSE nx.prior_state END AS state,
       CASE WHEN nx.backfill_id IS NULL THEN r.attempt ELSE nx.prior_attempt END AS attempt,
       CASE WHEN nx.backfill_id IS NULL THEN r.note ELSE nx.prior_note END AS note
FROM backfill_dag_runs s
LEFT JOIN dag_runs r ON r.id = s.dag_run_id
LEFT JOIN backfill_dag_runs nx ON nx.dag_run_id = s.dag_run_id AND nx.prior_backfill_id = s.backfill_id;

-- +goose Down
DROP VIEW backfill_slot_records;

ALTER TABLE backfill_dag_runs
    ADD COLUMN frozen_state   text,
    ADD COLUMN frozen_attempt integer,
    ADD COLUMN frozen_note    text,
    ADD CONSTRAINT backfill_dag_runs_frozen_state_valid
        CHECK (frozen_state IS NULL OR frozen_state IN ('success', 'failed', 'canceled'));

UPDATE backfill_dag_runs o
SET frozen_state = n.prior_state, frozen_attempt = n.prior_attempt, frozen_note = n.prior_note
FROM backfill_dag_runs n
WHERE n.prior_backfill_id = o.backfill_id AND n.dag_run_id = o.dag_run_id;

ALTER TABLE backfill_dag_runs
    DROP CONSTRAINT backfill_dag_runs_prior_iff_owner,
    DROP CONSTRAINT backfill_dag_runs_prior_state_valid,
    DROP COLUMN prior_note,
    DROP COLUMN prior_attempt,
    DROP COLUMN prior_state,
    DROP COLUMN prior_backfill_id;
