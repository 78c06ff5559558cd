-- The outbox of events (docs/events.md): one row per status change a campaign system cares
-- about, written in the transaction of that change, never updated; delivered to each webhook
-- receiver in commit order by a cursor per receiver (event_receivers), dead ones noted per
-- receiver (event_dead).
CREATE TABLE events (
    -- The writing transaction (pg_current_xact_id) and the order within it: a receiver's
    -- cursor only passes events whose transaction ended before every running one began
    -- (pg_snapshot_xmin), so an event committed late is never skipped.
    xid          bigint NOT NULL DEFAULT (pg_current_xact_id()::text::bigint),
    seq          bigint GENERATED ALWAYS AS IDENTITY,
    -- The stable id a receiver de-duplicates on (identical on every redelivery).
    id           uuid NOT NULL DEFAULT gen_random_uuid(),
    kind         text NOT NULL CHECK (kind IN ('accepted', 'sent', 'deferred', 'failed', 'bounced', 'cancelled')),
    message_id   uuid NOT NULL,
    campaign_id  text,
    sender_id    uuid,
    recipients   integer NOT NULL,
    reason       text,
    next_attempt_at timestamptz,
    occurred_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (xid, seq)
);

-- `deferred` at most once per message and reason.
CREATE UNIQUE INDEX events_deferred_once ON events (message_id, reason) WHERE kind = 'deferred';

CREATE TABLE event_receivers (
    -- sha256 of the URL (hex): a URL may carry a token in its query; `display` is redacted.
    url_key      text PRIMARY KEY,
    display      text NOT NULL,
    -- The last event delivered (or dead) here: (xid, seq).
    cursor_xid   bigint NOT NULL DEFAULT 0,
    cursor_seq   bigint NOT NULL DEFAULT 0,
    -- The replica delivering to it now, until when (claimed FOR UPDATE SKIP LOCKED).
    leased_by    uuid,
    leased_until timestamptz,
    failures     integer NOT NULL DEFAULT 0,
    next_try_at  timestamptz NOT NULL DEFAULT now(),
    last_error   text,
    delivered    bigint NOT NULL DEFAULT 0,
    dead         bigint NOT NULL DEFAULT 0,
    seen_at      timestamptz NOT NULL DEFAULT now(),
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE event_dead (
    url_key  text NOT NULL REFERENCES event_receivers (url_key) ON DELETE CASCADE,
    xid      bigint NOT NULL,
    seq      bigint NOT NULL,
    reason   text NOT NULL,
    dead_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (url_key, xid, seq)
);
