//! The limiter's metrics: its decisions (`DecisionMetrics`, the trait the limiter reports
//! through) and the adaptive rules' actions (docs/adaptive-rules.md).

use std::time::Duration;

use super::{Metrics, labels::AdaptiveLabels};

impl crate::rate_limit::DecisionMetrics for Metrics {
    fn rate_limit_decision(&self, decision: &'static str, took: Duration) {
        Metrics::rate_limit_decision(self, decision, took);
    }

    fn adaptive_fired(&self, rule: &str, scope: &'static str) {
        Metrics::adaptive_fired(self, rule, scope);
    }

    fn adaptive_factor(&self, rule: &str, scope: &'static str, permille: u16) {
        Metrics::set_adaptive_factor(self, rule, scope, permille);
    }
}

impl Metrics {
    /// Counts `mail_worker_adaptive_actions_total{rule,scope}`.
    pub fn adaptive_fired(&self, rule: &str, scope: &'static str) {
        self.adaptive_actions
            .get_or_create(&AdaptiveLabels {
                rule: rule.to_owned(),
                scope,
            })
            .inc();
    }

    /// Sets `mail_worker_adaptive_factor{rule,scope}` to `permille` ‰.
    pub fn set_adaptive_factor(&self, rule: &str, scope: &'static str, permille: u16) {
        self.adaptive_factor
            .get_or_create(&AdaptiveLabels {
                rule: rule.to_owned(),
                scope,
            })
            .set(f64::from(permille) / 1000.0);
    }
}
