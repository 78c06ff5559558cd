-- Delivered, not just sent (issue 42): Exchange's message trace (Graph v1.0) tells each
-- recipient's fate after Graph's 202. A message whose every recipient was delivered ends
-- `DELIVERED`; one with a failed recipient `BOUNCED` (as an NDR makes it); it stays `SENT` while
-- any is pending. `recipient_outcomes` keeps each recipient's fate (keyed by message and
-- recipient, lower case), the trace's status, its time and, for a failure, the code and text.
-- `trace_reads`: one row per Graph tenant whose trace is read, taken by one replica at a time
-- (as `bounce_reads`), with the pause a 401/403 starts. `trace_delivery`: the senders file's
-- `traceDelivery` (NULL: GRAPH_TRACE_DELIVERY decides). Events `delivered` and `filtered`, and a
-- recipient on the per-recipient outcome events, each written once per recipient.
ALTER TABLE messages DROP CONSTRAINT messages_status_check;
ALTER TABLE messages ADD CONSTRAINT messages_status_check
    CHECK (status IN ('SCHEDULED', 'SENDING', 'SENT', 'ERROR', 'BOUNCED', 'DELIVERED')) NOT VALID;
ALTER TABLE messages VALIDATE CONSTRAINT messages_status_check;
ALTER TABLE messages ADD COLUMN delivered_at timestamptz;

CREATE TABLE recipient_outcomes (
    message_id  uuid NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    recipient   text NOT NULL,
    trace_status text NOT NULL,
    outcome     text NOT NULL CHECK (outcome IN ('pending', 'delivered', 'failed', 'filtered')),
    at          timestamptz NOT NULL,
    code        text,
    detail      text,
    trace_id    text,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (message_id, recipient)
);

ALTER TABLE events DROP CONSTRAINT events_kind_check;
ALTER TABLE events ADD CONSTRAINT events_kind_check
    CHECK (kind IN ('accepted', 'sent', 'deferred', 'failed', 'bounced', 'cancelled', 'delivered', 'filtered')) NOT VALID;
ALTER TABLE events VALIDATE CONSTRAINT events_kind_check;
ALTER TABLE events ADD COLUMN recipient text;
CREATE UNIQUE INDEX events_recipient_once ON events (message_id, kind, recipient)
    WHERE recipient IS NOT NULL;

ALTER TABLE tenants ADD COLUMN trace_delivery boolean;
ALTER TABLE system_mailboxes ADD COLUMN trace_delivery boolean;

CREATE TABLE trace_reads (
    tenant       text PRIMARY KEY,
    next_read_at timestamptz NOT NULL,
    reader       text NOT NULL,
    paused_reason text
);
