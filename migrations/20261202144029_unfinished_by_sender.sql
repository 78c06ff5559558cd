-- no-transaction
-- The mailboxes page (issue 23, docs/decisions/0017-mailbox-pages.md): "busiest first" counts each
-- sender's unfinished rows (SCHEDULED + SENDING). This index holds only those and carries the
-- sender columns themselves (not coalesce(...): PostgreSQL answers from an index alone only
-- with plain columns), so the count is an index-only scan whatever the history of finished rows.
-- It names neither `updated_at` nor anything the send journal's stamp writes (that stays HOT).
-- CONCURRENTLY, one statement per file: claims must not wait for the build.
CREATE INDEX CONCURRENTLY IF NOT EXISTS messages_unfinished_by_sender
    ON messages (system_mailbox_id, tenant_id)
    WHERE status IN ('SCHEDULED', 'SENDING');
