-- A campaign line's `by` (issue 43 point 2, docs/decisions/0046-sender-pools.md): the time the
-- producer wants the message sent by. A pool whose overflow rule is `forecastMisses` gives the
-- message to its overflow sender when no member's next slot is before it. Expand-only: a
-- nullable column the previous release never reads (it sends such a row as before).
ALTER TABLE messages ADD COLUMN send_by timestamptz;
