-- no-transaction
-- The wait-reason gauge (issue 23, docs/decisions/0024-claim-round-buffers.md) counts SCHEDULED rows
-- by wait_reason and due or not every METRICS_REFRESH_MS on each replica: with wait_reason in
-- the due index, that count is an index-only scan (1,600 buffers for 400,000 rows where the
-- visibility map is set) instead of a read of every SCHEDULED row's heap page (80,000). It
-- replaces messages_due (the next migration drops it; one statement per no-transaction
-- migration): every use of that one (the oldest due row, the SCHEDULED count) reads this one
-- alike. Every update that sets or clears wait_reason also changes status or scheduled_on,
-- already indexed: no update that was HOT stops being so.
-- CONCURRENTLY, one statement per file: claims must not wait for the build.
CREATE INDEX CONCURRENTLY IF NOT EXISTS messages_due_v2
    ON messages (scheduled_on) INCLUDE (wait_reason)
    WHERE status = 'SCHEDULED';
