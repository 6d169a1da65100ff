-- One table of idempotency keys for every creating POST (a backfill or its retry, a claim, a
-- webhook, a manual run), recorded in the same transaction as the change, so that a request
-- whose commit was lost and that is sent again with its key ends exactly once.
--
-- operation names the kind of request: keys are global, and a key reused for another kind of
-- request is a different request (422 idempotency_key_reused). result_ids are the rows the
-- first request answered (the backfill, the runs handed out, the webhook, the run); a replay
-- reads them as they are now. dag_id is the DAG the rows belong to, for the requests that
-- have one, so that deleting a DAG takes its keys with it by index. dag_run_conf keeps its
-- name: it is the request's conf (a backfill's dag_run_conf, a manual run's conf), compared
-- as jsonb.

-- +goose Up
ALTER TABLE idempotency_keys
    ADD COLUMN operation  text NOT NULL DEFAULT 'backfill',
    ADD COLUMN result_ids bigint[],
    ADD COLUMN dag_id     text;

-- Every key stored so far is a backfill's (POST /backfills and its retry).
UPDATE idempotency_keys k
SET result_ids = ARRAY[k.backfill_id],
    dag_id = (SELECT b.dag_id FROM backfills b WHERE b.id = k.backfill_id);
-- A key without a backfill answered nothing: no replay can be made from it.
DELETE FROM idempotency_keys WHERE result_ids = ARRAY[NULL]::bigint[];

ALTER TABLE idempotency_keys
    ALTER COLUMN operation DROP DEFAULT,
    ALTER COLUMN result_ids SET NOT NULL,
    DROP COLUMN backfill_id,
    ADD CONSTRAINT idempotency_keys_operation_valid
        CHECK (operation IN ('backfill', 'claim', 'webhook', 'dag_run'));

CREATE INDEX idempotency_keys_by_dag ON idempotency_keys (dag_id) WHERE dag_id IS NOT NULL;

-- +goose Down
DROP INDEX idempotency_keys_by_dag;
ALTER TABLE idempotency_keys
    DROP CONSTRAINT idempotency_keys_operation_valid,
    ADD COLUMN backfill_id bigint;
-- The old table knew only backfills' keys: the others go.
DELETE FROM idempotency_keys WHERE operation <> 'backfill';
UPDATE idempotency_keys SET backfill_id = result_ids[1];
ALTER TABLE idempotency_keys
    DROP COLUMN operation,
    DROP COLUMN result_ids,
    DROP COLUMN dag_id;
