-- no-transaction
-- Retention deletes DELIVERED rows as finished ones too (issue 42): the index the batches walk
-- gets DELIVERED in its predicate (the old one is dropped by the next migration).
CREATE INDEX CONCURRENTLY IF NOT EXISTS messages_finished_by_age_v3
    ON messages (created_at, id)
    WHERE status IN ('SENT', 'ERROR', 'BOUNCED', 'DELIVERED');
