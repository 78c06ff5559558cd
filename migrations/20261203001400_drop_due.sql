-- no-transaction
-- messages_due_v2 (the previous migration) replaces it.
DROP INDEX CONCURRENTLY IF EXISTS messages_due;
