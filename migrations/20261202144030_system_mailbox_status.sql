-- no-transaction
-- A page's messages by status (store::mailbox_list::messages_of) counted from the index alone:
-- the system mailbox index gains `status` (replacing messages_system_mailbox in the next file;
-- a non-HOT update writes every index anyway, so this costs no write).
CREATE INDEX CONCURRENTLY IF NOT EXISTS messages_system_mailbox_status
    ON messages (system_mailbox_id, status)
    WHERE system_mailbox_id IS NOT NULL;
