-- Idempotency compares a request's dag_run_conf as jsonb values (the contract's "Exact at any
-- size"): the conf is stored beside the request hash, which no longer covers it, and a replay
-- compares it with jsonb's `=`. A key stored before this migration has a hash that covered the
-- conf, so no request matches it any more: a retry of such a request (keys live 24 hours)
-- answers 422 idempotency_key_reused instead of a replay. That is the safe side of the
-- change: it never replays a different request, which is what the old hash could do.

-- +goose Up
ALTER TABLE idempotency_keys ADD COLUMN dag_run_conf jsonb;

-- +goose Down
ALTER TABLE idempotency_keys DROP COLUMN dag_run_conf;
