-- no-transaction
-- The claim round's sender list (issue 23, docs/decisions/0024-claim-round-buffers.md): each known
-- sender (system mailboxes, tenants) probes this index for its oldest due SCHEDULED row, LIMIT
-- 1, instead of one aggregate over every due row (80,000 heap buffers a round with 400,000 due
-- rows; ~4 buffers a sender with this index, whatever the due rows and the history). Only
-- SCHEDULED rows have an entry; every update that changes scheduled_on or status already
-- changes an indexed column (messages_due): no update that was HOT stops being so.
-- CONCURRENTLY, one statement per file: claims must not wait for the build.
CREATE INDEX CONCURRENTLY IF NOT EXISTS messages_scheduled_by_sender
    ON messages ((coalesce(system_mailbox_id, tenant_id)), scheduled_on)
    WHERE status = 'SCHEDULED';
