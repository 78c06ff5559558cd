//! Where the limiter reports: [`DecisionMetrics`].

use std::time::Duration;

/// Where the limiter reports each decision; `ops::Metrics` counts them
/// (`mail_worker_rate_limit_decisions_total`, `mail_worker_rate_limit_seconds`). A trait so the
/// limiter does not import the metrics registry that imports it for the health check.
pub(crate) trait DecisionMetrics: Send + Sync {
    /// One decision: `allowed`, a [`DenyReason`](crate::rate_limit::DenyReason)'s name, or `fail_open`,
    /// and how long it took.
    fn rate_limit_decision(&self, decision: &'static str, took: Duration);

    /// An adaptive rule fired on `on` (`mail_worker_adaptive_actions_total{rule,scope,tenant,mailbox}`).
    fn adaptive_fired(&self, _rule: &str, _scope: &'static str, _on: AdaptiveOn<'_>) {}

    /// The factor (‰) an action on `on` holds now
    /// (`mail_worker_adaptive_factor{rule,scope,tenant,mailbox}`).
    fn adaptive_factor(
        &self,
        _rule: &str,
        _scope: &'static str,
        _on: AdaptiveOn<'_>,
        _permille: u16,
    ) {
    }
}

/// What an adaptive action is on, for its metrics' labels: the Graph tenant, and the mailbox
/// when the action is on one (empty for a tenant's). Both are configuration (bounded), never a
/// recipient.
#[derive(Debug, Clone, Copy)]
pub struct AdaptiveOn<'a> {
    /// The Graph tenant.
    pub tenant: &'a str,
    /// The mailbox's address, or `""` for an action on the tenant.
    pub mailbox: &'a str,
}

impl<'a> AdaptiveOn<'a> {
    /// An action of `scope` (`mailbox`, `tenant`) asked for `mailbox` of `tenant`: the mailbox
    /// is named only when the action is on it.
    pub(crate) fn of(scope: &str, tenant: &'a str, mailbox: &'a str) -> Self {
        Self {
            tenant,
            mailbox: if scope == "mailbox" { mailbox } else { "" },
        }
    }
}
