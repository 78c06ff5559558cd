-- When a message was first tried: MAIL_RETRY_FOR (give up on transient failures by time, not by
-- count) counts from here. `mail-worker messages retry` clears it with the attempts.
ALTER TABLE messages ADD COLUMN first_attempt_at timestamptz;
