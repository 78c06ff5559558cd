-- Reserved headroom (issue 24): a system mailbox's override of MAIL_RATE_LIMIT_RESERVED_PERCENT,
-- the share of its budgets only `high` messages may use (the senders file's
-- `rateLimitReservedPercent`; NULL = the default).
ALTER TABLE system_mailboxes ADD COLUMN rate_limit_reserved_percent integer
    CONSTRAINT system_mailboxes_reserved_percent_range
    CHECK (rate_limit_reserved_percent BETWEEN 0 AND 90);
