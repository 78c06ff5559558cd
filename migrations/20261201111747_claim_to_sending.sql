-- Scale out (issue 12): the claim writes SENDING directly (no QUEUED step, no Redis queue), so a
-- sent message costs its claim and its outcome (plus the send journal's stamp for Graph). Every
-- partial index names `status` in its predicate, so those two writes cannot be HOT; the
-- journal's stamp (`graph_draft_id`, `send_attempted_at`, `updated_at`: no index names them)
-- can, if the row's page has room: leave 15 % of each new page free for it.
ALTER TABLE messages SET (fillfactor = 85);
-- The limiter's send history (store::history: a mailbox's SENT rows of the last 24 h, read when
-- Redis has forgotten its budget) by sender and time, instead of a scan of every SENT row.
CREATE INDEX messages_sent_by_sender
    ON messages ((coalesce(system_mailbox_id, tenant_id)), sent_at)
    WHERE status = 'SENT';
