//! `POST /v1.0/users/{id | userPrincipalName}/sendMail`
//! (<https://learn.microsoft.com/graph/api/user-sendmail>): authentication, mailbox lookup,
//! Outlook's per-app-and-mailbox limits, fault injection, validation, Exchange's sending limits,
//! and the record of what was accepted.
//!
//! In order; the first that fails answers:
//! 1. bearer token missing, unknown or expired → `401 InvalidAuthenticationToken`;
//! 2. unknown mailbox → `404 ErrorInvalidUser`;
//! 3. token of a tenant that does not own the mailbox, or an app not allowed for it →
//!    `403 ErrorAccessDenied`;
//! 4. a request before the `Retry-After` of the mailbox's last 429 (ours or a scripted one) →
//!    `429 ApplicationThrottled` with the rest of the wait, recorded as `retry_after_ignored`:
//!    Exchange keeps refusing a client that does not wait;
//!    more than `concurrent_requests` in flight for this app and mailbox → `429
//!    ApplicationThrottled` "Application is over its MailboxConcurrency limit.", `Retry-After: 1`;
//! 5. more than `requests_per_10_minutes` for this app and mailbox → `429 ApplicationThrottled`
//!    with `Retry-After` until the oldest request ages out (4 and 5:
//!    <https://learn.microsoft.com/graph/throttling-limits#outlook-service-limits>);
//! 6. added latency (the request keeps its concurrency slot meanwhile);
//! 7. a scripted answer that does not deliver → that answer;
//! 8. body over `max_request_bytes` → `413 RequestEntityTooLarge`; a MIME (`text/plain`) body →
//!    `400`/`501`; invalid JSON body → `400` (see [`super::validate`]);
//! 9. recipients over `recipients_per_day` in the rolling 24 h → `202` as Exchange answers, then
//!    an NDR `550 5.1.90` for every recipient (Microsoft documents the NDR, not an HTTP refusal:
//!    <https://learn.microsoft.com/exchange/mail-flow-best-practices/non-delivery-reports-in-exchange-online/non-delivery-reports-in-exchange-online>),
//!    recorded as a `day` finding, not as accepted; with `bounces.quota_exceeded: "refuse"`,
//!    `429 ErrorSubmissionQuotaExceeded` with `Retry-After` until enough recipients age out
//!    (that status is ours);
//! 10. messages over `messages_per_minute` in the rolling 60 s → `429 ApplicationThrottled` with
//!     `Retry-After` until the oldest message ages out, or in `accept_delayed` mode `202` counted
//!     as delayed (9 and 10: Exchange Online sending limits,
//!     <https://learn.microsoft.com/office365/servicedescriptions/exchange-online-service-description/exchange-online-limits#sending-limits>);
//! 11. a new tenant (`tenants[].new_tenant`) past its `external_per_day` external recipients in
//!     the rolling 24 h → `202`, then an NDR `550 5.7.708` (or its `code`: `5.7.705`,
//!     `5.7.501`) for its external recipients, recorded as a `tenant_reputation` finding;
//!     over the tenant's `external_recipients_per_day` (recipients outside its accepted domains
//!     in the rolling 24 h, all its mailboxes together) → `202` as Exchange answers, but the
//!     message bounces: recorded as a `tenant_external_limit` finding, not as accepted, and an
//!     NDR with `550 5.7.233` for its external recipients goes to the mailbox's Inbox;
//! 12. recorded; `202 Accepted` with an empty body, or the scripted delivering answer; a
//!     recipient configured as unknown (`bounces.unknown_recipients`) gets an NDR (`5.1.1`,
//!     `5.1.10`) in the Inbox ([`super::ndr`]).

use std::{sync::Arc, time::Instant};

use axum::{
    body::Body,
    extract::Path,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use uuid::Uuid;

use super::{
    call::Call,
    config::{DEFAULT_MAX_REQUEST_BYTES, QuotaExceeded},
    faults::ScriptedAnswer,
    limits::{SendVerdict, retry_after_ms, retry_after_secs},
    ndr,
    records::{RecordedMessage, RecordedRefusal, RefusalCause},
    state::{Inner, SentItem, SimState},
    validate::{ParsedMessage, parse_send_mail},
    wire::{self, GraphError, RequestIds},
};
use crate::events;

mod admit;
mod tenant;
use admit::refusal_record;
pub(crate) use admit::{Admitted, admit, throttled};

/// How the request ends.
pub(crate) enum Reply {
    Error(GraphError),
    /// A JSON answer (a created draft, a message, a list, an upload session).
    Json {
        status: StatusCode,
        body: serde_json::Value,
    },
    Success {
        status: StatusCode,
        retry_after: Option<String>,
    },
    /// A message's MIME (`GET …/messages/{id}/$value`), `200`.
    Mime(Vec<u8>),
}

/// What the log line says about the request.
#[derive(Default)]
pub(crate) struct Seen {
    pub mailbox: Option<String>,
    pub client_id: Option<String>,
    pub recipients: Option<u32>,
}

/// The sendMail handler (any case of `sendMail` in the last segment).
pub(crate) async fn send_mail(
    Call { state, headers }: Call,
    Path((user, action)): Path<(String, String)>,
    body: Body,
) -> Response {
    let handle = async |ids: &RequestIds, arrived_at_ms, seen: &mut Seen| {
        Ok(process(&state, &user, &headers, body, ids, arrived_at_ms, seen).await)
    };
    action_route(&state, "sendMail", &action, &headers, handle).await
}

/// A request to the action `route` (`sendMail`, a draft's `send`): answered by `handle` (as
/// [`routed`]) when the path's last segment is `action` in any case, else Graph's `400` for an
/// unknown segment.
pub(crate) async fn action_route(
    state: &Arc<SimState>,
    route: &str,
    action: &str,
    headers: &HeaderMap,
    handle: impl AsyncFnOnce(&RequestIds, i64, &mut Seen) -> Result<Reply, GraphError>,
) -> Response {
    routed(state, route, headers, async |ids, arrived_at_ms, seen| {
        if action.eq_ignore_ascii_case(route) {
            handle(ids, arrived_at_ms, seen).await
        } else {
            Err(GraphError::new(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!("Resource not found for the segment '{action}'."),
            ))
        }
    })
    .await
}

/// A request to `route`: counted when it arrives, answered by `handle` (given the request's
/// ids, its arrival in ms since the epoch and what it was seen to be; an error is Graph's error
/// answer), and logged ([`finish`]).
pub(crate) async fn routed(
    state: &Arc<SimState>,
    route: &str,
    headers: &HeaderMap,
    handle: impl AsyncFnOnce(&RequestIds, i64, &mut Seen) -> Result<Reply, GraphError>,
) -> Response {
    let started = Instant::now();
    count(state, route);
    let arrived_at_ms = state.now().timestamp_millis();
    let ids = RequestIds::new(headers);
    let mut seen = Seen::default();
    let reply = handle(&ids, arrived_at_ms, &mut seen)
        .await
        .unwrap_or_else(Reply::Error);
    finish(state, route, reply, &ids, &seen, started)
}

/// Counts a request under `route` when it arrives (a request whose client goes away, or that
/// is reset, is counted too).
pub(crate) fn count(state: &SimState, route: &str) {
    *state.lock().requests.entry(route.to_owned()).or_default() += 1;
}

/// Logs the answer (`sim.request`) and turns it into a response.
pub(crate) fn finish(
    state: &SimState,
    route: &str,
    reply: Reply,
    ids: &RequestIds,
    seen: &Seen,
    started: Instant,
) -> Response {
    let (status, code, retry_after) = match &reply {
        Reply::Error(e) => (e.status, Some(e.code.clone()), e.retry_after.clone()),
        Reply::Success {
            status,
            retry_after,
        } => (*status, None, retry_after.clone()),
        Reply::Json { status, .. } => (*status, None, None),
        Reply::Mime(_) => (StatusCode::OK, None, None),
    };
    tracing::info!(
        event = events::SIM_REQUEST,
        sim.route = route,
        mailbox = seen.mailbox.as_deref().unwrap_or("unknown"),
        client_id = seen.client_id.as_deref().unwrap_or(""),
        http.status = status.as_u16(),
        graph.code = code.as_deref().unwrap_or(""),
        retry_after = retry_after.as_deref().unwrap_or(""),
        recipients = seen.recipients.unwrap_or(0),
        request_id = %ids.request_id,
        duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "graph-sim answered a Graph request"
    );
    match reply {
        Reply::Success {
            status,
            retry_after,
        } => wire::accepted(status, ids, retry_after.as_deref()),
        Reply::Json { status, body } => {
            let mut response = (status, axum::Json(body)).into_response();
            wire::graph_headers(response.headers_mut(), ids, None);
            response
        }
        Reply::Mime(body) => {
            let mut response =
                (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], body).into_response();
            wire::graph_headers(response.headers_mut(), ids, None);
            response
        }
        Reply::Error(e) => {
            let unauthorized = e.status == StatusCode::UNAUTHORIZED;
            let mut response = e.into_response(ids, state.now());
            if unauthorized {
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static(
                        "Bearer realm=\"\", authorization_uri=\"https://login.microsoftonline.com/common/oauth2/authorize\", client_id=\"00000003-0000-0000-c000-000000000000\"",
                    ),
                );
            }
            response
        }
    }
}

fn scripted_error(answer: &ScriptedAnswer) -> GraphError {
    GraphError {
        status: StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        code: answer.error_code(),
        message: answer.error_message(),
        retry_after: answer.retry_after.clone(),
    }
}

pub(crate) fn scripted_reply(answer: &ScriptedAnswer) -> Reply {
    if (200..300).contains(&answer.status) {
        Reply::Success {
            status: StatusCode::from_u16(answer.status).unwrap_or(StatusCode::ACCEPTED),
            retry_after: answer.retry_after.clone(),
        }
    } else {
        Reply::Error(scripted_error(answer))
    }
}

/// Step 7: the next scripted answer of the mailbox (or the global one), counted.
pub(crate) fn next_scripted(state: &SimState, idx: usize) -> Option<ScriptedAnswer> {
    let mut inner = state.lock();
    let answer = inner.boxes[idx]
        .script
        .pop_front()
        .or_else(|| inner.global_script.pop_front());
    if answer.is_some() {
        inner.boxes[idx].scripted_answers += 1;
    }
    answer
}

/// A scripted answer that does not deliver, answered instead of the message (after `late_ms`,
/// if set: a request that hangs without delivering).
pub(crate) async fn undelivered(state: &SimState, idx: usize, answer: &ScriptedAnswer) -> Reply {
    if !(200..300).contains(&answer.status) {
        state.lock().boxes[idx].refused.scripted += 1;
    }
    hold_after_scripted_429(state, idx, answer);
    if let Some(ms) = answer.late_ms {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
    scripted_reply(answer)
}

/// A scripted 429 with `Retry-After` holds the mailbox like one of ours.
fn hold_after_scripted_429(state: &SimState, idx: usize, answer: &ScriptedAnswer) {
    if answer.status == 429
        && let Some(ms) = answer.retry_after.as_deref().and_then(retry_after_ms)
    {
        let now_ms = state.now().timestamp_millis();
        state.lock().hold(idx, now_ms + ms);
    }
}

/// How a message reached [`deliver`].
pub(crate) struct Delivery<'a> {
    pub ids: &'a RequestIds,
    pub arrived_at_ms: i64,
    pub request_bytes: usize,
    /// `sendMail` or `draft`.
    pub via: &'static str,
    pub draft_id: Option<String>,
}

/// Steps 9–11: Exchange's sending limits, the record, then the scripted answer's after-accept
/// fault (`late_ms` sleeps holding the slot; `reset` drops the connection without an answer).
/// `on_recorded` runs under the lock right after the record (a draft is marked sent there).
pub(crate) async fn deliver(
    state: &Arc<SimState>,
    admitted: &Admitted,
    message: ParsedMessage,
    how: Delivery<'_>,
    scripted: Option<ScriptedAnswer>,
    on_recorded: impl FnOnce(&mut Inner, i64) + Send,
) -> Reply {
    let received_at = state.now();
    if let Err(e) = record(
        state,
        admitted,
        message,
        how,
        scripted.as_ref(),
        received_at,
        on_recorded,
    ) {
        return Reply::Error(e);
    }
    match &scripted {
        Some(answer) => {
            hold_after_scripted_429(state, admitted.idx, answer);
            if let Some(ms) = answer.late_ms {
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            }
            if answer.reset {
                // Unwinds the connection's task without running the panic hook: hyper drops
                // the connection, the client reads no answer at all.
                std::panic::resume_unwind(Box::new("graph-sim: reset after delivery"));
            }
            scripted_reply(answer)
        }
        None => Reply::Success {
            status: StatusCode::ACCEPTED,
            retry_after: None,
        },
    }
}

fn record(
    state: &Arc<SimState>,
    admitted: &Admitted,
    message: ParsedMessage,
    how: Delivery<'_>,
    scripted: Option<&ScriptedAnswer>,
    received_at: chrono::DateTime<chrono::Utc>,
    on_recorded: impl FnOnce(&mut Inner, i64),
) -> Result<(), GraphError> {
    let idx = admitted.idx;
    let mailbox = &state.mailboxes[idx];
    let limits = &mailbox.limits;
    let recipients = message.recipient_count();
    let now_ms = received_at.timestamp_millis();
    let mut inner = state.lock();
    let refusal = |cause, e: &GraphError| {
        refusal_record(
            state,
            idx,
            &admitted.client_id,
            admitted.client_request_id.as_ref(),
            cause,
            e,
        )
    };
    let verdict = inner.boxes[idx]
        .windows
        .check_send(now_ms, recipients, limits);
    let delayed = match verdict {
        SendVerdict::Accept => false,
        SendVerdict::AcceptDelayed => true,
        SendVerdict::RefuseDay { retry_after_ms } => {
            inner.boxes[idx].refused.day += 1;
            if state.bounces.quota_exceeded == QuotaExceeded::Ndr {
                // Exchange accepts, then bounces every recipient with 5.1.90 (bounces.rs).
                let r = RecordedRefusal {
                    at: received_at,
                    at_ms: now_ms,
                    mailbox: mailbox.address.to_string(),
                    client_id: admitted.client_id.clone(),
                    cause: RefusalCause::Day,
                    retry_after_s: None,
                    client_request_id: admitted.client_request_id.clone(),
                };
                inner.record_refusal(idx, r);
                let failures: Vec<_> = message
                    .to
                    .iter()
                    .chain(&message.cc)
                    .chain(&message.bcc)
                    .map(|a| ndr::Failure::daily_quota(a))
                    .collect();
                trace_feed(state, &mut inner, idx, &message, &failures, received_at);
                ndr::bounce(state, &mut inner, idx, &message, &failures, received_at);
                on_recorded(&mut inner, now_ms);
                return Ok(());
            }
            let mut e = GraphError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "ErrorSubmissionQuotaExceeded",
                format!(
                    "The message can't be submitted because the sender's submission quota was exceeded: at most {} recipients in 24 hours.",
                    limits.recipients_per_day
                ),
            );
            if let Some(ms) = retry_after_ms {
                e = e.with_retry_after_secs(retry_after_secs(ms));
            }
            let r = refusal(RefusalCause::Day, &e);
            inner.record_refusal(idx, r);
            return Err(e);
        }
        SendVerdict::RefuseMinute { retry_after_ms } => {
            inner.boxes[idx].refused.minute += 1;
            let e = throttled(
                format!(
                    "Mailbox is over its limit of {} messages in any 60 seconds. Exchange Online would queue the excess; graph-sim refuses it so the overshoot is visible.",
                    limits.messages_per_minute
                ),
                retry_after_ms,
            );
            let r = refusal(RefusalCause::Minute, &e);
            inner.record_refusal(idx, r);
            return Err(e);
        }
    };
    // A new tenant's reputation, then its external recipient limit: over either Exchange
    // still answers 202, then bounces the external recipients (tenant.rs).
    if let Some(bounced) = tenant::over(state, &mut inner, idx, &message, now_ms) {
        inner.boxes[idx].refused.count_bounce(bounced.cause);
        let r = RecordedRefusal {
            at: received_at,
            at_ms: now_ms,
            mailbox: mailbox.address.to_string(),
            client_id: admitted.client_id.clone(),
            cause: bounced.cause,
            retry_after_s: None,
            client_request_id: admitted.client_request_id.clone(),
        };
        inner.record_refusal(idx, r);
        trace_feed(
            state,
            &mut inner,
            idx,
            &message,
            &bounced.failures,
            received_at,
        );
        ndr::bounce(
            state,
            &mut inner,
            idx,
            &message,
            &bounced.failures,
            received_at,
        );
        on_recorded(&mut inner, now_ms);
        return Ok(());
    }
    let failures = ndr::unknown_failures(state, &message);
    trace_feed(state, &mut inner, idx, &message, &failures, received_at);
    ndr::bounce(state, &mut inner, idx, &message, &failures, received_at);
    let b = &mut inner.boxes[idx];
    b.accepted += 1;
    if delayed {
        b.delayed += 1;
    }
    let answered_status = scripted.map_or(202, |a| a.status);
    let (attachment_count, attachment_bytes) =
        (message.attachment_count(), message.attachment_bytes());
    inner.messages.push(RecordedMessage {
        id: Uuid::new_v4(),
        request_id: how.ids.request_id.clone(),
        mailbox: mailbox.address.to_string(),
        mailbox_id: mailbox.id,
        client_id: admitted.client_id.clone(),
        received_at,
        received_at_ms: now_ms,
        arrived_at_ms: how.arrived_at_ms,
        subject: message.subject,
        to: message.to,
        cc: message.cc,
        bcc: message.bcc,
        recipient_count: recipients,
        headers: message.headers,
        body_content_type: message.body_content_type,
        body_bytes: message.body_bytes,
        request_bytes: how.request_bytes,
        attachment_count,
        attachment_bytes,
        save_to_sent_items: message.save_to_sent_items,
        delayed,
        answered_status,
        client_request_id: admitted.client_request_id.clone(),
        internet_message_id: message.internet_message_id,
        via: how.via.to_owned(),
        draft_id: how.draft_id,
        fault: scripted.and_then(ScriptedAnswer::fault_label),
        attachments: message.attachments,
    });
    on_recorded(&mut inner, now_ms);
    Ok(())
}

async fn process(
    state: &Arc<SimState>,
    user: &str,
    headers: &HeaderMap,
    body: Body,
    ids: &RequestIds,
    arrived_at_ms: i64,
    seen: &mut Seen,
) -> Reply {
    let admitted = match admit(state, user, headers, seen).await {
        Ok(a) => a,
        Err(e) => return Reply::Error(e),
    };
    let idx = admitted.idx;
    let limits = &state.mailboxes[idx].limits;
    let scripted = next_scripted(state, idx);
    if let Some(answer) = scripted.as_ref().filter(|a| !a.deliver) {
        return undelivered(state, idx, answer).await;
    }

    let bytes = match read_body(state, headers, body).await {
        Ok(bytes) => bytes,
        Err(e) => {
            state.lock().boxes[idx].refused.validation += 1;
            return Reply::Error(e);
        }
    };
    let message = match parse_send_mail(&bytes, limits.recipients_per_message) {
        Ok(m) => m,
        Err(e) => {
            state.lock().boxes[idx].refused.validation += 1;
            return Reply::Error(e);
        }
    };
    seen.recipients = Some(message.recipient_count());
    let visible_after = state.sent_visibility_delay_ms;
    let save = message.save_to_sent_items;
    let imid = message.internet_message_id.clone();
    deliver(
        state,
        &admitted,
        message,
        Delivery {
            ids,
            arrived_at_ms,
            request_bytes: bytes.len(),
            via: "sendMail",
            draft_id: None,
        },
        scripted,
        |inner, now_ms| {
            if save {
                inner.sent_items.push(SentItem {
                    idx,
                    id: wire::new_item_id(),
                    internet_message_id: imid,
                    visible_at_ms: now_ms + visible_after,
                });
            }
        },
    )
    .await
}

pub(crate) async fn read_body(
    state: &SimState,
    headers: &HeaderMap,
    body: Body,
) -> Result<axum::body::Bytes, GraphError> {
    let limit = state.max_request_bytes;
    let too_large = || {
        let size = if limit == DEFAULT_MAX_REQUEST_BYTES {
            "4MB".to_owned()
        } else {
            format!("{limit} bytes")
        };
        GraphError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            format!("The maximum request length supported is {size}."),
        )
    };
    let bytes = read_limited(body, limit).await.ok_or_else(too_large)?;
    let mime = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/plain")
        });
    if mime {
        use base64::Engine as _;
        let text = String::from_utf8_lossy(&bytes);
        return Err(
            if base64::engine::general_purpose::STANDARD
                .decode(text.trim())
                .is_err()
            {
                GraphError::new(
                    StatusCode::BAD_REQUEST,
                    "ErrorMimeContentInvalidBase64String",
                    "Invalid base64 string for MIME content.",
                )
            } else {
                GraphError::new(
                    StatusCode::NOT_IMPLEMENTED,
                    "NotImplemented",
                    "graph-sim does not simulate MIME sendMail; send the JSON form.",
                )
            },
        );
    }
    Ok(bytes)
}

/// Reads at most `limit` bytes; `None` when the body is larger (or broken). An oversized body is
/// drained (up to 8 × `limit`) before the answer, so the client finishes writing and reads our
/// `413` instead of a reset connection.
pub(crate) async fn read_limited(body: Body, limit: usize) -> Option<axum::body::Bytes> {
    use futures::StreamExt as _;
    let mut stream = body.into_data_stream();
    let mut buf = Vec::new();
    let mut seen = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.ok()?;
        seen += chunk.len();
        if seen > limit.saturating_mul(8) {
            return None;
        }
        if seen <= limit {
            buf.extend_from_slice(&chunk);
        }
    }
    (seen <= limit).then(|| axum::body::Bytes::from(buf))
}

/// Feeds the message trace ([`crate::trace_log::feed`]) with `message` of mailbox `idx` and its
/// `failures`.
fn trace_feed(
    state: &SimState,
    inner: &mut Inner,
    idx: usize,
    message: &ParsedMessage,
    failures: &[ndr::Failure],
    now: chrono::DateTime<chrono::Utc>,
) {
    let mailbox = &state.mailboxes[idx];
    let failed = |recipient: &str| {
        failures
            .iter()
            .find(|f| f.recipient.eq_ignore_ascii_case(recipient))
            .map(|f| (f.reply.to_owned(), f.code.clone(), f.text.clone()))
    };
    crate::trace_log::feed(
        &mut inner.trace,
        &state.trace,
        (mailbox.address.as_str(), &mailbox.tenant_id),
        message,
        &failed,
        now,
    );
}
