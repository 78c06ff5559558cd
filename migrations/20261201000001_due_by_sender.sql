-- Fair claims: send-scheduled-messages takes each sender's oldest due rows in turn, so it looks
-- rows up by sender and due time.
CREATE INDEX messages_due_by_sender
    ON messages ((coalesce(system_mailbox_id, tenant_id)), scheduled_on)
    WHERE status = 'SCHEDULED';
