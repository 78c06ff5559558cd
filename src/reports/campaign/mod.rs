//! A campaign's forecast (before it is enqueued: `mail-worker campaign forecast FILE`) and its
//! progress (while it runs: `mail-worker campaign status CAMPAIGN`, the admin UI's campaigns
//! pages), one implementation for both: the senders and what waits from PostgreSQL, the
//! budgets from the limiter's Redis ([`UsageReader`]), the arithmetic in [`crate::forecast`].

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::{
    ReportError,
    limits::{EffectiveLimits, limits_of, provider, tenant_budget},
};
use crate::{
    config::Config,
    domain::{Priority, Sender},
    forecast::{self, Finish, Limits, Load, NewSend, SenderState, Warning},
    import::BadEntry,
    rate_limit::{
        Algorithm,
        usage::{LimiterUsage, UsageReader},
    },
    store::{
        self,
        campaigns::{self, Waiting},
        senders,
    },
};

mod pooled;
mod pools;
mod status;
mod suspended;
pub use pooled::{MemberShare, PoolForecast};
pub use pools::{MemberCounts, PoolStatus};
pub use status::{CampaignStatus, CampaignSuspension, SenderStatus, campaign_status};
pub(crate) use status::{Readings, status_with};
pub(super) use suspended::{held_by, suspensions_in, suspensions_of};

/// One sender's forecast.
#[derive(Debug, Clone, Serialize)]
pub struct SenderForecast {
    /// The mailbox.
    pub mailbox: String,
    /// `system mailbox` or `tenant <name>`.
    pub sender: String,
    /// `graph` or `sendgrid` (not rate-limited: its messages are forecast to go at once).
    pub provider: &'static str,
    /// The budgets in force.
    pub limits: Limits,
    /// The share of them the file's messages may use: [`forecast::usable_budget`] of `normal`
    /// (the whole budget when every message is `high`).
    pub usable: Limits,
    /// The messages forecast (the file's lines, or the campaign's still waiting) and their
    /// recipients.
    pub messages: Load,
    /// What already waits for the sender in PostgreSQL.
    pub backlog: Waiting,
    /// Recipients the limiter counts in the sender's rolling 24 h.
    pub recipients_last_day: u64,
    /// The limiter's next free slot (after its bookings).
    pub next_free_slot: Option<DateTime<Utc>>,
    /// The first slot and the last (the finish), with what spills past the day budget.
    #[serde(flatten)]
    pub finish: Finish,
    /// From the reading to the finish, in seconds.
    pub seconds: f64,
    /// What to look at.
    pub warnings: Vec<Warning>,
    /// Why the limiter's Redis could not be read (the forecast then assumes an idle mailbox).
    pub limiter_error: Option<String>,
}

/// A whole forecast: every sender, the latest finish, and the tenants' warnings.
#[derive(Debug, Clone, Serialize)]
pub struct CampaignForecast {
    /// When it was computed.
    pub now: DateTime<Utc>,
    /// The limiter's algorithm.
    pub algorithm: &'static str,
    /// The deadline given (`--by`).
    pub by: Option<DateTime<Utc>>,
    /// The latest finish of any sender.
    pub finish: DateTime<Utc>,
    /// Per sender, by mailbox.
    pub senders: Vec<SenderForecast>,
    /// The Graph tenants' external budgets exceeded.
    pub tenant_warnings: Vec<Warning>,
    /// The file's lines that are not messages (they are not forecast).
    pub bad_lines: Vec<String>,
    /// The file's good lines whose id is stored already: `enqueue` does not insert them again,
    /// so they are not forecast.
    pub already_stored: u64,
    /// The file's sender pools: how their lines were spread over the members.
    pub pools: Vec<PoolForecast>,
    /// The file's campaigns suspended by `suspend --campaign`: their lines are forecast not
    /// before each suspension's end.
    pub campaigns_suspended: Vec<CampaignSuspension>,
}

/// What a sender sends, for [`forecast_for`].
struct Share {
    sends: Vec<NewSend>,
    external: u64,
}

/// The forecast of campaign file `bytes` if it were enqueued now (nothing is written).
///
/// # Errors
/// Database errors; a limiter that cannot be read is reported per sender, not as a failure.
pub async fn forecast_file(
    config: &Config,
    pool: &sqlx::PgPool,
    bytes: &[u8],
    by: Option<DateTime<Utc>>,
) -> Result<CampaignForecast, ReportError> {
    let directory = crate::import::sender_directory(pool).await?;
    let (mut good, bad) = crate::import::campaign::parse_bytes(bytes, &directory);
    // What `enqueue` would skip: ids stored already (a repeat within the file is a bad line).
    let ids: Vec<Uuid> = good.iter().map(|(_, m)| m.id).collect();
    let stored: std::collections::HashSet<Uuid> = store::messages::present(pool, &ids)
        .await?
        .into_iter()
        .collect();
    let lines = good.len();
    good.retain(|(_, m)| !stored.contains(&m.id));
    let already_stored = (lines - good.len()) as u64;
    let senders = senders_by_id(pool).await?;
    // A line without a priority is stored with its sender's (as the insert does).
    let defaults = crate::store::sender_settings::priorities(pool).await?;
    // A line of a suspended campaign goes not before the suspension's end.
    let now = Utc::now();
    let mut held = store::suspensions::of_scope(pool, "campaign", now).await?;
    held.retain(|s| {
        good.iter()
            .any(|(_, m)| m.campaign_id.as_deref() == Some(s.key.as_str()))
    });
    let held_until = |m: &crate::store::messages::NewMessage| {
        let campaign = m.campaign_id.as_deref()?;
        held.iter()
            .find(|s| s.key == campaign)
            .map(|s| s.suspended_until)
    };
    let send_of = |m: &crate::store::messages::NewMessage, id: Uuid| NewSend {
        not_before: m.scheduled_on.max(held_until(m)),
        by: m.send_by,
        recipients: m.content.recipient_count(),
        priority: m
            .priority
            .or_else(|| defaults.get(&id).copied())
            .unwrap_or_default(),
    };
    // A pooled line goes to the member the placement would give it, not its stand-in.
    let pooled: Vec<pooled::Line> = good
        .iter()
        .filter_map(|(_, m)| {
            let c = &m.content;
            Some(pooled::Line {
                pool: m.sender_pool?,
                send: send_of(m, m.sender.id()),
                stand_in: m.sender.id(),
                recipients: c
                    .to
                    .iter()
                    .chain(&c.cc)
                    .chain(&c.bcc)
                    .map(|r| r.address.as_str())
                    .collect(),
            })
        })
        .collect();
    let (mut placed, pools) = pooled::spread_pooled(config, pool, &senders, &pooled, now).await?;
    placed.reverse();
    let mut shares: BTreeMap<Uuid, Share> = BTreeMap::new();
    for (_, m) in &good {
        let mut id = m.sender.id();
        if m.sender_pool.is_some() {
            id = placed.pop().unwrap_or(id);
        }
        let share = shares.entry(id).or_insert(Share {
            sends: Vec::new(),
            external: 0,
        });
        share.sends.push(send_of(m, id));
        if let Some(budget) = senders.get(&id).and_then(tenant_budget) {
            let c = &m.content;
            let all = c.to.iter().chain(&c.cc).chain(&c.bcc);
            share.external += u64::from(budget.external_count(all.map(|r| r.address.as_str())));
        }
    }
    let mut result = forecast_for(config, pool, &senders, shares, by).await?;
    result.bad_lines = bad.iter().map(BadEntry::to_string).collect();
    result.already_stored = already_stored;
    result.pools = pools;
    result.campaigns_suspended = held
        .into_iter()
        .map(|s| CampaignSuspension {
            campaign: Some(s.key),
            until: s.suspended_until,
            reason: s.reason,
        })
        .collect();
    Ok(result)
}

async fn senders_by_id(pool: &sqlx::PgPool) -> Result<HashMap<Uuid, Sender>, ReportError> {
    Ok(senders::all(pool)
        .await?
        .into_iter()
        .map(|s| (sender_id(&s), s))
        .collect())
}

fn sender_id(sender: &Sender) -> Uuid {
    store::SenderRef::of(sender).id()
}

/// Every sender's forecast of its `shares`, and the tenants' warnings.
async fn forecast_for(
    config: &Config,
    pool: &sqlx::PgPool,
    senders: &HashMap<Uuid, Sender>,
    shares: BTreeMap<Uuid, Share>,
    by: Option<DateTime<Utc>>,
) -> Result<CampaignForecast, ReportError> {
    let booking = config.rate_limit.algorithm == Algorithm::Paced;
    let waiting = campaigns::waiting_by_sender(pool, booking).await?;
    let mut reader = UsageReader::new(&config.rate_limit);
    let now = Utc::now();
    let mut out = Vec::new();
    // Graph tenant → (its budget, external recipients added).
    let mut tenants: BTreeMap<String, (u32, u64)> = BTreeMap::new();
    for (id, share) in shares {
        let Some(sender) = senders.get(&id) else {
            continue;
        };
        let backlog = waiting.get(&id).copied().unwrap_or_default();
        out.push(
            sender_forecast(config, &mut reader, sender, backlog, &share.sends, now, by).await,
        );
        if let (Some(budget), (_, _, Some(tenant), _)) =
            (tenant_budget(sender), limits_of(sender, config))
        {
            let entry = tenants
                .entry(tenant.to_lowercase())
                .or_insert((budget.external_recipients_per_day.get(), 0));
            entry.1 += share.external;
        }
    }
    let mut tenant_warnings = Vec::new();
    for (tenant, (per_day, adding)) in tenants {
        let used = reader.tenant_external(&tenant).await.unwrap_or(0);
        tenant_warnings.extend(forecast::tenant_warning(
            &tenant,
            used,
            adding,
            (
                per_day,
                applied_reserve(config, config.rate_limit.defaults.reserved_percent),
            ),
            Priority::default(),
        ));
    }
    out.sort_by(|a, b| a.mailbox.cmp(&b.mailbox));
    Ok(CampaignForecast {
        now,
        algorithm: config.rate_limit.algorithm.as_str(),
        by,
        finish: out.iter().map(|s| s.finish.finish).max().unwrap_or(now),
        senders: out,
        tenant_warnings,
        bad_lines: Vec::new(),
        already_stored: 0,
        pools: Vec::new(),
        campaigns_suspended: Vec::new(),
    })
}

/// The share of a budget reserved for `high` as the limiter applies it: `reserved` (the
/// mailbox's, from [`limits_of`]) under `paced`, 0 under `fixed-window` (it ignores priority).
fn applied_reserve(config: &Config, reserved: u8) -> u8 {
    match config.rate_limit.algorithm {
        Algorithm::FixedWindow => 0,
        Algorithm::Paced => reserved,
    }
}

/// What the forecast starts from for a sender with `limits` in force: the limiter's reading
/// `usage` (`None`: unread, or SendGrid) and what waits in PostgreSQL.
pub(super) fn sender_state(
    config: &Config,
    limits: &EffectiveLimits,
    usage: Option<&LimiterUsage>,
    backlog: Waiting,
    now: DateTime<Utc>,
) -> SenderState {
    SenderState {
        now,
        algorithm: config.rate_limit.algorithm,
        limits: Limits {
            per_minute: limits.per_minute,
            recipients_per_day: limits.recipients_per_day,
            reserved_percent: applied_reserve(config, limits.reserved_percent),
        },
        next_free_slot: usage.and_then(|u| u.next_free_slot),
        cooldown_until: usage.and_then(|u| u.cooldown_until),
        // The limiter's window: sent and booked (the replay counts the booked slots as taken).
        recipients_last_day: usage.map_or(0, |u| u.recipients_last_day + u.recipients_booked),
        backlog: Load {
            messages: backlog.unbooked,
            recipients: backlog.unbooked_recipients,
        },
        warm_up: limits.warm_up,
    }
}

/// One sender's forecast of `sends` after `backlog`, its budgets read from the limiter.
async fn sender_forecast(
    config: &Config,
    reader: &mut UsageReader<'_>,
    sender: &Sender,
    backlog: Waiting,
    sends: &[NewSend],
    now: DateTime<Utc>,
    by: Option<DateTime<Utc>>,
) -> SenderForecast {
    let (kind, _, tenant, limits) = limits_of(sender, config);
    let mailbox = sender.mailbox();
    let (usage, limiter_error) = match &tenant {
        Some(t) => match reader.read(&t.to_lowercase(), mailbox, now).await {
            Ok(u) => (Some(u), None),
            Err(e) => (None, Some(e)),
        },
        None => (None, None),
    };
    let mut state = sender_state(config, &limits, usage.as_ref(), backlog, now);
    // A suspension in force is a cooldown to the forecast: nothing goes before its end (a
    // trial found the forecast ignoring one).
    let suspensions = match &tenant {
        Some(t) => suspensions_of(reader, &t.to_lowercase(), mailbox, now).await,
        None => Vec::new(),
    };
    held_by(&suspensions, &mut state);
    let limits = state.limits;
    let finish = if tenant.is_some() {
        forecast::finish(&state, sends)
    } else {
        // SendGrid: no limiter, every message as soon as it is due.
        let due = sends.iter().map(|s| s.not_before.unwrap_or(now).max(now));
        Finish {
            first: due.clone().min(),
            finish: due.clone().max().unwrap_or(now),
            spilled: 0,
            too_large: 0,
            missed_by: due
                .zip(sends)
                .filter(|(at, s)| s.by.is_some_and(|by| *at > by))
                .count() as u64,
        }
    };
    let all_high = !sends.is_empty() && sends.iter().all(|s| s.priority == Priority::High);
    SenderForecast {
        mailbox: mailbox.to_string(),
        sender: kind,
        provider: provider(tenant.as_deref()),
        limits,
        usable: forecast::usable_budget(
            limits,
            if all_high {
                Priority::High
            } else {
                Priority::Normal
            },
        ),
        messages: Load {
            messages: sends.len() as u64,
            recipients: sends.iter().map(|s| u64::from(s.recipients)).sum(),
        },
        backlog,
        recipients_last_day: state.recipients_last_day,
        next_free_slot: state.next_free_slot,
        seconds: (finish.finish - now).num_milliseconds() as f64 / 1000.0,
        warnings: suspensions
            .into_iter()
            .chain(forecast::warnings(&finish, limits, by))
            .collect(),
        finish,
        limiter_error,
    }
}
