//! The mailboxes page (a page of the mailboxes, busiest first, with their limits and live use,
//! refreshed every 5 s: `?page=`, `?per_page=`, under the banner of the budgets nearly used)
//! and the row type one mailbox's page ([`super::mailbox`]) shares.

use axum::{http::HeaderValue, response::IntoResponse};

use super::*;
use crate::{
    rate_limit::usage::UsageReader,
    reports::usage::{TenantShare, tenant_shares},
};

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
    /// `MAIL_BUDGET_ALERT_PERCENT` on this page, then one per Graph tenant past it of its external
    /// budget.
    nearly_used: Vec<String>,
    /// "Page 2 of 100 (5,000 mailboxes, busiest first: …".
    position: String,
    /// "as of 19:58:03 UTC, 4 s old" (the 5-second refresh updates it from the rows'
    /// [`ORDER_FRESHNESS`] header).
    freshness: String,
    previous: Option<PageLink>,
    next: Option<PageLink>,
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

/// Mailboxes a page lists unless `?per_page=` says otherwise.
const PER_PAGE: u32 = 50;

/// `?page=` (from 1) and `?per_page=` of the mailboxes page and its refresh.
#[derive(Deserialize)]
pub(super) struct PageQuery {
    page: Option<u32>,
    per_page: Option<u32>,
}

impl PageQuery {
    async fn read(&self, state: &AdminState) -> Result<UsagePage, AdminError> {
        usage_page(
            &state.config,
            &state.pool,
            self.page.unwrap_or(1),
            self.per_page.unwrap_or(PER_PAGE),
        )
        .await
        .map_err(AdminError::from)
    }
}

/// A link to another page of the mailboxes.
struct PageLink {
    label: String,
    href: String,
}

/// The links to the pages before and after `p`.
fn page_links(p: &UsagePage) -> (Option<PageLink>, Option<PageLink>) {
    let link = |page: u32, label: &str| PageLink {
        label: label.to_owned(),
        href: format!("/mailboxes?page={page}&per_page={}", p.per_page),
    };
    (
        (p.page > 1).then(|| link((p.page - 1).min(p.pages), "← busier")),
        (p.page < p.pages).then(|| link(p.page + 1, "quieter →")),
    )
}

pub(super) async fn mailboxes(
    State(state): State<AdminState>,
    Authed(session): Authed,
    Params(q): Params<PageQuery>,
) -> Result<Html<String>, AdminError> {
    let page = q.read(&state).await?;
    if let Some(past) = page.past_the_last() {
        return Err(AdminError::BadInput(past));
    }
    let rows: Vec<MailboxRow> = page.mailboxes.iter().map(MailboxRow::of).collect();
    let (previous, next) = page_links(&page);
    let mut reader = UsageReader::new(&state.config.rate_limit);
    let (tenants, _) = tenant_shares(&mut reader, &state.config, &state.pool).await?;
    render(&MailboxesPage {
        nav: true,
        csrf: session.csrf,
        nearly_used: nearly_used(&rows, &tenants, state.config.budget_alert_percent),
        rows,
        refresh: format!(
            "/mailboxes/rows?page={}&per_page={}",
            page.page, page.per_page
        ),
        default_per_minute: state.config.rate_limit.defaults.per_minute.get(),
        default_per_day: state.config.rate_limit.defaults.recipients_per_day.get(),
        position: format!(
            "Page {} of {} ({} mailboxes, busiest first: most messages waiting or in flight,",
            page.page, page.pages, page.total,
        ),
        freshness: page.order_freshness(),
        previous,
        next,
    })
}

#[derive(Deserialize)]
pub(super) struct RowsQuery {
    address: Option<String>,
    page: Option<u32>,
    per_page: Option<u32>,
}

/// The rows alone, for the pages' 5-second refresh (`admin.js`): one mailbox's, or a page's.
pub(super) async fn mailbox_rows(
    State(state): State<AdminState>,
    Authed(_): Authed,
    Params(RowsQuery {
        address,
        page,
        per_page,
    }): Params<RowsQuery>,
) -> Result<axum::response::Response, AdminError> {
    let page = PageQuery { page, per_page };
    let (usages, freshness) = match address.as_deref().map(parse_address).transpose()? {
        Some(a) => (
            vec![mailbox_usage(&state.config, &state.pool, &a).await?],
            None,
        ),
        None => {
            let page = page.read(&state).await?;
            let freshness = page.order_freshness();
            (page.mailboxes, Some(freshness))
        }
    };
    let rows = render(&MailboxRows {
        rows: usages.iter().map(MailboxRow::of).collect(),
    })?;
    let mut response = rows.into_response();
    if let Some(freshness) = freshness.and_then(|f| HeaderValue::from_str(&f).ok()) {
        response.headers_mut().insert(ORDER_FRESHNESS, freshness);
    }
    Ok(response)
}

/// The rows' header with the page order's [`UsagePage::order_freshness`], for `admin.js`.
const ORDER_FRESHNESS: &str = "x-order-freshness";

pub(super) fn parse_address(raw: &str) -> Result<MailboxAddress, AdminError> {
    MailboxAddress::parse(raw).map_err(|e| AdminError::BadInput(format!("address: {e}")))
}
