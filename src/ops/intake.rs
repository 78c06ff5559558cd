//! The intake queue's metrics (in [`super::Metrics`]'s table, counted by
//! [`crate::intake`]):
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `mail_worker_intake_jobs_total` | counter | `outcome` (`inserted`, `duplicate`, `dead`) |
//! | `mail_worker_intake_queue_depth` | gauge | — (jobs waiting: active + scheduled retries) |
//! | `mail_worker_intake_dead` | gauge | — (dead-lettered jobs kept for `mail-worker queue dead`) |
//! | `mail_worker_intake_oldest_job_seconds` | gauge | — (age of the oldest waiting job) |

use prometheus_client::encoding::EncodeLabelSet;

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
pub(super) struct OutcomeLabels {
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

impl super::Metrics {
    /// Counts `n` intake jobs of `outcome`.
    pub(crate) fn intake_jobs(&self, outcome: IntakeOutcome, n: u64) {
        if n > 0 {
            self.intake_jobs
                .get_or_create(&OutcomeLabels {
                    outcome: outcome.as_str(),
                })
                .inc_by(n);
        }
    }

    /// Sets the intake queue's gauges.
    pub(crate) fn set_intake(&self, gauges: QueueGauges) {
        self.intake_depth.set(gauges.depth);
        self.intake_dead.set(gauges.dead);
        self.intake_oldest.set(gauges.oldest_seconds);
    }
}
