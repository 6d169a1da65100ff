-- The outbox: one row per change of a backfill's state or settings, written in the same
-- transaction as the change (see the writer in a later migration). Readers page it by id;
-- webhook deliveries and the SSE stream are fed from it. Rows are kept at least 7 days and
-- pruned by the sweep.

-- +goose Up
CREATE TABLE events (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    type        text        NOT NULL,
    backfill_id bigint      NOT NULL,
    dag_id      text        NOT NULL,
    occurred_at timestamptz NOT NULL,
    -- { "backfill": <the backfill as GET answers it right after the change>, ... }
    data        jsonb       NOT NULL,
    CONSTRAINT events_type_valid CHECK (type IN (
        'backfill.created', 'backfill.updated', 'backfill.paused', 'backfill.unpaused',
        'backfill.canceling', 'backfill.succeeded', 'backfill.failed', 'backfill.canceled'))
);

-- GET /backfills/{id}/events and the SSE stream read one backfill's events in id order.
CREATE INDEX events_by_backfill ON events (backfill_id, id);

-- The sweep's retention prune.
CREATE INDEX events_by_age ON events (occurred_at);

-- +goose Down
DROP TABLE events;
