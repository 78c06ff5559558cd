-- Priority (issue 24): a sender's due `high` rows are claimed first, then `normal`, then `bulk`.
-- The claim orders each sender's due rows by (priority rank, deferrals = 0, scheduled_on); the
-- partial index carries the rank so the claim stays an index scan per sender.
ALTER TABLE messages ADD COLUMN priority text NOT NULL DEFAULT 'normal'
    CONSTRAINT messages_priority_keyword CHECK (priority IN ('high', 'normal', 'bulk'));

DROP INDEX messages_due_by_sender;
CREATE INDEX messages_due_by_sender
    ON messages ((coalesce(system_mailbox_id, tenant_id)),
                 (CASE priority WHEN 'high' THEN 0 WHEN 'normal' THEN 1 ELSE 2 END),
                 (deferrals = 0), scheduled_on)
    WHERE status = 'SCHEDULED';

-- A sender's default priority (the senders file's `priority`): a line without its own takes it.
ALTER TABLE system_mailboxes ADD COLUMN priority text NOT NULL DEFAULT 'normal'
    CONSTRAINT system_mailboxes_priority_keyword CHECK (priority IN ('high', 'normal', 'bulk'));
ALTER TABLE tenants ADD COLUMN priority text NOT NULL DEFAULT 'normal'
    CONSTRAINT tenants_priority_keyword CHECK (priority IN ('high', 'normal', 'bulk'));
