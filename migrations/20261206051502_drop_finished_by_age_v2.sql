-- no-transaction
-- messages_finished_by_age_v3 (the previous migration) replaces it.
DROP INDEX CONCURRENTLY IF EXISTS messages_finished_by_age_v2;
