//! The admin UI's routes: login and logout, the mailboxes with their live use, a mailbox with
//! its limits form and its Verify button (`senders verify`'s report), the messages with retry and cancel and a message with its recipients' fates, the intake queue with its dead letters, the campaigns with their forecast, the suppression list with add and remove. HTML from `templates/admin/` (askama,
//! escaped); every page but the login form needs a session, every POST its CSRF token.
//! Here the router, the security headers, the session extractor and form parsing; a file per
//! page beside it (like zero2prod's `routes/admin/*`).

use std::{collections::BTreeMap, net::SocketAddr, num::NonZeroU32, time::Instant};

use askama::Template;
use axum::{
    Router,
    extract::{ConnectInfo, FromRequestParts, Path, Query, Request, State},
    http::{HeaderMap, HeaderValue, Method, StatusCode, header, request::Parts},
    middleware::{self, Next},
    response::{Html, IntoResponse, Redirect, Response},
    routing::{MethodRouter, get, post},
};
use serde::{Deserialize, de::DeserializeOwned};

use super::{
    AdminError, AdminState,
    auth::{self, Session},
};
use crate::{
    domain::{MailboxAddress, MessageStatus},
    log_events,
    reports::usage::{MailboxUsage, UsagePage, mailbox_usage, usage_page},
    store::{admin as ops, senders},
};

/// Exchange Online's per-mailbox limits (above them the limits form warns) and their page,
/// linked from the warnings: the same numbers the start-up warnings use.
pub use crate::config::EXCHANGE_LIMITS_PAGE as EXCHANGE_LIMITS_URL;
use crate::config::{
    EXCHANGE_MESSAGES_PER_MINUTE as EXCHANGE_PER_MINUTE, EXCHANGE_RECIPIENTS_PER_DAY,
};

mod campaigns;
mod form;
mod login;
mod mailbox;
mod mailboxes;
mod messages;
mod queue;
mod suppressions;
mod verify;

use campaigns::{campaign_page, campaigns_page};
use form::{Fields, Posted};
use login::{login, login_form, logout};
use mailbox::{mailbox, set_limits};
use mailboxes::{mailbox_rows, mailboxes};
use messages::{act, message_page, messages};
use queue::{queue, queue_act};
use suppressions::{suppressions_change, suppressions_page};
use verify::verify_sender;
/// The most messages a messages page lists.
pub(crate) const MESSAGES_PAGE: u32 = 200;
/// The most messages a mailbox page lists.
pub(crate) const MAILBOX_MESSAGES: u32 = 25;

const CSS: &str = include_str!("../../../templates/admin/admin.css");
const JS: &str = include_str!("../../../templates/admin/admin.js");

/// The POST route of a messages button.
fn bulk(action: ops::BulkAction) -> MethodRouter<AdminState> {
    post(move |state, form| act(state, form, action))
}

/// The POST route of a dead-letters button.
fn dead(action: queue::Action) -> MethodRouter<AdminState> {
    post(move |state, form| queue_act(state, form, action))
}

/// The POST route of a suppression form.
fn suppression(change: suppressions::Change) -> MethodRouter<AdminState> {
    post(move |state, form| suppressions_change(state, form, change))
}

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
        .route("/mailboxes/{address}/verify", post(verify_sender))
        .route("/messages", get(messages))
        .route("/campaigns", get(campaigns_page))
        .route("/campaigns/{campaign}", get(campaign_page))
        .route("/messages/retry", bulk(ops::BulkAction::Retry))
        .route("/messages/cancel", bulk(ops::BulkAction::Cancel))
        .route("/messages/{id}", get(message_page))
        .route("/queue", get(queue))
        .route("/queue/retry", dead(queue::Action::Retry))
        .route("/queue/discard", dead(queue::Action::Discard))
        .route("/suppressions", get(suppressions_page))
        .route("/suppressions/add", suppression(suppressions::Change::Add))
        .route(
            "/suppressions/remove",
            suppression(suppressions::Change::Remove),
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

/// The most ids one audit line names.
const LOGGED_IDS: usize = 50;

/// The selection for the audit line: up to [`LOGGED_IDS`] ids, comma-separated, then `…`.
fn logged_ids<T: ToString>(ids: &[T]) -> String {
    let mut text: Vec<String> = ids.iter().take(LOGGED_IDS).map(T::to_string).collect();
    if ids.len() > LOGGED_IDS {
        text.push("…".into());
    }
    text.join(",")
}

fn render(template: &impl Template) -> Result<Html<String>, AdminError> {
    Ok(Html(template.render()?))
}

/// A path segment for `text` (`@`, `+`, `&` escaped; a space as `%20`, since a path does not
/// read `+` as a space).
fn segment(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
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

/// A page's query string, or the error page naming what in it is wrong (422; axum's own
/// rejection is a bare 400 in plain text).
pub(super) struct Params<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Params<T> {
    type Rejection = AdminError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(q)| Self(q))
            .map_err(|rejection| AdminError::BadInput(rejection.body_text()))
    }
}
