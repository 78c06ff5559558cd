-- no-transaction
-- Retention (issue 23): finished rows (SENT, ERROR) by age, for the batches that delete the ones
-- older than MAIL_RETENTION (store::retention). Keyed on `created_at`, which no write changes, not
-- on `updated_at`: an index naming `updated_at` would make the send journal's stamp (it writes
-- `updated_at` on a SENDING row) a non-HOT update (see 20261201111747_claim_to_sending.sql). The
-- batch also checks `updated_at` and `sent_at` against the cut-off on the row itself. `id` makes
-- the batches a keyset walk (each starts after the last row the previous one saw). CONCURRENTLY:
-- the table may hold months of history, and claims must not wait for the build.
CREATE INDEX CONCURRENTLY IF NOT EXISTS messages_finished_by_age
    ON messages (created_at, id)
    WHERE status IN ('SENT', 'ERROR');
