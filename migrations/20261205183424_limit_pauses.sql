-- Limit pauses (issue 40, docs/decisions/0032-quota-ndrs-pause.md): Exchange said in a
-- non-delivery report that a budget is used up although ours had room — a mailbox's recipients
-- per rolling 24 h (5.1.90, 5.2.2 submission quota) or a Graph tenant's external mail (5.7.233,
-- 5.7.705, 5.7.708, 5.7.501). The limiter's Redis holds the pause for every replica; this
-- table keeps it so that a Redis that comes back empty re-applies it when it re-seeds the
-- budget from the send history. One row per budget: a later pause replaces an earlier one.
CREATE TABLE limit_pauses (
    scope text NOT NULL CHECK (scope IN ('mailbox', 'tenant')),
    -- The mailbox address (lower case) or the Graph tenant id (lower case).
    key text NOT NULL,
    -- The DSN code that started it (5.1.90, …).
    code text NOT NULL,
    -- true: the whole budget counted as used at paused_at (nothing fits for 24 h); false: the
    -- window filled up to the budget (it frees as the recipients we counted leave it).
    whole_day boolean NOT NULL,
    paused_at timestamptz NOT NULL,
    -- When it ends at the latest.
    paused_until timestamptz NOT NULL,
    -- The NDR's text, scrubbed.
    reason text NOT NULL,
    PRIMARY KEY (scope, key)
);
