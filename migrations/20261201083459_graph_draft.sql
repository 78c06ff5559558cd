-- Exactly once through Graph (issue 14). `graph_draft_id`: the immutable id of the draft created
-- for the message (GRAPH_SEND_MODE=draft), stored before the draft is sent, so a later attempt
-- (a retry, or lease recovery after a crash) checks or reuses that draft instead of making a
-- second one. `send_attempted_at`: when a request that could deliver the message (sendMail, or
-- the draft's send) was last written; set means an earlier attempt may have delivered it, so the
-- next attempt checks before it sends.
ALTER TABLE messages
    ADD COLUMN graph_draft_id    text,
    ADD COLUMN send_attempted_at timestamptz;
