-- no-transaction
-- Retention (issue 23) deletes BOUNCED rows as finished ones too (issue 25): the index the batches
-- walk gets BOUNCED in its predicate (the old one is dropped by the next migration: one statement
-- per no-transaction migration, as PostgreSQL runs several as one implicit transaction).
-- CONCURRENTLY, as 20261202115922_retention.sql.
CREATE INDEX CONCURRENTLY IF NOT EXISTS messages_finished_by_age_v2
    ON messages (created_at, id)
    WHERE status IN ('SENT', 'ERROR', 'BOUNCED');
