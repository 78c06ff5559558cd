//! The delivery reconciler (`GRAPH_TRACE_DELIVERY`, the senders file's `traceDelivery`): Graph's
//! `202` says nothing of delivery; Exchange's message trace (Graph v1.0) tells each recipient's
//! fate. Every replica runs [`DeliveryReconciler::run`]: every `GRAPH_TRACE_INTERVAL` it groups
//! the traced senders by Graph tenant and reads the tenants whose read it takes
//! ([`crate::store::trace_reads`]: one replica per tenant at a time). A read (`read.rs`) asks
//! nothing while no `SENT` message is older than the trace's lag (`GRAPH_TRACE_LAG`), then
//! lists the trace of the window those messages were sent in — one sender's by
//! `senderAddress`, several senders' as the whole tenant's — page by page (5,000 a page), joins
//! each record to our message by its `messageId` (our `internetMessageId`), asks the details of
//! failed recipients only, and writes each recipient's fate ([`crate::store::outcomes`]). Every
//! request is counted first in the tenant's Redis budget (90 of Exchange's 100 per rolling
//! 5 min, [`crate::rate_limit`]'s `trace_budget.rs`); a `429` cools it down. A `401` pauses the
//! tenant's reads naming the service principal to create, a `403` the permission; both are
//! probed again after `GRAPH_TRACE_PROBE`. Messages older than `GRAPH_TRACE_GIVE_UP` stay `SENT`.
//! docs/decisions/0044-delivery-trace.md.

mod read;

use std::{collections::BTreeMap, time::Duration};

use tokio_util::sync::CancellationToken;

use crate::{
    domain::Sender,
    log_events,
    replica_reader::ReplicaReader,
    store::{self, StoreError},
};
pub use read::TraceOutcome;

/// How long one tenant's read may take; also its hold in `trace_reads`.
pub const READ_DEADLINE: Duration = Duration::from_secs(240);

/// The reconciler's settings (`GRAPH_TRACE_DELIVERY`, `GRAPH_TRACE_INTERVAL`, `GRAPH_TRACE_LAG`,
/// `GRAPH_TRACE_GIVE_UP`, `GRAPH_TRACE_PROBE`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceSettings {
    /// `GRAPH_TRACE_DELIVERY`, `off` (default) or `on`: the default of senders without
    /// `traceDelivery`.
    pub enabled: bool,
    /// `GRAPH_TRACE_INTERVAL`, default `5m`: how often each tenant's trace is read.
    pub interval: Duration,
    /// `GRAPH_TRACE_LAG`, default `5m`: no read until a `SENT` message is this old (the trace
    /// shows a message minutes after its send).
    pub lag: Duration,
    /// `GRAPH_TRACE_GIVE_UP`, default `48h`: a message sent longer ago is no longer traced.
    pub give_up: Duration,
    /// `GRAPH_TRACE_PROBE`, default `30m`: how long a tenant paused by a `401`/`403` waits
    /// before the next try.
    pub probe: Duration,
}

impl Default for TraceSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            interval: Duration::from_secs(300),
            lag: Duration::from_secs(300),
            give_up: Duration::from_secs(48 * 3600),
            probe: Duration::from_secs(1800),
        }
    }
}

/// Reads the message trace of the traced senders' tenants. One per replica.
pub type DeliveryReconciler = ReplicaReader<TraceSettings>;

impl DeliveryReconciler {
    /// Rounds every interval until `stop`.
    pub(crate) async fn run(self, stop: CancellationToken) {
        self.rounds(self.settings.interval, stop, Self::round, |e| {
            tracing::warn!(
                event = log_events::MAIL_TRACE_READ_FAILED,
                tenant = "",
                error = %e,
                "could not list the senders whose delivery is traced; the next interval tries again"
            );
        })
        .await;
    }

    /// One round: every traced tenant whose read this replica takes. Returns what each read
    /// did, by Graph tenant.
    ///
    /// # Errors
    /// PostgreSQL failed listing the senders or taking a read.
    pub async fn round(&self) -> Result<Vec<(String, TraceOutcome)>, StoreError> {
        let mut tenants: BTreeMap<String, Vec<Sender>> = BTreeMap::new();
        for sender in store::trace_reads::tracers(&self.pool, self.settings.enabled).await? {
            if let Some(graph) = sender.graph() {
                tenants
                    .entry(graph.graph_tenant_id.to_lowercase())
                    .or_default()
                    .push(sender);
            }
        }
        let mut done = Vec::new();
        for (tenant, senders) in tenants {
            if !store::trace_reads::take(&self.pool, &tenant, &self.reader, READ_DEADLINE).await? {
                continue;
            }
            let outcome =
                match tokio::time::timeout(READ_DEADLINE, self.read(&tenant, &senders)).await {
                    Ok(outcome) => outcome,
                    Err(_) => TraceOutcome {
                        error: Some("deadline".to_owned()),
                        ..TraceOutcome::default()
                    },
                };
            let next = if outcome.paused.is_some() {
                self.settings.probe
            } else {
                self.settings.interval
            };
            store::trace_reads::done(
                &self.pool,
                &tenant,
                &self.reader,
                next,
                outcome.paused.as_deref(),
            )
            .await?;
            done.push((tenant, outcome));
        }
        Ok(done)
    }
}
