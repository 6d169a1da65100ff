-- Webhooks (Standard Webhooks): registrations, one delivery row per (event, matching webhook),
-- and a log of every attempt.
--
-- A delivery row is made by a trigger on events, in the event's own transaction: an event
-- commits with the deliveries it owes, or not at all, so a crash between "event written" and
-- "delivery scheduled" cannot exist. (A per-webhook cursor over event ids would skip events
-- whose transaction commits after a larger id has been read.)

-- +goose Up
CREATE TABLE webhooks (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    url         text        NOT NULL,
    -- The event types this webhook receives; creation fills in every type when none is given.
    event_types text[]      NOT NULL,
    description text,
    -- whsec_ + base64 of 32 random bytes. Kept as is: signing needs the key itself.
    secret      text        NOT NULL,
    created_at  timestamptz NOT NULL,
    CONSTRAINT webhooks_url_http CHECK (url ~ '^https?://'),
    CONSTRAINT webhooks_event_types_not_empty CHECK (cardinality(event_types) > 0)
);

CREATE TABLE webhook_deliveries (
    webhook_id      bigint      NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event_id        bigint      NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    -- pending: due at next_attempt_at (or claimed until then); delivered; failed: given up.
    state           text        NOT NULL DEFAULT 'pending',
    -- Attempts started so far; a claim takes the next number, so a late result of an attempt
    -- whose claim expired cannot overwrite a newer one.
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz,
    delivered_at    timestamptz,
    created_at      timestamptz NOT NULL,
    PRIMARY KEY (webhook_id, event_id),
    CONSTRAINT webhook_deliveries_state_valid CHECK (state IN ('pending', 'delivered', 'failed')),
    CONSTRAINT webhook_deliveries_due_iff_pending CHECK ((state = 'pending') = (next_attempt_at IS NOT NULL)),
    CONSTRAINT webhook_deliveries_delivered_at_iff_delivered CHECK ((state = 'delivered') = (delivered_at IS NOT NULL))
);

-- The deliverer's claim: the earliest due pending deliveries. Only pending rows are indexed,
-- so the probe's cost follows the backlog, not the history.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
-- The events foreign key's cascade on the retention prune.
CREATE INDEX webhook_deliveries_by_event ON webhook_deliveries (event_id);

CREATE TABLE webhook_attempts (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    webhook_id      bigint      NOT NULL,
    event_id        bigint      NOT NULL,
    attempt         integer     NOT NULL,
    -- NULL when no HTTP answer came (refused address, connection error, timeout) and while
    -- the attempt is in flight.
    status_code     integer,
    error           text,
    attempted_at    timestamptz NOT NULL,
    -- When the next attempt is due after this one failed; NULL once delivered or given up.
    next_attempt_at timestamptz,
    delivered_at    timestamptz,
    FOREIGN KEY (webhook_id, event_id) REFERENCES webhook_deliveries (webhook_id, event_id) ON DELETE CASCADE,
    CONSTRAINT webhook_attempts_one_per_number UNIQUE (webhook_id, event_id, attempt)
);

-- GET /webhooks/{id}/deliveries pages one webhook's attempts in the order they were made.
CREATE INDEX webhook_attempts_by_webhook ON webhook_attempts (webhook_id, id);

-- +goose StatementBegin
CREATE FUNCTION webhook_deliveries_for_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- FOR KEY SHARE holds each matching webhook against a concurrent DELETE until this
    -- transaction ends: the delete then waits and cascades to these rows, instead of this
    -- insert failing its foreign key (and with it the backfill change that wrote the event).
    -- A webhook deleted before this statement is skipped.
    INSERT INTO webhook_deliveries (webhook_id, event_id, next_attempt_at, created_at)
    SELECT w.id, NEW.id, backfill_now(), backfill_now()
    FROM webhooks w
    WHERE NEW.type = ANY (w.event_types)
    FOR KEY SHARE OF w;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER events_schedule_webhook_deliveries
AFTER INSERT ON events
FOR EACH ROW EXECUTE FUNCTION webhook_deliveries_for_event();

-- +goose Down
DROP TRIGGER events_schedule_webhook_deliveries ON events;
DROP FUNCTION webhook_deliveries_for_event();
DROP TABLE webhook_attempts;
DROP TABLE webhook_deliveries;
DROP TABLE webhooks;
