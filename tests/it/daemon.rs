//! The worker end to end: the real service stack (MailerFactory → RateLimitedGraphMailer →
//! MicrosoftGraphMailer, the real MailRateLimiter on Redis) against graph-sim in process, with
//! PostgreSQL rows driven through the job handler, the daemon loops, and the binary.

use std::{collections::BTreeMap, num::NonZeroU32, sync::Arc, time::Duration};

use chrono::Utc;
use graph_sim::{ScriptedAnswer, Target};
use mail_worker::{
    clock::{Clock, ManualClock, SystemClock},
    daemon,
    service::{SendOutcome, spread_ms},
    store::senders,
    worker::{self, handler::Handler},
};
use uuid::Uuid;

use crate::support::{
    TestApp,
    app::noon,
    claim_and_send, claim_and_send_all,
    logs::{capture_logs, first_logged, logs_containing},
    spawn_app, wait_until,
};

/// Claims `ids` and sends them all at once; their outcomes.
async fn process_all(world: &TestApp, handler: &Handler, ids: &[Uuid]) -> Vec<SendOutcome> {
    claim_and_send_all(&world.db.pool, handler, ids)
        .await
        .unwrap()
        .into_iter()
        .map(Option::unwrap)
        .collect()
}

/// One mailbox at our limit of 10 a minute, graph-sim and the real handler on a manual clock
/// at noon.
async fn ten_a_minute_on_a_manual_clock() -> (ManualClock, TestApp, Handler) {
    let clock = ManualClock::new(noon());
    let world = TestApp::builder()
        .per_minute(10)
        .sim_clock(clock.clone())
        .spawn()
        .await;
    let handler = world.real_handler(Arc::new(clock.clone()));
    (clock, world, handler)
}

#[tokio::test]
async fn forty_messages_at_a_ten_per_minute_limit_go_out_ten_per_utc_minute_with_spread() {
    capture_logs();
    let (clock, world, handler) = ten_a_minute_on_a_manual_clock().await;
    let ids = world.insert(0, 40, "SCHEDULED").await;

    let outcomes = process_all(&world, &handler, &ids).await;
    let sent = outcomes.iter().filter(|o| **o == SendOutcome::Sent).count();
    assert_eq!(sent, 10);
    assert_eq!(world.count("SCHEDULED").await, 30);
    let next_minute = noon() + chrono::Duration::minutes(1);
    for &id in &ids {
        let (status, _, scheduled_on) = world.status_of(id).await;
        if status == "SCHEDULED" {
            let expected =
                next_minute + chrono::Duration::milliseconds(spread_ms(id, 30_000) as i64);
            let off = (scheduled_on - expected).num_milliseconds().abs();
            assert!(
                off <= 1_000,
                "{id}: scheduled_on {scheduled_on}, expected {expected}"
            );
            let event = first_logged("mail.rateLimit.deferred", &id.to_string());
            assert_eq!(event["reason"], "minute");
            assert_eq!(event["retry_after_ms"], 60_000);
            assert_eq!(event["spread_ms"], spread_ms(id, 30_000));
        }
    }
    // The next minutes: each takes exactly ten more.
    for minute in 1..=3 {
        clock.set(noon() + chrono::Duration::seconds(minute * 60 + 31));
        let due = world.due_by(clock.now()).await;
        assert_eq!(due.len(), 40 - 10 * minute as usize, "minute {minute}");
        process_all(&world, &handler, &due).await;
        assert_eq!(
            world.count("SENT").await,
            10 * (minute + 1),
            "minute {minute}"
        );
    }
    assert_eq!(world.count("SENT").await, 40);
    let per_minute: Vec<usize> = world.sends_per_minute().into_values().collect();
    assert_eq!(per_minute, [10, 10, 10, 10]);
    assert_eq!(
        world.sim.messages().len(),
        40,
        "each message sent exactly once"
    );
}

#[tokio::test]
async fn a_lowered_limit_applies_to_the_next_minute_without_a_restart() {
    let (clock, world, handler) = ten_a_minute_on_a_manual_clock().await;
    let first = world.insert(0, 5, "SCHEDULED").await;
    process_all(&world, &handler, &first).await;
    assert_eq!(world.count("SENT").await, 5);

    // What `mail-worker mailbox set-limits mb0@contoso.example --per-minute 3` does.
    let change = senders::LimitsChange::Set {
        per_minute: NonZeroU32::new(3),
        recipients_per_day: None,
        reserved_percent: None,
    };
    senders::set_limits(&world.db.pool, &world.mailboxes[0].0, change)
        .await
        .unwrap();
    clock.set(noon() + chrono::Duration::seconds(60));
    let next = world.insert(0, 10, "SCHEDULED").await;
    process_all(&world, &handler, &next).await;
    assert_eq!(
        world.count("SENT").await,
        5 + 3,
        "the new limit, 3 per minute, applies"
    );
    assert_eq!(world.count("SCHEDULED").await, 7);
}

#[tokio::test]
async fn with_the_limiters_redis_unreachable_messages_are_still_sent_and_the_error_logged() {
    capture_logs();
    let mut world = TestApp::builder().per_minute(10).spawn().await;
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    world.config.rate_limit.redis_url = url::Url::parse(&format!("redis://127.0.0.1:{closed}"))
        .unwrap()
        .into();
    let handler = world.real_handler(Arc::new(SystemClock));
    let ids = world.insert(0, 12, "SCHEDULED").await;
    let started = std::time::Instant::now();
    let outcomes = process_all(&world, &handler, &ids).await;
    assert!(
        outcomes.iter().all(|o| *o == SendOutcome::Sent),
        "{outcomes:?}"
    );
    assert_eq!(
        world.sim.messages().len(),
        12,
        "fail-open: over our limit of 10, all sent"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let warned = logs_containing("mb0@contoso.example")
        .into_iter()
        .filter(|l| l["event"] == "mail.rateLimit.redisError" && l["level"] == "WARN")
        .count();
    assert!(warned >= 1, "mail.rateLimit.redisError logged");
}

#[tokio::test]
async fn graph_throttling_and_refusals_become_deferrals_backoff_and_errors() {
    // Each scripted answer in turn: graph-sim must not hold the mailbox after the 429.
    let world = TestApp::builder()
        .per_minute(25)
        .sim_ignoring_retry_after()
        .spawn()
        .await;
    let handler = world.real_handler(Arc::new(SystemClock));
    world
        .sim
        .push_script(
            Target::mailbox("mb0@contoso.example"),
            [
                ScriptedAnswer::throttled("120"),
                ScriptedAnswer::unavailable(),
                ScriptedAnswer::status(400).with_code("ErrorInvalidRecipients"),
            ],
        )
        .unwrap();
    let ids = world.insert(0, 3, "SCHEDULED").await;
    let mut results = Vec::new();
    for &id in &ids {
        let before = Utc::now();
        claim_and_send(&world.db.pool, &handler, id)
            .await
            .unwrap()
            .unwrap();
        let (status, last_error, scheduled_on) = world.status_of(id).await;
        results.push((
            status,
            last_error.unwrap_or_default(),
            (scheduled_on - before).num_milliseconds(),
        ));
    }
    let (s, e, wait) = &results[0];
    assert_eq!(s, "SCHEDULED");
    assert!(
        *wait >= 120_000 && *wait < 150_000 + 1_000,
        "Retry-After 120 s + spread: {wait} ms ({e})"
    );
    let (s, e, wait) = &results[1];
    assert_eq!(s, "SCHEDULED");
    assert!(
        *wait >= 2_500 && *wait < 40_000,
        "503 without Retry-After → backoff + spread: {wait} ms ({e})"
    );
    let (s, e, _) = &results[2];
    assert_eq!(s, "ERROR");
    assert!(e.contains("ErrorInvalidRecipients"), "{e}");
    let deferrals: Vec<i32> = sqlx::query_scalar(
        "SELECT deferrals FROM messages WHERE id = ANY($1) ORDER BY deferrals DESC",
    )
    .bind(&ids)
    .fetch_all(&world.db.pool)
    .await
    .unwrap();
    assert_eq!(deferrals, [1, 1, 0]);
}

#[tokio::test]
async fn two_replicas_send_every_message_exactly_once() {
    let world = TestApp::builder()
        .mailboxes(10)
        .per_minute(1_000)
        .sim_concurrency(4)
        .spawn()
        .await;
    let mut ids = Vec::new();
    for mailbox in 0..10 {
        ids.extend(world.insert(mailbox, 20, "SCHEDULED").await);
    }
    let mut config = world.config.clone();
    config.worker.scheduler_interval = Duration::from_millis(100);
    config.worker.concurrency = NonZeroU32::new(8).unwrap();
    config.defer_spread_max = Duration::from_millis(500);
    let (stop_tx, _) = tokio::sync::broadcast::channel::<()>(1);
    let replica = |stop: tokio::sync::broadcast::Receiver<()>| {
        let service =
            daemon::build_service(&config, world.db.pool.clone(), Arc::new(SystemClock)).unwrap();
        let mut stop = stop;
        worker::run(
            world.db.pool.clone(),
            service,
            daemon::daemon_settings(&config),
            async move {
                let _ = stop.recv().await;
            },
        )
    };
    let pool = world.db.pool.clone();
    let stopper = {
        let stop_tx = stop_tx.clone();
        async move {
            // Until every message is SENT; then both replicas are told to stop (past the
            // deadline too: the count below then says what is missing).
            let all_sent = async || {
                let left: i64 =
                    sqlx::query_scalar("SELECT count(*) FROM messages WHERE status <> 'SENT'")
                        .fetch_one(&pool)
                        .await
                        .unwrap();
                left == 0
            };
            let within = Duration::from_secs(60);
            let _ = tokio::time::timeout(
                within,
                wait_until(within * 2, "every message SENT", all_sent),
            )
            .await;
            let _ = stop_tx.send(());
        }
    };
    tokio::join!(
        replica(stop_tx.subscribe()),
        replica(stop_tx.subscribe()),
        stopper
    );
    assert_eq!(world.count("SENT").await, 200);
    let recorded = world.sim.messages();
    let mut subjects: Vec<String> = recorded.iter().filter_map(|m| m.subject.clone()).collect();
    subjects.sort();
    subjects.dedup();
    assert_eq!(
        (recorded.len(), subjects.len()),
        (200, 200),
        "no message sent twice"
    );
    let ours: BTreeMap<String, usize> = recorded.iter().fold(BTreeMap::new(), |mut acc, m| {
        *acc.entry(m.mailbox.clone()).or_default() += 1;
        acc
    });
    assert!(ours.values().all(|&n| n == 20), "{ours:?}");
}

#[tokio::test]
async fn sixteen_workers_send_everything_through_a_pool_of_two_connections() {
    let world = TestApp::builder()
        .mailboxes(8)
        .per_minute(1_000)
        .sim_latency(graph_sim::Latency::Fixed(100))
        .spawn()
        .await;
    for mailbox in 0..8 {
        world.insert(mailbox, 4, "SCHEDULED").await;
    }
    let mut config = world.config.clone();
    config.worker.concurrency = NonZeroU32::new(16).unwrap();
    config.worker.scheduler_interval = Duration::from_millis(100);
    // No connection is held across a provider call: 2 serve 16 sends in flight.
    let pool = mail_worker::store::connect(&config.database_url, 2)
        .await
        .unwrap();
    let service = daemon::build_service(&config, pool.clone(), Arc::new(SystemClock)).unwrap();
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let run = worker::run(
        pool,
        service,
        daemon::daemon_settings(&config),
        async move {
            let _ = stop_rx.wait_for(|s| *s).await;
        },
    );
    let watch = async {
        wait_until(Duration::from_secs(60), "all 32 SENT", async || {
            world.count("SENT").await == 32
        })
        .await;
        stop_tx.send(true).unwrap();
    };
    tokio::join!(run, watch);
    assert_eq!(world.count("SENT").await, 32);
    assert_eq!(world.sim.messages().len(), 32, "each sent once");
}

/// `mail-worker run` on `world`'s database and Redis, 8 workers, claims every 100 ms, with
/// `extra` variables on top.
fn spawn_binary(world: &TestApp, extra: &[(&str, &str)]) -> tokio::process::Child {
    binary(world, extra).spawn().unwrap()
}

/// The command [`spawn_binary`] runs.
fn binary(world: &TestApp, extra: &[(&str, &str)]) -> tokio::process::Command {
    world.daemon_command(extra)
}

/// A running binary and the lines it has written to stderr (its logs) so far.
pub(crate) struct Logged {
    pub child: tokio::process::Child,
    pub lines: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Logged {
    /// Spawns `command` with stderr collected line by line.
    pub(crate) fn spawn(mut command: tokio::process::Command) -> Self {
        use tokio::io::AsyncBufReadExt;
        let mut child = command
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut reader = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let sink = Arc::clone(&lines);
        tokio::spawn(async move {
            while let Ok(Some(line)) = reader.next_line().await {
                sink.lock().unwrap().push(line);
            }
        });
        Self { child, lines }
    }

    /// How many lines so far carry `event`.
    pub(crate) fn count(&self, event: &str) -> usize {
        let needle = format!("\"event\":\"{event}\"");
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(&needle))
            .count()
    }
}

#[tokio::test]
async fn a_sigterm_logs_daemon_stopping_once() {
    let world = spawn_app().await;
    let mut daemon = Logged::spawn(binary(&world, &[("RUST_LOG", "info")]));
    wait_until(Duration::from_secs(60), "daemon.started", async || {
        daemon.count("daemon.started") == 1
    })
    .await;
    let status = sigterm(&mut daemon.child).await;
    assert_eq!(status.code(), Some(0));
    wait_until(Duration::from_secs(10), "daemon.stopped", async || {
        daemon.count("daemon.stopped") == 1
    })
    .await;
    let lines = daemon.lines.lock().unwrap().join("\n");
    assert_eq!(daemon.count("daemon.stopping"), 1, "{lines}");
    assert_eq!(daemon.count("daemon.signal"), 1, "{lines}");
    assert!(lines.contains("\"signal\":\"SIGTERM\""), "{lines}");
}

/// Sends SIGTERM to `child` and waits (at most 20 s) for it to exit.
pub(crate) async fn sigterm(child: &mut tokio::process::Child) -> std::process::ExitStatus {
    let pid = child.id().unwrap().to_string();
    let term = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(term.success());
    tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .unwrap()
        .unwrap()
}

/// 30 due messages for one mailbox, graph-sim answering each sendMail after 1.5 s.
async fn a_slow_campaign() -> (TestApp, Vec<Uuid>) {
    let world = TestApp::builder()
        .per_minute(1_000)
        .sim_latency(graph_sim::Latency::Fixed(1_500))
        .spawn()
        .await;
    let ids = world.insert(0, 30, "SCHEDULED").await;
    (world, ids)
}

#[tokio::test]
async fn sigterm_mid_campaign_exits_zero_with_nothing_left_sending() {
    let (world, _) = a_slow_campaign().await;
    let mut child = spawn_binary(&world, &[("SHUTDOWN_GRACE", "10s")]);
    // Wait until sends are in flight.
    wait_until(
        Duration::from_secs(30),
        "nothing reached graph-sim",
        async || {
            world
                .sim
                .stats()
                .mailboxes
                .iter()
                .any(|m| m.max_concurrent > 0)
        },
    )
    .await;
    let status = sigterm(&mut child).await;
    assert_eq!(status.code(), Some(0), "a requested shutdown exits 0");
    assert_eq!(
        world.count("SENDING").await,
        0,
        "in-flight sends finished, claimed rows that had not started were given back"
    );
    let sent = world.count("SENT").await;
    assert!(
        (1..30).contains(&sent),
        "{sent} sent of 30: it stopped mid-campaign"
    );
    assert_eq!(world.count("SCHEDULED").await, 30 - sent);
    assert_eq!(world.sim.messages().len() as i64, sent);
}

/// The in-flight leases held under the limiter's key prefix (every mailbox's set).
async fn in_flight_leases(prefix: &str) -> usize {
    let mut conn = crate::support::redis_conn().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*:inflight"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut held = 0;
    for key in keys {
        let n: usize = redis::cmd("ZCARD")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        held += n;
    }
    held
}

/// A daemon whose shutdown grace cuts 3 sends off mid-request (graph-sim serves each for 4 s
/// and, as Exchange, keeps serving it after the client went away), restarted at once: the cut-off
/// sends' leases are kept until their requests time out (`HTTP_TIMEOUT` = 6 s), so the
/// restarted daemon never puts a 4th–6th request on the mailbox while graph-sim still serves the
/// first 3 (issue 46, point 4).
#[tokio::test]
async fn a_restart_after_a_shutdown_cut_sends_off_keeps_exchanges_4_in_flight() {
    let world = TestApp::paced()
        .per_minute(1_000)
        .sim_concurrency(4)
        .sim_latency(graph_sim::Latency::Fixed(4_000))
        .spawn()
        .await;
    world.sim.set_requests_outlive_clients(true);
    let ids = world.insert(0, 10, "SCHEDULED").await;
    let prefix = world.config.rate_limit.key_prefix.clone();
    let env = [
        ("SHUTDOWN_GRACE", "300ms"),
        ("HTTP_TIMEOUT", "6s"),
        ("SEND_LEASE", "12s"),
        // One request per send; a cut-off one is found in Sent Items, not sent again.
        ("GRAPH_SEND_MODE", "sendmail"),
        ("GRAPH_SAVE_TO_SENT_ITEMS", "true"),
    ];
    let mut first = spawn_binary(&world, &env);
    wait_until(
        Duration::from_secs(30),
        "3 requests in flight at graph-sim",
        async || {
            in_flight_leases(&prefix).await == 3
                && world.sim.stats().mailboxes[0].max_concurrent == 3
        },
    )
    .await;
    let status = sigterm(&mut first).await;
    assert_eq!(status.code(), Some(0));
    let kept = in_flight_leases(&prefix).await;
    let mut second = spawn_binary(&world, &env);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while world.count("SENT").await < ids.len() as i64 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let sent = world.count("SENT").await;
    second.start_kill().unwrap();
    second.wait().await.unwrap();
    let stats = world.sim.stats();
    let mailbox = &stats.mailboxes[0];
    println!(
        "leases kept at exit: {kept}; {sent} SENT of 10; at graph-sim: at most {} in flight, {} x 429 (concurrency), {} messages",
        mailbox.max_concurrent,
        mailbox.refused.concurrency,
        world.sim.messages().len()
    );
    assert!(
        mailbox.max_concurrent <= 4,
        "{} requests in flight at once",
        mailbox.max_concurrent
    );
    assert_eq!(mailbox.refused.concurrency, 0, "no 429 for concurrency");
    assert_eq!(kept, 3, "the cut-off sends' leases outlive the process");
    assert_eq!(sent, ids.len() as i64, "every message SENT within 60 s");
    let mut delivered: Vec<String> = world
        .sim
        .messages()
        .iter()
        .map(|m| m.subject.clone().unwrap_or_default())
        .collect();
    delivered.sort();
    let mut expected: Vec<String> = ids.iter().map(Uuid::to_string).collect();
    expected.sort();
    assert_eq!(delivered, expected, "every message delivered exactly once");
}

#[tokio::test]
async fn after_a_crash_no_row_is_left_sending_once_the_lease_expires() {
    let (world, ids) = a_slow_campaign().await;
    let leases = [("HTTP_TIMEOUT", "2500ms"), ("SEND_LEASE", "5s")];
    let mut child = spawn_binary(&world, &leases);
    // Claimed rows: those sending and the prefetch waiting for a slot (8 + 2).
    wait_until(
        Duration::from_secs(30),
        "rows claimed and sends in flight",
        async || world.count("SENDING").await == 10,
    )
    .await;
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let left = world.count("SENDING").await;
    assert!(left > 0, "the crash left claimed rows SENDING");

    let config = {
        let mut c = world.config.worker.clone();
        c.send_lease = Duration::from_secs(5);
        c
    };
    wait_until(Duration::from_secs(30), "the leases expired", async || {
        let expired: bool = sqlx::query_scalar(
            "SELECT bool_and(sending_at < now() - interval '5 seconds') \
             FROM messages WHERE status = 'SENDING'",
        )
        .fetch_one(&world.db.pool)
        .await
        .unwrap();
        expired
    })
    .await;
    assert_eq!(
        worker::recovery::recover_once(&world.db.pool, &config)
            .await
            .unwrap(),
        left as usize,
        "every claimed row"
    );
    assert_eq!(world.count("SENDING").await, 0);
    assert_eq!(
        world.count("SCHEDULED").await + world.count("SENT").await,
        ids.len() as i64,
        "every row SCHEDULED again or SENT"
    );
}

#[tokio::test]
async fn a_limiter_redis_that_does_not_answer_at_start_is_said_loudly_once() {
    let world = TestApp::builder().spawn().await;
    let mut child = binary(
        &world,
        &[
            ("MAIL_RATE_LIMIT_REDIS_URL", "redis://127.0.0.1:1"),
            ("RUST_LOG", "error"),
        ],
    )
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    child.start_kill().unwrap();
    let _ = child.wait().await;
    let mut text = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut text)
        .await
        .unwrap();
    let loud: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("mail.rateLimit.unreachableAtStart"))
        .collect();
    assert_eq!(loud.len(), 1, "said once: {text}");
    assert!(loud[0].contains("\"ERROR\""), "at error level: {}", loud[0]);
    assert!(loud[0].contains("MAIL_RATE_LIMIT_REDIS_URL"), "{}", loud[0]);
}

/// 8 due messages sent by two replicas of the binary with `budget` set, the budget alert at
/// 70 % and the gauges refreshed every 200 ms (the first replica serving `/metrics`), until all
/// are `SENT` and `/metrics` shows `series`; then both are stopped. Of the lines they logged
/// with `mail.budget.nearlyUsed` there must be one (across both): it is returned with its JSON.
async fn the_one_alert_of_two_replicas(
    world: &TestApp,
    budget: (&str, &str),
    series: &str,
) -> (String, serde_json::Value) {
    let ids = world.insert(0, 8, "SCHEDULED").await;
    let listen = format!("127.0.0.1:{}", crate::support::private_redis::free_port());
    let replica = |metrics: &str| {
        let env = [
            budget,
            ("MAIL_BUDGET_ALERT_PERCENT", "70"),
            ("METRICS_REFRESH", "200ms"),
            ("METRICS_LISTEN", metrics),
        ];
        Logged::spawn(binary(world, &env))
    };
    let (mut a, mut b) = (replica(&listen), replica("off"));
    // Generous: CI runs this beside another build on two cores.
    wait_until(Duration::from_secs(90), "8 SENT", async || {
        world.count("SENT").await == ids.len() as i64
    })
    .await;
    let url = format!("http://{listen}/metrics");
    wait_until(
        Duration::from_secs(30),
        &format!("{series} on /metrics"),
        async || match reqwest::get(&url).await {
            Ok(answer) => answer.text().await.unwrap_or_default().contains(series),
            Err(_) => false,
        },
    )
    .await;
    // Both replicas have refreshed several times by now.
    tokio::time::sleep(Duration::from_secs(1)).await;
    for replica in [&mut a, &mut b] {
        sigterm(&mut replica.child).await;
    }
    let said: Vec<String> = [&a, &b]
        .iter()
        .flat_map(|r| r.lines.lock().unwrap().clone())
        .filter(|l| l.contains("mail.budget.nearlyUsed"))
        .collect();
    assert_eq!(said.len(), 1, "once across both replicas: {said:?}");
    let event = serde_json::from_str(&said[0]).unwrap();
    (said[0].clone(), event)
}

#[tokio::test]
async fn a_nearly_used_day_budget_is_a_gauge_and_one_event_across_two_replicas() {
    let world = TestApp::builder().spawn().await;
    let (said, event) = the_one_alert_of_two_replicas(
        &world,
        ("MAIL_RATE_LIMIT_RECIPIENTS_PER_DAY", "10"),
        "mail_worker_budget_used_ratio{mailbox=\"mb0@contoso.example\",window=\"day\"} 0.8",
    )
    .await;
    // The first refresh at or past 70 % logs it: after the 7th or the 8th of the 8 sends.
    let used = event["used_percent"].as_f64().unwrap();
    assert!(used == 70.0 || used == 80.0, "used_percent {used}: {said}");
    assert!(said.contains("\"threshold_percent\":70"), "{said}");
}

#[tokio::test]
async fn a_nearly_used_tenant_budget_is_a_gauge_and_one_event_across_two_replicas() {
    let world = TestApp::paced().tenant_budget(10).spawn().await;
    // One external recipient each (example.org): 8 of the tenant's 10.
    let (said, event) = the_one_alert_of_two_replicas(
        &world,
        ("MAIL_RATE_LIMIT_RESERVED_PERCENT", "0"),
        "mail_worker_tenant_budget_used_ratio{tenant=\"contoso.example\"} 0.8",
    )
    .await;
    let fields = if event["fields"].is_object() {
        &event["fields"]
    } else {
        &event
    };
    assert_eq!(fields["tenant"], "contoso.example", "{said}");
    assert_eq!(fields["external_recipients_per_day"], 10, "{said}");
    // The first refresh at or past 70 %: after the 7th or the 8th send.
    let used = fields["used_percent"].as_f64().unwrap();
    assert!(used == 70.0 || used == 80.0, "{said}");
    assert!(
        fields["mailbox"].is_null(),
        "a tenant's, not a mailbox's: {said}"
    );
}

#[tokio::test]
async fn two_replicas_keep_the_mailboxes_order_snapshot_one_at_a_time() {
    use mail_worker::store::mailbox_order;
    let world = TestApp::builder().mailboxes(2).spawn().await;
    let pool = &world.db.pool;
    // Due tomorrow: nothing is sent, the backlog stays as it is.
    world.insert(1, 3, "SCHEDULED").await;
    sqlx::query("UPDATE messages SET scheduled_on = now() + interval '1 day'")
        .execute(pool)
        .await
        .unwrap();
    assert_eq!(mailbox_order::taken(pool).await.unwrap(), None);
    let mut a = Logged::spawn(binary(&world, &[("RUST_LOG", "info")]));
    let mut b = Logged::spawn(binary(&world, &[("RUST_LOG", "info")]));
    // Each replica tries at start-up: one takes it, the other skips (locked, or fresh).
    wait_until(Duration::from_secs(60), "the order snapshot", async || {
        mailbox_order::taken(pool).await.unwrap().is_some()
    })
    .await;
    let (at, _) = mailbox_order::taken(pool).await.unwrap().unwrap();
    let (ids, counts): (Vec<Uuid>, Vec<i64>) =
        sqlx::query_as("SELECT sender_ids, unfinished FROM mailbox_order")
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!((ids, counts), (vec![world.mailboxes[1].1], vec![3]));
    wait_until(
        Duration::from_secs(60),
        "both replicas started",
        async || a.count("daemon.started") == 1 && b.count("daemon.started") == 1,
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Both have tried by now: still the one snapshot, unless REFRESH_EVERY (less a tenth)
    // passed between (a slow start on a busy machine): never two back to back.
    let (again, _) = mailbox_order::taken(pool).await.unwrap().unwrap();
    assert!(
        again == at || (again - at).to_std().unwrap() >= mailbox_order::REFRESH_EVERY * 9 / 10,
        "{at} then {again}"
    );
    for daemon in [&mut a, &mut b] {
        assert_eq!(sigterm(&mut daemon.child).await.code(), Some(0));
    }
}

/// A sender paused by an earlier process (its `env:` secret unset; the earlier process ran long
/// enough for its probes to be 15 min apart) and a restart with the variable set — a rollout, the
/// only way an `env:` secret reaches the daemon: the new process probes the paused rows at once,
/// not at the earlier process's next probe (issue 46, point 7).
#[tokio::test]
async fn a_restart_probes_the_rows_an_earlier_process_paused_at_once() {
    let world = TestApp::paced().per_minute(1_000).spawn().await;
    sqlx::query("UPDATE system_mailboxes SET graph_client_secret = 'env:MW_PAUSE_TEST_SECRET'")
        .execute(&world.db.pool)
        .await
        .unwrap();
    let ids = world.insert(0, 3, "SCHEDULED").await;
    let mut first = spawn_binary(&world, &[]);
    let paused = async || -> i64 {
        sqlx::query_scalar(
            "SELECT count(*) FROM messages WHERE status = 'SCHEDULED' AND wait_reason = 'paused'",
        )
        .fetch_one(&world.db.pool)
        .await
        .unwrap()
    };
    wait_until(Duration::from_secs(30), "the 3 rows paused", async || {
        paused().await == 3
    })
    .await;
    assert_eq!(sigterm(&mut first).await.code(), Some(0));
    // As a process paused for an hour leaves them: its next probe 15 min out.
    world
        .execute(
            "UPDATE messages SET scheduled_on = now() + interval '15 minutes' \
             WHERE wait_reason = 'paused' AND $1::uuid IS NOT NULL",
            ids[0],
        )
        .await;
    let started = std::time::Instant::now();
    let mut second = spawn_binary(
        &world,
        &[("MW_PAUSE_TEST_SECRET", crate::support::app::SECRET)],
    );
    let deadline = started + Duration::from_secs(20);
    while world.count("SENT").await < 3 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (sent, took) = (world.count("SENT").await, started.elapsed());
    second.start_kill().unwrap();
    second.wait().await.unwrap();
    let next: Option<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM min(scheduled_on) - now())::float8 FROM messages \
         WHERE status = 'SCHEDULED'",
    )
    .fetch_one(&world.db.pool)
    .await
    .unwrap();
    println!("{sent} of 3 SENT {took:?} after the restart; the rest due in {next:?} s");
    assert_eq!(sent, 3, "probed at once, not 15 min later");
}
