-- Scale out (issue 12): the claim writes SENDING directly (no QUEUED step, no Redis queue), so a
-- sent message costs its claim and its outcome (plus the send journal's stamp for Graph). Every
-- partial index names `status` in its predicate, so those two writes cannot be HOT; the
-- journal's stamp (`graph_draft_id`, `send_attempted_at`, `updated_at`: no index names them)
-- can, if the row's page has room: leave 15 % of each new page free for it.
ALTER TABLE messages SET (fillfactor = 85);
