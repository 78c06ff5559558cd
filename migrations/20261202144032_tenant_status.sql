-- no-transaction
-- As 20261202144030 for tenants' senders.
CREATE INDEX CONCURRENTLY IF NOT EXISTS messages_tenant_status
    ON messages (tenant_id, status)
    WHERE tenant_id IS NOT NULL;
