//! A running campaign's progress (`mail-worker campaign status CAMPAIGN`, the admin UI's
//! campaigns pages): its rows by sender and status, and the forecast finish of what still waits.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::{
    pools::{PoolStatus, pool_statuses},
    sender_forecast, senders_by_id,
};
use crate::reports::ReportError;
use crate::{
    config::Config,
    domain::{Priority, Sender},
    forecast::{NewSend, Warning},
    rate_limit::{Algorithm, usage::UsageReader},
    store::{
        campaigns::{self, CampaignCounts, Waiting},
        pool_views, suspensions,
    },
};

/// One sender's part of a running campaign, with the forecast finish of what still waits.
#[derive(Debug, Clone, Serialize)]
pub struct SenderStatus {
    /// The mailbox.
    pub mailbox: String,
    /// Its rows by status.
    #[serde(flatten)]
    pub counts: CampaignCounts,
    /// When its last waiting message will have been sent (`null`: nothing waits).
    pub forecast_finish: Option<DateTime<Utc>>,
    /// What to look at.
    pub warnings: Vec<Warning>,
}

/// A running campaign: per sender, and the latest forecast finish.
#[derive(Debug, Clone, Serialize)]
pub struct CampaignStatus {
    /// `campaignId`.
    pub campaign: String,
    /// When it was read.
    pub now: DateTime<Utc>,
    /// All senders together.
    pub total: CampaignCounts,
    /// The latest forecast finish (`null`: nothing waits).
    pub forecast_finish: Option<DateTime<Utc>>,
    /// Per sender, by mailbox.
    pub senders: Vec<SenderStatus>,
    /// Per sender pool of the campaign's pooled messages (empty: none is pooled).
    pub pools: Vec<PoolStatus>,
    /// An operator's `suspend --campaign` in force (`null`: none): nothing of the campaign
    /// goes until it ends, so every forecast finish above counts from its end.
    pub suspended: Option<CampaignSuspension>,
}

/// A campaign's operator suspension, as `campaign status` and `campaign forecast` show it.
#[derive(Debug, Clone, Serialize)]
pub struct CampaignSuspension {
    /// The campaign (`campaign forecast` lists each of its file's; `null` in `campaign
    /// status`, which is of one campaign).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub campaign: Option<String>,
    /// When it ends by itself (`resume --campaign` ends it sooner).
    pub until: DateTime<Utc>,
    /// The operator's reason.
    pub reason: Option<String>,
}

impl CampaignSuspension {
    /// `until 2026-12-07 10:00:00 UTC (checking)`: its end, and its reason when it has one.
    pub fn until_text(&self) -> String {
        let reason = self
            .reason
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        format!(
            "until {} UTC{reason}",
            self.until.format("%Y-%m-%d %H:%M:%S")
        )
    }
}

/// What every campaign's progress reads once (a page of many campaigns reads it once): the
/// senders, what waits per sender, the limiter's connection.
pub(crate) struct Readings<'a> {
    config: &'a Config,
    senders: HashMap<Uuid, Sender>,
    waiting: HashMap<Uuid, Waiting>,
    reader: UsageReader<'a>,
    booking: bool,
}

impl<'a> Readings<'a> {
    /// Reads the senders and what waits for each.
    ///
    /// # Errors
    /// Database errors.
    pub(crate) async fn new(config: &'a Config, pool: &sqlx::PgPool) -> Result<Self, ReportError> {
        let booking = config.rate_limit.algorithm == Algorithm::Paced;
        Ok(Self {
            config,
            senders: senders_by_id(pool).await?,
            waiting: campaigns::waiting_by_sender(pool, booking).await?,
            reader: UsageReader::new(&config.rate_limit),
            booking,
        })
    }
}

/// Campaign `campaign`'s progress (`None`: no message has that campaign).
///
/// # Errors
/// Database errors.
pub async fn campaign_status(
    config: &Config,
    pool: &sqlx::PgPool,
    campaign: &str,
) -> Result<Option<CampaignStatus>, ReportError> {
    let mut readings = Readings::new(config, pool).await?;
    status_with(&mut readings, pool, campaign).await
}

/// [`campaign_status`] over `readings`.
///
/// # Errors
/// Database errors.
pub(crate) async fn status_with(
    readings: &mut Readings<'_>,
    pool: &sqlx::PgPool,
    campaign: &str,
) -> Result<Option<CampaignStatus>, ReportError> {
    let rows = campaigns::by_sender(pool, campaign, readings.booking).await?;
    if rows.is_empty() {
        return Ok(None);
    }
    let now = Utc::now();
    let suspended = suspensions::of(pool, "campaign", campaign, now)
        .await?
        .map(|s| CampaignSuspension {
            campaign: None,
            until: s.suspended_until,
            reason: s.reason,
        });
    // Its messages wait out the suspension: every waiting row (the booked ones are booked
    // again) is replayed not before its end, behind whatever else holds the sender (a mailbox
    // suspension too: the later end wins, never the sum).
    let hold = suspended.as_ref().map(|s| s.until);
    let mut out = Vec::new();
    let mut total = CampaignCounts::default();
    for row in rows {
        let c = &row.counts;
        add(&mut total, c);
        // The campaign's unbooked rows are taken to wait behind the sender's others (the
        // latest they can go); its booked rows go at their slots.
        let mut forecast_finish = c
            .last_booked_slot
            .filter(|_| c.waiting > 0 && hold.is_none());
        let replayed = if hold.is_some() {
            c.booked + c.unbooked
        } else {
            c.unbooked
        };
        let mut warnings = Vec::new();
        if let (Some(sender), true) = (readings.senders.get(&row.sender_id), replayed > 0) {
            let mut all = readings
                .waiting
                .get(&row.sender_id)
                .copied()
                .unwrap_or_default();
            all.unbooked = all.unbooked.saturating_sub(c.unbooked as u64);
            all.unbooked_recipients = all
                .unbooked_recipients
                .saturating_sub(c.unbooked_recipients as u64);
            let per = (c.unbooked_recipients / c.unbooked.max(1)).max(1) as u32;
            let sends = vec![
                NewSend {
                    not_before: hold,
                    by: None,
                    recipients: per,
                    priority: Priority::default(),
                };
                replayed as usize
            ];
            let config = readings.config;
            let f =
                sender_forecast(config, &mut readings.reader, sender, all, &sends, now, None).await;
            forecast_finish = forecast_finish.max(Some(f.finish.finish));
            warnings = f.warnings;
        }
        out.push(SenderStatus {
            mailbox: row.mailbox,
            counts: row.counts,
            forecast_finish,
            warnings,
        });
    }
    let pooled = pool_views::campaign_rows(pool, campaign).await?;
    let pools = if pooled.is_empty() {
        Vec::new()
    } else {
        pool_statuses(&pooled, &pool_views::members(pool).await?)
    };
    Ok(Some(CampaignStatus {
        suspended,
        pools,
        campaign: campaign.to_owned(),
        now,
        forecast_finish: out.iter().filter_map(|s| s.forecast_finish).max(),
        total,
        senders: out,
    }))
}

/// Adds `c`'s counts to `total` (the times: the earliest first, the latest last).
pub(crate) fn add(total: &mut CampaignCounts, c: &CampaignCounts) {
    total.sent += c.sent;
    total.delivered += c.delivered;
    total.bounced += c.bounced;
    total.recipients_delivered += c.recipients_delivered;
    total.recipients_failed += c.recipients_failed;
    total.recipients_filtered += c.recipients_filtered;
    total.recipients_pending += c.recipients_pending;
    total.waiting += c.waiting;
    total.failed += c.failed;
    total.cancelled += c.cancelled;
    total.booked += c.booked;
    total.unbooked += c.unbooked;
    total.unbooked_recipients += c.unbooked_recipients;
    total.last_booked_slot = total.last_booked_slot.max(c.last_booked_slot);
    total.first_sent = match (total.first_sent, c.first_sent) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    total.last_sent = total.last_sent.max(c.last_sent);
}
