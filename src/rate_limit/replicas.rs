//! How many replicas are alive, as the heartbeat (`crate::daemon::heartbeat`, a row per
//! replica in PostgreSQL) last counted them: fail-open shares each mailbox's budgets among
//! max(this, `MAIL_RATE_LIMIT_FAIL_OPEN_REPLICAS`) replicas
//! (docs/decisions/0034-replicas-and-restored-bookings.md).

use std::sync::{
    Arc,
    atomic::{AtomicU32, Ordering},
};

/// The live replica count, shared by the heartbeat (writer) and the limiter (reader); 0 until
/// the first beat counted them (the configured lower bound applies alone).
#[derive(Debug, Clone, Default)]
pub struct LiveReplicas(Arc<AtomicU32>);

impl LiveReplicas {
    /// Unknown yet (0).
    pub fn new() -> Self {
        Self::default()
    }

    /// The heartbeat counted `n` live replicas (this one included).
    pub fn set(&self, n: u32) {
        self.0.store(n, Ordering::Relaxed);
    }

    /// The last count, 0 when none was made yet.
    pub fn get(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }
}
