-- Bounces read back from the sending mailbox (issue 25). A Graph message whose non-delivery
-- report (NDR) arrived in the mailbox's Inbox ends `BOUNCED` (terminal, like SENT and ERROR),
-- with the DSN status code (`5.1.1`), its text (scrubbed) and when the NDR was read.
-- `read_bounces`: the senders file's `readBounces` (default true: read when GRAPH_READ_BOUNCES=on).
-- `bounce_reads`: one row per mailbox whose Inbox is read; a replica takes the mailbox's read by
-- moving `next_read_at` past now in one statement (store::bounce_reads), so two replicas never
-- read one Inbox at once, and each Inbox is read about once per GRAPH_BOUNCE_INTERVAL in all.
ALTER TABLE messages DROP CONSTRAINT messages_status_check;
ALTER TABLE messages ADD CONSTRAINT messages_status_check
    CHECK (status IN ('SCHEDULED', 'SENDING', 'SENT', 'ERROR', 'BOUNCED')) NOT VALID;
ALTER TABLE messages VALIDATE CONSTRAINT messages_status_check;
ALTER TABLE messages
    ADD COLUMN bounced_at  timestamptz,
    ADD COLUMN bounce_code text,
    ADD COLUMN bounce_text text;

ALTER TABLE tenants ADD COLUMN read_bounces boolean NOT NULL DEFAULT true;
ALTER TABLE system_mailboxes ADD COLUMN read_bounces boolean NOT NULL DEFAULT true;

CREATE TABLE bounce_reads (
    mailbox      text PRIMARY KEY,
    next_read_at timestamptz NOT NULL,
    reader       text NOT NULL
);
