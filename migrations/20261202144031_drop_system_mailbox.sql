-- no-transaction
-- Replaced by messages_system_mailbox_status (its prefix serves the same lookups).
DROP INDEX CONCURRENTLY IF EXISTS messages_system_mailbox;
