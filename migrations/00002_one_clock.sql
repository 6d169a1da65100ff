-- The service's one clock. Every timestamp the service writes and every lease decision (claim,
-- heartbeat, expiry) is taken from backfill_now() inside SQL, so replicas whose own clocks
-- disagree still agree on every lease: there is only the database's clock. now() is the start
-- of the current transaction, which also gives each transaction one "now".
--
-- The test harness (internal/pgtest) redefines this function in its template database so that
-- tests can move time forward without sleeping; production never does.

-- +goose Up
CREATE FUNCTION backfill_now() RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT now() $$;

-- +goose Down
DROP FUNCTION backfill_now();
