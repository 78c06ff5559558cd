//! One mailbox's page: its live use (the mailboxes page's row), its limits form (warned above
//! Exchange Online's) and its latest messages.

use super::{
    mailboxes::{MailboxRow, parse_address},
    *,
};

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
    reserved_value: String,
    default_per_minute: u32,
    default_per_day: u32,
    default_reserved: u8,
    error: Option<String>,
    notice: Option<String>,
    warnings: Vec<String>,
    limits_url: &'static str,
    messages: Vec<ops::MessageLine>,
    messages_href: String,
    select: bool,
    /// The sender pools the mailbox is a member of, by name (empty: none).
    pools: String,
    /// Its warm-up: step, day budget, sending days, why it held (ADR 0047).
    warm_up: Option<String>,
    /// When what waits now will have been sent (forecast), UTC.
    backlog_ends: Option<String>,
    /// The adaptive actions in force, in words.
    adaptive: Vec<String>,
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
    Params(q): Params<MailboxQuery>,
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
    form: Option<[String; 3]>,
) -> Result<(StatusCode, Html<String>), AdminError> {
    let usage = mailbox_usage(&state.config, &state.pool, address).await?;
    let system_mailbox = usage.sender == "system mailbox";
    let shown = |v: u32, source: &str| -> String {
        if source == "override" {
            v.to_string()
        } else {
            String::new()
        }
    };
    let [per_minute_value, per_day_value, reserved_value] = form.unwrap_or_else(|| {
        let l = &usage.limits;
        [
            shown(l.per_minute, l.per_minute_source),
            shown(l.recipients_per_day, l.recipients_per_day_source),
            shown(l.reserved_percent.into(), l.reserved_percent_source),
        ]
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
        reserved_value,
        default_per_minute: state.config.rate_limit.defaults.per_minute.get(),
        default_per_day: state.config.rate_limit.defaults.recipients_per_day.get(),
        default_reserved: state.config.rate_limit.defaults.reserved_percent,
        error: error.clone(),
        notice,
        limits_url: EXCHANGE_LIMITS_URL,
        messages,
        messages_href: format!("/messages?sender={}", segment(address.as_str())),
        select: false,
        pools: usage.pools.join(", "),
        warm_up: usage
            .warm_up
            .as_ref()
            .map(crate::reports::warm_up::WarmUpUsage::describe),
        adaptive: usage.adaptive.clone(),
        backlog_ends: usage
            .backlog_ends
            .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string()),
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

/// The reserved-share field: empty means the default; otherwise 0 to 90.
fn reserved_field(raw: &str) -> Result<Option<u8>, String> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Ok(None);
    }
    crate::rate_limit::parse_reserved_percent(raw)
        .map(Some)
        .map_err(|why| {
            format!(
                "rate_limit_reserved_percent: {why} (got {raw:?}); leave it empty for the default"
            )
        })
}

pub(super) async fn set_limits(
    State(state): State<AdminState>,
    Path(raw): Path<String>,
    Posted { session, fields }: Posted,
) -> Result<Response, AdminError> {
    let address = parse_address(&raw)?;
    let clear = fields.get("action") == Some("clear");
    let typed = [
        "rate_limit_per_minute",
        "rate_limit_recipients_per_day",
        "rate_limit_reserved_percent",
    ]
    .map(|name| fields.get(name).unwrap_or("").to_owned());
    let parsed = if clear {
        Ok((None, None, None))
    } else {
        limit_field("rate_limit_per_minute", &typed[0]).and_then(|m| {
            let d = limit_field("rate_limit_recipients_per_day", &typed[1])?;
            Ok((m, d, reserved_field(&typed[2])?))
        })
    };
    let (per_minute, recipients_per_day, reserved_percent) = match parsed {
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
        Some(crate::domain::Sender::SystemMailbox(m)) => (
            m.rate_limit_per_minute,
            m.rate_limit_recipients_per_day,
            m.rate_limit_reserved_percent,
        ),
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
            reserved_percent,
        },
    )
    .await?;
    // Bookings made under the old limits go: the rows take fresh decisions under the new ones.
    // The same values again change nothing, and the bookings they made still hold.
    let changed = before
        != (
            after.per_minute,
            after.recipients_per_day,
            after.reserved_percent,
        );
    let (unbooked, due_now) = if changed {
        crate::reports::bookings::after_limit_change(&state.config, &state.pool, &address).await?
    } else {
        (0, 0)
    };
    let show = |v: Option<u32>| v.map_or_else(|| "default".to_owned(), |v| v.to_string());
    let count = |v: Option<NonZeroU32>| v.map(NonZeroU32::get);
    tracing::info!(
        event = log_events::MAIL_ADMIN_LIMITS_CHANGED,
        mailbox = %address,
        per_minute_before = %show(count(before.0)),
        per_minute_after = %show(count(after.per_minute)),
        recipients_per_day_before = %show(count(before.1)),
        recipients_per_day_after = %show(count(after.recipients_per_day)),
        bookings_dropped = unbooked,
        messages_due_now = due_now,
        reserved_percent_before = %show(before.2.map(u32::from)),
        reserved_percent_after = %show(after.reserved_percent.map(u32::from)),
        "rate-limit overrides changed in the admin UI"
    );
    Ok(Redirect::to(&format!("/mailboxes/{}?saved=1", segment(address.as_str()))).into_response())
}
