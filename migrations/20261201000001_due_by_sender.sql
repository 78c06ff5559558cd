-- Fair claims: send-scheduled-messages takes each sender's due rows in turn, rows that were
-- deferred before (a booked slot, a Retry-After) first, then by due time. A booked row must not
-- wait behind a backlog of rows never tried, or its slot passes unused.
CREATE INDEX messages_due_by_sender
    ON messages ((coalesce(system_mailbox_id, tenant_id)), (deferrals = 0), scheduled_on)
    WHERE status = 'SCHEDULED';
