//! graph-sim's shared state: the configuration it was started with, beside one mutex over what
//! moves (tokens, windows, scripts, recorded messages, drafts, uploads). The handlers (`auth`,
//! `send`, `drafts`) and the admin API (`server`) read and change it through [`SimState`].

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    net::SocketAddr,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{
    SimError,
    config::{ResolvedMailbox, SentInTransit, SimApp, SimConfig, SimTenant},
    faults::{Latency, ScriptedAnswer, Target, TokenFault},
    limits::{MailboxWindows, TenantWindow},
    records::{
        MailboxStats, RecordedMessage, RecordedRefusal, RefusalCause, RefusedCounts, SimDraft,
        SimStats,
    },
    validate::ParsedMessage,
};
use crate::clock::{Clock, SystemClock};

/// Everything the handlers share. Immutable config beside one mutex over the moving parts; the
/// mutex is never held across an `.await`.
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
    /// `http://host:port` of the second listener, which serves only upload URLs: Graph's are on
    /// another host than the API (`https://outlook.office.com/api/v2.0/…`,
    /// <https://learn.microsoft.com/graph/outlook-large-attachments>, step 1), so a client is
    /// tested treating them as a separate origin.
    pub upload_origin: String,
    /// How long after a send the sent copy becomes visible (ms).
    pub sent_visibility_delay_ms: i64,
    /// What a sent draft looks like until then.
    pub sent_in_transit: super::config::SentInTransit,
    /// When messages bounce back as NDRs.
    pub bounces: super::config::SimBounces,
    /// The message trace's settings.
    pub trace: super::config::SimTrace,
    /// Whether a request keeps being served after its client went away
    /// ([`crate::GraphSim::set_requests_outlive_clients`]).
    pub outlive_clients: std::sync::atomic::AtomicBool,
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
    /// External recipients of the last 24 h per new tenant (its `new_tenant` reputation).
    pub reputation_windows: HashMap<String, TenantWindow>,
    pub unknown_mailbox_requests: u64,
    /// Drafts by their creation id (made and sent by the `drafts` handlers).
    pub drafts: HashMap<String, DraftState>,
    /// Messages sent through sendMail with `saveToSentItems`.
    pub sent_items: Vec<SentItem>,
    /// Open upload sessions by token.
    pub uploads: HashMap<String, Upload>,
    /// Request bytes uploaded (`POST`, `PATCH`, `PUT`) per mailbox in the last 5 minutes
    /// (`crate::limits::UploadBudget`).
    pub uploaded_bytes: HashMap<(usize, String), crate::limits::UploadBudget>,
    /// Every mailbox's Inbox (NDRs, delivered messages) and the folders they were moved to.
    pub inbox: Vec<super::records::InboxItem>,
    /// Graph requests by route.
    pub requests: BTreeMap<String, u64>,
    /// `jti`s of the client assertions accepted (a replay is refused).
    pub assertion_ids: std::collections::HashSet<String>,
    /// Each app's granted application permissions by client id (from the config; changed by
    /// [`crate::GraphSim::grant_roles`]); a token carries those of its issue time.
    pub roles: HashMap<String, Vec<String>>,
    /// The message trace's records, budgets and counts.
    pub trace: crate::trace_log::TraceRuntime,
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
        upload_addr: SocketAddr,
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
            roles: config
                .apps
                .iter()
                .map(|a| (a.client_id.clone(), a.roles.clone()))
                .collect(),
            trace: crate::trace_log::TraceRuntime {
                unprovisioned: config
                    .trace
                    .unprovisioned_tenants
                    .iter()
                    .map(|t| t.to_lowercase())
                    .collect(),
                ..crate::trace_log::TraceRuntime::default()
            },
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
            upload_origin: origin_of(upload_addr),
            sent_visibility_delay_ms: i64::try_from(config.sent_visibility_delay_ms)
                .unwrap_or(i64::MAX),
            sent_in_transit: config.sent_in_transit,
            bounces: config.bounces,
            trace: config.trace,
            outlive_clients: std::sync::atomic::AtomicBool::new(false),
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
        inner.reputation_windows.clear();
        inner.unknown_mailbox_requests = 0;
        inner.requests.clear();
        inner.inbox.clear();
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

/// An issued access token.
#[derive(Debug, Clone)]
pub(crate) struct IssuedToken {
    pub tenant_id: String,
    pub client_id: String,
    pub expires_at: DateTime<Utc>,
    /// The app's application permissions when the token was issued (its `roles` claim).
    pub roles: Vec<String>,
}

/// One draft and what happened to it.
#[derive(Debug, Clone)]
pub(crate) struct DraftState {
    pub idx: usize,
    pub id: String,
    /// The id of the sent copy when the draft was created without an immutable id.
    pub sent_id: Option<String>,
    pub internet_message_id: String,
    pub message: ParsedMessage,
    pub immutable: bool,
    pub sends: u32,
    pub visible_at_ms: Option<i64>,
    pub uploaded: u32,
    /// Attachments added by `POST …/attachments`.
    pub posted: u32,
    /// `DELETE`d: moved to Deleted Items (listed in no folder's view but every folder's,
    /// still found by id), as Graph's `DELETE` does.
    pub deleted: bool,
}

impl DraftState {
    pub(crate) fn sent_visible(&self, now_ms: i64) -> bool {
        self.visible_at_ms.is_some_and(|at| now_ms >= at)
    }

    /// Sent, its copy not visible yet, and shown as nothing meanwhile
    /// ([`SentInTransit::NotFound`]).
    pub(crate) fn hidden(&self, in_transit: SentInTransit, now_ms: i64) -> bool {
        in_transit == SentInTransit::NotFound
            && self.visible_at_ms.is_some()
            && !self.sent_visible(now_ms)
    }

    /// Whether `id` names this item now.
    pub(crate) fn answers_to(&self, id: &str, now_ms: i64) -> bool {
        if self.immutable || !self.sent_visible(now_ms) {
            self.id == id
        } else {
            self.sent_id.as_deref() == Some(id)
        }
    }

    pub(crate) fn current_id(&self, now_ms: i64) -> &str {
        if self.immutable || !self.sent_visible(now_ms) {
            &self.id
        } else {
            self.sent_id.as_deref().unwrap_or(&self.id)
        }
    }

    pub(crate) fn snapshot(&self, state: &SimState, now_ms: i64) -> SimDraft {
        SimDraft {
            id: self.current_id(now_ms).to_owned(),
            mailbox: state.mailboxes[self.idx].address.to_string(),
            internet_message_id: self.internet_message_id.clone(),
            immutable_id: self.immutable,
            sends: self.sends,
            uploaded_attachments: self.uploaded,
            posted_attachments: self.posted,
            deleted: self.deleted,
        }
    }
}

/// A message sent through sendMail with `saveToSentItems`.
#[derive(Debug, Clone)]
pub(crate) struct SentItem {
    pub idx: usize,
    pub id: String,
    pub internet_message_id: Option<String>,
    pub visible_at_ms: i64,
}

/// An open upload session.
#[derive(Debug, Clone)]
pub(crate) struct Upload {
    pub idx: usize,
    /// The app that opened the session (its upload budget is charged for the chunks).
    pub client_id: String,
    pub draft_id: String,
    pub name: String,
    pub size: u64,
    pub received: Vec<u8>,
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
