-- no-transaction
-- The mailboxes page (issue 23, docs/decisions/0017-mailbox-pages.md) counts each listed sender's
-- paused rows (SCHEDULED, wait_reason 'paused'): without this index that read every SCHEDULED
-- row of the page's senders from the table (52,000 heap rows for the busiest 50 of a 330,000
-- row backlog) to find the few paused ones. Only paused rows have an entry; every update that
-- sets or clears wait_reason also changes status or scheduled_on, already indexed: no update
-- that was HOT stops being so.
-- CONCURRENTLY, one statement per file: claims must not wait for the build.
CREATE INDEX CONCURRENTLY IF NOT EXISTS messages_paused_by_sender
    ON messages (system_mailbox_id, tenant_id)
    WHERE status = 'SCHEDULED' AND wait_reason = 'paused';
