//! Graph's draft-and-send flow, its look-ups and upload sessions:
//! - `POST /v1.0/users/{id}/messages` creates a draft (`201`, the message with its `id`); with
//!   `Prefer: IdType="ImmutableId"` the id stays the same when the message moves to Sent Items,
//!   without it the id changes once the sent copy is visible
//!   (<https://learn.microsoft.com/graph/api/user-post-messages>,
//!   <https://learn.microsoft.com/graph/outlook-immutable-id>);
//! - `POST /v1.0/users/{id}/messages/{draft}/send` sends it (`202`): the same limits, scripted
//!   answers and after-accept faults as sendMail (<https://learn.microsoft.com/graph/api/message-send>).
//!   Sending an item that was already sent delivers it again (recorded as a second send): the
//!   pessimistic reading, so a client that resends is caught;
//! - `GET /v1.0/users/{id}/messages/{item}` answers `{id, isDraft, internetMessageId}`;
//! - `GET /v1.0/users/{id}/messages?$filter=internetMessageId eq '…'` (every folder) and
//!   `GET /v1.0/users/{id}/mailFolders/sentitems/messages?$filter=…` answer `{"value": […]}`.
//!
//!   Eventual consistency: a sent message becomes visible as sent only
//!   `sent_visibility_delay_ms` after it was accepted (Microsoft documents no bound; the
//!   stand-in makes the delay configurable, default 0). Until then Sent Items does not list it,
//!   and by `sent_in_transit` the draft is gone (`GET` by id `404 ErrorItemNotFound`, in no
//!   listing: the default, as <https://learn.microsoft.com/graph/outlook-immutable-id> describes
//!   the sent copy) or still reads as the unsent draft (`isDraft: true`);
//! - `POST …/attachments` (under 3 MB), `DELETE`, the upload budget ([`attach`]);
//! - upload sessions for attachments of 3–150 MB ([`upload`]).

use std::sync::Arc;

use axum::{
    body::Body,
    extract::{Path, Query},
    http::{HeaderMap, StatusCode},
    response::Response,
};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use super::{
    call::Call,
    message::MessageView,
    send::{
        Delivery, Reply, Seen, action_route, admit, deliver, next_scripted, read_body, routed,
        undelivered,
    },
    state::{DraftState, Inner, SimState},
    validate::parse_draft,
    wire::{GraphError, RequestIds, new_item_id},
};

mod attach;
mod upload;
pub(crate) use attach::delete_message;
use attach::{add_attachment, charge_upload};
pub use upload::{MAX_CHUNK_BYTES, MAX_UPLOAD_BYTES, MIN_UPLOAD_BYTES};
pub(crate) use upload::{create_upload_session, upload_chunk};

fn wants_immutable_id(headers: &HeaderMap) -> bool {
    crate::wire::prefers(headers, |p| {
        p.eq_ignore_ascii_case("IdType=\"ImmutableId\"")
            || p.eq_ignore_ascii_case("IdType=ImmutableId")
    })
}

fn item_not_found() -> GraphError {
    GraphError::new(
        StatusCode::NOT_FOUND,
        "ErrorItemNotFound",
        "The specified object was not found in the store.",
    )
}

/// A draft (or its sent copy) as Graph writes a message.
fn draft_json(d: &DraftState, id: &str, is_draft: bool, folder: &str, at: DateTime<Utc>) -> Value {
    MessageView {
        id,
        is_draft,
        is_read: true,
        internet_message_id: Some(&d.internet_message_id),
        subject: d.message.subject.as_deref(),
        body_type: &d.message.body_content_type,
        body: "",
        from: None,
        to: &d.message.to,
        cc: &d.message.cc,
        bcc: &d.message.bcc,
        has_attachments: !d.message.attachments.is_empty(),
        folder,
        at,
    }
    .json()
}

/// A `sendMail` copy in Sent Items (graph-sim keeps only its ids).
fn sent_item_json(id: &str, internet_message_id: Option<&str>, at: DateTime<Utc>) -> Value {
    MessageView {
        id,
        is_draft: false,
        is_read: true,
        internet_message_id,
        subject: None,
        body_type: "html",
        body: "",
        from: None,
        to: &[],
        cc: &[],
        bcc: &[],
        has_attachments: false,
        folder: "sentitems",
        at,
    }
    .json()
}

/// `POST /v1.0/users/{user}/messages`: create a draft.
pub(crate) async fn create_draft(
    Call { state, headers }: Call,
    Path(user): Path<String>,
    body: Body,
) -> Response {
    let handle = async |_: &RequestIds, _, seen: &mut Seen| {
        let admitted = admit(&state, &user, &headers, seen).await?;
        let idx = admitted.idx;
        let bytes = read_body(&state, &headers, body).await.inspect_err(|_| {
            state.lock().boxes[idx].refused.validation += 1;
        })?;
        charge_upload(&state, idx, &admitted.client_id, bytes.len())?;
        let mut message = parse_draft(&bytes, state.mailboxes[idx].limits.recipients_per_message)
            .inspect_err(|_| {
            state.lock().boxes[idx].refused.validation += 1;
        })?;
        seen.recipients = Some(message.recipient_count());
        let internet_message_id = message
            .internet_message_id
            .clone()
            .unwrap_or_else(|| format!("<{}@graph-sim.example>", Uuid::new_v4().simple()));
        message.internet_message_id = Some(internet_message_id.clone());
        let id = new_item_id();
        let draft = DraftState {
            idx,
            id: id.clone(),
            sent_id: None,
            internet_message_id: internet_message_id.clone(),
            message,
            immutable: wants_immutable_id(&headers),
            sends: 0,
            visible_at_ms: None,
            uploaded: 0,
            posted: 0,
            deleted: false,
        };
        state.lock().drafts.insert(id.clone(), draft);
        let draft = state
            .lock()
            .drafts
            .get(&id)
            .map(|d| draft_json(d, &id, true, "drafts", state.now()));
        let mut body = draft.unwrap_or_default();
        body["@odata.context"] = json!(format!(
            "{}/v1.0/$metadata#users('{user}')/messages/$entity",
            state.origin
        ));
        Ok(Reply::Json {
            status: StatusCode::CREATED,
            body,
        })
    };
    routed(&state, "createDraft", &headers, handle).await
}

/// `POST /v1.0/users/{user}/messages/{id}/{action}`: `send`, `attachments` ([`attach`]) or
/// `move` ([`crate::inbox`]); other actions: `400`.
pub(crate) async fn draft_action(
    Call { state, headers }: Call,
    Path((user, id, action)): Path<(String, String, String)>,
    body: Body,
) -> Response {
    if action.eq_ignore_ascii_case("move") {
        return crate::inbox::routes::move_message(Call { state, headers }, (user, id), body).await;
    }
    if action.eq_ignore_ascii_case("attachments") {
        return add_attachment(state, headers, user, id, body).await;
    }
    let handle = async |ids: &RequestIds, arrived_at_ms, seen: &mut Seen| {
        let admitted = admit(&state, &user, &headers, seen).await?;
        let idx = admitted.idx;
        let scripted = next_scripted(&state, idx);
        if let Some(answer) = scripted.as_ref().filter(|a| !a.deliver) {
            return Ok(undelivered(&state, idx, answer).await);
        }
        let now_ms = state.now().timestamp_millis();
        let (key, message) = {
            let inner = state.lock();
            let found = inner
                .drafts
                .iter()
                .find(|(_, d)| d.idx == idx && d.answers_to(&id, now_ms));
            match found {
                Some((key, d)) => (key.clone(), d.message.clone()),
                None => return Err(item_not_found()),
            }
        };
        seen.recipients = Some(message.recipient_count());
        let delay = state.sent_visibility_delay_ms;
        Ok(deliver(
            &state,
            &admitted,
            message,
            Delivery {
                ids,
                arrived_at_ms,
                request_bytes: 0,
                via: "draft",
                draft_id: Some(id.clone()),
            },
            scripted,
            move |inner: &mut Inner, now_ms| {
                if let Some(d) = inner.drafts.get_mut(&key) {
                    d.sends += 1;
                    d.visible_at_ms.get_or_insert(now_ms + delay);
                    if !d.immutable && d.sent_id.is_none() {
                        d.sent_id = Some(new_item_id());
                    }
                }
            },
        )
        .await)
    };
    action_route(&state, "send", &action, &headers, handle).await
}

/// `GET /v1.0/users/{user}/messages/{id}`.
pub(crate) async fn get_message(
    Call { state, headers }: Call,
    Path((user, id)): Path<(String, String)>,
    Query(query): Query<ListQuery>,
) -> Response {
    let handle = async |_: &RequestIds, _, seen: &mut Seen| {
        let admitted = admit(&state, &user, &headers, seen).await?;
        let now_ms = state.now().timestamp_millis();
        let inner = state.lock();
        if let Some(d) = inner.drafts.values().find(|d| {
            d.idx == admitted.idx
                && d.answers_to(&id, now_ms)
                && !d.hidden(state.sent_in_transit, now_ms)
        }) {
            return Ok(Reply::Json {
                status: StatusCode::OK,
                body: {
                    let sent = d.sent_visible(now_ms);
                    let folder = if sent { "sentitems" } else { "drafts" };
                    draft_json(d, d.current_id(now_ms), !sent, folder, state.now())
                },
            });
        }
        if let Some(item) = inner
            .sent_items
            .iter()
            .find(|s| s.idx == admitted.idx && s.id == id && now_ms >= s.visible_at_ms)
        {
            return Ok(Reply::Json {
                status: StatusCode::OK,
                body: sent_item_json(&item.id, item.internet_message_id.as_deref(), state.now()),
            });
        }
        // Any other folder's item (the Inbox's, or one moved from it), as Graph finds a
        // message by id in whichever folder it is.
        if let Some(item) = inner
            .inbox
            .iter()
            .find(|i| i.idx == admitted.idx && i.id == id && now_ms >= i.visible_at_ms)
        {
            let select = query.selected();
            return Ok(Reply::Json {
                status: StatusCode::OK,
                body: item.json(select.as_deref(), crate::inbox::wants_text(&headers)),
            });
        }
        Err(item_not_found())
    };
    routed(&state, "getMessage", &headers, handle).await
}

/// The OData query of a list request (`$filter`, `$select`, `$top`).
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct ListQuery {
    #[serde(rename = "$filter")]
    filter: Option<String>,
    /// `$select`: applied to the Inbox's items (drafts and sent copies are written whole).
    #[serde(rename = "$select")]
    select: Option<String>,
}

impl ListQuery {
    /// `$select`'s fields.
    fn selected(&self) -> Option<Vec<String>> {
        self.select
            .as_deref()
            .map(|s| s.split(',').map(|f| f.trim().to_owned()).collect())
    }
}

/// `internetMessageId eq '<…>'` → the id (`''` unescaped); `None` for any other filter.
fn filter_value(filter: &str) -> Option<String> {
    let filter = filter.trim();
    let (name, rest) = filter.split_once(char::is_whitespace)?;
    if !name.eq_ignore_ascii_case("internetMessageId") {
        return None;
    }
    let rest = rest.trim_start();
    let rest = rest
        .strip_prefix("eq ")
        .or_else(|| rest.strip_prefix("EQ "))?
        .trim();
    let quoted = rest.strip_prefix('\'')?.strip_suffix('\'')?;
    Some(quoted.replace("''", "'"))
}

/// `GET /v1.0/users/{user}/messages` (every folder: drafts too).
pub(crate) async fn list_messages(
    Call { state, headers }: Call,
    Path(user): Path<String>,
    Query(query): Query<ListQuery>,
) -> Response {
    list(state, user, None, query, headers).await
}

/// `GET /v1.0/users/{user}/mailFolders/{folder}/messages`: `sentitems` or `drafts` here,
/// any other folder (the Inbox) in [`crate::inbox`].
pub(crate) async fn list_folder_messages(
    Call { state, headers }: Call,
    Path((user, folder)): Path<(String, String)>,
    Query(query): Query<crate::inbox::FolderQuery>,
) -> Response {
    if ["sentitems", "drafts"].contains(&folder.to_ascii_lowercase().as_str()) {
        let query = ListQuery {
            filter: query.filter,
            select: None,
        };
        list(state, user, Some(folder), query, headers).await
    } else {
        crate::inbox::routes::list(state, user, folder, query, headers).await
    }
}

async fn list(
    state: Arc<SimState>,
    user: String,
    folder: Option<String>,
    query: ListQuery,
    headers: HeaderMap,
) -> Response {
    let handle = async |_: &RequestIds, _, seen: &mut Seen| {
        listed(&state, &user, folder.as_deref(), &query, &headers, seen).await
    };
    routed(&state, "listMessages", &headers, handle).await
}

async fn listed(
    state: &Arc<SimState>,
    user: &str,
    folder: Option<&str>,
    query: &ListQuery,
    headers: &HeaderMap,
    seen: &mut Seen,
) -> Result<Reply, GraphError> {
    let admitted = admit(state, user, headers, seen).await?;
    let (sent, drafts) = match folder.map(str::to_ascii_lowercase).as_deref() {
        None => (true, true),
        Some("sentitems") => (true, false),
        Some("drafts") => (false, true),
        Some(other) => {
            return Err(GraphError::new(
                StatusCode::NOT_FOUND,
                "ErrorInvalidIdMalformed",
                format!("graph-sim knows the folders sentitems and drafts, not '{other}'."),
            ));
        }
    };
    let wanted = match query.filter.as_deref() {
        None => None,
        Some(f) => Some(filter_value(f).ok_or_else(|| {
            GraphError::new(
                StatusCode::BAD_REQUEST,
                "ErrorInvalidUrlQueryFilter",
                "graph-sim filters only by internetMessageId eq '…'.",
            )
        })?),
    };
    let matches = |imid: Option<&str>| wanted.as_deref().is_none_or(|w| imid == Some(w));
    let now_ms = state.now().timestamp_millis();
    let inner = state.lock();
    let mut value = Vec::new();
    for d in inner
        .drafts
        .values()
        .filter(|d| d.idx == admitted.idx && !d.hidden(state.sent_in_transit, now_ms))
        // A deleted item is in Deleted Items: in the every-folder listing only.
        .filter(|d| !d.deleted || folder.is_none())
    {
        let visible = d.sent_visible(now_ms);
        if ((visible && sent) || (!visible && drafts)) && matches(Some(&d.internet_message_id)) {
            let folder = if visible { "sentitems" } else { "drafts" };
            value.push(draft_json(
                d,
                d.current_id(now_ms),
                !visible,
                folder,
                state.now(),
            ));
        }
    }
    if sent {
        for s in inner
            .sent_items
            .iter()
            .filter(|s| s.idx == admitted.idx && now_ms >= s.visible_at_ms)
        {
            if matches(s.internet_message_id.as_deref()) {
                value.push(sent_item_json(
                    &s.id,
                    s.internet_message_id.as_deref(),
                    state.now(),
                ));
            }
        }
    }
    if folder.is_none() {
        // Every folder: the Inbox's items too, as `GET /users/{id}/messages` lists them.
        let select = query.selected();
        for item in inner
            .inbox
            .iter()
            .filter(|i| i.idx == admitted.idx && now_ms >= i.visible_at_ms)
        {
            if matches(Some(&item.internet_message_id)) {
                value.push(item.json(select.as_deref(), false));
            }
        }
    }
    Ok(Reply::Json {
        status: StatusCode::OK,
        body: json!({
            "@odata.context": format!("{}/v1.0/$metadata#users('{user}')/messages", state.origin),
            "value": value,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_by_internet_message_id_is_read_back_with_quotes_unescaped() {
        assert_eq!(
            filter_value("internetMessageId eq '<a@b>'").as_deref(),
            Some("<a@b>")
        );
        assert_eq!(
            filter_value("internetMessageId eq 'it''s'").as_deref(),
            Some("it's")
        );
        assert_eq!(filter_value("subject eq 'x'"), None);
    }
}
