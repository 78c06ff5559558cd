-- mail-worker schema. Producers (a campaign system) INSERT into `messages` directly: the column
-- names and checks below are a contract.

CREATE TABLE tenants (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name                text NOT NULL UNIQUE,
    mail_provider       text NOT NULL CHECK (mail_provider IN ('microsoft-graph', 'sendgrid')),
    sender_address      text NOT NULL CHECK (sender_address = lower(sender_address) AND sender_address LIKE '%_@_%'),
    -- Secret columns hold the secret itself or a reference `env:NAME` / `file:/path`.
    graph_tenant_id     text,
    graph_client_id     text,
    graph_client_secret text,
    sendgrid_api_key    text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT tenants_credentials_match_provider CHECK (
        (mail_provider = 'microsoft-graph'
            AND graph_tenant_id IS NOT NULL AND graph_client_id IS NOT NULL
            AND graph_client_secret IS NOT NULL AND sendgrid_api_key IS NULL)
        OR (mail_provider = 'sendgrid'
            AND sendgrid_api_key IS NOT NULL
            AND graph_tenant_id IS NULL AND graph_client_id IS NULL AND graph_client_secret IS NULL)
    )
);

CREATE TABLE system_mailboxes (
    id                            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    address                       text NOT NULL UNIQUE CHECK (address = lower(address) AND address LIKE '%_@_%'),
    graph_tenant_id               text NOT NULL,
    graph_client_id               text NOT NULL,
    graph_client_secret           text NOT NULL,
    -- NULL = the defaults (MAIL_RATE_LIMIT_PER_MINUTE / MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY).
    rate_limit_per_minute         integer CHECK (rate_limit_per_minute > 0),
    rate_limit_recipients_per_day integer CHECK (rate_limit_recipients_per_day > 0),
    created_at                    timestamptz NOT NULL DEFAULT now(),
    updated_at                    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE messages (
    id                uuid PRIMARY KEY,
    tenant_id         uuid REFERENCES tenants (id),
    system_mailbox_id uuid REFERENCES system_mailboxes (id),
    -- Lists of {"address": "...", "name": "..."} as the producer wrote them.
    to_recipients     jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(to_recipients) = 'array'),
    cc_recipients     jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(cc_recipients) = 'array'),
    bcc_recipients    jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(bcc_recipients) = 'array'),
    subject           text NOT NULL DEFAULT '',
    body_content_type text NOT NULL DEFAULT 'html' CHECK (body_content_type IN ('text', 'html')),
    body              text NOT NULL DEFAULT '',
    -- List of {"name": "x-...", "value": "..."}.
    headers           jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(headers) = 'array'),
    status            text NOT NULL DEFAULT 'SCHEDULED'
                      CHECK (status IN ('SCHEDULED', 'QUEUED', 'SENDING', 'SENT', 'ERROR')),
    scheduled_on      timestamptz NOT NULL DEFAULT now(),
    attempts          integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    deferrals         integer NOT NULL DEFAULT 0 CHECK (deferrals >= 0),
    last_error        text,
    queued_at         timestamptz,
    sending_at        timestamptz,
    sent_at           timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT messages_exactly_one_sender CHECK (num_nonnulls(tenant_id, system_mailbox_id) = 1)
);

-- "Due SCHEDULED rows in scheduled_on order" for send-scheduled-messages.
CREATE INDEX messages_due ON messages (scheduled_on) WHERE status = 'SCHEDULED';
-- Lease recovery of stale QUEUED / SENDING rows.
CREATE INDEX messages_queued_at ON messages (queued_at) WHERE status = 'QUEUED';
CREATE INDEX messages_sending_at ON messages (sending_at) WHERE status = 'SENDING';
CREATE INDEX messages_tenant ON messages (tenant_id) WHERE tenant_id IS NOT NULL;
CREATE INDEX messages_system_mailbox ON messages (system_mailbox_id) WHERE system_mailbox_id IS NOT NULL;

CREATE TABLE message_attachments (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id   uuid NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
    position     integer NOT NULL DEFAULT 0,
    name         text NOT NULL,
    content_type text NOT NULL DEFAULT 'application/octet-stream',
    content      bytea NOT NULL,
    UNIQUE (message_id, position)
);
