//! The daemon's own HTTP listener (`METRICS_LISTEN`): `GET /metrics` (Prometheus text,
//! [`metrics`]), `GET /healthz` (liveness) and `GET /readyz` (readiness, [`health`]).

pub mod events;
pub(crate) mod health;
pub mod ingest;
pub mod intake;
pub mod metrics;

use std::{net::SocketAddr, sync::Arc};

use axum::{
    Json, Router,
    extract::State,
    http::{StatusCode, header},
    response::IntoResponse,
    routing::get,
};
use tokio::net::TcpListener;

pub(crate) use health::{Liveness, Readiness};
pub use metrics::Metrics;

/// What the endpoints read.
#[derive(Debug, Clone)]
pub(crate) struct OpsState {
    /// The daemon's metrics.
    pub metrics: Arc<Metrics>,
    /// The loops' heartbeats.
    pub liveness: Arc<Liveness>,
    /// The dependencies' checks.
    pub readiness: Arc<Readiness>,
}

/// Binds `METRICS_LISTEN`.
///
/// # Errors
/// A message naming the variable and the address (`METRICS_LISTEN (0.0.0.0:9184): Address
/// already in use`).
pub(crate) async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("METRICS_LISTEN ({addr}): {e}"))
}

/// The router of the three endpoints.
pub(crate) fn router(state: OpsState) -> Router {
    Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
}

/// Serves [`router`] on `listener` until `stop` completes.
pub(crate) async fn serve(
    listener: TcpListener,
    state: OpsState,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(stop)
        .await
}

async fn metrics_text(State(state): State<OpsState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
}

async fn healthz(State(state): State<OpsState>) -> impl IntoResponse {
    let dead = state.liveness.dead();
    let body = serde_json::json!({
        "alive": dead.is_empty(),
        "loops": state.liveness.loops(),
        "dead": dead,
    });
    let code = if dead.is_empty() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(body))
}

async fn readyz(State(state): State<OpsState>) -> impl IntoResponse {
    let report = state.readiness.check().await;
    let code = if report.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(report))
}

/// The address a bound listener got (port 0 → the real port).
pub(crate) fn local_addr(listener: &TcpListener) -> Option<SocketAddr> {
    listener.local_addr().ok()
}
