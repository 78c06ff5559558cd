//! The daemon's parts as supervised tasks (tokio-util's [`TaskTracker`] and
//! [`CancellationToken`]). Two groups: the *draining* parts (the claim loop and what feeds it:
//! recovery, paused-sender revisits, the intake) stop first, on the shutdown request; the rest
//! (gauges, heartbeat, retention, bounces, webhooks, the operations listener) stop once those
//! have drained, so `/metrics` and the heartbeat outlive the sends in flight.
//!
//! A part that returns before it was asked to stop, returns an error, or panics is a failure:
//! one `daemon.partFailed` line names it (and the error or the panic's message), the shutdown
//! starts as for SIGTERM (the sends in flight drain), and [`Supervisor::run`] returns the
//! failure, so `mail-worker run` exits non-zero and Kubernetes restarts the pod. A process with a
//! dead part no longer looks alive.

use std::{
    any::Any,
    error::Error,
    fmt,
    future::Future,
    sync::{Arc, Mutex},
};

use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::log_events;

/// A part that stopped on its own: the first one, which started the shutdown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the daemon's part `{part}` {how}")]
pub struct PartFailed {
    /// The part's name (`claim`, `intake`, `heartbeat`, …).
    pub part: &'static str,
    /// `stopped on its own`, `failed: …` or `panicked: …`.
    pub how: String,
}

/// What a part's future ends with: nothing, or a result whose error is a failure.
pub(crate) trait PartEnd {
    /// The failure this end is, with its causes (`None`: a clean end).
    fn failure(self) -> Option<String>;
}

impl PartEnd for () {
    fn failure(self) -> Option<String> {
        None
    }
}

impl<E: Error> PartEnd for Result<(), E> {
    fn failure(self) -> Option<String> {
        self.err().map(|e| with_causes(&e))
    }
}

/// `error: cause: cause's cause`, each source once.
pub(crate) fn with_causes(error: &dyn Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let shown = cause.to_string();
        if !text.ends_with(&shown) {
            text = format!("{text}: {shown}");
        }
        source = cause.source();
    }
    text
}

/// The text of a panic's payload (`panic!("…")` gives a `&str` or a `String`).
fn panic_text(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// Runs the daemon's parts and stops them in order (the module doc).
pub(crate) struct Supervisor {
    /// Cancelled by the shutdown request or a failure: the draining parts stop.
    stop: CancellationToken,
    /// Cancelled once the draining parts are done: the rest stop (a parent of `stop`).
    done: CancellationToken,
    draining: TaskTracker,
    rest: TaskTracker,
    failed: Arc<Mutex<Option<PartFailed>>>,
}

impl fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Supervisor")
            .field("stopping", &self.stop.is_cancelled())
            .field("draining", &self.draining.len())
            .field("rest", &self.rest.len())
            .finish_non_exhaustive()
    }
}

impl Default for Supervisor {
    fn default() -> Self {
        let done = CancellationToken::new();
        Self {
            stop: done.child_token(),
            done,
            draining: TaskTracker::new(),
            rest: TaskTracker::new(),
            failed: Arc::default(),
        }
    }
}

impl Supervisor {
    /// Starts `part` among the draining parts: `run` gets the token cancelled on the shutdown
    /// request.
    pub(crate) fn spawn_draining<F>(
        &self,
        part: &'static str,
        run: impl FnOnce(CancellationToken) -> F,
    ) where
        F: Future<Output: PartEnd + Send> + Send + 'static,
    {
        self.watch(&self.draining, part, self.stop.clone(), run);
    }

    /// Starts `part` among the rest: `run` gets the token cancelled once the draining parts are
    /// done.
    pub(crate) fn spawn<F>(&self, part: &'static str, run: impl FnOnce(CancellationToken) -> F)
    where
        F: Future<Output: PartEnd + Send> + Send + 'static,
    {
        self.watch(&self.rest, part, self.done.clone(), run);
    }

    fn watch<F>(
        &self,
        tracker: &TaskTracker,
        part: &'static str,
        until: CancellationToken,
        run: impl FnOnce(CancellationToken) -> F,
    ) where
        F: Future<Output: PartEnd + Send> + Send + 'static,
    {
        let task = tracker.spawn(run(until.clone()));
        let (stop, failed) = (self.stop.clone(), Arc::clone(&self.failed));
        tracker.spawn(async move {
            let how = match task.await {
                Ok(end) => match end.failure() {
                    Some(error) => format!("failed: {error}"),
                    None if until.is_cancelled() => return,
                    None => "stopped on its own".to_owned(),
                },
                Err(e) if e.is_panic() => {
                    format!("panicked: {}", panic_text(&*e.into_panic()))
                }
                Err(_) => return,
            };
            tracing::error!(
                event = log_events::DAEMON_PART_FAILED,
                part,
                error = %how,
                "a part of the daemon stopped: the process stops (exit 1) so that it is restarted"
            );
            failed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get_or_insert(PartFailed { part, how });
            stop.cancel();
        });
    }

    /// Waits for `shutdown` (or a part's failure), then for the draining parts, then runs
    /// `drained`, then stops the rest and waits for them.
    ///
    /// # Errors
    /// The first part that stopped on its own, failed or panicked.
    pub(crate) async fn run(
        self,
        shutdown: impl Future<Output = ()>,
        drained: impl Future<Output = ()>,
    ) -> Result<(), PartFailed> {
        tokio::select! {
            () = shutdown => self.stop.cancel(),
            () = self.stop.cancelled() => {}
        }
        self.draining.close();
        self.draining.wait().await;
        drained.await;
        self.done.cancel();
        self.rest.close();
        self.rest.wait().await;
        let failed = self
            .failed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        match failed {
            Some(failed) => Err(failed),
            None => {
                tracing::info!(
                    event = log_events::DAEMON_STOPPED,
                    reason = "shutdown requested",
                    "daemon stopped"
                );
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_part_that_returns_stops_the_others_and_is_named() {
        let parts = Supervisor::default();
        let rest_saw_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let saw = Arc::clone(&rest_saw_stop);
        parts.spawn("gauges", |done| async move {
            done.cancelled().await;
            saw.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        parts.spawn_draining("claim", |stop| async move { stop.cancelled().await });
        parts.spawn_draining("heartbeat", |_| async {});
        let failed = parts
            .run(std::future::pending(), async {})
            .await
            .unwrap_err();
        assert_eq!(failed.part, "heartbeat");
        assert_eq!(failed.how, "stopped on its own");
        assert!(rest_saw_stop.load(std::sync::atomic::Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_panic_is_a_failure_with_its_message() {
        let parts = Supervisor::default();
        parts.spawn("retention", |_| async {
            let at = 3;
            assert!(at != 3, "boom at {at}");
        });
        let failed = parts.run(std::future::pending(), async {}).await;
        assert_eq!(
            failed.unwrap_err().to_string(),
            "the daemon's part `retention` panicked: boom at 3"
        );
    }

    #[tokio::test]
    async fn an_error_is_a_failure_with_its_causes() {
        let parts = Supervisor::default();
        let io = std::io::Error::other("listener closed");
        parts.spawn("ops", |_| async move { Err::<(), _>(io) });
        let failed = parts.run(std::future::pending(), async {}).await;
        assert_eq!(failed.unwrap_err().how, "failed: listener closed");
    }

    #[tokio::test]
    async fn a_requested_shutdown_drains_then_stops_the_rest_and_is_no_failure() {
        let parts = Supervisor::default();
        let order = Arc::new(Mutex::new(Vec::new()));
        let (a, b, c) = (Arc::clone(&order), Arc::clone(&order), Arc::clone(&order));
        parts.spawn("ops", |done| async move {
            done.cancelled().await;
            a.lock().unwrap().push("ops");
        });
        parts.spawn_draining("claim", |stop| async move {
            stop.cancelled().await;
            b.lock().unwrap().push("claim");
        });
        let drained = async move { c.lock().unwrap().push("drained") };
        parts.run(async {}, drained).await.unwrap();
        assert_eq!(*order.lock().unwrap(), ["claim", "drained", "ops"]);
    }
}
