//! The warm-up loop (docs/decisions/0047-warm-up.md): every [`EVERY`] each replica evaluates
//! the ramps not yet evaluated today ([`store::warmups::evaluate_due`]: rows locked and skipped
//! when another replica holds them, a ramp evaluated today not taken again), so the first
//! round after 00:00 UTC counts yesterday's sending day, once, whichever replica runs it.

use std::{sync::Arc, time::Duration};

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::{
    clock::Clock,
    config::Config,
    domain::{Verdict, WarmUpGate},
    log_events, shutdown, store,
};

/// How often a replica looks for ramps to evaluate (the first at start-up).
pub(super) const EVERY: Duration = Duration::from_secs(60);

/// The gate from `WARMUP_MAX_HARD_BOUNCE_PERCENT` and `WARMUP_MAX_FILTERED_PERCENT`.
pub(super) fn gate(config: &Config) -> WarmUpGate {
    WarmUpGate {
        max_hard_bounce_percent: config.settings.senders.warmup_max_hard_bounce_percent,
        max_filtered_percent: config.settings.senders.warmup_max_filtered_percent,
    }
}

/// Evaluates the due ramps every [`EVERY`] until `done`, logging what each did. The day is
/// PostgreSQL's (a replica's wall clock never decides a row's day), a test's virtual clock's
/// when it runs on one.
pub(super) async fn warmup_loop(
    pool: PgPool,
    gate: WarmUpGate,
    clock: Arc<dyn Clock>,
    done: CancellationToken,
) {
    let (pool, clock) = (&pool, &clock);
    shutdown::every(EVERY, done.clone(), None, || async move {
        let now = clock.is_virtual().then(|| clock.now());
        match store::warmups::evaluate_due(pool, now, gate).await {
            Ok(evaluations) => evaluations.iter().for_each(log),
            Err(e) => tracing::warn!(
                event = log_events::MAIL_WARMUP_EVALUATION_FAILED,
                error = %e,
                "evaluating the warm-up ramps failed; the next round tries again"
            ),
        }
    })
    .await;
}

/// One evaluation's log line.
fn log(e: &store::warmups::Evaluation) {
    let s = &e.state;
    let day = e.day.to_string();
    match &e.verdict {
        Verdict::Stepped => tracing::info!(
            event = log_events::MAIL_WARMUP_STEPPED,
            mailbox = %s.mailbox, day, step = s.step, day_budget = s.day_budget,
            sending_days = s.sending_days, sent = e.outcome.sent,
            "warm-up: a clean sending day, one step up"
        ),
        Verdict::AtMax => tracing::info!(
            event = log_events::MAIL_WARMUP_HELD,
            mailbox = %s.mailbox, day, step = s.step, day_budget = s.day_budget,
            sending_days = s.sending_days, reason = "at maxPerDay",
            "warm-up: a clean sending day, the ramp is at its end"
        ),
        Verdict::Held(reason) => tracing::warn!(
            event = log_events::MAIL_WARMUP_HELD,
            mailbox = %s.mailbox, day, step = s.step, day_budget = s.day_budget,
            sending_days = s.sending_days, reason,
            "warm-up: the sending day was not clean, the step holds"
        ),
        Verdict::SteppedDown(reason) => tracing::warn!(
            event = log_events::MAIL_WARMUP_STEPPED_DOWN,
            mailbox = %s.mailbox, day, step = s.step, day_budget = s.day_budget,
            sending_days = s.sending_days, reason,
            "warm-up: a reputation NDR, one step down"
        ),
    }
}
