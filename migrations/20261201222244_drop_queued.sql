-- The QUEUED state is gone (issue 26): the claim moves due rows straight to SENDING, and only the
-- Redis job queue of versions before issue 12 left rows QUEUED. Any such row left over is
-- rescheduled, due now (what lease recovery did with it), and the status can no longer be
-- written. `queued_at` stays: every claim stamps it, and the benchmarks read it as claim time.
UPDATE messages
   SET status = 'SCHEDULED', scheduled_on = now(), updated_at = now(),
       last_error = 'queue lease expired: the job was lost, rescheduled'
 WHERE status = 'QUEUED';
DROP INDEX IF EXISTS messages_queued_at;
ALTER TABLE messages DROP CONSTRAINT messages_status_check;
ALTER TABLE messages ADD CONSTRAINT messages_status_check
    CHECK (status IN ('SCHEDULED', 'SENDING', 'SENT', 'ERROR'));
