//! The worker end to end: the real service stack (MailerFactory → RateLimitedGraphMailer →
//! MicrosoftGraphMailer, the real MailRateLimiter on Redis) against graph-sim in process, with
//! PostgreSQL rows driven through the job handler, the daemon loops, and the binary.

use std::{collections::BTreeMap, num::NonZeroU32, sync::Arc, time::Duration};

use chrono::{DateTime, TimeZone, Utc};
use graph_sim::{GraphSim, MailboxLimits, ScriptedAnswer, SimConfig, SimMailbox, Target};
use mail_worker::{
    clock::{Clock, ManualClock, SystemClock},
    config::Config,
    daemon,
    domain::{GraphCredentials, MailboxAddress, SecretRef},
    service::{SendOutcome, spread_ms},
    store::senders,
    worker::{self, handler::Handler, queue::SendMessageJob},
};
use uuid::Uuid;

use crate::helpers::{self, TestDb};

const TENANT: &str = "contoso.example";
const CLIENT: &str = "11111111-1111-4111-8111-111111111111";
const SECRET: &str = "e2e-secret";

/// A test world: a database, graph-sim and a config pointing at both.
struct World {
    db: TestDb,
    sim: GraphSim,
    config: Config,
    mailboxes: Vec<(MailboxAddress, Uuid)>,
}

impl World {
    /// `n` system mailboxes `mbN@contoso.example` with our limit `per_minute`, graph-sim with
    /// Exchange's limits but `sim_concurrency` concurrent requests, and `clock` for the sim.
    async fn new(
        n: usize,
        per_minute: u32,
        sim_concurrency: u32,
        clock: Option<ManualClock>,
    ) -> Self {
        let db = TestDb::new().await;
        let mut sim_config = SimConfig::new().with_app(TENANT, CLIENT, SECRET);
        if let Some(clock) = clock {
            sim_config = sim_config.with_clock(clock);
        }
        let mut mailboxes = Vec::new();
        for i in 0..n {
            let address = MailboxAddress::parse(&format!("mb{i}@contoso.example")).unwrap();
            sim_config = sim_config.with_mailbox(
                SimMailbox::new(address.as_str(), TENANT).with_limits(MailboxLimits {
                    concurrent_requests: sim_concurrency,
                    ..MailboxLimits::default()
                }),
            );
            let id = senders::upsert_system_mailbox(
                &db.pool,
                &address,
                &GraphCredentials {
                    graph_tenant_id: TENANT.into(),
                    client_id: CLIENT.into(),
                    client_secret: SecretRef::new(SECRET),
                },
                NonZeroU32::new(per_minute),
                None,
            )
            .await
            .unwrap();
            mailboxes.push((address, id));
        }
        let sim = GraphSim::start(sim_config).await.unwrap();
        let mut config = Config::from_lookup(|_| None).unwrap();
        config.database_url = db.url.clone();
        config.redis_url = helpers::redis_url();
        config.rate_limit.redis_url = helpers::redis_url();
        config.rate_limit.key_prefix = helpers::redis_prefix();
        config.worker.queue_name = helpers::redis_prefix();
        config.graph.api_base_url = sim.graph_base_url();
        config.graph.login_base_url = sim.login_base_url();
        config.http_timeout = Duration::from_secs(10);
        Self {
            db,
            sim,
            config,
            mailboxes,
        }
    }

    fn handler(&self, clock: Arc<dyn Clock>) -> Handler {
        let service = daemon::build_service(&self.config, self.db.pool.clone(), clock).unwrap();
        Handler::new(self.db.pool.clone(), service)
    }

    /// Inserts `n` messages for mailbox `i` with status `status`; the subject is the id.
    async fn insert(&self, mailbox: usize, n: usize, status: &str) -> Vec<Uuid> {
        let mut ids = Vec::new();
        for k in 0..n {
            let id = Uuid::new_v4();
            sqlx::query(
                "INSERT INTO messages (id, system_mailbox_id, to_recipients, subject, body, status, queued_at) \
                 VALUES ($1, $2, $3, $4, '<p>hi</p>', $5, now())",
            )
            .bind(id)
            .bind(self.mailboxes[mailbox].1)
            .bind(serde_json::json!([{ "address": format!("guest{k}@example.org"), "name": "Gäst" }]))
            .bind(id.to_string())
            .bind(status)
            .execute(&self.db.pool)
            .await
            .unwrap();
            ids.push(id);
        }
        ids
    }

    async fn status_of(&self, id: Uuid) -> (String, Option<String>, DateTime<Utc>) {
        sqlx::query_as("SELECT status, last_error, scheduled_on FROM messages WHERE id = $1")
            .bind(id)
            .fetch_one(&self.db.pool)
            .await
            .unwrap()
    }

    async fn count(&self, status: &str) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM messages WHERE status = $1")
            .bind(status)
            .fetch_one(&self.db.pool)
            .await
            .unwrap()
    }

    /// `SCHEDULED` rows due by `at` back to `QUEUED` (what the claim loop does), returning them.
    async fn requeue_due(&self, at: DateTime<Utc>) -> Vec<Uuid> {
        sqlx::query_scalar(
            "UPDATE messages SET status = 'QUEUED', queued_at = now() \
             WHERE status = 'SCHEDULED' AND scheduled_on <= $1 RETURNING id",
        )
        .bind(at)
        .fetch_all(&self.db.pool)
        .await
        .unwrap()
    }

    /// Sends per UTC minute (`HH:MM`) as graph-sim recorded them.
    fn sends_per_minute(&self) -> BTreeMap<String, usize> {
        let mut per = BTreeMap::new();
        for m in self.sim.messages() {
            *per.entry(m.received_at.format("%H:%M").to_string())
                .or_default() += 1;
        }
        per
    }
}

async fn process_all(handler: &Handler, ids: &[Uuid]) -> Vec<SendOutcome> {
    let mut set = tokio::task::JoinSet::new();
    for &id in ids {
        let handler = handler.clone();
        set.spawn(async move {
            handler
                .process(SendMessageJob { message_id: id })
                .await
                .unwrap()
                .unwrap()
        });
    }
    set.join_all().await
}

fn noon() -> DateTime<Utc> {
    // A fixed start of a UTC minute; the limiter's keys carry the date, so runs never collide
    // with each other thanks to the random key prefix.
    Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap()
}

#[tokio::test]
async fn forty_messages_at_a_ten_per_minute_limit_go_out_ten_per_utc_minute_with_spread() {
    helpers::capture_logs();
    let clock = ManualClock::new(noon());
    let world = World::new(1, 10, 64, Some(clock.clone())).await;
    let handler = world.handler(Arc::new(clock.clone()));
    let ids = world.insert(0, 40, "QUEUED").await;

    let outcomes = process_all(&handler, &ids).await;
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
            let logged = helpers::logs_containing(&id.to_string());
            let event = logged
                .iter()
                .find(|l| l["event"] == "mail.rateLimit.deferred")
                .unwrap_or_else(|| panic!("no deferral event for {id}: {logged:?}"));
            assert_eq!(event["reason"], "minute");
            assert_eq!(event["retry_after_ms"], 60_000);
            assert_eq!(event["spread_ms"], spread_ms(id, 30_000));
        }
    }
    // The next minutes: each takes exactly ten more.
    for minute in 1..=3 {
        clock.set(noon() + chrono::Duration::seconds(minute * 60 + 31));
        let due = world.requeue_due(clock.now()).await;
        assert_eq!(due.len(), 40 - 10 * minute as usize, "minute {minute}");
        process_all(&handler, &due).await;
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
    let clock = ManualClock::new(noon());
    let world = World::new(1, 10, 64, Some(clock.clone())).await;
    let handler = world.handler(Arc::new(clock.clone()));
    let first = world.insert(0, 5, "QUEUED").await;
    process_all(&handler, &first).await;
    assert_eq!(world.count("SENT").await, 5);

    // What `mail-worker mailbox set-limits mb0@contoso.example --per-minute 3` does.
    let change = senders::LimitsChange::Set {
        per_minute: NonZeroU32::new(3),
        recipients_per_day: None,
    };
    senders::set_limits(&world.db.pool, &world.mailboxes[0].0, change)
        .await
        .unwrap();
    clock.set(noon() + chrono::Duration::seconds(60));
    let next = world.insert(0, 10, "QUEUED").await;
    process_all(&handler, &next).await;
    assert_eq!(
        world.count("SENT").await,
        5 + 3,
        "the new limit, 3 per minute, applies"
    );
    assert_eq!(world.count("SCHEDULED").await, 7);
}

#[tokio::test]
async fn with_the_limiters_redis_unreachable_messages_are_still_sent_and_the_error_logged() {
    helpers::capture_logs();
    let mut world = World::new(1, 10, 64, None).await;
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    world.config.rate_limit.redis_url =
        url::Url::parse(&format!("redis://127.0.0.1:{closed}")).unwrap();
    let handler = world.handler(Arc::new(SystemClock));
    let ids = world.insert(0, 12, "QUEUED").await;
    let started = std::time::Instant::now();
    let outcomes = process_all(&handler, &ids).await;
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
    let warned = helpers::logs_containing("mb0@contoso.example")
        .into_iter()
        .filter(|l| l["event"] == "mail.rateLimit.redisError" && l["level"] == "WARN")
        .count();
    assert!(warned >= 1, "mail.rateLimit.redisError logged");
}

#[tokio::test]
async fn graph_throttling_and_refusals_become_deferrals_backoff_and_errors() {
    let world = World::new(1, 25, 64, None).await;
    let handler = world.handler(Arc::new(SystemClock));
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
    let ids = world.insert(0, 3, "QUEUED").await;
    let mut results = Vec::new();
    for &id in &ids {
        let before = Utc::now();
        handler
            .process(SendMessageJob { message_id: id })
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
    let world = World::new(10, 1_000, 4, None).await;
    let mut ids = Vec::new();
    for mailbox in 0..10 {
        ids.extend(world.insert(mailbox, 20, "SCHEDULED").await);
    }
    let mut config = world.config.clone();
    config.worker.scheduler_interval = Duration::from_millis(100);
    config.worker.poll_interval = Duration::from_millis(50);
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
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            loop {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let left: i64 =
                    sqlx::query_scalar("SELECT count(*) FROM messages WHERE status <> 'SENT'")
                        .fetch_one(&pool)
                        .await
                        .unwrap();
                if left == 0 || std::time::Instant::now() > deadline {
                    break;
                }
            }
            let _ = stop_tx.send(());
        }
    };
    let (a, b, ()) = tokio::join!(
        replica(stop_tx.subscribe()),
        replica(stop_tx.subscribe()),
        stopper
    );
    a.unwrap();
    b.unwrap();
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
async fn sigterm_mid_campaign_exits_zero_with_nothing_left_sending() {
    let world = World::new(1, 1_000, 64, None).await;
    world
        .sim
        .set_latency(Target::Global, graph_sim::Latency::Fixed(1_500))
        .unwrap();
    world.insert(0, 30, "SCHEDULED").await;
    let config = &world.config;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mail-worker"))
        .arg("run")
        .env("DATABASE_URL", config.database_url.as_str())
        .env("REDIS_URL", config.redis_url.as_str())
        .env("MAIL_RATE_LIMIT_KEY_PREFIX", &config.rate_limit.key_prefix)
        .env("QUEUE_NAME", &config.worker.queue_name)
        .env("GRAPH_API_BASE_URL", config.graph.api_base_url.as_str())
        .env("GRAPH_LOGIN_BASE_URL", config.graph.login_base_url.as_str())
        .env("WORKER_CONCURRENCY", "8")
        .env("SCHEDULER_INTERVAL_MS", "100")
        .env("WORKER_POLL_INTERVAL_MS", "50")
        .env("SHUTDOWN_GRACE_MS", "10000")
        .env("RUST_LOG", "warn")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // Wait until sends are in flight.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while world.count("SENDING").await == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "nothing started SENDING"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let in_flight = world.count("SENDING").await;
    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0), "a requested shutdown exits 0");
    assert_eq!(world.count("SENDING").await, 0, "in-flight sends finished");
    let sent = world.count("SENT").await;
    assert!(
        sent >= in_flight && sent < 30,
        "{in_flight} in flight, {sent} sent of 30: it stopped mid-campaign"
    );
    assert_eq!(world.sim.messages().len() as i64, sent);
}
