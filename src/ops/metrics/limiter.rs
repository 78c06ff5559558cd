//! The limiter's metrics: its decisions (`DecisionMetrics`, the trait the limiter reports
//! through) and the adaptive rules' actions (docs/adaptive-rules.md).

use std::time::Duration;

use super::{Metrics, labels::AdaptiveLabels};
use crate::rate_limit::AdaptiveOn;

impl crate::rate_limit::DecisionMetrics for Metrics {
    fn rate_limit_decision(&self, decision: &'static str, took: Duration) {
        Metrics::rate_limit_decision(self, decision, took);
    }

    fn adaptive_fired(&self, rule: &str, scope: &'static str, on: AdaptiveOn<'_>) {
        Metrics::adaptive_fired(self, rule, scope, on);
    }

    fn adaptive_factor(&self, rule: &str, scope: &'static str, on: AdaptiveOn<'_>, permille: u16) {
        Metrics::set_adaptive_factor(self, rule, scope, on, permille);
    }
}

impl Metrics {
    /// Counts `mail_worker_adaptive_actions_total{rule,scope,tenant,mailbox}`.
    pub fn adaptive_fired(&self, rule: &str, scope: &'static str, on: AdaptiveOn<'_>) {
        self.adaptive_actions
            .get_or_create(&AdaptiveLabels::of(rule, scope, on))
            .inc();
    }

    /// Sets `mail_worker_adaptive_factor{rule,scope,tenant,mailbox}` to `permille` ‰.
    pub fn set_adaptive_factor(
        &self,
        rule: &str,
        scope: &'static str,
        on: AdaptiveOn<'_>,
        permille: u16,
    ) {
        self.adaptive_factor
            .get_or_create(&AdaptiveLabels::of(rule, scope, on))
            .set(f64::from(permille) / 1000.0);
    }
}

impl AdaptiveLabels {
    fn of(rule: &str, scope: &'static str, on: AdaptiveOn<'_>) -> Self {
        Self {
            rule: rule.to_owned(),
            scope,
            tenant: on.tenant.to_owned(),
            mailbox: on.mailbox.to_owned(),
        }
    }
}
