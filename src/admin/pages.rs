//! The admin UI's routes: login and logout, the mailboxes with their live use, a mailbox with
//! its limits form, the messages with retry and cancel. HTML from `templates/admin/` (askama,
//! escaped); every page but the login form needs a session, every POST its CSRF token.

use std::{collections::BTreeMap, net::SocketAddr, num::NonZeroU32, time::Instant};

use askama::Template;
use axum::{
    Router,
    extract::{ConnectInfo, FromRequestParts, Path, Query, Request, State},
    http::{HeaderMap, HeaderValue, Method, StatusCode, header, request::Parts},
    middleware::{self, Next},
    response::{Html, IntoResponse, Redirect, Response},
    routing::{get, post},
};
use serde::Deserialize;

use super::{
    AdminError, AdminState,
    auth::{self, Session},
    usage::{MailboxUsage, mailbox_usage, mailbox_usage_with},
};
use crate::{
    domain::{MailboxAddress, MessageStatus},
    events,
    store::{admin as ops, senders},
};

/// Exchange Online's per-mailbox limits (above them the limits form warns) and their page,
/// linked from the warnings: the same numbers the start-up warnings use.
pub use crate::config::EXCHANGE_LIMITS_PAGE as EXCHANGE_LIMITS_URL;
use crate::config::{
    EXCHANGE_MESSAGES_PER_MINUTE as EXCHANGE_PER_MINUTE, EXCHANGE_RECIPIENTS_PER_DAY,
};
use crate::rate_limit::usage::UsageReader;
/// The most messages a messages page lists.
pub(crate) const MESSAGES_PAGE: u32 = 200;
/// The most messages a mailbox page lists.
pub(crate) const MAILBOX_MESSAGES: u32 = 25;

const CSS: &str = include_str!("../../templates/admin/admin.css");
const JS: &str = include_str!("../../templates/admin/admin.js");

/// Every route of the UI.
pub(crate) fn router(state: AdminState) -> Router {
    Router::new()
        .route("/", get(|| async { Redirect::to("/mailboxes") }))
        .route("/login", get(login_form).post(login))
        .route("/logout", post(logout))
        .route("/mailboxes", get(mailboxes))
        .route("/mailboxes/rows", get(mailbox_rows))
        .route("/mailboxes/{address}", get(mailbox))
        .route("/mailboxes/{address}/limits", post(set_limits))
        .route("/messages", get(messages))
        .route(
            "/messages/retry",
            post(|state, session, body| act(state, session, body, ops::BulkAction::Retry)),
        )
        .route(
            "/messages/cancel",
            post(|state, session, body| act(state, session, body, ops::BulkAction::Cancel)),
        )
        .route(
            "/assets/admin.css",
            get(|| async { ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], CSS) }),
        )
        .route("/assets/admin.js", get(script))
        .layer(middleware::from_fn(security_headers))
        .with_state(state)
}

/// No caching, no framing, scripts and styles from this origin only.
async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CACHE_CONTROL, "no-store"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "same-origin"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
        ),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// A request with a valid session. Without one, a GET is sent to the login form (303) and
/// anything else is refused (401).
pub(crate) struct Authed(pub Session);

impl FromRequestParts<AdminState> for Authed {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AdminState,
    ) -> Result<Self, Self::Rejection> {
        let session = parts
            .headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find_map(|h| auth::cookie(h, auth::SESSION_COOKIE))
            .and_then(|c| state.token.session(c, chrono::Utc::now()));
        match session {
            Some(s) => Ok(Self(s)),
            None if parts.method == Method::GET => Err(Redirect::to("/login").into_response()),
            None => Err((StatusCode::UNAUTHORIZED, "log in first: /login").into_response()),
        }
    }
}

/// A urlencoded form body, repeated fields kept (`id=…&id=…`).
struct Fields(Vec<(String, String)>);

impl Fields {
    fn parse(body: &str) -> Self {
        Self(
            url::form_urlencoded::parse(body.as_bytes())
                .into_owned()
                .collect(),
        )
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn all(&self, name: &str) -> impl Iterator<Item = &str> {
        self.0
            .iter()
            .filter(move |(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The session's CSRF token must be in field `csrf`, else [`AdminError::Csrf`] (403).
    fn check_csrf(&self, session: &Session) -> Result<(), AdminError> {
        if session.csrf_ok(self.get("csrf")) {
            Ok(())
        } else {
            Err(AdminError::Csrf)
        }
    }
}

fn render(template: &impl Template) -> Result<Html<String>, AdminError> {
    Ok(Html(template.render()?))
}

/// A path segment for `text` (`@` and `+` escaped).
fn segment(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

// ---------------------------------------------------------------------------------------------
// Login

#[derive(Template)]
#[template(path = "admin/login.html")]
struct LoginPage {
    nav: bool,
    csrf: String,
    error: Option<String>,
}

async fn login_form(State(state): State<AdminState>) -> Result<Response, AdminError> {
    login_page(&state, StatusCode::OK, None)
}

fn login_page(
    state: &AdminState,
    code: StatusCode,
    error: Option<String>,
) -> Result<Response, AdminError> {
    let (nonce, csrf) = state.token.new_login();
    let cookie = auth::set_cookie(
        auth::LOGIN_COOKIE,
        &nonce,
        std::time::Duration::from_secs(3600),
        state.config.admin.cookie_secure,
    );
    let page = render(&LoginPage {
        nav: false,
        csrf,
        error,
    })?;
    Ok((code, [(header::SET_COOKIE, cookie)], page).into_response())
}

async fn login(
    State(state): State<AdminState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: String,
) -> Result<Response, AdminError> {
    let fields = Fields::parse(&body);
    let client = peer.ip();
    let now = Instant::now();
    if let Some(wait) = state.throttle.blocked(client, now) {
        tracing::warn!(
            event = events::MAIL_ADMIN_LOGIN_FAILED,
            client = %client,
            throttled = true,
            "admin login refused: too many failures"
        );
        let mut response = login_page(
            &state,
            StatusCode::TOO_MANY_REQUESTS,
            Some(format!(
                "Too many failed logins from {client}: wait {} s.",
                wait.as_secs().max(1)
            )),
        )?;
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(wait.as_secs().max(1)),
        );
        return Ok(response);
    }
    let nonce = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|h| auth::cookie(h, auth::LOGIN_COOKIE));
    let csrf_ok = match (nonce, fields.get("csrf")) {
        (Some(nonce), Some(csrf)) => state.token.login_csrf_ok(nonce, csrf),
        _ => false,
    };
    if !csrf_ok {
        return login_page(
            &state,
            StatusCode::FORBIDDEN,
            Some("The login form expired (missing or wrong CSRF token): try again.".into()),
        );
    }
    if !state.token.matches(fields.get("token").unwrap_or("")) {
        let failures = state.throttle.failed(client, now);
        tracing::warn!(
            event = events::MAIL_ADMIN_LOGIN_FAILED,
            client = %client,
            failures,
            throttled = false,
            "admin login refused: wrong token"
        );
        return login_page(
            &state,
            StatusCode::UNAUTHORIZED,
            Some("Wrong token.".into()),
        );
    }
    tracing::info!(event = events::MAIL_ADMIN_LOGIN, client = %client, "admin login");
    let secure = state.config.admin.cookie_secure;
    let session = state.token.new_session(chrono::Utc::now());
    let mut response = Redirect::to("/mailboxes").into_response();
    let headers = response.headers_mut();
    for cookie in [
        auth::set_cookie(auth::SESSION_COOKIE, &session, auth::SESSION_TTL, secure),
        auth::set_cookie(auth::LOGIN_COOKIE, "", std::time::Duration::ZERO, secure),
    ] {
        if let Ok(v) = HeaderValue::from_str(&cookie) {
            headers.append(header::SET_COOKIE, v);
        }
    }
    Ok(response)
}

async fn logout(
    State(state): State<AdminState>,
    Authed(session): Authed,
    body: String,
) -> Result<Response, AdminError> {
    Fields::parse(&body).check_csrf(&session)?;
    let cookie = auth::set_cookie(
        auth::SESSION_COOKIE,
        "",
        std::time::Duration::ZERO,
        state.config.admin.cookie_secure,
    );
    Ok(([(header::SET_COOKIE, cookie)], Redirect::to("/login")).into_response())
}

async fn script(Authed(_): Authed) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/javascript; charset=utf-8",
        )],
        JS,
    )
}

// ---------------------------------------------------------------------------------------------
// Mailboxes

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
}

#[derive(Template)]
#[template(path = "admin/mailbox_rows.html")]
struct MailboxRows {
    rows: Vec<MailboxRow>,
}

async fn usage_rows(
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

async fn mailboxes(
    State(state): State<AdminState>,
    Authed(session): Authed,
) -> Result<Html<String>, AdminError> {
    render(&MailboxesPage {
        nav: true,
        csrf: session.csrf,
        rows: usage_rows(&state, None).await?,
        refresh: "/mailboxes/rows".into(),
        default_per_minute: state.config.rate_limit.defaults.per_minute.get(),
        default_per_day: state.config.rate_limit.defaults.recipients_per_day.get(),
    })
}

#[derive(Deserialize)]
struct RowsQuery {
    address: Option<String>,
}

/// The rows alone, for the pages' 5-second refresh (`admin.js`).
async fn mailbox_rows(
    State(state): State<AdminState>,
    Authed(_): Authed,
    Query(RowsQuery { address }): Query<RowsQuery>,
) -> Result<Html<String>, AdminError> {
    let only = address.as_deref().map(parse_address).transpose()?;
    render(&MailboxRows {
        rows: usage_rows(&state, only.as_ref()).await?,
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
struct MailboxQuery {
    saved: Option<String>,
}

async fn mailbox(
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

async fn set_limits(
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

// ---------------------------------------------------------------------------------------------
// Messages

#[derive(Debug, Default, Deserialize)]
struct MessagesQuery {
    sender: Option<String>,
    status: Option<String>,
    error: Option<String>,
    done: Option<String>,
    matched: Option<u64>,
    changed: Option<u64>,
}

impl MessagesQuery {
    fn filter(&self) -> Result<ops::MessageFilter, AdminError> {
        let text = |v: &Option<String>| {
            v.as_deref()
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        Ok(ops::MessageFilter {
            sender: text(&self.sender).map(|s| s.to_lowercase()),
            status: match text(&self.status) {
                None => None,
                Some(s) => Some(
                    s.to_ascii_uppercase()
                        .parse::<MessageStatus>()
                        .map_err(|_| {
                            AdminError::BadInput(format!(
                                "status: {s:?} is not one of {}",
                                MessageStatus::NAMES
                            ))
                        })?,
                ),
            },
            error_like: text(&self.error),
            ids: Vec::new(),
        })
    }

    /// The filter part as a query string (for links and the redirect after an action).
    fn query(&self) -> String {
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("sender", &self.sender),
            ("status", &self.status),
            ("error", &self.error),
        ] {
            if let Some(v) = v.as_deref().filter(|v| !v.trim().is_empty()) {
                q.append_pair(k, v);
            }
        }
        q.finish()
    }
}

#[derive(Template)]
#[template(path = "admin/messages.html")]
struct MessagesPage {
    nav: bool,
    csrf: String,
    sender: String,
    status: String,
    error: String,
    /// Every sender, and whether it is the one filtered on.
    senders: Vec<(String, bool)>,
    /// Every status, and whether it is the one filtered on.
    statuses: Vec<(&'static str, bool)>,
    notice: Option<String>,
    messages: Vec<ops::MessageLine>,
    limit: u32,
    select: bool,
}

async fn messages(
    State(state): State<AdminState>,
    Authed(session): Authed,
    Query(q): Query<MessagesQuery>,
) -> Result<Html<String>, AdminError> {
    let filter = q.filter()?;
    let notice = match (q.done.as_deref(), q.matched, q.changed) {
        (Some(verb @ ("retried" | "cancelled")), Some(matched), Some(changed)) => Some(format!(
            "{changed} {} {verb} ({matched} of the selection matched).",
            if changed == 1 { "message" } else { "messages" }
        )),
        _ => None,
    };
    let sender = filter.sender.clone().unwrap_or_default();
    let status = filter.status.map(MessageStatus::as_str).unwrap_or_default();
    render(&MessagesPage {
        nav: true,
        csrf: session.csrf,
        senders: senders::addresses(&state.pool)
            .await?
            .into_iter()
            .map(|a| {
                let on = a == sender;
                (a, on)
            })
            .collect(),
        statuses: ["SCHEDULED", "SENDING", "SENT", "ERROR"]
            .into_iter()
            .map(|s| (s, s == status))
            .collect(),
        sender,
        status: status.to_owned(),
        error: filter.error_like.clone().unwrap_or_default(),
        notice,
        messages: ops::list(&state.pool, &filter, MESSAGES_PAGE).await?,
        limit: MESSAGES_PAGE,
        select: true,
    })
}

/// The most message ids one audit line names.
const LOGGED_IDS: usize = 50;

/// The selection for the audit line: up to [`LOGGED_IDS`] ids, comma-separated, then `…`.
fn logged_ids(ids: &[uuid::Uuid]) -> String {
    let mut text: Vec<String> = ids
        .iter()
        .take(LOGGED_IDS)
        .map(uuid::Uuid::to_string)
        .collect();
    if ids.len() > LOGGED_IDS {
        text.push("…".into());
    }
    text.join(",")
}

/// Retries or cancels the selected messages: the code of `messages retry|cancel`, with the
/// selection as `--id`s and the page's status filter as `--status`.
async fn act(
    State(state): State<AdminState>,
    Authed(session): Authed,
    body: String,
    action: ops::BulkAction,
) -> Result<Response, AdminError> {
    let fields = Fields::parse(&body);
    fields.check_csrf(&session)?;
    let ids = fields
        .all("id")
        .map(|id| {
            uuid::Uuid::parse_str(id)
                .map_err(|_| AdminError::BadInput(format!("id: {id:?} is not a message id")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if ids.is_empty() {
        return Err(AdminError::BadInput(
            "id: select at least one message".into(),
        ));
    }
    let query = MessagesQuery {
        sender: fields.get("sender").map(str::to_owned),
        status: fields.get("status").map(str::to_owned),
        error: fields.get("error").map(str::to_owned),
        ..MessagesQuery::default()
    };
    let mut filter = query.filter()?;
    // The page may list any status; each action takes the statuses its command accepts and
    // falls back to its default (retry: ERROR, cancel: SCHEDULED) for the others.
    filter.status = filter.status.filter(|s| action.accepted().contains(s));
    filter.ids = ids;
    let selected = filter.ids.len();
    let ids = logged_ids(&filter.ids);
    let changed = action.apply(&state.pool, &filter, false).await?;
    let (verb, event, after) = match action {
        ops::BulkAction::Retry => ("retried", events::MAIL_ADMIN_MESSAGES_RETRIED, "SCHEDULED"),
        ops::BulkAction::Cancel => ("cancelled", events::MAIL_ADMIN_MESSAGES_CANCELLED, "ERROR"),
    };
    let before: BTreeMap<String, u64> = changed.by_status.clone();
    let before = serde_json::to_string(&before).unwrap_or_default();
    tracing::info!(
        event,
        message.ids = %ids,
        selected,
        matched = changed.matched,
        changed = changed.changed,
        before = %before,
        after,
        "messages {verb} in the admin UI"
    );
    let filters = query.query();
    Ok(Redirect::to(&format!(
        "/messages?{filters}{}done={verb}&matched={}&changed={}",
        if filters.is_empty() { "" } else { "&" },
        changed.matched,
        changed.changed
    ))
    .into_response())
}
