//! Bounds a repeated log line to one per interval, counting the ones it suppressed, so a Redis
//! outage during a burst of 1,000 sends writes one warn line per second instead of 1,000.

use std::{
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

/// One line per `interval`; the rest are counted and the count rides on the next line written.
#[derive(Debug)]
pub(crate) struct LogThrottle {
    interval: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    last_written: Option<Instant>,
    suppressed: u64,
}

impl LogThrottle {
    /// At most one line per `interval`.
    pub(crate) fn new(interval: Duration) -> Self {
        Self {
            interval,
            state: Mutex::new(State::default()),
        }
    }

    /// `Some(n)` when a line may be written at `now`, `n` being how many were suppressed since
    /// the last written one; `None` when this one is suppressed (and counted).
    pub(crate) fn admit(&self, now: Instant) -> Option<u64> {
        // A poisoned lock only means another thread panicked mid-update of two counters; the
        // counters are still usable for a log bound.
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let due = state
            .last_written
            .is_none_or(|last| now.saturating_duration_since(last) >= self.interval);
        if due {
            state.last_written = Some(now);
            Some(std::mem::take(&mut state.suppressed))
        } else {
            state.suppressed += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_second_carries_the_count_of_suppressed_lines() {
        let throttle = LogThrottle::new(Duration::from_secs(1));
        let t0 = Instant::now();
        assert_eq!(throttle.admit(t0), Some(0));
        let suppressed = (1..1000u64)
            .filter(|i| {
                throttle
                    .admit(t0 + Duration::from_micros(i * 900))
                    .is_none()
            })
            .count();
        assert_eq!(suppressed, 999);
        assert_eq!(throttle.admit(t0 + Duration::from_millis(999)), None);
        assert_eq!(throttle.admit(t0 + Duration::from_secs(1)), Some(1000));
        assert_eq!(throttle.admit(t0 + Duration::from_millis(1500)), None);
        assert_eq!(throttle.admit(t0 + Duration::from_secs(3)), Some(1));
    }
}
