//! graph-sim's axum router and the admin API under `/_sim/`; the state they share is
//! [`super::state`].
//!
//! Routes:
//! - `POST /{tenant}/oauth2/v2.0/token` — Entra ID client credentials ([`super::auth`]);
//! - `POST /v1.0/users/{id | userPrincipalName}/sendMail` — Graph sendMail ([`super::send`]);
//! - drafts, `send`, `GET` by id, `$filter` look-ups and upload sessions ([`super::drafts`]);
//! - `GET /_sim/messages`, `GET /_sim/stats`, `GET /_sim/refusals` — what was recorded
//!   ([`super::records`]);
//! - `POST /_sim/script` `{"mailbox"?: "…", "answers": [ScriptedAnswer…]}`,
//!   `POST /_sim/latency` `{"mailbox"?: "…", "latency": "none" | {"fixed": ms} | {"uniform": [min, max]}}`,
//!   `POST /_sim/token-faults` `{"faults": [TokenFault…]}`, `POST /_sim/reset` — fault injection
//!   ([`super::faults`]); no `mailbox` means global. Answers `204`, or `400 {"error": "…"}`.
//!
//! Every other path gets Graph's `400 BadRequest` "Resource not found for the segment …".

use std::sync::Arc;

use axum::{
    Json, Router,
    extract::{Path, State},
    http::{HeaderMap, StatusCode, Uri},
    response::{IntoResponse, Response},
    routing::{get, post, put},
};
use serde::Deserialize;

use super::{
    SimError, auth, drafts,
    faults::{Latency, ScriptedAnswer, Target, TokenFault},
    records::{RecordedMessage, RecordedRefusal, SimStats},
    send,
    state::SimState,
    wire::{GraphError, RequestIds},
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
        .route("/v1.0/users/{user}/messages/{id}", get(drafts::get_message))
        .route(
            "/v1.0/users/{user}/messages/{id}/{action}",
            post(drafts::draft_action),
        )
        .route(
            "/v1.0/users/{user}/messages/{id}/attachments/createUploadSession",
            post(drafts::create_upload_session),
        )
        .route(
            "/v1.0/users/{user}/mailFolders/{folder}/messages",
            get(drafts::list_folder_messages),
        )
        .route("/_upload/{token}", put(drafts::upload_chunk))
        .route("/v1.0/me/{action}", post(me))
        .route("/_sim/messages", get(admin_messages))
        .route("/_sim/stats", get(admin_stats))
        .route("/_sim/refusals", get(admin_refusals))
        .route("/_sim/script", post(admin_script))
        .route("/_sim/latency", post(admin_latency))
        .route("/_sim/token-faults", post(admin_token_faults))
        .route("/_sim/reset", post(admin_reset))
        .fallback(not_found)
        .with_state(state)
}

async fn me(
    State(state): State<Arc<SimState>>,
    Path(_action): Path<String>,
    headers: HeaderMap,
) -> Response {
    GraphError::new(
        StatusCode::BAD_REQUEST,
        "BadRequest",
        "/me request is only valid with delegated authentication flow.",
    )
    .into_response(&RequestIds::new(&headers), state.now())
}

async fn not_found(State(state): State<Arc<SimState>>, uri: Uri, headers: HeaderMap) -> Response {
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

async fn admin_messages(State(state): State<Arc<SimState>>) -> Json<Vec<RecordedMessage>> {
    Json(state.messages())
}

async fn admin_refusals(State(state): State<Arc<SimState>>) -> Json<Vec<RecordedRefusal>> {
    Json(state.refusals())
}

async fn admin_stats(State(state): State<Arc<SimState>>) -> Json<SimStats> {
    Json(state.stats())
}

fn target_of(mailbox: Option<String>) -> Target {
    mailbox.map_or(Target::Global, Target::Mailbox)
}

fn admin_answer(result: Result<(), SimError>) -> Response {
    match result {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => (
            StatusCode::BAD_REQUEST,
            Json(serde_json::json!({ "error": e.to_string() })),
        )
            .into_response(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptRequest {
    #[serde(default)]
    mailbox: Option<String>,
    answers: Vec<ScriptedAnswer>,
}

async fn admin_script(
    State(state): State<Arc<SimState>>,
    Json(req): Json<ScriptRequest>,
) -> Response {
    admin_answer(state.push_script(&target_of(req.mailbox), req.answers))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LatencyRequest {
    #[serde(default)]
    mailbox: Option<String>,
    latency: Latency,
}

async fn admin_latency(
    State(state): State<Arc<SimState>>,
    Json(req): Json<LatencyRequest>,
) -> Response {
    admin_answer(state.set_latency(&target_of(req.mailbox), req.latency))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenFaultsRequest {
    faults: Vec<TokenFault>,
}

async fn admin_token_faults(
    State(state): State<Arc<SimState>>,
    Json(req): Json<TokenFaultsRequest>,
) -> Response {
    admin_answer(state.push_token_faults(req.faults))
}

async fn admin_reset(State(state): State<Arc<SimState>>) -> Response {
    state.reset();
    StatusCode::NO_CONTENT.into_response()
}
