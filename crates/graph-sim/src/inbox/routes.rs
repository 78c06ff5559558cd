//! The Inbox's HTTP handlers: each request counted under its route (`listInbox`,
//! `patchMessage`, `moveMessage` in `GET /_sim/stats`'s `requests`) and logged as every Graph
//! request is ([`crate::send::routed`]).

use std::sync::Arc;

use axum::{body::Body, extract::Path, http::HeaderMap, response::Response};

use super::{Change, FolderQuery};
use crate::{
    send::{Seen, routed},
    state::SimState,
    wire::{Call, RequestIds},
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

/// `PATCH /v1.0/users/{user}/messages/{id}`.
pub(crate) async fn patch_message(
    Call { state, headers }: Call,
    Path((user, id)): Path<(String, String)>,
    body: Body,
) -> Response {
    let handle = async |_: &RequestIds, _, seen: &mut Seen| {
        super::edit(&state, &user, &id, &headers, body, seen, Change::patch).await
    };
    routed(&state, "patchMessage", &headers, handle).await
}

/// `POST /v1.0/users/{user}/messages/{id}/move`.
pub(crate) async fn move_message(
    state: Arc<SimState>,
    headers: HeaderMap,
    user: String,
    id: String,
    body: Body,
) -> Response {
    let handle = async |_: &RequestIds, _, seen: &mut Seen| {
        super::edit(&state, &user, &id, &headers, body, seen, Change::move_to).await
    };
    routed(&state, "moveMessage", &headers, handle).await
}
