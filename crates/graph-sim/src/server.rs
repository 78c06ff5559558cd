//! graph-sim's shared state, its axum router, and the admin API under `/_sim/`.
//!
//! Routes:
//! - `POST /{tenant}/oauth2/v2.0/token` — Entra ID client credentials ([`super::auth`]);
//! - `POST /v1.0/users/{id | userPrincipalName}/sendMail` — Graph sendMail ([`super::send`]);
//! - drafts, `send`, `GET` by id, `$filter` look-ups and upload sessions ([`super::drafts`]);
//! - `GET /_sim/messages`, `GET /_sim/stats`, `GET /_sim/refusals` — what was recorded
//!   ([`super::records`]);
//! - `POST /_sim/script` `{"mailbox"?: "…", "answers": [ScriptedAnswer…]}`,
//!   `POST /_sim/latency` `{"mailbox"?: "…", "latency": "none" | {"fixed": ms} | {"uniform": [min, max]}}`,
//!   `POST /_sim/token-faults` `{"faults": [TokenFault…]}`, `POST /_sim/reset` — fault injection
//!   ([`super::faults`]); no `mailbox` means global. Answers `204`, or `400 {"error": "…"}`.
//!
//! Every other path gets Graph's `400 BadRequest` "Resource not found for the segment …".

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    net::SocketAddr,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use axum::{
    Json, Router,
    extract::{Path, State},
    http::{HeaderMap, StatusCode, Uri},
    response::{IntoResponse, Response},
    routing::{get, post, put},
};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use uuid::Uuid;

use super::{
    SimError,
    auth::{self, IssuedToken},
    config::{ResolvedMailbox, SimApp, SimConfig, SimTenant},
    drafts::{self, DraftState, Upload},
    faults::{Latency, ScriptedAnswer, Target, TokenFault},
    limits::{MailboxWindows, TenantWindow},
    records::{
        MailboxStats, RecordedMessage, RecordedRefusal, RefusalCause, RefusedCounts, SimDraft,
        SimStats,
    },
    send,
    wire::{GraphError, RequestIds},
};
use mail_worker::clock::{Clock, SystemClock};

/// Everything the handlers share. Immutable config beside one mutex over the moving parts; the
/// mutex is never held across an `.await`.
pub(crate) use drafts::SentItem;

pub(crate) struct SimState {
    pub clock: Arc<dyn Clock>,
    pub token_lifetime_s: u64,
    pub max_request_bytes: usize,
    pub apps: Vec<SimApp>,
    pub mailboxes: Vec<ResolvedMailbox>,
    /// Tenants' external-recipient budgets.
    pub tenants: Vec<SimTenant>,
    by_address: HashMap<String, usize>,
    by_id: HashMap<Uuid, usize>,
    /// `http://host:port` of the listener (loopback when bound to an unspecified address).
    pub origin: String,
    /// How long after a send the sent copy becomes visible (ms).
    pub sent_visibility_delay_ms: i64,
    /// What a sent draft looks like until then.
    pub sent_in_transit: super::config::SentInTransit,
    inner: Mutex<Inner>,
}

/// The moving parts.
#[derive(Default)]
pub(crate) struct Inner {
    pub tokens: HashMap<String, IssuedToken>,
    pub token_requests: BTreeMap<String, u64>,
    pub token_faults: VecDeque<TokenFault>,
    pub global_script: VecDeque<ScriptedAnswer>,
    pub global_latency: Latency,
    /// Parallel to [`SimState::mailboxes`].
    pub boxes: Vec<MailboxRuntime>,
    pub messages: Vec<RecordedMessage>,
    /// Every throttling refusal (`429`) and bounce, oldest first.
    pub refusals: Vec<RecordedRefusal>,
    /// External recipients of the last 24 h per tenant with a budget (lower-case tenant id).
    pub tenant_windows: HashMap<String, TenantWindow>,
    pub unknown_mailbox_requests: u64,
    /// Drafts by their creation id ([`super::drafts`]).
    pub drafts: HashMap<String, DraftState>,
    /// Messages sent through sendMail with `saveToSentItems`.
    pub sent_items: Vec<SentItem>,
    /// Open upload sessions by token.
    pub uploads: HashMap<String, Upload>,
    /// Graph requests by route.
    pub requests: BTreeMap<String, u64>,
    /// `jti`s of the client assertions accepted (a replay is refused).
    pub assertion_ids: std::collections::HashSet<String>,
}

impl Inner {
    /// Keeps `refusal` of mailbox `idx` for `GET /_sim/refusals`; a 429 with `Retry-After`
    /// holds the mailbox until then ([`Inner::hold`]).
    pub(crate) fn record_refusal(&mut self, idx: usize, refusal: RecordedRefusal) {
        if let Some(secs) = refusal.retry_after_s
            && refusal.cause != RefusalCause::RetryAfterIgnored
        {
            let until = refusal.at_ms + i64::try_from(secs).unwrap_or(i64::MAX / 2) * 1000;
            self.hold(idx, until);
        }
        self.refusals.push(refusal);
    }

    /// After a 429 with `Retry-After` Exchange refuses the mailbox's requests until then: every
    /// request to mailbox `idx` before `until_ms` is answered 429 again. Never shortens a hold.
    pub(crate) fn hold(&mut self, idx: usize, until_ms: i64) {
        let b = &mut self.boxes[idx];
        if !b.retry_after_holds {
            return;
        }
        b.hold_until_ms = b.hold_until_ms.max(until_ms);
    }
}

/// One mailbox's moving parts.
#[derive(Default)]
pub(crate) struct MailboxRuntime {
    pub windows: MailboxWindows,
    pub script: VecDeque<ScriptedAnswer>,
    pub latency: Option<Latency>,
    /// sendMail requests in flight per client id.
    pub in_flight: HashMap<String, u32>,
    pub in_flight_total: u32,
    pub max_concurrent: u32,
    pub accepted: u64,
    pub delayed: u64,
    pub scripted_answers: u64,
    pub refused: RefusedCounts,
    /// Requests before this (ms) are refused: the `Retry-After` of the mailbox's last 429.
    pub hold_until_ms: i64,
    /// The mailbox's `retry_after_holds`.
    pub retry_after_holds: bool,
}

impl SimState {
    pub(crate) fn new(
        config: SimConfig,
        mailboxes: Vec<ResolvedMailbox>,
        addr: SocketAddr,
    ) -> Self {
        let by_address = mailboxes
            .iter()
            .enumerate()
            .map(|(i, m)| (m.address.as_str().to_owned(), i))
            .collect();
        let by_id = mailboxes
            .iter()
            .enumerate()
            .map(|(i, m)| (m.id, i))
            .collect();
        let inner = Inner {
            boxes: mailboxes
                .iter()
                .map(|m| MailboxRuntime {
                    retry_after_holds: m.limits.retry_after_holds,
                    ..MailboxRuntime::default()
                })
                .collect(),
            ..Inner::default()
        };
        Self {
            clock: config.clock.unwrap_or_else(|| Arc::new(SystemClock)),
            token_lifetime_s: config.token_lifetime_s,
            max_request_bytes: config.max_request_bytes,
            apps: config.apps,
            tenants: config.tenants,
            mailboxes,
            by_address,
            by_id,
            origin: origin_of(addr),
            sent_visibility_delay_ms: i64::try_from(config.sent_visibility_delay_ms)
                .unwrap_or(i64::MAX),
            sent_in_transit: config.sent_in_transit,
            inner: Mutex::new(inner),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves counters, not invariants; keep serving.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// The index of the mailbox addressed by userPrincipalName (case-insensitive) or id.
    pub(crate) fn resolve_mailbox(&self, user: &str) -> Option<usize> {
        let user = user.trim();
        self.by_address
            .get(&user.to_lowercase())
            .copied()
            .or_else(|| {
                Uuid::parse_str(user)
                    .ok()
                    .and_then(|id| self.by_id.get(&id).copied())
            })
    }

    fn target_box(&self, target: &Target) -> Result<Option<usize>, SimError> {
        match target {
            Target::Global => Ok(None),
            Target::Mailbox(m) => self
                .resolve_mailbox(m)
                .map(Some)
                .ok_or_else(|| SimError::UnknownMailbox(m.clone())),
        }
    }

    pub(crate) fn push_script(
        &self,
        target: &Target,
        answers: Vec<ScriptedAnswer>,
    ) -> Result<(), SimError> {
        answers.iter().try_for_each(ScriptedAnswer::check)?;
        let idx = self.target_box(target)?;
        let mut inner = self.lock();
        match idx {
            None => inner.global_script.extend(answers),
            Some(i) => inner.boxes[i].script.extend(answers),
        }
        Ok(())
    }

    pub(crate) fn set_latency(&self, target: &Target, latency: Latency) -> Result<(), SimError> {
        let latency = latency.check()?;
        let idx = self.target_box(target)?;
        let mut inner = self.lock();
        match idx {
            None => inner.global_latency = latency,
            Some(i) => inner.boxes[i].latency = Some(latency),
        }
        Ok(())
    }

    pub(crate) fn push_token_faults(&self, faults: Vec<TokenFault>) -> Result<(), SimError> {
        faults.iter().try_for_each(TokenFault::check)?;
        self.lock().token_faults.extend(faults);
        Ok(())
    }

    /// Forgets records, windows, statistics and faults; keeps issued tokens and in-flight slots.
    pub(crate) fn reset(&self) {
        let mut inner = self.lock();
        inner.token_requests.clear();
        inner.token_faults.clear();
        inner.global_script.clear();
        inner.global_latency = Latency::None;
        inner.messages.clear();
        inner.refusals.clear();
        inner.tenant_windows.clear();
        inner.unknown_mailbox_requests = 0;
        inner.requests.clear();
        for b in &mut inner.boxes {
            *b = MailboxRuntime {
                in_flight: std::mem::take(&mut b.in_flight),
                in_flight_total: b.in_flight_total,
                retry_after_holds: b.retry_after_holds,
                ..MailboxRuntime::default()
            };
        }
    }

    pub(crate) fn drafts(&self) -> Vec<SimDraft> {
        let now_ms = self.now().timestamp_millis();
        let inner = self.lock();
        let mut out: Vec<SimDraft> = inner
            .drafts
            .values()
            .map(|d| d.snapshot(self, now_ms))
            .collect();
        out.sort_by(|a, b| a.internet_message_id.cmp(&b.internet_message_id));
        out
    }

    pub(crate) fn messages(&self) -> Vec<RecordedMessage> {
        self.lock().messages.clone()
    }

    pub(crate) fn refusals(&self) -> Vec<RecordedRefusal> {
        self.lock().refusals.clone()
    }

    pub(crate) fn stats(&self) -> SimStats {
        let at = self.now();
        let now_ms = at.timestamp_millis();
        let mut inner = self.lock();
        let mailboxes = self
            .mailboxes
            .iter()
            .zip(inner.boxes.iter_mut())
            .map(|(m, b)| MailboxStats {
                mailbox: m.address.to_string(),
                mailbox_id: m.id,
                tenant_id: m.tenant_id.clone(),
                accepted: b.accepted,
                delayed: b.delayed,
                refused: b.refused.clone(),
                scripted_answers: b.scripted_answers,
                max_in_rolling_60s: b.windows.max_in_rolling_60s,
                max_in_utc_minute: b.windows.max_in_utc_minute,
                max_concurrent: b.max_concurrent,
                messages_last_60s: b.windows.messages_last_60s(now_ms),
                recipients_last_24h: b.windows.recipients_last_24h(now_ms),
            })
            .collect();
        SimStats {
            at,
            mailboxes,
            token_requests: inner.token_requests.clone(),
            unknown_mailbox_requests: inner.unknown_mailbox_requests,
            requests: inner.requests.clone(),
        }
    }
}

fn origin_of(addr: SocketAddr) -> String {
    let ip = if addr.ip().is_unspecified() {
        match addr {
            SocketAddr::V4(_) => std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            SocketAddr::V6(_) => std::net::IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
        }
    } else {
        addr.ip()
    };
    format!("http://{}", SocketAddr::new(ip, addr.port()))
}

/// The whole router.
pub(crate) fn router(state: Arc<SimState>) -> Router {
    Router::new()
        .route("/{tenant}/oauth2/v2.0/token", post(auth::token))
        .route("/v1.0/users/{user}/{action}", post(send::send_mail))
        .route(
            "/v1.0/users/{user}/messages",
            post(drafts::create_draft).get(drafts::list_messages),
        )
        .route("/v1.0/users/{user}/messages/{id}", get(drafts::get_message))
        .route(
            "/v1.0/users/{user}/messages/{id}/{action}",
            post(drafts::draft_action),
        )
        .route(
            "/v1.0/users/{user}/messages/{id}/attachments/createUploadSession",
            post(drafts::create_upload_session),
        )
        .route(
            "/v1.0/users/{user}/mailFolders/{folder}/messages",
            get(drafts::list_folder_messages),
        )
        .route("/_upload/{token}", put(drafts::upload_chunk))
        .route("/v1.0/me/{action}", post(me))
        .route("/_sim/messages", get(admin_messages))
        .route("/_sim/stats", get(admin_stats))
        .route("/_sim/refusals", get(admin_refusals))
        .route("/_sim/script", post(admin_script))
        .route("/_sim/latency", post(admin_latency))
        .route("/_sim/token-faults", post(admin_token_faults))
        .route("/_sim/reset", post(admin_reset))
        .fallback(not_found)
        .with_state(state)
}

async fn me(
    State(state): State<Arc<SimState>>,
    Path(_action): Path<String>,
    headers: HeaderMap,
) -> Response {
    GraphError::new(
        StatusCode::BAD_REQUEST,
        "BadRequest",
        "/me request is only valid with delegated authentication flow.",
    )
    .into_response(&RequestIds::new(&headers), state.now())
}

async fn not_found(State(state): State<Arc<SimState>>, uri: Uri, headers: HeaderMap) -> Response {
    let segment = uri
        .path()
        .trim_start_matches('/')
        .trim_start_matches("v1.0/")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    GraphError::new(
        StatusCode::BAD_REQUEST,
        "BadRequest",
        format!("Resource not found for the segment '{segment}'."),
    )
    .into_response(&RequestIds::new(&headers), state.now())
}

async fn admin_messages(State(state): State<Arc<SimState>>) -> Json<Vec<RecordedMessage>> {
    Json(state.messages())
}

async fn admin_refusals(State(state): State<Arc<SimState>>) -> Json<Vec<RecordedRefusal>> {
    Json(state.refusals())
}

async fn admin_stats(State(state): State<Arc<SimState>>) -> Json<SimStats> {
    Json(state.stats())
}

fn target_of(mailbox: Option<String>) -> Target {
    mailbox.map_or(Target::Global, Target::Mailbox)
}

fn admin_answer(result: Result<(), SimError>) -> Response {
    match result {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => (
            StatusCode::BAD_REQUEST,
            Json(serde_json::json!({ "error": e.to_string() })),
        )
            .into_response(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptRequest {
    #[serde(default)]
    mailbox: Option<String>,
    answers: Vec<ScriptedAnswer>,
}

async fn admin_script(
    State(state): State<Arc<SimState>>,
    Json(req): Json<ScriptRequest>,
) -> Response {
    admin_answer(state.push_script(&target_of(req.mailbox), req.answers))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LatencyRequest {
    #[serde(default)]
    mailbox: Option<String>,
    latency: Latency,
}

async fn admin_latency(
    State(state): State<Arc<SimState>>,
    Json(req): Json<LatencyRequest>,
) -> Response {
    admin_answer(state.set_latency(&target_of(req.mailbox), req.latency))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenFaultsRequest {
    faults: Vec<TokenFault>,
}

async fn admin_token_faults(
    State(state): State<Arc<SimState>>,
    Json(req): Json<TokenFaultsRequest>,
) -> Response {
    admin_answer(state.push_token_faults(req.faults))
}

async fn admin_reset(State(state): State<Arc<SimState>>) -> Response {
    state.reset();
    StatusCode::NO_CONTENT.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unspecified_listen_address_is_reached_through_loopback() {
        assert_eq!(
            origin_of("0.0.0.0:8025".parse().unwrap()),
            "http://127.0.0.1:8025"
        );
        assert_eq!(
            origin_of("127.0.0.1:9".parse().unwrap()),
            "http://127.0.0.1:9"
        );
        assert_eq!(origin_of("[::]:9".parse().unwrap()), "http://[::1]:9");
    }
}
