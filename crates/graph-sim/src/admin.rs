//! graph-sim's admin API under `/_sim/`:
//! - `GET /_sim/messages`, `GET /_sim/stats`, `GET /_sim/refusals` — what was recorded
//!   ([`super::records`]);
//! - `POST /_sim/script` `{"mailbox"?: "…", "answers": [ScriptedAnswer…]}`,
//!   `POST /_sim/latency` `{"mailbox"?: "…", "latency": "none" | {"fixed": ms} | {"uniform": [min, max]}}`,
//!   `POST /_sim/token-faults` `{"faults": [TokenFault…]}`, `POST /_sim/reset` — fault injection
//!   ([`super::faults`]); no `mailbox` means global. Answers `204`, or `400 {"error": "…"}`.

use std::sync::Arc;

use axum::{
    Json, Router,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde::{Deserialize, de::DeserializeOwned};

use super::{
    SimError,
    faults::{Latency, ScriptedAnswer, Target, TokenFault},
    records::{RecordedMessage, RecordedRefusal, SimStats},
    state::SimState,
};

/// Every admin route, by path.
pub(crate) fn routes() -> Router<Arc<SimState>> {
    [
        ("/_sim/messages", get(messages)),
        ("/_sim/stats", get(stats)),
        ("/_sim/refusals", get(refusals)),
        ("/_sim/script", post(apply::<ScriptRequest>)),
        ("/_sim/latency", post(apply::<LatencyRequest>)),
        ("/_sim/token-faults", post(apply::<TokenFaultsRequest>)),
        ("/_sim/reset", post(reset)),
    ]
    .into_iter()
    .fold(Router::new(), |router, (path, route)| {
        router.route(path, route)
    })
}

async fn messages(State(state): State<Arc<SimState>>) -> Json<Vec<RecordedMessage>> {
    Json(state.messages())
}

async fn refusals(State(state): State<Arc<SimState>>) -> Json<Vec<RecordedRefusal>> {
    Json(state.refusals())
}

async fn stats(State(state): State<Arc<SimState>>) -> Json<SimStats> {
    Json(state.stats())
}

async fn reset(State(state): State<Arc<SimState>>) -> Response {
    state.reset();
    StatusCode::NO_CONTENT.into_response()
}

/// A fault-injection request: applied to the state as it says.
trait AdminRequest: DeserializeOwned {
    fn apply(self, state: &SimState) -> Result<(), SimError>;
}

/// `POST` of an [`AdminRequest`]: `204`, or `400 {"error": "…"}`.
async fn apply<R: AdminRequest>(
    State(state): State<Arc<SimState>>,
    Json(req): Json<R>,
) -> Response {
    match req.apply(&state) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => (
            StatusCode::BAD_REQUEST,
            Json(serde_json::json!({ "error": e.to_string() })),
        )
            .into_response(),
    }
}

fn target_of(mailbox: Option<String>) -> Target {
    mailbox.map_or(Target::Global, Target::Mailbox)
}

/// A fault-injection request aimed at one mailbox or, without `mailbox`, at all:
/// `{"mailbox"?: "…", "<field>": …}`, applied by the [`SimState`] method named.
macro_rules! targeted_request {
    ($name:ident { $field:ident: $ty:ty } => $method:ident) => {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct $name {
            mailbox: Option<String>,
            $field: $ty,
        }

        impl AdminRequest for $name {
            fn apply(self, state: &SimState) -> Result<(), SimError> {
                state.$method(&target_of(self.mailbox), self.$field)
            }
        }
    };
}

targeted_request!(ScriptRequest { answers: Vec<ScriptedAnswer> } => push_script);
targeted_request!(LatencyRequest { latency: Latency } => set_latency);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenFaultsRequest {
    faults: Vec<TokenFault>,
}

impl AdminRequest for TokenFaultsRequest {
    fn apply(self, state: &SimState) -> Result<(), SimError> {
        state.push_token_faults(self.faults)
    }
}
