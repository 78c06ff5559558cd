//! graph-sim: a Microsoft Graph stand-in that speaks Graph's wire format and enforces Exchange's
//! limits, for tests, the demo and capacity planning. Runs as the `graph-sim` binary or in
//! process ([`GraphSim::start`]).
//!
//! It is an oracle, not a mirror: it depends on no crate of this workspace (its own [`clock`],
//! address parsing and certificate thumbprint), so a bug in the product's code is not shared by
//! the stand-in that should catch it; each rule cites Microsoft (docs/graph-sim.md).
//!
//! It serves Entra ID's client-credentials token endpoint ([`auth`]) and Graph's `sendMail`
//! ([`send`]), the Inbox with the non-delivery reports it generates (`inbox`: listing, `PATCH`,
//! `move`), validates bodies as Graph does ([`validate`]), enforces per-mailbox limits with
//! Microsoft's defaults over rolling windows on an injectable clock ([`limits`]), injects faults
//! ([`faults`]) and records what it accepted ([`records`]). Sources of the behaviour and numbers:
//! - sendMail: <https://learn.microsoft.com/graph/api/user-sendmail>;
//! - error shape: <https://learn.microsoft.com/graph/errors>;
//! - Outlook service limits (4 concurrent requests, 10,000 requests per 10 minutes, per app and
//!   mailbox): <https://learn.microsoft.com/graph/throttling-limits#outlook-service-limits>;
//! - Exchange Online sending limits (30 messages a minute, 10,000 recipients a day, 500
//!   recipients a message):
//!   <https://learn.microsoft.com/office365/servicedescriptions/exchange-online-service-description/exchange-online-limits#sending-limits>;
//! - token errors: <https://learn.microsoft.com/entra/identity-platform/reference-error-codes>.
//!
//! ```no_run
//! # async fn demo() -> Result<(), graph_sim::SimError> {
//! use graph_sim::{GraphSim, ScriptedAnswer, SimConfig, SimMailbox, Target};
//! let sim = GraphSim::start(
//!     SimConfig::new()
//!         .with_app("contoso.example", "app-1", "s3cret")
//!         .with_mailbox(SimMailbox::new("events@contoso.example", "contoso.example")),
//! )
//! .await?;
//! // Point the worker at sim.graph_base_url() / sim.login_base_url(); then:
//! sim.push_script(Target::Global, [ScriptedAnswer::throttled("2.128")])?;
//! println!("{}", serde_json::to_string(&sim.stats()).unwrap_or_default());
//! sim.shutdown().await?;
//! # Ok(()) }
//! ```

pub mod address;
mod admin;
pub mod auth;
mod call;
pub mod clock;
pub mod config;
pub mod drafts;
pub mod events;
pub mod faults;
mod inbox;
pub use inbox::SimInboxItem;
pub mod limits;
mod message;
mod ndr;
mod permissions;
pub mod recording;
pub mod records;
pub mod send;
pub mod sendgrid;
mod server;
mod state;
pub mod trace;
mod trace_log;
pub mod validate;
mod wire;

use std::{
    net::{Ipv4Addr, SocketAddr},
    sync::Arc,
};

use tokio::{sync::oneshot, task::JoinHandle};
use url::Url;
use uuid::Uuid;

pub use auth::GRAPH_DEFAULT_SCOPE;
pub use config::{
    CONFIG_FILE_HELP, DEFAULT_MAX_REQUEST_BYTES, DEFAULT_ROLES, DEFAULT_TOKEN_LIFETIME_S,
    MailboxLimits, MinuteOverflow, NdrLayout, NewTenant, QuotaExceeded, SentInTransit, SimApp,
    SimBounces, SimConfig, SimMailbox, SimTenant, SimTrace, TraceRule, UnknownRecipients,
};
pub use faults::{Latency, ScriptedAnswer, Target, TokenFault};
pub use records::{
    MailboxStats, RecordedAttachment, RecordedHeader, RecordedMessage, RecordedRefusal,
    RefusalCause, RefusedCounts, SimDraft, SimStats,
};
pub use trace::{MESSAGE_TRACE_APP_ID, TraceRecord, TraceStats};

use state::SimState;

/// graph-sim's errors (configuration, listening, fault injection).
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The configuration is unusable; the message names the field.
    #[error("graph-sim config: {0}")]
    Config(String),
    /// The config file could not be read.
    #[error("cannot read graph-sim config {path}: {source}")]
    ReadConfig {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The listen address could not be bound.
    #[error("graph-sim cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A fault named a mailbox that is not configured.
    #[error("graph-sim has no mailbox {0:?}")]
    UnknownMailbox(String),
    /// A fault that cannot be served (status out of range, bad header value, min > max).
    #[error("graph-sim: invalid fault: {0}")]
    InvalidFault(String),
    /// The HTTP server stopped with an error.
    #[error("graph-sim server failed: {0}")]
    Serve(#[source] std::io::Error),
}

/// A running graph-sim: serves in the background until [`GraphSim::shutdown`] or drop.
pub struct GraphSim {
    state: Arc<SimState>,
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl std::fmt::Debug for GraphSim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphSim")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl GraphSim {
    /// Checks `config`, binds `config.listen` (default `127.0.0.1:0`, a free port) and serves in
    /// the background on the current tokio runtime.
    ///
    /// # Errors
    /// [`SimError::Config`] for a bad configuration, [`SimError::Bind`] when the address is taken.
    pub async fn start(config: SimConfig) -> Result<Self, SimError> {
        let mailboxes = config.resolve()?;
        let listen = config
            .listen
            .unwrap_or_else(|| SocketAddr::from((Ipv4Addr::LOCALHOST, 0)));
        let bind_error = |source| SimError::Bind {
            addr: listen,
            source,
        };
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(bind_error)?;
        let addr = listener.local_addr().map_err(bind_error)?;
        // Upload URLs on an origin of their own (same host, another port), as Graph's are.
        let upload_listen = SocketAddr::new(addr.ip(), 0);
        let upload_error = |source| SimError::Bind {
            addr: upload_listen,
            source,
        };
        let upload_listener = tokio::net::TcpListener::bind(upload_listen)
            .await
            .map_err(upload_error)?;
        let upload_addr = upload_listener.local_addr().map_err(upload_error)?;
        let state = Arc::new(SimState::new(config, mailboxes, addr, upload_addr));
        let router = server::router(Arc::clone(&state));
        let upload_router = server::upload_router(Arc::clone(&state));
        let (stop, stopped) = oneshot::channel::<()>();
        let (upload_stop, upload_stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let uploads = tokio::spawn(async move {
                axum::serve(upload_listener, upload_router)
                    .with_graceful_shutdown(async move {
                        let _ = upload_stopped.await;
                    })
                    .await
            });
            let served = axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await;
            let _ = upload_stop.send(());
            let _ = uploads.await;
            served
        });
        Ok(Self {
            state,
            addr,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The origin of the upload URLs, `http://127.0.0.1:PORT2` (another port than the API's).
    pub fn upload_origin(&self) -> Url {
        Url::parse(&self.state.upload_origin)
            .unwrap_or_else(|_| unreachable!("origin is http://ip:port"))
    }

    fn origin(&self) -> Url {
        Url::parse(&self.state.origin).unwrap_or_else(|_| unreachable!("origin is http://ip:port"))
    }

    /// Graph's base URL, `http://127.0.0.1:PORT/v1.0` (for `GRAPH_API_BASE_URL`).
    pub fn graph_base_url(&self) -> Url {
        let mut url = self.origin();
        url.set_path("/v1.0");
        url
    }

    /// The login base URL, `http://127.0.0.1:PORT/` (for `GRAPH_LOGIN_BASE_URL`); tokens are at
    /// `{login}/{tenant}/oauth2/v2.0/token`.
    pub fn login_base_url(&self) -> Url {
        self.origin()
    }

    /// The token URL of `tenant`.
    pub fn token_url(&self, tenant: &str) -> Url {
        let mut url = self.origin();
        url.set_path(&format!("/{tenant}/oauth2/v2.0/token"));
        url
    }

    /// The scope a client derives from [`GraphSim::graph_base_url`]'s origin,
    /// `http://127.0.0.1:PORT/.default` (accepted beside [`GRAPH_DEFAULT_SCOPE`]).
    pub fn graph_scope(&self) -> String {
        format!("{}/.default", self.state.origin)
    }

    /// The Graph user id of `address` (case-insensitive).
    pub fn mailbox_id(&self, address: &str) -> Option<Uuid> {
        self.state
            .resolve_mailbox(address)
            .map(|i| self.state.mailboxes[i].id)
    }

    /// Every message accepted so far, oldest first.
    pub fn messages(&self) -> Vec<RecordedMessage> {
        self.state.messages()
    }

    /// Every draft created so far (`POST /users/{id}/messages`), with its send count.
    pub fn drafts(&self) -> Vec<SimDraft> {
        self.state.drafts()
    }

    /// Every item of `address`'s Inbox and the folders items were moved to (NDRs, delivered
    /// messages), oldest first; empty for an unknown mailbox.
    pub fn inbox(&self, address: &str) -> Vec<SimInboxItem> {
        self.state
            .resolve_mailbox(address)
            .map(|i| self.state.inbox_of(i))
            .unwrap_or_default()
    }

    /// Delivers an ordinary message (not an NDR) from `from` into `address`'s Inbox.
    ///
    /// # Errors
    /// [`SimError::UnknownMailbox`].
    pub fn deliver_to_inbox(
        &self,
        address: &str,
        from: &str,
        subject: &str,
        body: &str,
    ) -> Result<(), SimError> {
        let idx = self
            .state
            .resolve_mailbox(address)
            .ok_or_else(|| SimError::UnknownMailbox(address.to_owned()))?;
        self.state.deliver_note(idx, from, subject, body);
        Ok(())
    }

    /// Every throttling refusal (`429` for concurrency, request quota, day or minute) so far,
    /// oldest first.
    pub fn refusals(&self) -> Vec<RecordedRefusal> {
        self.state.refusals()
    }

    /// A snapshot of every mailbox's statistics.
    pub fn stats(&self) -> SimStats {
        self.state.stats()
    }

    /// The statistics of one mailbox (case-insensitive address).
    pub fn mailbox_stats(&self, address: &str) -> Option<MailboxStats> {
        self.stats().mailbox(address).cloned()
    }

    /// Token requests naming `client_id` so far (successful or not).
    pub fn token_requests(&self, client_id: &str) -> u64 {
        self.state
            .lock()
            .token_requests
            .get(client_id)
            .copied()
            .unwrap_or(0)
    }

    /// Grants `client_id` exactly `roles` (application permissions, admin-consented) from now
    /// on: only tokens issued after this carry them, as with Entra ID
    /// (<https://learn.microsoft.com/entra/identity-platform/access-token-claims-reference>).
    /// Returns `false` for an unknown client id.
    pub fn grant_roles<I, S>(&self, client_id: &str, roles: I) -> bool
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut inner = self.state.lock();
        match inner.roles.get_mut(client_id) {
            Some(granted) => {
                *granted = roles.into_iter().map(Into::into).collect();
                true
            }
            None => false,
        }
    }

    /// Provisions (`true`) or removes (`false`) the message-trace app's service principal in
    /// `tenant`: until it is provisioned every trace request of the tenant is answered `401`.
    pub fn set_trace_provisioned(&self, tenant: &str, provisioned: bool) {
        let tenant = tenant.to_lowercase();
        let mut inner = self.state.lock();
        if provisioned {
            inner.trace.unprovisioned.remove(&tenant);
        } else {
            inner.trace.unprovisioned.insert(tenant);
        }
    }

    /// What the message trace endpoint answered so far.
    pub fn trace_stats(&self) -> TraceStats {
        self.state.lock().trace.stats.clone()
    }

    /// Every message trace record (visible or not yet), oldest first.
    pub fn trace_records(&self) -> Vec<TraceRecord> {
        self.state.lock().trace.records.clone()
    }

    /// Adds trace records directly (the benchmark's 100,000 messages without sending them).
    pub fn insert_trace_records(&self, records: impl IntoIterator<Item = TraceRecord>) {
        self.state.lock().trace.records.extend(records);
    }

    /// Appends scripted answers for `target`'s next sendMail requests (a mailbox's own script is
    /// used before the global one).
    ///
    /// # Errors
    /// [`SimError::UnknownMailbox`], or [`SimError::InvalidFault`] for an answer that cannot be
    /// served; nothing is appended then.
    pub fn push_script(
        &self,
        target: Target,
        answers: impl IntoIterator<Item = ScriptedAnswer>,
    ) -> Result<(), SimError> {
        self.state
            .push_script(&target, answers.into_iter().collect())
    }

    /// A MailboxConcurrency storm on demand: `target`'s next `n` sendMail requests are answered
    /// `429 ApplicationThrottled` "Application is over its MailboxConcurrency limit."
    /// ([`ScriptedAnswer::mailbox_concurrency`]).
    ///
    /// # Errors
    /// As [`Self::push_script`].
    pub fn mailbox_concurrency_storm(&self, target: Target, n: usize) -> Result<(), SimError> {
        self.push_script(
            target,
            std::iter::repeat_n(ScriptedAnswer::mailbox_concurrency(), n),
        )
    }

    /// Sets the latency added to `target`'s sendMail requests ([`Latency::None`] clears it; a
    /// mailbox's own setting replaces the global one).
    ///
    /// # Errors
    /// [`SimError::UnknownMailbox`], or [`SimError::InvalidFault`] for `Uniform(min, max)` with
    /// `min > max`.
    pub fn set_latency(&self, target: Target, latency: Latency) -> Result<(), SimError> {
        self.state.set_latency(&target, latency)
    }

    /// Appends token endpoint failures, used by the next token requests (one each).
    ///
    /// # Errors
    /// [`SimError::InvalidFault`] for a status outside 400–599; nothing is appended then.
    pub fn push_token_faults(
        &self,
        faults: impl IntoIterator<Item = TokenFault>,
    ) -> Result<(), SimError> {
        self.state.push_token_faults(faults.into_iter().collect())
    }

    /// With `outlive` set, every Graph request keeps being served after its client went away
    /// (as Exchange does: it does not see a client's timeout or exit), holding its concurrency
    /// slot until it ends; by default a request ends when its client goes. Tests of what a
    /// client does to requests it gave up on set it.
    pub fn set_requests_outlive_clients(&self, outlive: bool) {
        self.state
            .outlive_clients
            .store(outlive, std::sync::atomic::Ordering::Relaxed);
    }

    /// Forgets records, windows, statistics and faults (issued tokens stay valid).
    pub fn reset(&self) {
        self.state.reset();
    }

    /// Stops accepting connections, lets in-flight requests finish, and waits for the server.
    ///
    /// # Errors
    /// [`SimError::Serve`] when the server had failed.
    pub async fn shutdown(mut self) -> Result<(), SimError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => match task.await {
                Ok(result) => result.map_err(SimError::Serve),
                Err(join) => Err(SimError::Serve(std::io::Error::other(join))),
            },
            None => Ok(()),
        }
    }
}

impl Drop for GraphSim {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

#[cfg(test)]
mod independence {
    /// graph-sim depends on no crate of this workspace: a shared helper would share its bugs
    /// with the product it checks (issue 40 point 7).
    #[test]
    fn graph_sim_depends_on_no_workspace_crate() {
        let manifest = include_str!("../Cargo.toml");
        let ours = ["mail-worker", "mail-worker-bench", "mail-worker-demo"];
        for line in manifest.lines() {
            let name = line.split(['.', '=', ' ']).next().unwrap_or_default();
            assert!(
                !ours.contains(&name),
                "graph-sim's Cargo.toml names {name}: {line}"
            );
        }
    }
}
