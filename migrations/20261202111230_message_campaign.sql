-- Campaigns (issue 24): a message's campaign, the campaign line's `campaignId` (default: its
-- `x-campaign-id` header). `mail-worker campaign status` and the admin UI's campaigns page count
-- a campaign's rows by sender and status; the index serves those counts (and the list of
-- campaigns) without reading the messages of other campaigns.
ALTER TABLE messages ADD COLUMN campaign_id text;

CREATE INDEX messages_by_campaign
    ON messages (campaign_id, (coalesce(system_mailbox_id, tenant_id)), status)
    WHERE campaign_id IS NOT NULL;
