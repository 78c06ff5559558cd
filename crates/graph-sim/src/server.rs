//! graph-sim's axum router; the state its handlers share is [`super::state`].
//!
//! Routes:
//! - `POST /{tenant}/oauth2/v2.0/token` — Entra ID client credentials ([`super::auth`]);
//! - `POST /v1.0/users/{id | userPrincipalName}/sendMail` — Graph sendMail ([`super::send`]);
//! - drafts, `send`, `GET` by id, `DELETE`, attachments, `$filter` look-ups and upload
//!   sessions ([`super::drafts`]); upload URLs on a second listener ([`upload_router`]);
//! - the Inbox: its listing, `PATCH` (`isRead`), `move` and `$value` ([`super::inbox`]);
//! - the message trace: `GET /v1.0/admin/exchange/tracing/messageTraces` and
//!   `…/{id}/getDetailsByRecipient(…)` ([`super::trace`]);
//! - the admin API under `/_sim/` ([`super::admin`]).
//!
//! Every route of a mailbox is behind [`super::permissions::enforce`] (the token's `roles`).
//! Every other path gets Graph's `400 BadRequest` "Resource not found for the segment …".

use std::sync::Arc;

use axum::{
    Router,
    extract::Path,
    http::{StatusCode, Uri},
    response::Response,
    routing::{get, post, put},
};

use super::{
    admin, auth, drafts, inbox, permissions, send,
    state::SimState,
    trace,
    wire::{Call, GraphError, RequestIds},
};

/// The whole router.
pub(crate) fn router(state: Arc<SimState>) -> Router {
    Router::new()
        .route("/{tenant}/oauth2/v2.0/token", post(auth::token))
        .route("/v1.0/users/{user}/{action}", post(send::send_mail))
        .route(
            "/v1.0/users/{user}/messages",
            post(drafts::create_draft).get(drafts::list_messages),
        )
        .route(
            "/v1.0/users/{user}/messages/{id}",
            get(drafts::get_message)
                .patch(inbox::routes::patch_message)
                .delete(drafts::delete_message),
        )
        .route(
            "/v1.0/users/{user}/messages/{id}/{action}",
            post(drafts::draft_action).get(inbox::routes::mime_value),
        )
        .route(
            "/v1.0/users/{user}/messages/{id}/attachments/createUploadSession",
            post(drafts::create_upload_session),
        )
        .route(
            "/v1.0/users/{user}/mailFolders/{folder}/messages",
            get(drafts::list_folder_messages),
        )
        .route(
            "/v1.0/admin/exchange/tracing/messageTraces",
            get(trace::routes::list),
        )
        .route(
            "/v1.0/admin/exchange/tracing/messageTraces/{id}/{action}",
            get(trace::routes::details),
        )
        .route("/v1.0/me/{action}", post(me))
        .route_layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            permissions::enforce,
        ))
        .merge(admin::routes())
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            outlive_clients,
        ))
        .with_state(state)
}

/// With [`SimState::outlive_clients`] set, serves the request in a task of its own, so a client
/// that goes away (a timeout, a process that exits) does not end it: it keeps its concurrency
/// slot and delivers as Exchange does, which does not see the client leave. Otherwise the
/// handler future is dropped with the connection (axum's default).
async fn outlive_clients(
    axum::extract::State(state): axum::extract::State<Arc<SimState>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if !state
        .outlive_clients
        .load(std::sync::atomic::Ordering::Relaxed)
    {
        return next.run(request).await;
    }
    match tokio::spawn(next.run(request)).await {
        Ok(response) => response,
        Err(_) => axum::response::IntoResponse::into_response(StatusCode::INTERNAL_SERVER_ERROR),
    }
}

/// The upload URLs' own origin: `PUT /_upload/{token}` and nothing else.
pub(crate) fn upload_router(state: Arc<SimState>) -> Router {
    Router::new()
        .route("/_upload/{token}", put(drafts::upload_chunk))
        .fallback(not_found)
        .with_state(state)
}

async fn me(Call { state, headers }: Call, Path(_action): Path<String>) -> Response {
    GraphError::new(
        StatusCode::BAD_REQUEST,
        "BadRequest",
        "/me request is only valid with delegated authentication flow.",
    )
    .into_response(&RequestIds::new(&headers), state.now())
}

async fn not_found(Call { state, headers }: Call, uri: Uri) -> Response {
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
