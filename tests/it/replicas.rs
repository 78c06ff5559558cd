//! Issue 46 points 5 and 6 (docs/decisions/0034-replicas-and-restored-bookings.md): a limiter
//! Redis that comes back empty restores the booked backlog from PostgreSQL before new mail is
//! booked, so the backlog keeps its order; fail-open is shared by the live replicas, and a
//! limiter never reached since start-up makes `/readyz` not ready.

use std::{num::NonZeroU32, sync::Arc, time::Instant};

use chrono::{DateTime, Duration, Utc};
use mail_worker::{
    clock::{Clock, ManualClock},
    config::Config,
    daemon::{self, Handle, Options, heartbeat},
    domain::MailboxAddress,
    rate_limit::{Algorithm, Decision, LiveReplicas, RateLimitConfig, RateLimits},
};
use uuid::Uuid;

use crate::support::{
    LimiterExt, TestApp, claim_and_send,
    logs::{capture_logs, logs_containing},
    redis_conn, wait_until,
};

/// Every key of the app's limiter gone, as after a Redis restart without persistence.
async fn flush_limiter(app: &TestApp) -> usize {
    let mut conn = redis_conn().await;
    test_support::unlink_prefix(&mut conn, &app.config.rate_limit.key_prefix)
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

/// Inserts a row of mailbox 0 booked at `slot` for `reason` with `priority`.
async fn booked_row(app: &TestApp, slot: DateTime<Utc>, reason: &str, priority: &str) -> Uuid {
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO messages (id, system_mailbox_id, to_recipients, subject, body, status, \
             wait_reason, priority, scheduled_on, queued_at) \
         VALUES ($1, $2, '[{\"address\": \"guest@example.org\"}]', 'b', '<p>b</p>', \
             'SCHEDULED', $3, $4, $5, now())",
    )
    .bind(id)
    .bind(app.mailboxes[0].1)
    .bind(reason)
    .bind(priority)
    .bind(slot)
    .execute(&app.db.pool)
    .await
    .unwrap();
    id
}

#[tokio::test]
async fn the_restore_books_as_the_limiter_does_normal_paced_tenant_and_high_aside() {
    let (app, clock) = paced_app().await;
    let now = clock.now();
    let at = |s: i64| now + Duration::seconds(s);
    let normal = [
        booked_row(&app, at(10), "minute", "normal").await,
        booked_row(&app, at(20), "day", "bulk").await,
        booked_row(&app, at(30), "minute", "normal").await,
    ];
    // A `high` booking and one held by the tenant budget alone do not move the pacing.
    let high = booked_row(&app, at(40), "minute", "high").await;
    let tenant = booked_row(&app, at(300), "tenant", "normal").await;
    let new = app.insert(0, 1, "SCHEDULED").await[0];
    let (status, slot) = try_send(&app, &clock, new).await;
    assert_eq!(status, "SCHEDULED");
    eprintln!(
        "new normal mail behind restored bookings at +10/+20/+30 s (normal/bulk), +40 s (high), \
         +300 s (tenant): booked at +{} ms",
        (slot - now).num_milliseconds()
    );
    // One spacing (62 s / 8) after the last normal/bulk booking, ahead of the tenant one.
    let expected = at(30) + Duration::milliseconds(7_750);
    assert!(
        (slot - expected).num_milliseconds().abs() <= 1,
        "{slot} vs {expected}"
    );
    for (id, when) in normal
        .iter()
        .zip([10, 20, 30])
        .chain([(&high, 40), (&tenant, 300)])
    {
        clock.set(at(when));
        assert_eq!(try_send(&app, &clock, *id).await.0, "SENT", "+{when} s");
    }
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

/// A `redis://` URL on a local port nothing listens on.
fn dead_redis() -> url::Url {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    format!("redis://127.0.0.1:{port}").parse().unwrap()
}

/// A `paced` limiter on the unreachable `url` (50 ms deadline, virtual time), sharing fail-open
/// among `live` (when given) and at least 1 replica.
fn unreachable_limiter(
    url: &url::Url,
    live: Option<LiveReplicas>,
) -> mail_worker::rate_limit::MailRateLimiter {
    let config = crate::budgets::config(url, &crate::support::unique("rl"), Algorithm::Paced, 1);
    let config = RateLimitConfig {
        redis_timeout: std::time::Duration::from_millis(50),
        ..config
    };
    let limiter = mail_worker::rate_limit::MailRateLimiter::new(&config).unwrap();
    match live {
        Some(live) => limiter.with_live_replicas(live),
        None => limiter,
    }
}

/// Both limiters asked for a message of one mailbox (L = 10) every 250 ms of virtual time
/// for 3 min while their Redis is unreachable: the most sends any rolling 60 s held.
async fn most_in_60_s(limiters: [&mail_worker::rate_limit::MailRateLimiter; 2]) -> usize {
    let mailbox = MailboxAddress::parse("events@contoso.example").unwrap();
    let limits = RateLimits {
        per_minute: NonZeroU32::new(10).unwrap(),
        recipients_per_day: NonZeroU32::new(9_000).unwrap(),
        reserved_percent: 0,
    };
    let start = Utc::now();
    let mut sent = Vec::new();
    for step in 0..720 {
        let now = start + Duration::milliseconds(250 * step);
        for limiter in limiters {
            if let Decision::Allowed(_) = limiter.check(&mailbox, 1, limits, now).await.unwrap() {
                sent.push(now);
            }
        }
    }
    sent.iter()
        .map(|t| {
            sent.iter()
                .filter(|s| **s <= *t && **s > *t - Duration::seconds(60))
                .count()
        })
        .max()
        .unwrap_or(0)
}

#[tokio::test]
async fn two_replicas_with_an_unreachable_limiter_share_l_per_rolling_minute() {
    capture_logs();
    let app = TestApp::builder().mailboxes(0).spawn().await;
    let url = dead_redis();
    // Before: each replica kept the whole L (MAIL_RATE_LIMIT_FAIL_OPEN_REPLICAS = 1).
    let alone = [
        unreachable_limiter(&url, None),
        unreachable_limiter(&url, None),
    ];
    let before = most_in_60_s([&alone[0], &alone[1]]).await;

    // Two replicas beating their rows every 100 ms (stale after 300 ms).
    let (stop_a, stop_b) = (
        mail_worker::shutdown::CancellationToken::new(),
        mail_worker::shutdown::CancellationToken::new(),
    );
    let (live_a, live_b) = (LiveReplicas::new(), LiveReplicas::new());
    let beats = (
        std::time::Duration::from_millis(100),
        std::time::Duration::from_millis(300),
    );
    let a = tokio::spawn(heartbeat::run(
        app.db.pool.clone(),
        Uuid::new_v4(),
        live_a.clone(),
        beats,
        stop_a.clone(),
    ));
    tokio::spawn(heartbeat::run(
        app.db.pool.clone(),
        Uuid::new_v4(),
        live_b.clone(),
        beats,
        stop_b.clone(),
    ));
    wait_until(
        std::time::Duration::from_secs(5),
        "both count 2",
        async || live_a.get() == 2 && live_b.get() == 2,
    )
    .await;
    let shared = [
        unreachable_limiter(&url, Some(live_a.clone())),
        unreachable_limiter(&url, Some(live_b.clone())),
    ];
    assert_eq!(shared[0].fail_open_shared_by(), 2);
    let after = most_in_60_s([&shared[0], &shared[1]]).await;
    eprintln!(
        "two replicas failing open, L = 10: at most {before} sends in a rolling 60 s without \
         the heartbeat, {after} with it"
    );
    assert!(before > 10, "the contrast: {before}");
    assert!(after <= 10, "{after} > L");

    // One stops: its row goes, the other counts 1 again and says so.
    stop_a.cancel();
    a.await.unwrap();
    wait_until(
        std::time::Duration::from_secs(5),
        "B counts 1",
        async || live_b.get() == 1,
    )
    .await;
    assert_eq!(shared[1].fail_open_shared_by(), 1);
    let changes: Vec<(u64, u64)> = logs_containing("the live replicas changed")
        .iter()
        .filter(|l| l["event"] == "mail.replicas.changed")
        .filter_map(|l| Some((l["before"].as_u64()?, l["live"].as_u64()?)))
        .collect();
    assert!(changes.contains(&(2, 1)), "{changes:?}");
}

/// `config` for a fast in-process daemon with its listener on a free port.
fn fast(mut config: Config) -> Config {
    config.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    config.worker.scheduler_interval = std::time::Duration::from_millis(100);
    config.shutdown_grace = std::time::Duration::from_secs(5);
    config.rate_limit.unreachable_not_ready_after = std::time::Duration::from_millis(1500);
    config
}

async fn readyz(handle: &Handle) -> (u16, serde_json::Value) {
    let addr = handle.ops_addr.expect("the listener is on");
    let answer = reqwest::get(format!("http://{addr}/readyz")).await.unwrap();
    let code = answer.status().as_u16();
    (
        code,
        serde_json::from_str(&answer.text().await.unwrap()).unwrap(),
    )
}

/// Runs the daemon while `body` runs, then stops it.
async fn with_daemon(config: Config, body: impl AsyncFnOnce(&Handle)) {
    let (handle, run) = daemon::start(config, Options::default()).await.unwrap();
    let test = async {
        body(&handle).await;
        handle.stop();
    };
    let (result, ()) = tokio::join!(run, test);
    result.expect("the daemon stops only when asked, and cleanly");
}

#[tokio::test]
async fn a_limiter_never_reached_since_start_up_makes_readyz_503_after_the_bound() {
    let app = TestApp::builder().mailboxes(0).spawn().await;
    let mut config = fast(app.config.clone());
    config.rate_limit.redis_url = dead_redis().into();
    with_daemon(config, async |d| {
        let (code, report) = readyz(d).await;
        assert_eq!(code, 200, "degraded at first: {report}");
        assert_eq!(report["degraded"], serde_json::json!(["rate_limit_redis"]));
        let started = Instant::now();
        let mut last = report;
        wait_until(std::time::Duration::from_secs(10), "503", async || {
            let (code, report) = readyz(d).await;
            last = report;
            code == 503
        })
        .await;
        eprintln!(
            "never reached: /readyz 503 after {} ms (bound 1500 ms): {last}",
            started.elapsed().as_millis()
        );
        assert_eq!(last["ready"], false);
        assert_eq!(last["down"], serde_json::json!(["rate_limit_redis"]));
        let error = last["checks"]["rate_limit_redis"]["error"]
            .as_str()
            .unwrap();
        assert!(error.contains("never answered since start-up"), "{error}");
    })
    .await;
}

#[tokio::test]
async fn a_limiter_lost_after_it_answered_stays_degraded() {
    let app = TestApp::builder().mailboxes(0).spawn().await;
    let gate = crate::support::proxy::Gate::relaying().await;
    let mut config = fast(app.config.clone());
    config.rate_limit.redis_url = gate.url().into();
    with_daemon(config, async |d| {
        wait_until(
            std::time::Duration::from_secs(5),
            "the limiter answers",
            async || readyz(d).await.1["checks"]["rate_limit_redis"]["ok"] == true,
        )
        .await;
        gate.cut();
        wait_until(
            std::time::Duration::from_secs(10),
            "the limiter's Redis said degraded",
            async || readyz(d).await.1["degraded"] == serde_json::json!(["rate_limit_redis"]),
        )
        .await;
        let (code, report) = readyz(d).await;
        assert_eq!(code, 200, "{report}");
        assert_eq!(report["down"], serde_json::json!([]), "{report}");
        assert_eq!(
            report["degraded"],
            serde_json::json!(["rate_limit_redis"]),
            "{report}"
        );
    })
    .await;
}
