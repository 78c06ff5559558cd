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
    log_events,
    ops::Metrics,
    shutdown, store,
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

/// Evaluates the due ramps every [`EVERY`] until `done`, logging what each did, and sets the
/// `mail_worker_warmup_day_budget` gauge. The day is PostgreSQL's (a replica's wall clock
/// never decides a row's day), a test's virtual clock's when it runs on one.
pub(super) async fn warmup_loop(
    pool: PgPool,
    (gate, metrics): (WarmUpGate, Arc<Metrics>),
    clock: Arc<dyn Clock>,
    done: CancellationToken,
) {
    let (pool, clock, metrics) = (&pool, &clock, &metrics);
    shutdown::every(EVERY, done.clone(), None, || async move {
        let now = clock.is_virtual().then(|| clock.now());
        let round = async {
            store::warmups::evaluate_due(pool, now, gate)
                .await?
                .iter()
                .for_each(log);
            let budgets: Vec<(String, u32)> = store::warmups::all(pool)
                .await?
                .into_iter()
                .map(|s| (s.mailbox, s.day_budget))
                .collect();
            metrics.set_warmup_day_budgets(&budgets);
            Ok::<_, store::StoreError>(())
        };
        if let Err(e) = round.await {
            tracing::warn!(
                event = log_events::MAIL_WARMUP_EVALUATION_FAILED,
                error = %e,
                "evaluating the warm-up ramps failed; the next round tries again"
            );
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
