-- The Graph tenant's external-recipient budget (issue 11, item 8): Exchange Online's tenant
-- external recipient rate limit, per rolling 24 h for the whole tenant. Set on the Graph app of a
-- tenant or system mailbox by `mail-worker senders import` (`externalRecipientsPerDay`,
-- `acceptedDomains`); both NULL = no tenant budget. Every entry of one Graph tenant carries the
-- same values (the import checks it). Accepted domains are lower case, in punycode.
ALTER TABLE tenants
    ADD COLUMN external_recipients_per_day integer CHECK (external_recipients_per_day > 0),
    ADD COLUMN accepted_domains            text[],
    ADD CONSTRAINT tenants_external_budget_complete CHECK (
        (external_recipients_per_day IS NULL) = (accepted_domains IS NULL)
        AND (external_recipients_per_day IS NULL OR mail_provider = 'microsoft-graph')
        AND (accepted_domains IS NULL OR cardinality(accepted_domains) > 0));

ALTER TABLE system_mailboxes
    ADD COLUMN external_recipients_per_day integer CHECK (external_recipients_per_day > 0),
    ADD COLUMN accepted_domains            text[],
    ADD CONSTRAINT system_mailboxes_external_budget_complete CHECK (
        (external_recipients_per_day IS NULL) = (accepted_domains IS NULL)
        AND (accepted_domains IS NULL OR cardinality(accepted_domains) > 0));
