//! Where the limiter reports: [`DecisionMetrics`].

use std::time::Duration;

/// Where the limiter reports each decision; `ops::Metrics` counts them
/// (`mail_worker_rate_limit_decisions_total`, `mail_worker_rate_limit_seconds`). A trait so the
/// limiter does not import the metrics registry that imports it for the health check.
pub(crate) trait DecisionMetrics: Send + Sync {
    /// One decision: `allowed`, a [`DenyReason`](crate::rate_limit::DenyReason)'s name, or `fail_open`,
    /// and how long it took.
    fn rate_limit_decision(&self, decision: &'static str, took: Duration);

    /// An adaptive rule fired (`mail_worker_adaptive_actions_total{rule,scope}`).
    fn adaptive_fired(&self, _rule: &str, _scope: &'static str) {}

    /// The factor (‰) an action holds now (`mail_worker_adaptive_factor{rule,scope}`).
    fn adaptive_factor(&self, _rule: &str, _scope: &'static str, _permille: u16) {}
}
