//! [`RequestStarts`]: when the latest provider request of the current send started, recorded by
//! the Graph client right before each request through a task-local, so the rate-limited
//! decorator knows, when the send is cut off, how long that request may still be in flight at
//! Graph: until its start + `HTTP_TIMEOUT` (issue 46, point 4;
//! docs/decisions/0033-leases-outlive-cut-off-sends.md).

use std::{
    sync::{
        Arc,
        atomic::{AtomicI64, Ordering},
    },
    time::Duration,
};

use chrono::{DateTime, Utc};

tokio::task_local! {
    /// The send being run in this task, if a [`RequestStarts::scope`] set it.
    static CURRENT: Arc<RequestStarts>;
}

/// The latest request start of one send, and the HTTP client's whole-request deadline.
#[derive(Debug)]
pub(crate) struct RequestStarts {
    /// Ms since the epoch of the latest request start; [`NONE`] before the first.
    latest_ms: AtomicI64,
    timeout: Duration,
}

/// No request started yet.
const NONE: i64 = i64::MIN;

impl RequestStarts {
    /// A send that has made no request yet, whose requests end at most `timeout` after they
    /// start (`HTTP_TIMEOUT`, the client's whole-request deadline).
    pub(crate) fn new(timeout: Duration) -> Arc<Self> {
        Arc::new(Self {
            latest_ms: AtomicI64::new(NONE),
            timeout,
        })
    }

    /// Runs `send` with `self` as the current send's record, so [`mark`] called anywhere
    /// inside it (on this task) lands here.
    pub(crate) async fn scope<F: Future>(self: &Arc<Self>, send: F) -> F::Output {
        CURRENT.scope(Arc::clone(self), send).await
    }

    /// Until when a request of this send may still be in flight at the provider: the latest
    /// request's start + the timeout; `None` when the send made no request (nothing can be in
    /// flight).
    pub(crate) fn in_flight_until(&self) -> Option<DateTime<Utc>> {
        let started = self.latest_ms.load(Ordering::Acquire);
        if started == NONE {
            return None;
        }
        let until = DateTime::<Utc>::from_timestamp_millis(started)?;
        Some(until + chrono::Duration::from_std(self.timeout).unwrap_or(chrono::Duration::MAX))
    }
}

/// Records that a provider request of the current send starts `now`. A no-op outside a
/// [`RequestStarts::scope`] (a mailer used without the rate-limited decorator, a bounce read).
pub(crate) fn mark(now: DateTime<Utc>) {
    let _ = CURRENT.try_with(|starts| {
        starts
            .latest_ms
            .store(now.timestamp_millis(), Ordering::Release);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_latest_start_plus_the_timeout_inside_the_scope_only() {
        let starts = RequestStarts::new(Duration::from_secs(30));
        let t0 = DateTime::<Utc>::from_timestamp_millis(1_000_000).unwrap();
        mark(t0);
        assert_eq!(starts.in_flight_until(), None, "outside the scope: nothing");
        starts
            .scope(async {
                mark(t0);
                mark(t0 + chrono::Duration::seconds(5));
            })
            .await;
        assert_eq!(
            starts.in_flight_until(),
            Some(t0 + chrono::Duration::seconds(35))
        );
    }
}
