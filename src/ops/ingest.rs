//! The HTTP ingest's metrics (in [`super::Metrics`]'s table, counted by [`crate::ingest`]):
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `mail_worker_ingest_requests_total` | counter | `status` (the HTTP status answered: `200`, `207`, `400`, `401`, `413`, `422`, `503`, …) |
//! | `mail_worker_ingest_lines_total` | counter | `outcome` (`stored`, `duplicate`, `refused`) |
//! | `mail_worker_ingest_request_seconds` | histogram | — (one request, body read to answer) |

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;

/// `outcome` of `mail_worker_ingest_lines_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IngestOutcome {
    /// A new row was committed.
    Stored,
    /// Its id was stored already.
    Duplicate,
    /// Not a message, or a sender the token may not post for.
    Refused,
}

impl IngestOutcome {
    /// The label value (also the answer's `outcome`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stored => "stored",
            Self::Duplicate => "duplicate",
            Self::Refused => "refused",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct IngestLineLabels {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct IngestStatusLabels {
    status: u16,
}

impl super::Metrics {
    /// Counts one answered request and how long it took.
    pub fn ingest_request(&self, status: u16, took: Duration) {
        self.ingest_requests
            .get_or_create(&IngestStatusLabels { status })
            .inc();
        self.ingest_seconds.observe(took.as_secs_f64());
    }

    /// Counts `n` lines of `outcome`.
    pub fn ingest_lines(&self, outcome: IngestOutcome, n: u64) {
        if n > 0 {
            self.ingest_lines
                .get_or_create(&IngestLineLabels {
                    outcome: outcome.as_str(),
                })
                .inc_by(n);
        }
    }
}
