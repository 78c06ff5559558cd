-- The suppression list (issue 25): recipients a sender no longer sends to. A hard bounce adds one
-- (source `bounce`), an operator (`manual`: `mail-worker suppressions add`, the admin UI) or a CSV
-- (`import`). Scoped to the sender that owns the reputation: a tenant, or a system mailbox; the
-- same person may still be mailed by another tenant. `scope` is the sender's id as messages name
-- it (`coalesce(system_mailbox_id, tenant_id)`), so the intake (one query per batch) and the send
-- (one lookup per message) both probe the unique index (scope, address). Addresses are stored
-- trimmed, lower case, the domain in punycode: what the campaign import stores.
CREATE TABLE suppressions (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant_id         uuid REFERENCES tenants (id) ON DELETE CASCADE,
    system_mailbox_id uuid REFERENCES system_mailboxes (id) ON DELETE CASCADE,
    scope             uuid NOT NULL GENERATED ALWAYS AS (coalesce(system_mailbox_id, tenant_id)) STORED,
    address           text NOT NULL CHECK (address = lower(address) AND address LIKE '%_@_%'),
    reason            text NOT NULL DEFAULT '',
    source            text NOT NULL CHECK (source IN ('bounce', 'manual', 'import')),
    created_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT suppressions_exactly_one_scope CHECK (num_nonnulls(tenant_id, system_mailbox_id) = 1),
    CONSTRAINT suppressions_scope_address UNIQUE (scope, address)
);
