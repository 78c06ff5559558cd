//! Steps 1–6 of [`super`]'s module doc, shared by every Graph route of a mailbox: the token,
//! the mailbox, the `Retry-After` hold, Outlook's per-app-and-mailbox concurrency and request
//! quota, and the added latency. An admitted request holds its concurrency slot until it ends.

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};

use super::Seen;
use crate::{
    auth::authenticate,
    limits::retry_after_secs,
    records::{RecordedRefusal, RefusalCause},
    state::{Inner, SimState},
    wire::GraphError,
};

/// Gives back a concurrency slot when the request ends, however it ends (also when the client
/// goes away and the handler future is dropped).
struct Slot {
    state: Arc<SimState>,
    idx: usize,
    client_id: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut inner = self.state.lock();
        let b = &mut inner.boxes[self.idx];
        if let Some(n) = b.in_flight.get_mut(&self.client_id) {
            *n = n.saturating_sub(1);
        }
        b.in_flight_total = b.in_flight_total.saturating_sub(1);
    }
}

pub(crate) fn throttled(message: impl Into<String>, retry_after_ms: i64) -> GraphError {
    GraphError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "ApplicationThrottled",
        message,
    )
    .with_retry_after_secs(retry_after_secs(retry_after_ms))
}

/// A request that got past authentication, mailbox lookup, the per-app-and-mailbox concurrency
/// and request quota and the added latency (steps 1–6); holds its concurrency slot.
pub(crate) struct Admitted {
    pub idx: usize,
    pub client_id: String,
    pub client_request_id: Option<String>,
    _slot: Slot,
}

pub(super) fn refusal_record(
    state: &SimState,
    idx: usize,
    client_id: &str,
    client_request_id: Option<&String>,
    cause: RefusalCause,
    e: &GraphError,
) -> RecordedRefusal {
    let at = state.now();
    RecordedRefusal {
        at,
        at_ms: at.timestamp_millis(),
        mailbox: state.mailboxes[idx].address.to_string(),
        client_id: client_id.to_owned(),
        cause,
        retry_after_s: e.retry_after.as_deref().and_then(|v| v.parse().ok()),
        client_request_id: client_request_id.cloned(),
    }
}

/// Steps 1–6 of the module doc, shared by every Graph route of a mailbox.
pub(crate) async fn admit(
    state: &Arc<SimState>,
    user: &str,
    headers: &HeaderMap,
    seen: &mut Seen,
) -> Result<Admitted, GraphError> {
    let idx = state.resolve_mailbox(user);
    let owner = match authenticate(state, headers, state.now()) {
        Ok(owner) => owner,
        Err(e) => {
            if let Some(i) = idx {
                state.lock().boxes[i].refused.auth += 1;
            }
            return Err(e);
        }
    };
    seen.client_id = Some(owner.client_id.clone());
    let Some(idx) = idx else {
        state.lock().unknown_mailbox_requests += 1;
        return Err(GraphError::new(
            StatusCode::NOT_FOUND,
            "ErrorInvalidUser",
            format!("The requested user '{user}' is invalid."),
        ));
    };
    let mailbox = &state.mailboxes[idx];
    let limits = &mailbox.limits;
    seen.mailbox = Some(mailbox.address.to_string());
    let allowed = owner.tenant_id.eq_ignore_ascii_case(&mailbox.tenant_id)
        && (mailbox.apps.is_empty() || mailbox.apps.contains(&owner.client_id));
    if !allowed {
        state.lock().boxes[idx].refused.auth += 1;
        return Err(GraphError::new(
            StatusCode::FORBIDDEN,
            "ErrorAccessDenied",
            "Access is denied. Check credentials and try again.",
        ));
    }
    if let Err(e) = in_scope_and_licensed(state, idx, &owner.client_id) {
        state.lock().boxes[idx].refused.auth += 1;
        return Err(e);
    }

    let client_request_id = headers
        .get("client-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_owned);

    // A held mailbox, the concurrency slot and the request quota, under one lock.
    let slot = {
        let now_ms = state.now().timestamp_millis();
        let mut inner = state.lock();
        // Records a 429 of this request and hands it back to be answered.
        let refuse = |inner: &mut Inner, cause, e: GraphError| {
            let r = refusal_record(
                state,
                idx,
                &owner.client_id,
                client_request_id.as_ref(),
                cause,
                &e,
            );
            inner.record_refusal(idx, r);
            Err(e)
        };
        let b = &mut inner.boxes[idx];
        if now_ms < b.hold_until_ms {
            b.refused.retry_after_ignored += 1;
            let e = throttled(
                "Mailbox is throttled: a request arrived before the Retry-After of the previous 429.",
                b.hold_until_ms - now_ms,
            );
            return refuse(&mut inner, RefusalCause::RetryAfterIgnored, e);
        }
        let mine = b.in_flight.get(&owner.client_id).copied().unwrap_or(0);
        if mine >= limits.concurrent_requests {
            b.refused.concurrency += 1;
            let e = throttled("Application is over its MailboxConcurrency limit.", 1_000);
            return refuse(&mut inner, RefusalCause::Concurrency, e);
        }
        if let Err(wait_ms) =
            b.windows
                .check_request(&owner.client_id, now_ms, limits.requests_per_10_minutes)
        {
            b.refused.request_quota += 1;
            let e = throttled(
                format!(
                    "Application is over its MailboxRequests limit of {} requests in 10 minutes.",
                    limits.requests_per_10_minutes
                ),
                wait_ms,
            );
            return refuse(&mut inner, RefusalCause::RequestQuota, e);
        }
        *b.in_flight.entry(owner.client_id.clone()).or_default() += 1;
        b.in_flight_total += 1;
        b.max_concurrent = b.max_concurrent.max(b.in_flight_total);
        Slot {
            state: Arc::clone(state),
            idx,
            client_id: owner.client_id.clone(),
        }
    };

    let delay = {
        let inner = state.lock();
        inner.boxes[idx]
            .latency
            .unwrap_or(inner.global_latency)
            .sample()
    };
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    Ok(Admitted {
        idx,
        client_id: owner.client_id,
        client_request_id,
        _slot: slot,
    })
}

/// The app's mailbox scope, then the mailbox's licence:
/// - a mailbox outside the app's RBAC for Applications scope or application access policy →
///   `403 ErrorAccessDenied` (<https://learn.microsoft.com/exchange/permissions-exo/application-rbac>,
///   <https://learn.microsoft.com/graph/auth-limit-mailbox-access>: "the app is denied access
///   to mailboxes outside the policy"); Graph's message names the access policy, as below;
/// - a mailbox without an Exchange Online licence (or on-premises) → `404
///   MailboxNotEnabledForRESTAPI` (<https://learn.microsoft.com/graph/api/resources/mail-api-overview>:
///   the mail API works with Exchange Online mailboxes only; Microsoft documents the code in its
///   known issues, not the status: 404 is what tenants report, taken as is).
fn in_scope_and_licensed(state: &SimState, idx: usize, client_id: &str) -> Result<(), GraphError> {
    let mailbox = &state.mailboxes[idx];
    let scope = state
        .apps
        .iter()
        .find(|a| a.client_id == client_id)
        .and_then(|a| a.mailbox_scope.as_ref());
    if let Some(scope) = scope
        && !scope
            .iter()
            .any(|m| m.trim().eq_ignore_ascii_case(mailbox.address.as_str()))
    {
        return Err(GraphError::new(
            StatusCode::FORBIDDEN,
            "ErrorAccessDenied",
            "Access to OData is disabled: [RAOP] : Blocked by tenant configured AppOnly AccessPolicy settings.",
        ));
    }
    if !mailbox.licensed {
        return Err(GraphError::new(
            StatusCode::NOT_FOUND,
            "MailboxNotEnabledForRESTAPI",
            "The mailbox is either inactive, soft-deleted, or is hosted on-premise.",
        ));
    }
    Ok(())
}
