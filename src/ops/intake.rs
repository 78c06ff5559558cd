//! The intake queue's metrics (registered by [`super::Metrics::new`], counted by
//! [`crate::intake`]):
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `mail_worker_intake_jobs_total` | counter | `outcome` (`inserted`, `duplicate`, `dead`) |
//! | `mail_worker_intake_queue_depth` | gauge | — (jobs waiting: active + scheduled retries) |
//! | `mail_worker_intake_dead` | gauge | — (dead-lettered jobs kept for `mail-worker queue dead`) |
//! | `mail_worker_intake_oldest_job_seconds` | gauge | — (age of the oldest waiting job) |

use std::sync::atomic::AtomicI64;

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

/// `outcome` of `mail_worker_intake_jobs_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntakeOutcome {
    /// A new row was committed.
    Inserted,
    /// Its id was stored already (a redelivery, or a message both queued and imported).
    Duplicate,
    /// Dead-lettered: the line is not a message (the reason the file import gives).
    Dead,
}

impl IntakeOutcome {
    /// The label value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Inserted => "inserted",
            Self::Duplicate => "duplicate",
            Self::Dead => "dead",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// The queue's gauges, as [`crate::intake`] reads them from Redis.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueGauges {
    /// Jobs waiting (active list + scheduled retries).
    pub depth: i64,
    /// Dead-lettered jobs.
    pub dead: i64,
    /// Age of the oldest waiting job, seconds (0 when none).
    pub oldest_seconds: i64,
}

/// The intake's metric handles.
#[derive(Debug, Clone, Default)]
pub(crate) struct IntakeMetrics {
    jobs: Family<OutcomeLabels, Counter>,
    depth: Gauge<i64, AtomicI64>,
    dead: Gauge<i64, AtomicI64>,
    oldest: Gauge<i64, AtomicI64>,
}

impl IntakeMetrics {
    /// Registers every intake metric in `registry`.
    pub(crate) fn register(registry: &mut Registry) -> Self {
        let me = Self::default();
        registry.register(
            "mail_worker_intake_jobs",
            "Intake queue jobs by outcome (inserted, duplicate, dead)",
            me.jobs.clone(),
        );
        registry.register(
            "mail_worker_intake_queue_depth",
            "Intake jobs waiting in Redis (active + retries)",
            me.depth.clone(),
        );
        registry.register(
            "mail_worker_intake_dead",
            "Dead-lettered intake jobs",
            me.dead.clone(),
        );
        registry.register(
            "mail_worker_intake_oldest_job_seconds",
            "Age of the oldest waiting intake job, seconds",
            me.oldest.clone(),
        );
        me
    }

    /// Counts `n` jobs of `outcome`.
    pub(crate) fn jobs(&self, outcome: IntakeOutcome, n: u64) {
        if n > 0 {
            self.jobs
                .get_or_create(&OutcomeLabels {
                    outcome: outcome.as_str(),
                })
                .inc_by(n);
        }
    }

    /// Sets the gauges.
    pub(crate) fn set(&self, gauges: QueueGauges) {
        self.depth.set(gauges.depth);
        self.dead.set(gauges.dead);
        self.oldest.set(gauges.oldest_seconds);
    }
}
