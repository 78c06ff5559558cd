-- The mailboxes page's order (issue 23, docs/decisions/0017-mailbox-pages.md): busiest first needs
-- every sender's count of unfinished rows, an index-only scan of all of them (~330,000 at the
-- scale run: 370 ms). One replica at a time counts them every few seconds into this one row
-- (the senders' ids and their counts, side by side), so a page reads one row and joins it to
-- the senders; the page's own 50 mailboxes are still counted live. No trigger, nothing on the
-- send path: a message's writes are what they were.
CREATE TABLE IF NOT EXISTS mailbox_order (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    taken_at timestamptz NOT NULL,
    sender_ids uuid[] NOT NULL,
    unfinished bigint[] NOT NULL
);
