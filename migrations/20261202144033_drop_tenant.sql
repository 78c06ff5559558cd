-- no-transaction
-- Replaced by messages_tenant_status.
DROP INDEX CONCURRENTLY IF EXISTS messages_tenant;
