-- Fenced claims (issue 22). `claim_token`: a fresh uuid set by every claim (SCHEDULED →
-- SENDING); every write of that attempt (its outcome, its lease renewal, giving back an unstarted
-- row) matches it, so an attempt whose lease was taken over changes nothing.
-- `wait_reason`: why a SCHEDULED row waits (minute, day, tenant, cooldown, in_flight, paused,
-- retry, unconfirmed; NULL = its scheduledOn); a paused sender's rows are found by it, not by a
-- prefix of `last_error`. `throttles`: provider throttles without Retry-After, the exponent of
-- their backoff (deferrals also count limiter bookings).
ALTER TABLE messages
    ADD COLUMN claim_token uuid,
    ADD COLUMN wait_reason text,
    ADD COLUMN throttles   integer NOT NULL DEFAULT 0 CHECK (throttles >= 0);
UPDATE messages SET wait_reason = 'paused'
 WHERE status = 'SCHEDULED' AND starts_with(coalesce(last_error, ''), 'sender paused: ');
