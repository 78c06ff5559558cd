//! The HTTP ingest (`INGEST_LISTEN`, docs/ingest.md, docs/decisions/0039-http-ingest.md): a
//! listener of its own beside the intake queue, for producers that cannot reach Redis.
//! `POST /v1/messages` takes a JSON array or JSONL of campaign lines from a producer with a
//! bearer token ([`tokens`]), judges them as the file import and the queue do and stores them
//! in one transaction with the request's row ([`request`]); `GET /v1/openapi.json` is its
//! OpenAPI 3.1 description (`docs/ingest-openapi.json`, served as committed). Plain HTTP:
//! TLS is the ingress's.

mod answer;
mod body;
mod key;
mod request;
pub mod tokens;
mod told;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::{
    Router,
    http::header,
    routing::{get, post},
};
use sqlx::PgPool;
use tokio::net::TcpListener;

pub use request::REPLAYED;
pub use tokens::Producers;

use crate::{config::IngestConfig, log_events, ops::Metrics, store::events::Outbox};

/// How long one request's PostgreSQL work may take before it is answered 503 (and rolled
/// back): 10 s.
pub const STORE_DEADLINE: Duration = Duration::from_secs(10);

/// The OpenAPI 3.1 description served at `/v1/openapi.json`.
pub const OPENAPI: &str = include_str!("../../docs/ingest-openapi.json");

/// How often a listener deletes `ingest_requests` rows past the 24 h window.
const FORGET_EVERY: Duration = Duration::from_secs(600);

/// Failures of the ingest layer at start-up.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// A token that cannot be used (names the variable and the token, never a secret).
    #[error("{0}")]
    Tokens(String),
    /// The listener's address.
    #[error("INGEST_LISTEN ({addr}): {error}")]
    Bind {
        /// `INGEST_LISTEN`.
        addr: SocketAddr,
        /// The bind error.
        error: std::io::Error,
    },
}

/// What the listener runs with.
#[derive(Debug, Clone)]
pub struct IngestSettings {
    /// Who may post.
    pub producers: Arc<Producers>,
    /// `INGEST_MAX_BODY_BYTES`.
    pub max_body_bytes: usize,
    /// `INGEST_MAX_LINES`.
    pub max_lines: usize,
    /// Whether stored rows write their `accepted` events (`EVENTS_WEBHOOK_URL`).
    pub outbox: Outbox,
    /// The `Retry-After` of a 503.
    pub retry_after: Duration,
}

impl IngestSettings {
    /// The settings of `config` (tokens resolved now), writing events as `outbox` says.
    ///
    /// # Errors
    /// [`IngestError::Tokens`].
    pub fn from_config(config: &IngestConfig, outbox: Outbox) -> Result<Self, IngestError> {
        Ok(Self {
            producers: Arc::new(Producers::load(config)?),
            max_body_bytes: config.max_body_bytes.get() as usize,
            max_lines: config.max_lines.get() as usize,
            outbox,
            retry_after: Duration::from_secs(5),
        })
    }
}

/// The listener (bound now) and settings of `config`; `None` with `INGEST_LISTEN=off`.
///
/// # Errors
/// A token that cannot be used, an address that cannot be bound.
pub async fn prepare(
    config: &crate::config::Config,
) -> Result<Option<(TcpListener, IngestSettings)>, IngestError> {
    let Some(addr) = config.ingest.listen else {
        return Ok(None);
    };
    let settings = IngestSettings::from_config(&config.ingest, config.events.outbox())?;
    Ok(Some((bind(addr).await?, settings)))
}

/// What a request reads.
#[derive(Debug, Clone)]
pub(crate) struct IngestState {
    pub pool: PgPool,
    pub settings: IngestSettings,
    pub metrics: Arc<Metrics>,
}

/// Binds `INGEST_LISTEN`.
///
/// # Errors
/// [`IngestError::Bind`] naming the variable.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, IngestError> {
    TcpListener::bind(addr)
        .await
        .map_err(|error| IngestError::Bind { addr, error })
}

/// The listener's routes.
pub fn router(pool: PgPool, settings: IngestSettings, metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/v1/messages", post(request::post_messages))
        .route(
            "/v1/openapi.json",
            get(|| async { ([(header::CONTENT_TYPE, "application/json")], OPENAPI) }),
        )
        .with_state(IngestState {
            pool,
            settings,
            metrics,
        })
}

/// Serves the ingest on `listener` until `stop` completes, deleting the rows past the 24 h
/// window meanwhile.
///
/// # Errors
/// The server's I/O error.
pub async fn serve(
    listener: TcpListener,
    pool: PgPool,
    settings: IngestSettings,
    metrics: Arc<Metrics>,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let forget = tokio::spawn(forget_loop(pool.clone()));
    tracing::info!(
        event = log_events::INGEST_REQUEST,
        addr = %listener.local_addr()?,
        producers = settings.producers.len(),
        "the HTTP ingest listens (POST /v1/messages)"
    );
    let served = axum::serve(listener, router(pool, settings, metrics))
        .with_graceful_shutdown(stop)
        .await;
    forget.abort();
    served
}

async fn forget_loop(pool: PgPool) {
    let mut every = tokio::time::interval(FORGET_EVERY);
    loop {
        every.tick().await;
        if let Err(e) = crate::store::ingest::forget_old(&pool).await {
            tracing::debug!(error = %e, "deleting old ingest requests failed; tried again later");
        }
    }
}
