//! Shutdown as the daemon's parts see it: a [`CancellationToken`] (tokio-util) cancelled once.
//! A part waits for it (`token.cancelled()`) or runs a tick every interval until it comes
//! ([`every`]); the process learns of it from a signal ([`signal`]). Who runs the parts and what
//! happens when one stops on its own: `src/supervise.rs`.

use std::time::Duration;

pub use tokio_util::sync::CancellationToken;

use crate::ops::Liveness;

/// A loop's heartbeat on `/healthz`: where it beats and under which name.
pub(crate) type Beat<'a> = (&'a Liveness, &'static str);

/// Runs `tick` every `interval` (the first at once; a late tick delays the next instead of
/// bursting) until `stop` is cancelled. With `beat`, the loop beats before each wait, allowed
/// three intervals and a minute (a tick may wait on PostgreSQL), and is marked ended on its
/// way out.
pub(crate) async fn every<F, Fut>(
    interval: Duration,
    stop: CancellationToken,
    beat: Option<Beat<'_>>,
    mut tick: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let allowance = interval * 3 + Duration::from_secs(60);
    loop {
        if let Some((liveness, name)) = beat {
            liveness.beat(name, allowance);
        }
        tokio::select! {
            () = stop.cancelled() => {
                if let Some((liveness, name)) = beat {
                    liveness.ended(name);
                }
                return;
            }
            _ = ticks.tick() => {}
        }
        tick().await;
    }
}

/// Completes on SIGTERM (Kubernetes' stop) or SIGINT (Ctrl-C), returning which; where SIGTERM
/// cannot be listened to, on SIGINT alone.
pub async fn signal() -> &'static str {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return "SIGINT";
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => "SIGINT",
            _ = term.recv() => "SIGTERM",
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "SIGINT"
    }
}

/// Completes on SIGTERM (Kubernetes' stop) or SIGINT (Ctrl-C), logging which.
pub async fn shutdown_signal() {
    let signal = signal().await;
    tracing::info!(
        event = crate::log_events::DAEMON_SIGNAL,
        signal,
        "signal received"
    );
}
