//! The mailboxes page (a page of the mailboxes, busiest first, with their limits and live use,
//! refreshed every 5 s: `?page=`, `?per_page=`) and one
//! mailbox's page (its limits form, warned above Exchange Online's, live use and latest
//! messages): one row type serves both.

use super::*;

/// One mailbox's line, ready to print.
struct MailboxRow {
    address: String,
    href: String,
    sender: String,
    provider: &'static str,
    per_minute: u32,
    per_minute_source: &'static str,
    per_day: u32,
    per_day_source: &'static str,
    limiter: Option<LimiterCells>,
    limiter_note: String,
    paused: Option<String>,
    counts: Vec<(String, i64)>,
}

struct LimiterCells {
    sent: u64,
    recipients: u64,
    in_flight: u64,
    booked: u64,
    cooldown: String,
    next_slot: String,
}

fn time(t: Option<chrono::DateTime<chrono::Utc>>) -> String {
    t.map_or_else(|| "-".to_owned(), |t| t.format("%H:%M:%S").to_string())
}

impl MailboxRow {
    fn of(u: &MailboxUsage) -> Self {
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
    /// `MAIL_BUDGET_ALERT_PERCENT` on this page.
    nearly_used: Vec<String>,
    /// "Page 2 of 100 (5,000 mailboxes, …)".
    position: String,
    previous: Option<PageLink>,
    next: Option<PageLink>,
}

/// The banner lines of the mailboxes whose day budget is past `percent`.
fn nearly_used(rows: &[MailboxRow], percent: Option<u8>) -> Vec<String> {
    let Some(percent) = percent else {
        return Vec::new();
    };
    rows.iter()
        .filter_map(|r| {
            let used = r.limiter.as_ref()?.recipients * 100 / u64::from(r.per_day.max(1));
            (used >= u64::from(percent)).then(|| {
                format!(
                    "{} has used {used} % of its 24 h recipient budget",
                    r.address
                )
            })
        })
        .collect()
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
    Query(q): Query<PageQuery>,
) -> Result<Html<String>, AdminError> {
    let page = q.read(&state).await?;
    let rows: Vec<MailboxRow> = page.mailboxes.iter().map(MailboxRow::of).collect();
    let (previous, next) = page_links(&page);
    render(&MailboxesPage {
        nav: true,
        csrf: session.csrf,
        nearly_used: nearly_used(&rows, state.config.budget_alert_percent),
        rows,
        refresh: format!(
            "/mailboxes/rows?page={}&per_page={}",
            page.page, page.per_page
        ),
        default_per_minute: state.config.rate_limit.defaults.per_minute.get(),
        default_per_day: state.config.rate_limit.defaults.recipients_per_day.get(),
        position: format!(
            "Page {} of {} ({} mailboxes, busiest first: most messages waiting or in flight)",
            page.page, page.pages, page.total
        ),
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
    Query(RowsQuery {
        address,
        page,
        per_page,
    }): Query<RowsQuery>,
) -> Result<Html<String>, AdminError> {
    let page = PageQuery { page, per_page };
    let usages = match address.as_deref().map(parse_address).transpose()? {
        Some(a) => vec![mailbox_usage(&state.config, &state.pool, &a).await?],
        None => page.read(&state).await?.mailboxes,
    };
    render(&MailboxRows {
        rows: usages.iter().map(MailboxRow::of).collect(),
    })
}

#[derive(Template)]
#[template(path = "admin/mailbox.html")]
struct MailboxPage {
    nav: bool,
    csrf: String,
    rows: Vec<MailboxRow>,
    refresh: String,
    system_mailbox: bool,
    per_minute_value: String,
    per_day_value: String,
    default_per_minute: u32,
    default_per_day: u32,
    error: Option<String>,
    notice: Option<String>,
    warnings: Vec<String>,
    limits_url: &'static str,
    messages: Vec<ops::MessageLine>,
    messages_href: String,
    select: bool,
}

fn parse_address(raw: &str) -> Result<MailboxAddress, AdminError> {
    MailboxAddress::parse(raw).map_err(|e| AdminError::BadInput(format!("address: {e}")))
}

/// Warnings for limits above Exchange Online's.
fn warnings(per_minute: u32, per_day: u32) -> Vec<String> {
    let mut out = Vec::new();
    if per_minute > EXCHANGE_PER_MINUTE {
        out.push(format!(
            "{per_minute} messages a minute is above Exchange Online's {EXCHANGE_PER_MINUTE}: Graph will throttle (429) what our limiter lets through."
        ));
    }
    if per_day > EXCHANGE_RECIPIENTS_PER_DAY {
        out.push(format!(
            "{per_day} recipients a day is above Exchange Online's {EXCHANGE_RECIPIENTS_PER_DAY} per 24 h: the mailbox may be blocked from sending."
        ));
    }
    out
}

#[derive(Deserialize)]
pub(super) struct MailboxQuery {
    saved: Option<String>,
}

pub(super) async fn mailbox(
    State(state): State<AdminState>,
    Authed(session): Authed,
    Path(raw): Path<String>,
    Query(q): Query<MailboxQuery>,
) -> Result<Html<String>, AdminError> {
    let address = parse_address(&raw)?;
    mailbox_page(
        &state,
        session,
        &address,
        None,
        q.saved.map(|_| {
            "Saved: the next message from this mailbox uses these limits, on every replica."
                .to_owned()
        }),
        None,
    )
    .await
    .map(|(_, page)| page)
}

/// The mailbox page; `form` keeps what the operator typed after a refusal.
async fn mailbox_page(
    state: &AdminState,
    session: Session,
    address: &MailboxAddress,
    error: Option<String>,
    notice: Option<String>,
    form: Option<(String, String)>,
) -> Result<(StatusCode, Html<String>), AdminError> {
    let usage = mailbox_usage(&state.config, &state.pool, address).await?;
    let system_mailbox = usage.sender == "system mailbox";
    let shown = |v: u32, source: &str| {
        if source == "override" {
            v.to_string()
        } else {
            String::new()
        }
    };
    let (per_minute_value, per_day_value) = form.unwrap_or_else(|| {
        (
            shown(usage.limits.per_minute, usage.limits.per_minute_source),
            shown(
                usage.limits.recipients_per_day,
                usage.limits.recipients_per_day_source,
            ),
        )
    });
    let filter = ops::MessageFilter {
        sender: Some(address.to_string()),
        ..ops::MessageFilter::default()
    };
    let messages = ops::list(&state.pool, &filter, MAILBOX_MESSAGES).await?;
    let page = MailboxPage {
        nav: true,
        csrf: session.csrf,
        warnings: warnings(usage.limits.per_minute, usage.limits.recipients_per_day),
        rows: vec![MailboxRow::of(&usage)],
        refresh: format!("/mailboxes/rows?address={}", segment(address.as_str())),
        system_mailbox,
        per_minute_value,
        per_day_value,
        default_per_minute: state.config.rate_limit.defaults.per_minute.get(),
        default_per_day: state.config.rate_limit.defaults.recipients_per_day.get(),
        error: error.clone(),
        notice,
        limits_url: EXCHANGE_LIMITS_URL,
        messages,
        messages_href: format!("/messages?sender={}", segment(address.as_str())),
        select: false,
    };
    let code = if error.is_some() {
        StatusCode::UNPROCESSABLE_ENTITY
    } else {
        StatusCode::OK
    };
    Ok((code, render(&page)?))
}

/// A limit field: empty means "no override" (the default); otherwise a positive integer that
/// fits the column (`integer`).
fn limit_field(name: &str, raw: &str) -> Result<Option<NonZeroU32>, String> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Ok(None);
    }
    raw.parse::<u32>()
        .ok()
        .filter(|v| *v <= i32::MAX as u32)
        .and_then(NonZeroU32::new)
        .map(Some)
        .ok_or_else(|| {
            format!(
                "{name}: must be a whole number from 1 to {} (got {raw:?}); leave it empty for the default",
                i32::MAX
            )
        })
}

pub(super) async fn set_limits(
    State(state): State<AdminState>,
    Authed(session): Authed,
    Path(raw): Path<String>,
    body: String,
) -> Result<Response, AdminError> {
    let fields = Fields::parse(&body);
    fields.check_csrf(&session)?;
    let address = parse_address(&raw)?;
    let clear = fields.get("action") == Some("clear");
    let typed = (
        fields.get("rate_limit_per_minute").unwrap_or("").to_owned(),
        fields
            .get("rate_limit_recipients_per_day")
            .unwrap_or("")
            .to_owned(),
    );
    let parsed = if clear {
        Ok((None, None))
    } else {
        limit_field("rate_limit_per_minute", &typed.0)
            .and_then(|m| limit_field("rate_limit_recipients_per_day", &typed.1).map(|d| (m, d)))
    };
    let (per_minute, recipients_per_day) = match parsed {
        Ok(v) => v,
        Err(problem) => {
            return Ok(
                mailbox_page(&state, session, &address, Some(problem), None, Some(typed))
                    .await?
                    .into_response(),
            );
        }
    };
    let before = match senders::by_address(&state.pool, &address).await? {
        Some(crate::domain::Sender::SystemMailbox(m)) => {
            (m.rate_limit_per_minute, m.rate_limit_recipients_per_day)
        }
        Some(crate::domain::Sender::Tenant(_)) => {
            return Err(AdminError::BadInput(format!(
                "{address} is a tenant's sender: tenant senders always use the defaults \
                 (MAIL_RATE_LIMIT_PER_MINUTE, MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY)"
            )));
        }
        None => return Err(AdminError::NoSuchSender(address.to_string())),
    };
    let after = senders::set_limits(
        &state.pool,
        &address,
        senders::LimitsChange::Replace {
            per_minute,
            recipients_per_day,
        },
    )
    .await?;
    let show = |v: Option<NonZeroU32>| v.map_or_else(|| "default".to_owned(), |v| v.to_string());
    tracing::info!(
        event = events::MAIL_ADMIN_LIMITS_CHANGED,
        mailbox = %address,
        per_minute_before = %show(before.0),
        per_minute_after = %show(after.0),
        recipients_per_day_before = %show(before.1),
        recipients_per_day_after = %show(after.1),
        "rate-limit overrides changed in the admin UI"
    );
    Ok(Redirect::to(&format!("/mailboxes/{}?saved=1", segment(address.as_str()))).into_response())
}
