//! Issue 46 points 5 and 6 (docs/decisions/0034-replicas-and-restored-bookings.md): a limiter
//! Redis that comes back empty restores the booked backlog from PostgreSQL before new mail is
//! booked, so the backlog keeps its order; fail-open is shared by the live replicas, and a
//! limiter never reached since start-up makes `/readyz` not ready.

use std::{sync::Arc, time::Instant};

use chrono::{DateTime, Duration, Utc};
use mail_worker::clock::{Clock, ManualClock};
use uuid::Uuid;

use crate::support::{
    TestApp, claim_and_send,
    logs::{capture_logs, logs_containing},
    redis_conn,
};

/// Every key of the app's limiter gone, as after a Redis restart without persistence.
async fn flush_limiter(app: &TestApp) -> usize {
    let mut conn = redis_conn().await;
    mail_worker_bench::unlink_prefix(&mut conn, &app.config.rate_limit.key_prefix)
        .await
        .unwrap()
}

/// Claims and sends `id` once at the clock's time; its status and `scheduled_on` after.
async fn try_send(app: &TestApp, clock: &ManualClock, id: Uuid) -> (String, DateTime<Utc>) {
    let handler = app.real_handler(Arc::new(clock.clone()));
    claim_and_send(&app.db.pool, &handler, id).await.unwrap();
    let (status, _, _, _, scheduled_on) = app.row(id).await;
    (status, scheduled_on)
}

/// A `paced` app at L = 10 a minute with the reserved share R = 20 (normal mail paced at 8 a
/// minute, 7.75 s apart), on a manual clock that graph-sim shares, started at the real time:
/// the seed reads `sent_at`, PostgreSQL's own clock.
async fn paced_app() -> (TestApp, ManualClock) {
    capture_logs();
    let clock = ManualClock::new(Utc::now());
    let mut app = TestApp::paced()
        .per_minute(10)
        .sim_clock(clock.clone())
        .spawn()
        .await;
    app.config.rate_limit.defaults.reserved_percent = 20;
    (app, clock)
}

#[tokio::test]
async fn an_empty_limiter_redis_keeps_the_booked_backlogs_order_behind_which_new_mail_queues() {
    let (app, clock) = paced_app().await;
    // A backlog of 30: the first goes at noon, 29 are booked 7.75 s apart.
    let backlog = app.insert(0, 30, "SCHEDULED").await;
    let start = clock.now();
    let mut slots = Vec::new();
    for id in &backlog {
        let (status, scheduled_on) = try_send(&app, &clock, *id).await;
        if status == "SCHEDULED" {
            slots.push((*id, scheduled_on));
        }
    }
    assert_eq!(slots.len(), 29, "one sent at once, the rest booked");
    let last_slot = slots.last().unwrap().1;
    assert!(last_slot > start + Duration::minutes(3), "{last_slot}");

    // The limiter's Redis loses every key; new mail arrives 3 s later.
    assert!(flush_limiter(&app).await > 0);
    clock.advance(std::time::Duration::from_secs(3));
    let fresh = app.insert(0, 10, "SCHEDULED").await;
    let mut fresh_slots = Vec::new();
    for id in &fresh {
        let (status, scheduled_on) = try_send(&app, &clock, *id).await;
        assert_eq!(status, "SCHEDULED");
        fresh_slots.push(scheduled_on);
    }
    let restored: Vec<u64> = logs_containing("rate-limit budgets rebuilt")
        .iter()
        .filter_map(|l| l["bookings_restored"].as_u64())
        .collect();
    eprintln!(
        "new mail after the flush booked from {} (the backlog's last slot {last_slot}); \
         bookings restored by the seed: {restored:?}",
        fresh_slots[0]
    );

    // The backlog comes due slot by slot: each is sent at its own slot, none re-booked.
    let mut rebooked = 0;
    for (id, slot) in &slots {
        clock.set(*slot);
        let (status, scheduled_on) = try_send(&app, &clock, *id).await;
        if status != "SENT" {
            rebooked += 1;
            assert_eq!(status, "SCHEDULED");
            assert!(scheduled_on > *slot, "{scheduled_on} vs {slot}");
        }
    }
    eprintln!(
        "backlog rows re-booked after the flush: {rebooked} of {}",
        slots.len()
    );
    assert_eq!(rebooked, 0, "the backlog kept its slots");
    assert!(restored.contains(&29), "{restored:?}");
    // New mail queued behind the backlog, one pacing step apart at least.
    assert!(
        fresh_slots[0] >= last_slot + Duration::milliseconds(7_750),
        "new mail's first slot {} before the backlog's last {last_slot}",
        fresh_slots[0]
    );
    // And it goes at its slots in turn.
    for (id, slot) in fresh.iter().zip(&fresh_slots) {
        clock.set(*slot);
        assert_eq!(try_send(&app, &clock, *id).await.0, "SENT");
    }
    assert_eq!(app.count("ERROR").await, 0);
}

#[tokio::test]
async fn restoring_ten_thousand_bookings_prints_its_time() {
    let (app, clock) = paced_app().await;
    // 10,000 rows booked 7.75 s apart from now on (21.5 h), as check_and_reserve.lua books
    // them, each to one recipient.
    sqlx::query(
        "INSERT INTO messages (id, system_mailbox_id, to_recipients, subject, body, status, \
             wait_reason, scheduled_on, queued_at) \
         SELECT gen_random_uuid(), $1, '[{\"address\": \"guest@example.org\"}]', 'b', '<p>b</p>', \
             'SCHEDULED', 'minute', $2 + make_interval(secs => k * 7.75), now() \
         FROM generate_series(1, 10000) AS k",
    )
    .bind(app.mailboxes[0].1)
    .bind(clock.now())
    .execute(&app.db.pool)
    .await
    .unwrap();
    let last_slot = clock.now() + Duration::milliseconds(10_000 * 7_750);
    let new = app.insert(0, 1, "SCHEDULED").await[0];
    let started = Instant::now();
    let (status, slot) = try_send(&app, &clock, new).await;
    let took = started.elapsed();
    let logged: Vec<(u64, u64)> = logs_containing("rate-limit budgets rebuilt")
        .iter()
        .filter_map(|l| Some((l["bookings_restored"].as_u64()?, l["took_ms"].as_u64()?)))
        .collect();
    eprintln!(
        "restoring 10,000 bookings: seed script {logged:?} (restored, ms); the whole first \
         decision (PostgreSQL read, seed, booking) {} ms",
        took.as_millis()
    );
    assert!(logged.iter().any(|l| l.0 == 10_000), "{logged:?}");
    assert_eq!(status, "SCHEDULED");
    assert!(slot >= last_slot, "{slot} < {last_slot}");
}
