//! Upload sessions for a draft's large attachments (3–150 MB):
//! `POST /v1.0/users/{id}/messages/{draft}/attachments/createUploadSession`, then
//! `PUT {uploadUrl}` chunks (`Content-Range: bytes a-b/total`)
//! (<https://learn.microsoft.com/graph/outlook-large-attachments>,
//! <https://learn.microsoft.com/graph/api/attachment-createuploadsession>):
//! - a session for a file under 3 MB is refused `400
//!   ErrorAttachmentSizeShouldNotBeLessThanMinimumSize` (the large-attachments page, "Errors":
//!   "returned when attempting to create an upload session to attach a file smaller than 3 MB";
//!   "3 MB" read as 3 MiB, 3,145,728 bytes, the harsher reading: it refuses more);
//! - the upload URL is on another origin than the API (Graph's is on `outlook.office.com`),
//!   served by graph-sim's second listener ([`crate::server::upload_router`]);
//! - it is pre-authenticated ("contains the appropriate authorization token for subsequent PUT
//!   queries", step 1 of the same page; "Don't specify an Authorization request header"): a
//!   `PUT` with an `Authorization` header is refused `401`;
//! - chunks count against the app's upload budget for the mailbox ([`super::attach`]).

use axum::{
    body::Body,
    extract::Path,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{attach::charge_upload, item_not_found};
use crate::{
    call::Call,
    records::RecordedAttachment,
    send::{Reply, Seen, admit, count, read_body, read_limited, routed},
    state::Upload,
    wire::{GraphError, RequestIds},
};

/// The largest attachment an upload session takes: 150 MB
/// (<https://learn.microsoft.com/graph/outlook-large-attachments>).
pub const MAX_UPLOAD_BYTES: u64 = 150 * 1024 * 1024;
/// The smallest attachment an upload session takes: 3 MB (3,145,728 bytes; module doc).
pub const MIN_UPLOAD_BYTES: u64 = 3 * 1024 * 1024;
/// The largest chunk one `PUT` to an upload URL may carry: 4 MB (the same page).
pub const MAX_CHUNK_BYTES: usize = 4 * 1024 * 1024;

/// `POST /v1.0/users/{user}/messages/{id}/attachments/createUploadSession`.
pub(crate) async fn create_upload_session(
    Call { state, headers }: Call,
    Path((user, id)): Path<(String, String)>,
    body: Body,
) -> Response {
    let handle = async |_: &RequestIds, _, seen: &mut Seen| {
        let admitted = admit(&state, &user, &headers, seen).await?;
        let bytes = read_body(&state, &headers, body).await?;
        let root: Value = serde_json::from_slice(&bytes)
            .map_err(|_| GraphError::body_read("Unable to read JSON request payload."))?;
        let item = root
            .as_object()
            .and_then(|o| {
                o.iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case("AttachmentItem"))
            })
            .map(|(_, v)| v)
            .ok_or_else(|| {
                GraphError::new(
                    StatusCode::BAD_REQUEST,
                    "ErrorInvalidParameter",
                    "The value of the parameter 'AttachmentItem' is empty.",
                )
            })?;
        let size = item.get("size").and_then(Value::as_u64).unwrap_or(0);
        let name = item
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if item.get("attachmentType").and_then(Value::as_str) != Some("file") {
            return Err(GraphError::body_read(
                "AttachmentItem.attachmentType must be 'file'.",
            ));
        }
        if size < MIN_UPLOAD_BYTES {
            return Err(GraphError::new(
                StatusCode::BAD_REQUEST,
                "ErrorAttachmentSizeShouldNotBeLessThanMinimumSize",
                format!(
                    "Attachment size should not be less than minimum size {MIN_UPLOAD_BYTES} bytes (3 MB), was {size}."
                ),
            ));
        }
        if size > MAX_UPLOAD_BYTES {
            return Err(GraphError::new(
                StatusCode::BAD_REQUEST,
                "ErrorAttachmentSizeShouldNotExceedMaximumSize",
                format!("An upload session takes at most {MAX_UPLOAD_BYTES} bytes, not {size}."),
            ));
        }
        let now_ms = state.now().timestamp_millis();
        let mut inner = state.lock();
        let draft_id = inner
            .drafts
            .iter()
            .find(|(_, d)| d.idx == admitted.idx && d.answers_to(&id, now_ms) && d.sends == 0)
            .map(|(k, _)| k.clone())
            .ok_or_else(item_not_found)?;
        let token = Uuid::new_v4().simple().to_string();
        inner.uploads.insert(
            token.clone(),
            Upload {
                idx: admitted.idx,
                client_id: admitted.client_id.clone(),
                draft_id,
                name,
                size,
                received: Vec::new(),
            },
        );
        let expires = state.now() + chrono::Duration::hours(24);
        Ok(Reply::Json {
            status: StatusCode::CREATED,
            body: json!({
                "@odata.context": format!("{}/v1.0/$metadata#microsoft.graph.uploadSession", state.origin),
                "uploadUrl": format!("{}/_upload/{token}", state.upload_origin),
                "expirationDateTime": expires.to_rfc3339(),
                "nextExpectedRanges": ["0-"],
            }),
        })
    };
    routed(&state, "createUploadSession", &headers, handle).await
}

fn upload_error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"error": {"code": code, "message": message}})),
    )
        .into_response()
}

/// `PUT /_upload/{session}`: one chunk of an upload session.
pub(crate) async fn upload_chunk(
    Call { state, headers }: Call,
    Path(token): Path<String>,
    body: Body,
) -> Response {
    count(&state, "uploadChunk");
    if headers.contains_key(header::AUTHORIZATION) {
        return upload_error(
            StatusCode::UNAUTHORIZED,
            "InvalidAuthenticationToken",
            "An upload URL carries its own credential; a request with an Authorization header is refused.",
        );
    }
    let range = headers
        .get(header::CONTENT_RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_content_range);
    let Some((start, end, total)) = range else {
        return upload_error(
            StatusCode::BAD_REQUEST,
            "InvalidContentRange",
            "Content-Range must be 'bytes start-end/total'.",
        );
    };
    let Some(bytes) = read_limited(body, MAX_CHUNK_BYTES).await else {
        return upload_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            "A chunk carries at most 4 MB.",
        );
    };
    let charged = {
        let inner = state.lock();
        inner
            .uploads
            .get(&token)
            .map(|u| (u.idx, u.client_id.clone()))
    };
    if let Some((idx, client_id)) = charged
        && let Err(refused) = charge_upload(&state, idx, &client_id, bytes.len())
    {
        return refused.into_response(&RequestIds::new(&headers), state.now());
    }
    let mut inner = state.lock();
    let Some(upload) = inner.uploads.get_mut(&token) else {
        return upload_error(
            StatusCode::NOT_FOUND,
            "ItemNotFound",
            "The upload session does not exist or has completed.",
        );
    };
    let received = upload.received.len() as u64;
    if start != received
        || total != upload.size
        || end < start
        || end - start + 1 != bytes.len() as u64
    {
        return upload_error(
            StatusCode::RANGE_NOT_SATISFIABLE,
            "InvalidRange",
            &format!(
                "The next expected range starts at {received} of {}.",
                upload.size
            ),
        );
    }
    upload.received.extend_from_slice(&bytes);
    let next = upload.received.len() as u64;
    if next < upload.size {
        return (
            StatusCode::OK,
            axum::Json(json!({"nextExpectedRanges": [format!("{next}-")]})),
        )
            .into_response();
    }
    let Some(done) = inner.uploads.remove(&token) else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let attachment = RecordedAttachment::of(done.name, &done.received);
    if let Some(d) = inner.drafts.get_mut(&done.draft_id)
        && d.idx == done.idx
    {
        d.message.attachments.push(attachment);
        d.uploaded += 1;
    }
    (
        StatusCode::CREATED,
        [(
            header::LOCATION,
            format!("{}/_upload/{token}", state.upload_origin),
        )],
    )
        .into_response()
}

fn parse_content_range(value: &str) -> Option<(u64, u64, u64)> {
    let rest = value.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (start, end) = range.split_once('-')?;
    Some((
        start.trim().parse().ok()?,
        end.trim().parse().ok()?,
        total.trim().parse().ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn content_ranges_parse() {
        assert_eq!(parse_content_range("bytes 0-9/20"), Some((0, 9, 20)));
        assert_eq!(parse_content_range("bytes */20"), None);
    }
}
