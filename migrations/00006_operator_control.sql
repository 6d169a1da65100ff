-- Operator control: a failure budget that pauses a backfill, the reason a backfill is paused,
-- the plan a backfill was created from, the backfill a retry came from, and executors' notes.

-- +goose Up
ALTER TABLE backfills
    ADD COLUMN max_failed_runs    integer,
    ADD COLUMN pause_reason       text,
    ADD COLUMN plan_hash          text,
    ADD COLUMN parent_backfill_id bigint;

-- Backfills paused before this migration were paused by a person.
UPDATE backfills SET pause_reason = 'user' WHERE state = 'paused';

ALTER TABLE backfills
    ADD CONSTRAINT backfills_max_failed_runs_valid CHECK (max_failed_runs IS NULL OR max_failed_runs >= 1),
    ADD CONSTRAINT backfills_pause_reason_valid CHECK (pause_reason IN ('user', 'failure_budget')),
    ADD CONSTRAINT backfills_pause_reason_iff_paused CHECK ((pause_reason IS NOT NULL) = (state = 'paused'));

ALTER TABLE dag_runs
    ADD COLUMN note text,
    ADD CONSTRAINT dag_runs_note_length CHECK (char_length(note) <= 4096);

-- A slot listing shows its run's attempt and note; like frozen_state, they are frozen when a
-- later backfill takes the run over, so that a terminal backfill's record never changes.
ALTER TABLE backfill_dag_runs
    ADD COLUMN frozen_attempt integer,
    ADD COLUMN frozen_note    text;

-- +goose StatementBegin
-- The failure budget, in the transaction that fails the run, whichever path failed it (a
-- report, a lease expiry at MAX_ATTEMPTS, or any later one): every run change moves the
-- backfill's num_failed counter with an UPDATE of this row in the same transaction, and this
-- trigger sees that UPDATE. Because claims lock the backfill row and re-read its state, no
-- claim that commits after the pausing transaction hands out a run of the backfill.
--
-- It also clears pause_reason whenever the backfill leaves 'paused' (unpause, cancel, the
-- sweep's finalization), so that those paths need not know the column exists.
CREATE FUNCTION backfills_pause_rules() RETURNS trigger
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

-- The WHEN keeps the function call off every other update of the row (claims, successes).
-- Lowering max_failed_runs raises no counter, so it does not pause by itself: the next
-- failure does.
CREATE TRIGGER backfills_pause_rules BEFORE UPDATE ON backfills
    FOR EACH ROW
    WHEN (NEW.num_failed > OLD.num_failed OR NEW.state IS DISTINCT FROM OLD.state)
    EXECUTE FUNCTION backfills_pause_rules();

-- +goose StatementBegin
-- A new claim of a run clears the note its last report left. The WHEN is a plain expression
-- evaluated per row without calling the function, so bulk changes that do not start runs
-- (cancels, reprocessing) pay next to nothing for it.
CREATE FUNCTION dag_runs_clear_note_on_claim() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.note := NULL;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER dag_runs_clear_note_on_claim BEFORE UPDATE ON dag_runs
    FOR EACH ROW
    WHEN (NEW.state = 'running' AND OLD.state <> 'running' AND NEW.note IS NOT NULL)
    EXECUTE FUNCTION dag_runs_clear_note_on_claim();

-- +goose Down
DROP TRIGGER dag_runs_clear_note_on_claim ON dag_runs;
DROP FUNCTION dag_runs_clear_note_on_claim();
DROP TRIGGER backfills_pause_rules ON backfills;
DROP FUNCTION backfills_pause_rules();
ALTER TABLE backfill_dag_runs DROP COLUMN frozen_note, DROP COLUMN frozen_attempt;
ALTER TABLE dag_runs DROP COLUMN note;
ALTER TABLE backfills
    DROP CONSTRAINT backfills_pause_reason_iff_paused,
    DROP CONSTRAINT backfills_pause_reason_valid,
    DROP CONSTRAINT backfills_max_failed_runs_valid,
    DROP COLUMN parent_backfill_id,
    DROP COLUMN plan_hash,
    DROP COLUMN pause_reason,
    DROP COLUMN max_failed_runs;
