//! The gauges read from PostgreSQL and the limiter on a schedule (every `METRICS_REFRESH`),
//! and the budget alert they raise.

use std::{sync::Arc, time::Duration};

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use crate::{
    config::Config,
    log_events,
    ops::{Liveness, Metrics},
    shutdown, store,
};

/// The statuses `mail_worker_messages` counts every refresh (their partial indexes keep it
/// cheap; this is the backlog an operator watches).
const UNFINISHED: [&str; 2] = ["SCHEDULED", "SENDING"];
/// The finished statuses, counted every [`FINISHED_EVERY`]th refresh: a `GROUP BY` over every
/// row kept, ~1 s of PostgreSQL CPU per million rows (BENCHMARKS.md section 15), which every
/// replica ran every `METRICS_REFRESH` before.
const FINISHED: [&str; 4] = ["SENT", "ERROR", "BOUNCED", "DELIVERED"];
/// Every this many refreshes (the first included) the finished statuses are counted again:
/// every 5 min at the default `METRICS_REFRESH` of 15 s.
const FINISHED_EVERY: u32 = 20;

/// Refreshes `mail_worker_messages` (the finished statuses every [`FINISHED_EVERY`]th time),
/// `mail_worker_messages_waiting`, `mail_worker_limit_paused` and `mail_worker_oldest_due_seconds` every `every` until
/// `done`.
pub(super) async fn messages_gauge_loop(
    pool: PgPool,
    metrics: Arc<Metrics>,
    liveness: Arc<Liveness>,
    every: Duration,
    done: CancellationToken,
) {
    let (pool, metrics) = (&pool, &metrics);
    let beat = Some((&*liveness, "metrics"));
    let ticks = std::sync::atomic::AtomicU32::new(0);
    let ticks = &ticks;
    shutdown::every(every, done, beat, || async move {
        match store::report::count_unfinished(pool).await {
            Ok(rows) => metrics.set_messages_of(&UNFINISHED, &rows),
            Err(e) => tracing::debug!(error = %e, "refreshing mail_worker_messages failed"),
        }
        let tick = ticks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if tick.is_multiple_of(FINISHED_EVERY) {
            match store::report::count_finished(pool).await {
                Ok(rows) => metrics.set_messages_of(&FINISHED, &rows),
                Err(e) => tracing::debug!(error = %e, "refreshing mail_worker_messages failed"),
            }
        }
        match store::waiting::count_waiting(pool).await {
            Ok(rows) => {
                let rows: Vec<_> = rows.iter().map(|&(r, n)| (r.as_str(), n)).collect();
                metrics.set_waiting(&rows);
            }
            Err(e) => tracing::debug!(error = %e, "refreshing mail_worker_messages_waiting failed"),
        }
        match store::limit_pauses::in_force(pool).await {
            Ok(pauses) => metrics.set_limit_pauses(&pauses),
            Err(e) => tracing::debug!(error = %e, "refreshing mail_worker_limit_paused failed"),
        }
        match store::waiting::oldest_due_seconds(pool).await {
            Ok(seconds) => metrics.set_oldest_due(seconds),
            Err(e) => {
                tracing::debug!(error = %e, "refreshing mail_worker_oldest_due_seconds failed")
            }
        }
    })
    .await;
}

/// Refreshes `mail_worker_budget_used_ratio` and `mail_worker_tenant_budget_used_ratio` every
/// `METRICS_REFRESH` (a limiter read per Graph mailbox and per tenant with an external
/// budget) and logs `mail.budget.nearlyUsed` when a mailbox's 24 h recipient budget or a
/// tenant's external budget passes `MAIL_BUDGET_ALERT_PERCENT` (once per mailbox or tenant and
/// 24 h across replicas).
pub(super) async fn budget_gauge_loop(
    config: Config,
    pool: PgPool,
    metrics: Arc<Metrics>,
    done: CancellationToken,
) {
    let (config, pool, metrics) = (&config, &pool, &metrics);
    let reader = tokio::sync::Mutex::new(crate::rate_limit::usage::UsageReader::new(
        &config.rate_limit,
    ));
    let reader = &reader;
    shutdown::every(config.metrics_refresh, done, None, || async move {
        let mut reader = reader.lock().await;
        let read = crate::reports::usage::budget_shares(&mut reader, config, pool).await;
        let Some(shares) = shares_or_log(read, "a mailbox's", "mail_worker_budget_used_ratio")
        else {
            return;
        };
        for share in shares {
            metrics.set_budget_used(share.mailbox.as_str(), share.minute, share.day);
            let Some(threshold) = config.budget_alert_percent else {
                continue;
            };
            if share.day * 100.0 >= f64::from(threshold)
                && reader
                    .first_alert(&share.tenant, &share.mailbox)
                    .await
                    .unwrap_or(false)
            {
                tracing::warn!(
                    event = log_events::MAIL_BUDGET_NEARLY_USED,
                    mailbox = %share.mailbox,
                    used_percent = (share.day * 100.0).round(),
                    threshold_percent = threshold,
                    "a mailbox has nearly used its 24 h recipient budget"
                );
            }
        }
        let read = crate::reports::usage::tenant_shares(&mut reader, config, pool).await;
        let Some(tenants) =
            shares_or_log(read, "a tenant's", "mail_worker_tenant_budget_used_ratio")
        else {
            return;
        };
        for t in tenants {
            metrics.set_tenant_budget_used(&t.tenant, t.share);
            let Some(threshold) = config.budget_alert_percent else {
                continue;
            };
            if t.share * 100.0 >= f64::from(threshold)
                && reader.first_tenant_alert(&t.tenant).await.unwrap_or(false)
            {
                tracing::warn!(
                    event = log_events::MAIL_BUDGET_NEARLY_USED,
                    tenant = %t.tenant,
                    external = t.external,
                    external_recipients_per_day = t.per_day,
                    used_percent = (t.share * 100.0).round(),
                    threshold_percent = threshold,
                    "a Graph tenant has nearly used its 24 h external recipient budget"
                );
            }
        }
    })
    .await;
}

/// The shares a budget read gave, logging (at debug) the one `whose` budget that could not be
/// read, or the whole read of `gauge` that failed (then `None`: the refresh stops there).
fn shares_or_log<T, E: std::fmt::Display>(
    read: Result<(Vec<T>, Option<String>), E>,
    whose: &str,
    gauge: &str,
) -> Option<Vec<T>> {
    match read {
        Ok((shares, failed)) => {
            if let Some(e) = failed {
                tracing::debug!(error = %e, "reading {whose} budget failed");
            }
            Some(shares)
        }
        Err(e) => {
            tracing::debug!(error = %e, "refreshing {gauge} failed");
            None
        }
    }
}

/// Takes the mailboxes page's order snapshot ([`store::mailbox_order`]) every
/// [`store::mailbox_order::REFRESH_EVERY`] until `done`: each replica tries, the one that gets
/// the lock counts unless another did in the last interval.
pub(super) async fn mailbox_order_loop(pool: PgPool, done: CancellationToken) {
    let every = store::mailbox_order::REFRESH_EVERY;
    let pool = &pool;
    shutdown::every(every, done, None, || async move {
        // A little under the interval: the replica whose tick comes first after it counts.
        if let Err(e) = store::mailbox_order::refresh(pool, every * 9 / 10).await {
            tracing::debug!(error = %e, "taking the mailboxes' order snapshot failed");
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_refreshes_cover_every_status_once() {
        let both: Vec<&str> = UNFINISHED.iter().chain(&FINISHED).copied().collect();
        assert_eq!(both, crate::ops::metrics::STATUSES);
    }
}
