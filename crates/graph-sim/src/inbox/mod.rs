//! The mailbox's Inbox as Graph serves it, holding the non-delivery reports (NDRs) graph-sim
//! generates ([`crate::ndr`]) and any message a test delivers:
//! - `GET /v1.0/users/{id}/mailFolders/{inbox | folder}/messages` with `$filter`, `$select`,
//!   `$top`, `$skip` ([`query`]) and `@odata.nextLink` paging
//!   (<https://learn.microsoft.com/graph/api/mailfolder-list-messages>,
//!   <https://learn.microsoft.com/graph/paging>); newest first; `Prefer:
//!   outlook.body-content-type="text"` gives the text body, else HTML
//!   (<https://learn.microsoft.com/graph/api/resources/message>);
//! - `PATCH /v1.0/users/{id}/messages/{id}` with `{"isRead": true}` (`200`, the message;
//!   <https://learn.microsoft.com/graph/api/message-update>);
//! - `POST /v1.0/users/{id}/messages/{id}/move` with `{"destinationId": "…"}` (`201`, the
//!   message in its new folder under a new id; <https://learn.microsoft.com/graph/api/message-move>);
//! - `GET /v1.0/users/{id}/messages/{id}/$value`: the item's MIME
//!   (<https://learn.microsoft.com/graph/outlook-get-mime-message>), an NDR's as [`crate::ndr`]
//!   wrote it; `text/plain` (Microsoft shows the body, not its `Content-Type`).
//!
//! The JSON view is derived from the item's MIME parts; an absent property is `null`, as Graph
//! sends it (every property but `id` is nullable in the v1.0 model,
//! <https://learn.microsoft.com/graph/api/resources/message>): `internetMessageHeaders` of an
//! item without them, `subject` when empty, `from`/`sender` without a sender.
//!
//! Every one of them goes through the same admission as a send (token, the mailbox's 4
//! concurrent requests per app, its request quota): Exchange's limits count every request.
//! An NDR is in no listing before its delay has passed.

mod query;
pub(crate) mod routes;
mod snapshot;
pub use snapshot::SimInboxItem;

use std::sync::Arc;

use axum::{
    body::Body,
    http::{HeaderMap, StatusCode},
};
use serde_json::{Value, json};

use crate::{
    message::MessageView,
    ndr::INBOX,
    records::InboxItem,
    send::{Reply, Seen, admit, read_body},
    state::SimState,
    wire::{GraphError, new_item_id},
};
use query::{Clause, DEFAULT_TOP, MAX_TOP, parse_filter};

impl InboxItem {
    fn matches(&self, clauses: &[Clause]) -> bool {
        clauses.iter().all(|c| match c {
            Clause::IsRead(read) => self.is_read == *read,
            Clause::InternetMessageId(id) => &self.internet_message_id == id,
            Clause::MessageClass(class) => self.message_class.eq_ignore_ascii_case(class),
        })
    }

    /// The message's JSON: every default property, or those of `select` (`id` always), with
    /// `internetMessageHeaders` only when selected (as Graph returns them).
    pub(crate) fn json(&self, select: Option<&[String]>, text: bool) -> Value {
        let body = if text {
            json!({"contentType": "text", "content": self.body})
        } else {
            let escaped = self
                .body
                .replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;")
                .replace("\r\n", "<br>\r\n");
            json!({"contentType": "html", "content": format!("<html><body>{escaped}</body></html>")})
        };
        let to = [self.to.clone()];
        let mut all = MessageView {
            id: &self.id,
            is_draft: false,
            is_read: self.is_read,
            internet_message_id: Some(&self.internet_message_id),
            subject: (!self.subject.is_empty()).then_some(self.subject.as_str()),
            body_type: if text { "text" } else { "html" },
            body: body["content"].as_str().unwrap_or_default(),
            from: (!self.from_address.is_empty())
                .then_some((self.from_name.as_str(), self.from_address.as_str())),
            to: &to,
            cc: &[],
            bcc: &[],
            has_attachments: false,
            folder: &self.folder,
            at: self.received_at,
        }
        .json();
        // The preview is of the text, not of the HTML around it.
        all["bodyPreview"] = json!(self.body.chars().take(255).collect::<String>());
        let headers = || {
            if self.headers.is_empty() {
                return Value::Null;
            }
            Value::Array(
                self.headers
                    .iter()
                    .map(|(n, v)| json!({"name": n, "value": v}))
                    .collect(),
            )
        };
        match select {
            None => all,
            Some(fields) => {
                let mut out = serde_json::Map::new();
                out.insert("@odata.etag".into(), all["@odata.etag"].clone());
                out.insert("id".into(), all["id"].clone());
                for f in fields {
                    if f.eq_ignore_ascii_case("internetMessageHeaders") {
                        out.insert("internetMessageHeaders".into(), headers());
                    } else if let Some((k, v)) = all
                        .as_object()
                        .and_then(|o| o.iter().find(|(k, _)| k.eq_ignore_ascii_case(f)))
                    {
                        out.insert(k.clone(), v.clone());
                    }
                }
                Value::Object(out)
            }
        }
    }
}

/// The query of a folder listing.
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub(crate) struct FolderQuery {
    #[serde(rename = "$filter")]
    pub filter: Option<String>,
    #[serde(rename = "$select")]
    pub select: Option<String>,
    #[serde(rename = "$top")]
    pub top: Option<String>,
    #[serde(rename = "$skip")]
    pub skip: Option<String>,
}

pub(crate) fn wants_text(headers: &HeaderMap) -> bool {
    crate::wire::prefers(headers, |p| {
        p.to_ascii_lowercase()
            .replace(' ', "")
            .starts_with("outlook.body-content-type=\"text\"")
    })
}

fn bad_query(message: impl Into<String>) -> GraphError {
    GraphError::new(StatusCode::BAD_REQUEST, "ErrorInvalidUrlQuery", message)
}

fn number(value: Option<&str>, name: &str, default: usize) -> Result<usize, GraphError> {
    match value {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse()
            .map_err(|_| bad_query(format!("{name} must be a whole number, got '{v}'."))),
    }
}

/// `GET …/mailFolders/{folder}/messages` for a folder that is not Drafts or Sent Items.
pub(crate) async fn list(
    state: &Arc<SimState>,
    user: &str,
    folder: &str,
    query: &FolderQuery,
    headers: &HeaderMap,
    seen: &mut Seen,
) -> Result<Reply, GraphError> {
    let admitted = admit(state, user, headers, seen).await?;
    let clauses = match query.filter.as_deref() {
        None => Vec::new(),
        Some(f) => parse_filter(f).ok_or_else(|| {
            GraphError::new(
                StatusCode::BAD_REQUEST,
                "ErrorInvalidUrlQueryFilter",
                "graph-sim filters an Inbox by isRead, internetMessageId and the message class extended property (String 0x001A), joined by and.",
            )
        })?,
    };
    let top = number(query.top.as_deref(), "$top", DEFAULT_TOP)?;
    if top == 0 || top > MAX_TOP {
        return Err(bad_query(format!("$top must be 1 to {MAX_TOP}.")));
    }
    let skip = number(query.skip.as_deref(), "$skip", 0)?;
    let select: Option<Vec<String>> = query
        .select
        .as_deref()
        .map(|s| s.split(',').map(|f| f.trim().to_owned()).collect());
    let text = wants_text(headers);
    let folder = folder.to_ascii_lowercase();
    let now_ms = state.now().timestamp_millis();
    let inner = state.lock();
    let mut items: Vec<&InboxItem> = inner
        .inbox
        .iter()
        .filter(|i| {
            i.idx == admitted.idx
                && i.folder == folder
                && now_ms >= i.visible_at_ms
                && i.matches(&clauses)
        })
        .collect();
    items.sort_by(|a, b| b.received_at.cmp(&a.received_at).then(b.id.cmp(&a.id)));
    let page: Vec<Value> = items
        .iter()
        .skip(skip)
        .take(top)
        .map(|i| i.json(select.as_deref(), text))
        .collect();
    let mut body = json!({
        "@odata.context": format!("{}/v1.0/$metadata#users('{user}')/mailFolders('{folder}')/messages", state.origin),
        "value": page,
    });
    if items.len() > skip + top {
        let mut next = url::Url::parse(&format!(
            "{}/v1.0/users/{user}/mailFolders/{folder}/messages",
            state.origin
        ))
        .map_err(|e| {
            GraphError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalServerError",
                e.to_string(),
            )
        })?;
        {
            let mut pairs = next.query_pairs_mut();
            for (name, value) in [
                ("$filter", query.filter.as_deref()),
                ("$select", query.select.as_deref()),
            ] {
                if let Some(v) = value {
                    pairs.append_pair(name, v);
                }
            }
            pairs.append_pair("$top", &top.to_string());
            pairs.append_pair("$skip", &(skip + top).to_string());
        }
        body["@odata.nextLink"] = json!(next.as_str());
    }
    Ok(Reply::Json {
        status: StatusCode::OK,
        body,
    })
}

/// The visible item `id` of mailbox `idx`, or Graph's `404`.
fn find<'a>(
    items: &'a mut [InboxItem],
    idx: usize,
    id: &str,
    now_ms: i64,
) -> Result<&'a mut InboxItem, GraphError> {
    items
        .iter_mut()
        .find(|i| i.idx == idx && i.id == id && now_ms >= i.visible_at_ms)
        .ok_or_else(|| {
            GraphError::new(
                StatusCode::NOT_FOUND,
                "ErrorItemNotFound",
                "The specified object was not found in the store.",
            )
        })
}

/// `GET …/messages/{id}/$value` of the visible item `id`: its MIME, admitted as a send is.
pub(crate) async fn mime_value(
    state: &Arc<SimState>,
    user: &str,
    id: &str,
    headers: &HeaderMap,
    seen: &mut Seen,
) -> Result<Reply, GraphError> {
    let admitted = admit(state, user, headers, seen).await?;
    let now_ms = state.now().timestamp_millis();
    let mut inner = state.lock();
    let item = find(&mut inner.inbox, admitted.idx, id, now_ms)?;
    Ok(Reply::Mime(item.mime.clone().into_bytes()))
}

/// What a request does to one Inbox item: parsed from its JSON body, then applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Change {
    /// `PATCH /v1.0/users/{user}/messages/{id}`: `isRead` (other properties are ignored).
    IsRead(Option<bool>),
    /// `POST /v1.0/users/{user}/messages/{id}/move`: to `destinationId` (a well-known folder
    /// name or a folder id; graph-sim takes any), under a new id.
    MoveTo(String),
}

impl Change {
    /// A `PATCH` body: `isRead` must be a boolean when given.
    pub(crate) fn patch(bytes: &[u8]) -> Result<Self, GraphError> {
        let patch: Value = serde_json::from_slice(bytes)
            .map_err(|e| GraphError::body_read(format!("Invalid JSON: {e}")))?;
        match patch.get("isRead") {
            None => Ok(Self::IsRead(None)),
            Some(Value::Bool(b)) => Ok(Self::IsRead(Some(*b))),
            Some(_) => Err(GraphError::body_read(
                "Cannot convert the literal to the expected type 'Edm.Boolean'.",
            )),
        }
    }

    /// A `move` body: a non-blank `destinationId` is required.
    pub(crate) fn move_to(bytes: &[u8]) -> Result<Self, GraphError> {
        serde_json::from_slice::<Value>(bytes)
            .ok()
            .and_then(|v| {
                v.get("destinationId")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .filter(|d| !d.trim().is_empty())
            .map(Self::MoveTo)
            .ok_or_else(|| GraphError::body_read("The destinationId parameter is required."))
    }

    /// Applies it to `item`; the status Graph answers with (`200`, or `201` for a move).
    fn apply(self, item: &mut InboxItem) -> StatusCode {
        match self {
            Self::IsRead(read) => {
                if let Some(read) = read {
                    item.is_read = read;
                }
                StatusCode::OK
            }
            Self::MoveTo(destination) => {
                item.folder = destination.to_ascii_lowercase();
                item.id = new_item_id();
                StatusCode::CREATED
            }
        }
    }
}

/// `PATCH` or `move` of the visible item `id`: admitted as a send is, its body parsed by
/// `parse` ([`Change::patch`], [`Change::move_to`]), answered with the changed item.
pub(crate) async fn edit(
    state: &Arc<SimState>,
    user: &str,
    id: &str,
    headers: &HeaderMap,
    body: Body,
    seen: &mut Seen,
    parse: fn(&[u8]) -> Result<Change, GraphError>,
) -> Result<Reply, GraphError> {
    let admitted = admit(state, user, headers, seen).await?;
    let change = parse(&read_body(state, headers, body).await?)?;
    let now_ms = state.now().timestamp_millis();
    let mut inner = state.lock();
    let item = find(&mut inner.inbox, admitted.idx, id, now_ms)?;
    let status = change.apply(item);
    let mut body = item.json(None, false);
    if status == StatusCode::CREATED {
        // `move` answers the new copy with its type and context, as message-move's example does.
        body["@odata.context"] = json!(format!("{}/v1.0/$metadata#message", state.origin));
        body["@odata.type"] = json!("#microsoft.graph.message");
    }
    Ok(Reply::Json { status, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_asked_for_with_the_outlook_prefer_header() {
        let mut h = HeaderMap::new();
        assert!(!wants_text(&h));
        h.insert(
            "prefer",
            "outlook.body-content-type=\"text\"".parse().unwrap(),
        );
        assert!(wants_text(&h));
        h.insert(
            "prefer",
            "IdType=\"ImmutableId\", outlook.body-content-type=\"html\""
                .parse()
                .unwrap(),
        );
        assert!(!wants_text(&h));
    }
}
