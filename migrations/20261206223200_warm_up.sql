-- Warm-up (issue 43 point 3, docs/decisions/0047-warm-up.md): a sender's ramp of day budgets
-- from the senders file's `warmUp` ({startPerDay, growth, maxPerDay}) and where it stands. The
-- ramp counts sending days (a UTC day with sends); at the first evaluation of a new UTC day
-- the last sending day's outcomes step it up one (clean), hold it (hard bounces or filtered
-- share over their thresholds) or step it down one (a reputation NDR). `day_budget` is the
-- current step's budget, min(max_per_day, floor(start_per_day * growth ^ step)), written with
-- the step: the limits in force are min(configured, day_budget). Expand-only: the previous
-- release reads no column of it and sends on its configured budget.
CREATE TABLE sender_warmups (
    tenant_id         uuid REFERENCES tenants (id) ON DELETE CASCADE,
    system_mailbox_id uuid REFERENCES system_mailboxes (id) ON DELETE CASCADE,
    sender_id         uuid NOT NULL GENERATED ALWAYS AS (coalesce(system_mailbox_id, tenant_id)) STORED,
    start_per_day     integer NOT NULL CHECK (start_per_day > 0),
    growth            double precision NOT NULL CHECK (growth >= 1),
    max_per_day       integer NOT NULL,
    step              integer NOT NULL DEFAULT 0 CHECK (step >= 0),
    day_budget        integer NOT NULL CHECK (day_budget > 0),
    -- Sending days counted (days with sends that were evaluated).
    sending_days      integer NOT NULL DEFAULT 0,
    -- The last sending day counted (UTC).
    last_sending_day  date,
    -- The UTC day and the time of the last evaluation.
    evaluated_on      date,
    evaluated_at      timestamptz,
    -- What the last counted day did: stepped | held | steppedDown | atMax.
    verdict           text,
    -- Why it held or stepped down (NULL when it stepped up).
    held_reason       text,
    CONSTRAINT sender_warmups_exactly_one_sender CHECK (num_nonnulls(tenant_id, system_mailbox_id) = 1),
    CONSTRAINT sender_warmups_start_at_most_max CHECK (start_per_day <= max_per_day)
);
CREATE UNIQUE INDEX sender_warmups_sender ON sender_warmups (sender_id);
