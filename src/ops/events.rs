//! The outbox's metrics (in [`super::Metrics`]'s table, counted by [`crate::outbox`]):
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `mail_worker_events_delivered_total` | counter | — (events a receiver accepted) |
//! | `mail_worker_events_retried_total` | counter | — (events of a failed POST, tried again) |
//! | `mail_worker_events_dead_total` | counter | — (events given up after `EVENTS_RETRY_FOR`) |
//! | `mail_worker_events_oldest_undelivered_seconds` | gauge | — (the outbox's lag) |
//!
//! No receiver label: a URL may carry a token, and `mail-worker events stats` shows each.

impl super::Metrics {
    /// Counts `n` events delivered.
    pub(crate) fn events_delivered(&self, n: u64) {
        self.events_delivered.inc_by(n);
    }

    /// Counts `n` events whose POST failed and will be tried again.
    pub(crate) fn events_retried(&self, n: u64) {
        self.events_retried.inc_by(n);
    }

    /// Counts `n` events given up.
    pub(crate) fn events_dead(&self, n: u64) {
        self.events_dead.inc_by(n);
    }

    /// Sets the outbox's lag.
    pub(crate) fn set_events_oldest(&self, seconds: f64) {
        self.events_oldest.set(seconds);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_follow_the_contract() {
        let m = super::super::Metrics::new();
        m.events_delivered(100);
        m.events_retried(3);
        m.events_dead(2);
        m.set_events_oldest(1.5);
        let text = m.encode();
        for line in [
            "mail_worker_events_delivered_total 100",
            "mail_worker_events_retried_total 3",
            "mail_worker_events_dead_total 2",
            "mail_worker_events_oldest_undelivered_seconds 1.5",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
    }
}
