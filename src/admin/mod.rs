//! The admin UI (`mail-worker admin`, on `ADMIN_LISTEN`): server-rendered pages over the same
//! code as the operators' commands — [`crate::reports`] (`mailbox usage`, `campaign status`), [`crate::store::admin`]
//! (`messages retry|cancel`), [`crate::store::senders::set_limits`] (`mailbox set-limits`),
//! [`crate::intake::dead`] (`queue stats|dead|retry|discard`).
//!
//! It reads PostgreSQL, the limiter's Redis and the intake queue's Redis and keeps no state of its own (sessions are
//! signed cookies, [`auth`]), so it runs beside any number of `mail-worker run` replicas: a
//! limit changed here is in `system_mailboxes`, which every replica reads per message.
//!
//! - [`auth`]: the token, the session cookie, CSRF, the failed-login limit;
//! - [`pages`]: the routes and their templates (`templates/admin/`).

pub mod auth;
pub mod pages;

use std::{net::SocketAddr, sync::Arc};

use axum::{
    http::StatusCode,
    response::{Html, IntoResponse, Response},
};
use sqlx::PgPool;
use tokio::net::TcpListener;

use crate::{config::Config, log_events, reports::ReportError, store::StoreError};
pub use auth::AdminToken;

/// What can go wrong in the admin layer.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// No system mailbox or tenant sends from this address.
    #[error("no system mailbox or tenant sender {0} (see `mail-worker senders import`)")]
    NoSuchSender(String),
    /// A page about something that does not exist (a campaign no row names).
    #[error("no {0}")]
    NotFound(String),
    /// A form value that cannot be used; the text names the field.
    #[error("{0}")]
    BadInput(String),
    /// A POST without the session's CSRF token.
    #[error("missing or wrong CSRF token: reload the page and try again")]
    Csrf,
    /// PostgreSQL.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A report the commands share ([`crate::reports`]).
    #[error(transparent)]
    Report(#[from] ReportError),
    /// The intake queue's Redis.
    #[error(transparent)]
    Intake(#[from] crate::intake::IntakeError),
    /// `senders verify` could not run (the checks' own failures are lines of its report).
    #[error(transparent)]
    Verify(#[from] crate::service::verify::VerifyError),
    /// A template failed to render (a bug).
    #[error("rendering the page: {0}")]
    Template(#[from] askama::Error),
}

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        let code = match &self {
            Self::NoSuchSender(_) | Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::BadInput(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Csrf => StatusCode::FORBIDDEN,
            Self::Store(StoreError::NotFound(_))
            | Self::Report(
                ReportError::NoSuchSender(_) | ReportError::Store(StoreError::NotFound(_)),
            ) => StatusCode::NOT_FOUND,
            Self::Report(ReportError::BadInput(_) | ReportError::Store(StoreError::Invalid(_))) => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            Self::Store(StoreError::Invalid(_)) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Intake(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Verify(
                crate::service::verify::VerifyError::UnknownSenders(_)
                | crate::service::verify::VerifyError::BadAddress(_),
            ) => StatusCode::NOT_FOUND,
            Self::Store(_) | Self::Report(_) | Self::Template(_) | Self::Verify(_) => {
                StatusCode::INTERNAL_SERVER_ERROR
            }
        };
        if code.is_server_error() {
            tracing::error!(error = %self, "admin request failed");
        }
        let text = html_escape(&self.to_string());
        (
            code,
            Html(format!(
                "<!doctype html><title>{code}</title><link rel=\"stylesheet\" href=\"/assets/admin.css\">\
                 <main><h1>{code}</h1><p class=\"error\">{text}</p><p><a href=\"/mailboxes\">Mailboxes</a></p></main>"
            )),
        )
            .into_response()
    }
}

fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// What the pages share.
#[derive(Debug, Clone)]
pub struct AdminState {
    /// The effective configuration (limits' defaults, the limiter's Redis).
    pub config: Arc<Config>,
    /// PostgreSQL.
    pub pool: PgPool,
    /// `ADMIN_TOKEN`.
    pub token: Arc<AdminToken>,
    /// Failed logins per client.
    pub throttle: Arc<auth::LoginThrottle>,
}

impl AdminState {
    /// The state for `config` on `pool` with `token` (see [`AdminToken::resolve`]).
    pub fn new(config: Config, pool: PgPool, token: AdminToken) -> Self {
        Self {
            config: Arc::new(config),
            pool,
            token: Arc::new(token),
            throttle: Arc::default(),
        }
    }
}

/// Binds `ADMIN_LISTEN`.
///
/// # Errors
/// A message naming the variable and the address.
pub(crate) async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("ADMIN_LISTEN ({addr}): {e}"))
}

/// Serves the UI on `listener` until `stop` completes.
///
/// # Errors
/// The listener's I/O error.
pub async fn serve(
    listener: TcpListener,
    state: AdminState,
    stop: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(
        listener,
        pages::router(state).into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(stop)
    .await
}

/// `mail-worker admin`: checks `ADMIN_TOKEN`, opens the (migrated) database, serves the UI on
/// `ADMIN_LISTEN` until SIGTERM/SIGINT.
///
/// # Errors
/// `ADMIN_LISTEN=off`, a bad `ADMIN_TOKEN`, an unreachable database, a port in use.
pub(crate) async fn run(config: Config) -> anyhow::Result<std::process::ExitCode> {
    let Some(addr) = config.admin.listen else {
        let default =
            crate::config::settings::find("ADMIN_LISTEN").map_or("", |s| s.default_text());
        anyhow::bail!("ADMIN_LISTEN is off: set it to host:port (default {default})");
    };
    let token = AdminToken::resolve(config.admin.token.as_ref())?;
    let listener = bind(addr).await?;
    let pool = crate::store::open(&config.database_url, 4).await?;
    let state = AdminState::new(config, pool, token);
    tracing::info!(
        event = log_events::MAIL_ADMIN_STARTED,
        listen = %listener.local_addr().unwrap_or(addr),
        cookie_secure = state.config.admin.cookie_secure,
        "admin UI listening"
    );
    serve(listener, state, crate::shutdown::shutdown_signal()).await?;
    Ok(std::process::ExitCode::SUCCESS)
}
