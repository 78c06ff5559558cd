-- Operator suspensions (issue 43 point 4, docs/decisions/0048-adaptive-rules.md):
-- `mail-worker suspend --mailbox|--tenant|--campaign X --for 2h` holds a mailbox, a Graph
-- tenant's external mail or a campaign until `suspended_until`. The limiter's Redis holds it for
-- every replica; this table keeps it so that a Redis that comes back empty gets it back (the
-- daemon writes the rows in force back every 10 s). `resume` deletes the row. Expand-only: a
-- new table, which v(N-1) never reads.
CREATE TABLE operator_suspensions (
    scope text NOT NULL CHECK (scope IN ('mailbox', 'tenant', 'campaign')),
    -- The mailbox address (lower case), the Graph tenant id (lower case) or the campaign id.
    key text NOT NULL,
    -- A mailbox's Graph tenant (the limiter's hash tag); NULL for the other scopes.
    tenant text,
    suspended_at timestamptz NOT NULL,
    suspended_until timestamptz NOT NULL,
    reason text,
    PRIMARY KEY (scope, key)
);
