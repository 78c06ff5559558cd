-- Sender pools (issue 43 points 1 and 2, docs/decisions/0046-sender-pools.md): a named set of
-- Graph senders (system mailboxes or Graph tenants) a campaign line may name instead of one
-- sender, and the pool's optional overflow sender. Expand-only: the previous release never
-- reads these tables, and a pooled message always has one member in tenant_id /
-- system_mailbox_id (its placement), so the previous binary sends it from that member.
CREATE TABLE sender_pools (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name text NOT NULL UNIQUE,
    -- The overflow sender (a tenant or system mailbox), when to use it and for whom.
    overflow_tenant_id uuid REFERENCES tenants (id) ON DELETE SET NULL,
    overflow_system_mailbox_id uuid REFERENCES system_mailboxes (id) ON DELETE SET NULL,
    overflow_when text CHECK (overflow_when IN ('budgetsSpent', 'forecastMisses')),
    overflow_external_only boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE sender_pool_members (
    pool_id uuid NOT NULL REFERENCES sender_pools (id) ON DELETE CASCADE,
    position integer NOT NULL,
    tenant_id uuid REFERENCES tenants (id) ON DELETE CASCADE,
    system_mailbox_id uuid REFERENCES system_mailboxes (id) ON DELETE CASCADE,
    PRIMARY KEY (pool_id, position),
    CHECK ((tenant_id IS NULL) <> (system_mailbox_id IS NULL))
);

-- The pool a message was given to (NULL: one sender). Its tenant_id / system_mailbox_id is the
-- member it is placed on; re-placed only before its first Graph request.
ALTER TABLE messages ADD COLUMN sender_pool_id uuid REFERENCES sender_pools (id) ON DELETE SET NULL;
-- When the message was placed on its member (NULL: not yet; a pooled message is placed once,
-- at its first attempt, before any Graph request).
ALTER TABLE messages ADD COLUMN pool_placed_at timestamptz;
-- Overflowed: why (budgetsSpent | forecastMisses), NULL for a message sent by its pool's member.
ALTER TABLE messages ADD COLUMN overflow_reason text;
-- The outbox's new event kind, `overflowed` (docs/events.md).
ALTER TABLE events DROP CONSTRAINT events_kind_check;
ALTER TABLE events ADD CONSTRAINT events_kind_check
    CHECK (kind IN ('accepted', 'sent', 'deferred', 'failed', 'bounced', 'cancelled', 'delivered', 'filtered', 'overflowed')) NOT VALID;
ALTER TABLE events VALIDATE CONSTRAINT events_kind_check;
CREATE INDEX messages_by_pool ON messages (sender_pool_id) WHERE sender_pool_id IS NOT NULL;
