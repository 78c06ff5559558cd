//! A draft's small attachments and its deletion, and the upload budget every draft request is
//! charged:
//! - `POST /v1.0/users/{id}/messages/{draft}/attachments` adds one `fileAttachment` (`201`);
//!   its body is capped as every request's ([`crate::send::read_body`]: `413` over 4 MB), so a
//!   file under 3 MB fits and larger ones need an upload session
//!   (<https://learn.microsoft.com/graph/api/message-post-attachments>,
//!   <https://learn.microsoft.com/graph/outlook-large-attachments>);
//! - `DELETE /v1.0/users/{id}/messages/{item}` (`204`) moves the item to Deleted Items
//!   (<https://learn.microsoft.com/graph/api/message-delete>; `permanentDelete` is the other
//!   action): no longer in Drafts, still found by id and in the every-folder listing;
//! - request bytes (`POST`, `PATCH`, `PUT`) count against 150 MB per 5 minutes per app and
//!   mailbox ([`crate::limits::UPLOAD_BYTES_PER_5_MINUTES`]); past it `429 ApplicationThrottled`
//!   "Application is over its IncomingBytes limit." with `Retry-After`. The limit is
//!   Microsoft's (<https://learn.microsoft.com/graph/throttling-limits#outlook-service-limits>);
//!   the message text is the one clients report (O365/python-o365 issue 500): Microsoft
//!   documents the limit, not its error body.

use axum::{body::Body, extract::Path, http::StatusCode, response::Response};
use serde_json::{Value, json};

use super::item_not_found;
use crate::{
    call::Call,
    send::{Reply, Seen, admit, read_body, routed, throttled},
    state::SimState,
    validate::parse_attachment_body,
    wire::{GraphError, RequestIds},
};

/// Counts `bytes` uploaded by `client_id` to mailbox `idx`; `429` past the 5-minute budget.
pub(crate) fn charge_upload(
    state: &SimState,
    idx: usize,
    client_id: &str,
    bytes: usize,
) -> Result<(), GraphError> {
    let now_ms = state.now().timestamp_millis();
    let mut inner = state.lock();
    inner
        .uploaded_bytes
        .entry((idx, client_id.to_owned()))
        .or_default()
        .charge(now_ms, bytes as u64)
        .map_err(|retry_after_ms| {
            throttled(
                "Application is over its IncomingBytes limit.",
                retry_after_ms,
            )
        })
}

/// `POST /v1.0/users/{user}/messages/{id}/attachments`.
pub(crate) async fn add_attachment(
    state: std::sync::Arc<SimState>,
    headers: axum::http::HeaderMap,
    user: String,
    id: String,
    body: Body,
) -> Response {
    let handle = async |_: &RequestIds, _, seen: &mut Seen| {
        let admitted = admit(&state, &user, &headers, seen).await?;
        let bytes = read_body(&state, &headers, body).await?;
        charge_upload(&state, admitted.idx, &admitted.client_id, bytes.len())?;
        let attachment = parse_attachment_body(&bytes)?;
        let now_ms = state.now().timestamp_millis();
        let mut inner = state.lock();
        let draft = inner
            .drafts
            .values_mut()
            .find(|d| d.idx == admitted.idx && d.answers_to(&id, now_ms) && d.sends == 0)
            .ok_or_else(item_not_found)?;
        let name = attachment.name.clone();
        let size = attachment.bytes;
        draft.message.attachments.push(attachment);
        draft.posted += 1;
        Ok(Reply::Json {
            status: StatusCode::CREATED,
            body: {
                // The fileAttachment as message-post-attachments' example answers it: the
                // request's own optional properties echoed, Graph's null where absent.
                let sent: Value = serde_json::from_slice(&bytes).unwrap_or_default();
                let echo = |key: &str| sent.get(key).cloned().unwrap_or(Value::Null);
                json!({
                    "@odata.type": "#microsoft.graph.fileAttachment",
                    "id": super::new_item_id(),
                    "lastModifiedDateTime": state.now().format("%Y-%m-%dT%H:%M:%SZ").to_string(),
                    "name": name,
                    "contentType": echo("contentType"),
                    "size": size,
                    "isInline": sent.get("isInline").and_then(Value::as_bool).unwrap_or(false),
                    "contentId": echo("contentId"),
                    "contentLocation": echo("contentLocation"),
                    "contentBytes": echo("contentBytes"),
                })
            },
        })
    };
    routed(&state, "addAttachment", &headers, handle).await
}

/// `DELETE /v1.0/users/{user}/messages/{id}`.
pub(crate) async fn delete_message(
    Call { state, headers }: Call,
    Path((user, id)): Path<(String, String)>,
) -> Response {
    let handle = async |_: &RequestIds, _, seen: &mut Seen| {
        let admitted = admit(&state, &user, &headers, seen).await?;
        let now_ms = state.now().timestamp_millis();
        let mut inner = state.lock();
        let draft = inner
            .drafts
            .values_mut()
            .find(|d| {
                d.idx == admitted.idx
                    && d.answers_to(&id, now_ms)
                    && !d.deleted
                    && !d.hidden(state.sent_in_transit, now_ms)
            })
            .ok_or_else(item_not_found)?;
        draft.deleted = true;
        Ok(Reply::Success {
            status: StatusCode::NO_CONTENT,
            retry_after: None,
        })
    };
    routed(&state, "deleteMessage", &headers, handle).await
}
