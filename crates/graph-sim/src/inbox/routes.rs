//! The Inbox's HTTP handlers: each request counted under its route (`listInbox`,
//! `patchMessage`, `moveMessage`, `getMimeContent` in `GET /_sim/stats`'s `requests`) and logged as every Graph
//! request is ([`crate::send::routed`]).

use std::sync::Arc;

use axum::{body::Body, extract::Path, http::HeaderMap, response::Response};

use super::{Change, FolderQuery};
use crate::{
    call::Call,
    send::{Seen, routed},
    state::SimState,
    wire::{GraphError, RequestIds},
};

/// `GET …/mailFolders/{folder}/messages` of the Inbox or a folder NDRs were moved to.
pub(crate) async fn list(
    state: Arc<SimState>,
    user: String,
    folder: String,
    query: FolderQuery,
    headers: HeaderMap,
) -> Response {
    let handle = async |_: &RequestIds, _, seen: &mut Seen| {
        super::list(&state, &user, &folder, &query, &headers, seen).await
    };
    routed(&state, "listInbox", &headers, handle).await
}

/// `GET /v1.0/users/{user}/messages/{id}/$value`; any other last segment is Graph's `400`.
pub(crate) async fn mime_value(
    Call { state, headers }: Call,
    Path((user, id, action)): Path<(String, String, String)>,
) -> Response {
    let handle = async |_: &RequestIds, _, seen: &mut Seen| {
        if action != "$value" {
            return Err(GraphError::new(
                axum::http::StatusCode::BAD_REQUEST,
                "BadRequest",
                format!("Resource not found for the segment '{action}'."),
            ));
        }
        super::mime_value(&state, &user, &id, &headers, seen).await
    };
    routed(&state, "getMimeContent", &headers, handle).await
}

/// `PATCH /v1.0/users/{user}/messages/{id}`.
pub(crate) async fn patch_message(
    call: Call,
    Path(item): Path<(String, String)>,
    body: Body,
) -> Response {
    edit(call, item, body, "patchMessage", Change::patch).await
}

/// `POST /v1.0/users/{user}/messages/{id}/move` (routed here by the drafts' `{id}/{action}`).
pub(crate) async fn move_message(call: Call, item: (String, String), body: Body) -> Response {
    edit(call, item, body, "moveMessage", Change::move_to).await
}

/// Item `id` of mailbox `user` changed as its body says ([`super::edit`]), counted under `route`.
async fn edit(
    Call { state, headers }: Call,
    (user, id): (String, String),
    body: Body,
    route: &'static str,
    parse: fn(&[u8]) -> Result<Change, GraphError>,
) -> Response {
    let handle = async |_: &RequestIds, _, seen: &mut Seen| {
        super::edit(&state, &user, &id, &headers, body, seen, parse).await
    };
    routed(&state, route, &headers, handle).await
}
