//! A mailbox's limits, live budget and messages in one report: what `mail-worker mailbox
//! usage` prints and what the admin UI's mailbox pages show (one implementation for both).

use serde::Serialize;

pub use super::limits::EffectiveLimits;
use super::{
    ReportError,
    limits::{limits_of, provider, tenant_budget},
};
use crate::{
    config::Config,
    domain::{MailboxAddress, Sender},
    rate_limit::usage::{LimiterUsage, UsageReader},
    store::{SenderRef, admin, campaigns, mailbox_list, pool_views, senders},
};

/// `mailbox usage`'s report (its `--json` shape is stable).
#[derive(Debug, Clone, Serialize)]
pub struct MailboxUsage {
    /// The mailbox.
    pub mailbox: String,
    /// `system mailbox` or `tenant <name>`.
    pub sender: String,
    /// `graph` or `sendgrid`.
    pub provider: &'static str,
    /// The limits in force.
    pub limits: EffectiveLimits,
    /// What the limiter counts (`null` for SendGrid, which is not rate-limited).
    pub limiter: Option<LimiterUsage>,
    /// Why the limiter's Redis could not be read, if it could not.
    pub limiter_error: Option<String>,
    /// The sender pools it is a member of, by name (docs/decisions/0046-sender-pools.md).
    pub pools: Vec<String>,
    /// Its warm-up, if it has one (docs/decisions/0047-warm-up.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warm_up: Option<super::warm_up::WarmUpUsage>,
    /// The adaptive actions in force on it and on its tenant (docs/adaptive-rules.md), each in
    /// words: `mailbox usage` of one mailbox and the admin UI's mailbox page fill it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub adaptive: Vec<String>,
    /// Its messages.
    pub messages: admin::SenderMessages,
    /// When the messages waiting now will have been sent (a forecast: the limiter's bookings,
    /// then the unbooked ones at the mailbox's budgets; `crate::forecast::backlog_end`). Only
    /// in the report of one mailbox, and only when something waits for a Graph mailbox.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backlog_ends: Option<chrono::DateTime<chrono::Utc>>,
}

/// Builds `mailbox usage`'s report.
///
/// # Errors
/// [`ReportError::NoSuchSender`]; database errors. A limiter Redis that cannot be read is
/// reported in `limiter_error`, not as a failure.
pub async fn mailbox_usage(
    config: &Config,
    pool: &sqlx::PgPool,
    address: &MailboxAddress,
) -> Result<MailboxUsage, ReportError> {
    mailbox_usage_with(
        &mut UsageReader::new(&config.rate_limit),
        config,
        pool,
        address,
    )
    .await
}

/// [`mailbox_usage`] reading the limiter through `reader` (one connection for many mailboxes).
///
/// # Errors
/// As [`mailbox_usage`].
pub(crate) async fn mailbox_usage_with(
    reader: &mut UsageReader<'_>,
    config: &Config,
    pool: &sqlx::PgPool,
    address: &MailboxAddress,
) -> Result<MailboxUsage, ReportError> {
    let sender = senders::by_address(pool, address)
        .await?
        .ok_or_else(|| ReportError::NoSuchSender(address.to_string()))?;
    let mut usage = usages(reader, config, pool, vec![sender.clone()])
        .await?
        .pop()
        .unwrap_or_else(|| unreachable!("one usage per sender"));
    // The adaptive actions on it and its tenant, read once: in words, and a suspension among
    // them holds the forecast below. None for SendGrid or a limiter that cannot be read.
    let now = chrono::Utc::now();
    let actions = match sender.graph() {
        Some(graph) => reader
            .adaptive(&graph.graph_tenant_id.to_lowercase(), address)
            .await
            .ok(),
        None => None,
    };
    if let Some(actions) = &actions {
        usage.adaptive = super::adaptive::actions_in_words(actions, now);
    }
    // A paused sender sends nothing until it resumes: no forecast then.
    if let Some(limiter) = &usage.limiter
        && usage.messages.paused == 0
    {
        let booking = config.rate_limit.algorithm == crate::rate_limit::Algorithm::Paced;
        let sender_ref = SenderRef::of(&sender);
        let waiting = campaigns::waiting_of(pool, booking, sender_ref).await?;
        if waiting.booked + waiting.unbooked > 0 {
            let mut state =
                super::campaign::sender_state(config, &usage.limits, Some(limiter), waiting, now);
            // A suspended mailbox sends nothing before the suspension ends; then everything
            // waiting goes at its budgets, the booked ones booked again (a trial found `waiting
            // sent by` before the suspension's end).
            let held = actions
                .as_ref()
                .map(|a| super::campaign::suspensions_in(a, now))
                .unwrap_or_default();
            if super::campaign::held_by(&held, &mut state) {
                state.next_free_slot = None;
                state.backlog.messages += waiting.booked;
                // At least one recipient each (a booking does not say how many).
                state.backlog.recipients += waiting.booked;
            }
            // Not before the latest booked slot or future `scheduledOn` either.
            usage.backlog_ends = crate::forecast::backlog_end(&state).max(waiting.latest);
        }
    }
    Ok(usage)
}

/// One page of `mailbox usage` (no address) and of the admin UI's mailboxes page (its `--json`
/// shape is stable).
#[derive(Debug, Clone, Serialize)]
pub struct UsagePage {
    /// This page, from 1.
    pub page: u32,
    /// Mailboxes per page.
    pub per_page: u32,
    /// Every sending mailbox (system mailboxes and tenants' senders).
    pub total: u64,
    /// Pages in all (at least 1).
    pub pages: u32,
    /// This page's mailboxes, busiest first: most unfinished (`SCHEDULED` + `SENDING`)
    /// messages as of [`Self::order_as_of`], equal ones by address (`messages` read now).
    pub mailboxes: Vec<MailboxUsage>,
    /// When the order's counts were taken: the snapshot's time (at most
    /// [`crate::store::mailbox_order::MAX_AGE`] ago), or now where it was counted live.
    pub order_as_of: chrono::DateTime<chrono::Utc>,
}

/// Page `page` (from 1) of `per_page` mailboxes (at most [`mailbox_list::MAX_PER_PAGE`]),
/// busiest first by the order's snapshot ([`mailbox_list::Order::SNAPSHOT`]), each with its
/// [`MailboxUsage`]: a fixed number of queries (the order, the page's senders, their messages)
/// and one Redis round trip for the page, whatever the number of mailboxes.
///
/// # Errors
/// [`ReportError::BadInput`] for page 0 or a `per_page` of 0 or above the most; database errors.
pub async fn usage_page(
    config: &Config,
    pool: &sqlx::PgPool,
    page: u32,
    per_page: u32,
) -> Result<UsagePage, ReportError> {
    usage_page_ordered(config, pool, page, per_page, mailbox_list::Order::SNAPSHOT).await
}

/// [`usage_page`] with its order as `order` says (`Live`: what the snapshot saves, for benches).
///
/// # Errors
/// As [`usage_page`].
pub async fn usage_page_ordered(
    config: &Config,
    pool: &sqlx::PgPool,
    page: u32,
    per_page: u32,
    order: mailbox_list::Order,
) -> Result<UsagePage, ReportError> {
    if page == 0 {
        return Err(ReportError::BadInput("page: pages count from 1".into()));
    }
    if per_page == 0 || per_page > mailbox_list::MAX_PER_PAGE {
        return Err(ReportError::BadInput(format!(
            "per_page: from 1 to {} (got {per_page})",
            mailbox_list::MAX_PER_PAGE
        )));
    }
    let listed = mailbox_list::busiest(pool, page, per_page, order).await?;
    let addresses: Vec<String> = listed.addresses.iter().map(|(a, _)| a.clone()).collect();
    let mut found = senders::matching(pool, Some(&addresses)).await?;
    // In the page's order (busiest first), not the query's.
    found.sort_by_key(|s| addresses.iter().position(|a| a == s.mailbox().as_str()));
    let mailboxes = usages(
        &mut UsageReader::new(&config.rate_limit),
        config,
        pool,
        found,
    )
    .await?;
    Ok(UsagePage {
        page,
        per_page,
        total: listed.total,
        pages: u32::try_from(listed.total.div_ceil(u64::from(per_page)))
            .unwrap_or(u32::MAX)
            .max(1),
        mailboxes,
        order_as_of: listed.order_as_of,
    })
}

impl UsagePage {
    /// What is wrong with asking for this page when it lies past the last (it lists nothing):
    /// the CLI and the HTML page refuse it; the page's refresh shows it empty.
    #[must_use]
    pub fn past_the_last(&self) -> Option<String> {
        (self.page > self.pages).then(|| {
            format!(
                "page: {} is past the last page, {} ({} mailboxes, {} a page)",
                self.page, self.pages, self.total, self.per_page
            )
        })
    }

    /// How fresh the order is, for the page and the CLI: `as of 19:58:03 UTC, 4 s old`.
    pub fn order_freshness(&self) -> String {
        let (at, age) = (self.order_as_of, chrono::Utc::now() - self.order_as_of);
        format!(
            "as of {} UTC, {} s old",
            at.format("%H:%M:%S"),
            age.num_seconds().max(0)
        )
    }
}

/// The [`MailboxUsage`] of each of `senders`, in their order: their messages in one query,
/// their limiter state in one round trip.
async fn usages(
    reader: &mut UsageReader<'_>,
    config: &Config,
    pool: &sqlx::PgPool,
    senders: Vec<Sender>,
) -> Result<Vec<MailboxUsage>, ReportError> {
    let described: Vec<_> = senders.iter().map(|s| limits_of(s, config)).collect();
    let ids: Vec<uuid::Uuid> = described.iter().map(|(_, id, _, _)| *id).collect();
    let mut messages = mailbox_list::messages_of(pool, &ids).await?;
    let mut pools = pool_views::pools_of(pool, &ids).await?;
    let mut warm_ups = crate::store::warmups::of_senders(pool, &ids).await?;
    let graph: Vec<(String, MailboxAddress)> = senders
        .iter()
        .zip(&described)
        .filter_map(|(s, (_, _, tenant, _))| {
            Some((tenant.as_ref()?.to_lowercase(), s.mailbox().clone()))
        })
        .collect();
    let mut read = reader
        .read_many(&graph, chrono::Utc::now())
        .await
        .into_iter();
    let mut out = Vec::with_capacity(senders.len());
    for (sender, (kind, id, tenant, limits)) in senders.iter().zip(described) {
        let (limiter, limiter_error) = match &tenant {
            Some(_) => match read.next().unwrap_or_else(|| Err("not read".into())) {
                Ok(usage) => (Some(usage), None),
                Err(e) => (
                    None,
                    Some(format!(
                        "MAIL_RATE_LIMIT_REDIS_URL, default REDIS_URL ({}): {e}",
                        config.rate_limit.redis_url.redacted()
                    )),
                ),
            },
            None => (None, None),
        };
        out.push(MailboxUsage {
            mailbox: sender.mailbox().to_string(),
            sender: kind,
            provider: provider(tenant.as_deref()),
            limits,
            limiter,
            limiter_error,
            pools: pools.remove(&id).unwrap_or_default(),
            warm_up: warm_ups.remove(&id).map(Into::into),
            adaptive: Vec::new(),
            messages: messages
                .remove(&id)
                .unwrap_or_else(admin::SenderMessages::zeros),
            backlog_ends: None,
        });
    }
    Ok(out)
}

/// The used share of one Graph mailbox's budgets, as the limiter counts them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BudgetShare {
    /// The mailbox.
    pub mailbox: MailboxAddress,
    /// Its Graph tenant (lower case).
    pub tenant: String,
    /// Of the per-minute message budget (0–1, above 1 only if the limits were lowered).
    pub minute: f64,
    /// Of the 24 h recipient budget.
    pub day: f64,
}

/// The [`BudgetShare`] of every Graph sender (the senders read in two queries); senders whose
/// limiter state cannot be read are left out (the read error is returned beside the rest).
///
/// # Errors
/// Database errors.
pub(crate) async fn budget_shares(
    reader: &mut UsageReader<'_>,
    config: &Config,
    pool: &sqlx::PgPool,
) -> Result<(Vec<BudgetShare>, Option<String>), ReportError> {
    let mut shares = Vec::new();
    let mut failed = None;
    // Two queries and one Redis round trip per refresh whatever the number of mailboxes.
    let graph: Vec<(String, MailboxAddress, EffectiveLimits)> = senders::all(pool)
        .await?
        .iter()
        .filter_map(|sender| {
            let (_, _, tenant, limits) = limits_of(sender, config);
            Some((tenant?.to_lowercase(), sender.mailbox().clone(), limits))
        })
        .collect();
    let asked: Vec<(String, MailboxAddress)> = graph
        .iter()
        .map(|(t, m, _)| (t.clone(), m.clone()))
        .collect();
    let read = reader.read_many(&asked, chrono::Utc::now()).await;
    for ((tenant, mailbox, limits), usage) in graph.into_iter().zip(read) {
        match usage {
            Ok(u) => shares.push(BudgetShare {
                minute: u.sent_last_minute as f64 / f64::from(limits.per_minute),
                day: u.recipients_last_day as f64 / f64::from(limits.recipients_per_day),
                mailbox,
                tenant,
            }),
            Err(e) => failed = Some(e),
        }
    }
    Ok((shares, failed))
}

/// The used share of one Graph tenant's external recipient budget (rolling 24 h), as the
/// `paced` limiter counts it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TenantShare {
    /// The Graph tenant (lower case).
    pub tenant: String,
    /// External recipients in its rolling 24 h (bookings included).
    pub external: u64,
    /// Its budget.
    pub per_day: u32,
    /// `external / per_day`.
    pub share: f64,
}

/// The [`TenantShare`] of every Graph tenant with an external budget (one read per tenant, the
/// senders in two queries); tenants whose state cannot be read are left out (the error is
/// returned beside the rest). `fixed-window` keeps no tenant budget: none.
///
/// # Errors
/// Database errors.
pub(crate) async fn tenant_shares(
    reader: &mut UsageReader<'_>,
    config: &Config,
    pool: &sqlx::PgPool,
) -> Result<(Vec<TenantShare>, Option<String>), ReportError> {
    if config.rate_limit.algorithm != crate::rate_limit::Algorithm::Paced {
        return Ok((Vec::new(), None));
    }
    let mut budgets = std::collections::BTreeMap::new();
    for sender in senders::all(pool).await? {
        if let (Some(budget), (_, _, Some(tenant), _)) =
            (tenant_budget(&sender), limits_of(&sender, config))
        {
            budgets
                .entry(tenant.to_lowercase())
                .or_insert(budget.external_recipients_per_day.get());
        }
    }
    let mut shares = Vec::new();
    let mut failed = None;
    for (tenant, per_day) in budgets {
        match reader.tenant_external(&tenant).await {
            Ok(external) => shares.push(TenantShare {
                share: external as f64 / f64::from(per_day),
                tenant,
                external,
                per_day,
            }),
            Err(e) => failed = Some(e),
        }
    }
    Ok((shares, failed))
}
