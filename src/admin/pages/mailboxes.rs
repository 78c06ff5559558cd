//! The mailboxes page (every mailbox with its limits and live use, refreshed every 5 s, under
//! the banner of the budgets nearly used) and the row type one mailbox's page
//! ([`super::mailbox`]) shares.

use super::*;
use crate::admin::usage::{TenantShare, tenant_shares};

/// One mailbox's line, ready to print.
pub(super) struct MailboxRow {
    pub(super) address: String,
    pub(super) href: String,
    pub(super) sender: String,
    pub(super) provider: &'static str,
    pub(super) per_minute: u32,
    pub(super) per_minute_source: &'static str,
    pub(super) per_day: u32,
    pub(super) per_day_source: &'static str,
    pub(super) limiter: Option<LimiterCells>,
    pub(super) limiter_note: String,
    pub(super) paused: Option<String>,
    pub(super) counts: Vec<(String, i64)>,
}

pub(super) struct LimiterCells {
    pub(super) sent: u64,
    pub(super) recipients: u64,
    pub(super) in_flight: u64,
    pub(super) booked: u64,
    pub(super) cooldown: String,
    pub(super) next_slot: String,
}

fn time(t: Option<chrono::DateTime<chrono::Utc>>) -> String {
    t.map_or_else(|| "-".to_owned(), |t| t.format("%H:%M:%S").to_string())
}

impl MailboxRow {
    pub(super) fn of(u: &MailboxUsage) -> Self {
        Self {
            address: u.mailbox.clone(),
            href: format!("/mailboxes/{}", segment(&u.mailbox)),
            sender: u.sender.clone(),
            provider: u.provider,
            per_minute: u.limits.per_minute,
            per_minute_source: u.limits.per_minute_source,
            per_day: u.limits.recipients_per_day,
            per_day_source: u.limits.recipients_per_day_source,
            limiter: u.limiter.as_ref().map(|l| LimiterCells {
                sent: l.sent_last_minute,
                recipients: l.recipients_last_day,
                in_flight: l.in_flight,
                booked: l.booked,
                cooldown: time(l.cooldown_until),
                next_slot: time(l.next_free_slot),
            }),
            limiter_note: match (&u.limiter, &u.limiter_error) {
                (Some(l), _) => l.algorithm.to_owned(),
                (None, Some(e)) => format!("limiter unreadable: {e}"),
                (None, None) => "SendGrid: not rate-limited".to_owned(),
            },
            paused: (u.messages.paused > 0).then(|| {
                format!(
                    "{} wait: {}",
                    u.messages.paused,
                    u.messages.paused_reason.as_deref().unwrap_or("?")
                )
            }),
            counts: u
                .messages
                .by_status
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(s, n)| (s.clone(), *n))
                .collect(),
        }
    }
}

#[derive(Template)]
#[template(path = "admin/mailboxes.html")]
struct MailboxesPage {
    nav: bool,
    csrf: String,
    rows: Vec<MailboxRow>,
    refresh: String,
    default_per_minute: u32,
    default_per_day: u32,
    /// "hr@contoso.example has used 85 % of its 24 h recipient budget", one per mailbox past
    /// `MAIL_BUDGET_ALERT_PERCENT`, then one per Graph tenant past it of its external budget.
    nearly_used: Vec<String>,
}

/// The banner lines of the mailboxes whose day budget, and of the Graph tenants whose external
/// budget, is past `percent`.
fn nearly_used(rows: &[MailboxRow], tenants: &[TenantShare], percent: Option<u8>) -> Vec<String> {
    let Some(percent) = percent else {
        return Vec::new();
    };
    let mailboxes = rows.iter().filter_map(|r| {
        let used = r.limiter.as_ref()?.recipients * 100 / u64::from(r.per_day.max(1));
        (used >= u64::from(percent)).then(|| {
            format!(
                "{} has used {used} % of its 24 h recipient budget",
                r.address
            )
        })
    });
    let tenants = tenants.iter().filter_map(|t| {
        let used = t.external * 100 / u64::from(t.per_day.max(1));
        (used >= u64::from(percent)).then(|| {
            format!(
                "tenant {} has used {used} % of its 24 h external recipient budget ({} of {})",
                t.tenant, t.external, t.per_day
            )
        })
    });
    mailboxes.chain(tenants).collect()
}

#[derive(Template)]
#[template(path = "admin/mailbox_rows.html")]
struct MailboxRows {
    rows: Vec<MailboxRow>,
}

pub(super) async fn usage_rows(
    state: &AdminState,
    only: Option<&MailboxAddress>,
) -> Result<Vec<MailboxRow>, AdminError> {
    let addresses = match only {
        Some(a) => vec![a.clone()],
        None => senders::addresses(&state.pool)
            .await?
            .iter()
            .filter_map(|a| MailboxAddress::parse(a).ok())
            .collect(),
    };
    let mut rows = Vec::with_capacity(addresses.len());
    let mut reader = UsageReader::new(&state.config.rate_limit);
    for address in &addresses {
        rows.push(MailboxRow::of(
            &mailbox_usage_with(&mut reader, &state.config, &state.pool, address).await?,
        ));
    }
    Ok(rows)
}

pub(super) async fn mailboxes(
    State(state): State<AdminState>,
    Authed(session): Authed,
) -> Result<Html<String>, AdminError> {
    let rows = usage_rows(&state, None).await?;
    let mut reader = UsageReader::new(&state.config.rate_limit);
    let (tenants, _) = tenant_shares(&mut reader, &state.config, &state.pool).await?;
    render(&MailboxesPage {
        nav: true,
        csrf: session.csrf,
        nearly_used: nearly_used(&rows, &tenants, state.config.budget_alert_percent),
        rows,
        refresh: "/mailboxes/rows".into(),
        default_per_minute: state.config.rate_limit.defaults.per_minute.get(),
        default_per_day: state.config.rate_limit.defaults.recipients_per_day.get(),
    })
}

#[derive(Deserialize)]
pub(super) struct RowsQuery {
    address: Option<String>,
}

/// The rows alone, for the pages' 5-second refresh (`admin.js`).
pub(super) async fn mailbox_rows(
    State(state): State<AdminState>,
    Authed(_): Authed,
    Query(RowsQuery { address }): Query<RowsQuery>,
) -> Result<Html<String>, AdminError> {
    let only = address.as_deref().map(parse_address).transpose()?;
    render(&MailboxRows {
        rows: usage_rows(&state, only.as_ref()).await?,
    })
}

pub(super) fn parse_address(raw: &str) -> Result<MailboxAddress, AdminError> {
    MailboxAddress::parse(raw).map_err(|e| AdminError::BadInput(format!("address: {e}")))
}
