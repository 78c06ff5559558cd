//! What starts an in-process daemon ([`Options`]) and what it hands back ([`Handle`]).

use std::{net::SocketAddr, sync::Arc};

use crate::{clock::Clock, mailer::factory::SecretEnv, ops::Metrics};

/// What an in-process daemon may be given instead of the defaults (tests, the benchmarks).
#[derive(Clone, Default)]
pub struct Options {
    /// The clock (default: the system's).
    pub clock: Option<Arc<dyn Clock>>,
    /// How `env:` secrets are looked up (default: the process environment).
    pub secret_env: Option<SecretEnv>,
}

/// The handle of a daemon started by [`start`].
#[derive(Debug, Clone)]
pub struct Handle {
    /// Where `/metrics`, `/healthz`, `/readyz` answer (`None` with `METRICS_LISTEN=off`).
    pub ops_addr: Option<SocketAddr>,
    /// Where the HTTP ingest answers (`None` with `INGEST_LISTEN=off`).
    pub ingest_addr: Option<SocketAddr>,
    /// Its metrics.
    pub metrics: Arc<Metrics>,
    pub(super) stop: tokio::sync::watch::Sender<bool>,
}

impl Handle {
    /// Asks the daemon to stop, as SIGTERM does; its run future then completes.
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }
}
