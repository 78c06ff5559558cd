//! The intake queue (src/intake) against the real Redis and PostgreSQL: jobs pushed as campaign
//! lines become rows, bad ones are dead-lettered with the file import's reason, finished jobs
//! leave Redis, a stopped consumer leaves nothing behind, a killed one is forgotten once its jobs
//! are re-queued, and a replica SIGKILLed with jobs in flight loses none of them.

use std::{sync::Arc, time::Duration};

use mail_worker::{
    import::campaign::{SenderDirectory, parse_line_bytes},
    intake::{self, IntakeSettings, dead},
    log_events,
    ops::Metrics,
};
use redis::AsyncCommands;
use uuid::Uuid;

use crate::{
    daemon::{Logged, sigterm},
    support::{
        TestApp,
        logs::{capture_logs, logs_containing},
        redis_url, sorted, spawn_app, wait_until,
    },
};

/// Workers alive for `dead::stats`: the production orphan threshold (10 s × 3).
pub(crate) const ALIVE: Duration = Duration::from_secs(30);

pub(crate) fn line(id: Uuid, mailbox: &str) -> Vec<u8> {
    serde_json::json!({
        "id": id.to_string(),
        "systemMailbox": mailbox,
        "to": [{"address": "guest@fabrikam.example"}],
        "subject": "Invitation",
        "body": {"contentType": "text", "content": "Hello"},
    })
    .to_string()
    .into_bytes()
}

/// Every key of `queue` (`<queue>:…`), sorted.
async fn queue_keys(queue: &str) -> Vec<String> {
    let mut conn = crate::support::redis_conn().await;
    let mut keys: Vec<String> = conn.keys(format!("{queue}:*")).await.unwrap();
    keys.sort();
    keys
}

pub(crate) fn settings(app: &TestApp) -> IntakeSettings {
    quick_settings(app.config.intake.queue.as_deref().unwrap(), "it")
}

/// `queue`'s settings with a cleanup every 200 ms and a poll every 20 ms.
pub(crate) fn quick_settings(queue: &str, worker: &str) -> IntakeSettings {
    let mut s = IntakeSettings::new(queue, Some(worker));
    s.cleanup_every = Duration::from_millis(200);
    s.poll = Duration::from_millis(20);
    s
}

/// Waits until message `id` is stored.
async fn wait_for_row(app: &TestApp, id: Uuid) {
    let pool = app.db.pool.clone();
    wait_until(Duration::from_secs(10), "the row", async || {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM messages WHERE id = $1")
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap()
            == 1
    })
    .await;
}

/// Waits (up to 20 s) until the queue's counts satisfy `holds`.
async fn wait_for_stats(
    conn: &intake::QueueConnection,
    queue: &str,
    what: &str,
    holds: impl Fn(&dead::QueueStats) -> bool,
) {
    wait_for_stats_within(Duration::from_secs(20), conn, queue, what, holds).await;
}

/// Waits (up to `within`) until the queue's counts satisfy `holds`.
pub(crate) async fn wait_for_stats_within(
    within: Duration,
    conn: &intake::QueueConnection,
    queue: &str,
    what: &str,
    holds: impl Fn(&dead::QueueStats) -> bool,
) {
    let mut c = conn.clone();
    wait_until(within, what, async || {
        holds(&dead::stats(&mut c, queue, ALIVE).await.unwrap())
    })
    .await;
}

/// Every finished job is gone: none done (kept), waiting or in flight.
pub(crate) fn drained(s: &dead::QueueStats) -> bool {
    s.done == 0 && s.waiting == 0 && s.in_flight == 0
}

/// Starts a consumer of the app's queue; cancel the token to stop it.
pub(crate) fn consume(
    app: &TestApp,
    conn: &intake::QueueConnection,
    metrics: &Arc<Metrics>,
) -> Consumer {
    consume_with(settings(app), app, conn, metrics)
}

/// A running consumer: cancel the token to stop it, then await it.
pub(crate) type Consumer = (
    mail_worker::shutdown::CancellationToken,
    tokio::task::JoinHandle<Result<(), intake::IntakeError>>,
);

/// Starts a consumer with `settings` into the app's database; cancel the token to stop it.
pub(crate) fn consume_with(
    settings: IntakeSettings,
    app: &TestApp,
    conn: &intake::QueueConnection,
    metrics: &Arc<Metrics>,
) -> Consumer {
    let stop = mail_worker::shutdown::CancellationToken::new();
    let consumer = tokio::spawn(intake::run(
        settings,
        conn.clone(),
        app.db.pool.clone(),
        Arc::clone(metrics),
        stop.clone(),
    ));
    (stop, consumer)
}

/// An app with an intake queue: it, the queue's name and its first mailbox.
async fn intake_app() -> (TestApp, String, String) {
    let app = spawn_app().await;
    let queue = app.config.intake.queue.clone().unwrap();
    let mailbox = app.mailboxes[0].0.as_str().to_owned();
    (app, queue, mailbox)
}

#[tokio::test]
async fn queued_lines_become_rows_and_bad_ones_are_dead_with_the_file_imports_reason() {
    let (app, queue, mailbox) = intake_app().await;
    let conn = intake::connect(&redis_url().into()).await.unwrap();
    let ids: Vec<Uuid> = (0..60).map(|_| Uuid::new_v4()).collect();
    let mut lines: Vec<Vec<u8>> = ids.iter().map(|id| line(*id, &mailbox)).collect();
    let bad: Vec<Vec<u8>> = vec![
        b"not json at all".to_vec(),
        line(Uuid::new_v4(), "nobody@contoso.example"),
        String::from_utf8(line(Uuid::new_v4(), &mailbox))
            .unwrap()
            .replace("Hello", "Hel\\u0000lo")
            .into_bytes(),
        [b"{\"id\": \"x\xff\"}".as_slice()].concat(),
    ];
    lines.extend(bad.iter().cloned());
    // The same message pushed again while the first is still queued: not a second job.
    lines.push(line(ids[0], &mailbox));
    assert_eq!(
        intake::push_lines(conn.clone(), &queue, lines)
            .await
            .unwrap(),
        64
    );

    let metrics = Arc::new(Metrics::new());
    let (stop, consumer) = consume(&app, &conn, &metrics);
    let pool = app.db.pool.clone();
    wait_until(Duration::from_secs(20), "60 rows", async || {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM messages WHERE status = 'SCHEDULED'")
            .fetch_one(&pool)
            .await
            .unwrap();
        n == 60
    })
    .await;
    wait_for_stats(&conn, &queue, "4 dead, none done left", |s| {
        s.dead == 4 && drained(s)
    })
    .await;
    let mut c = conn.clone();

    // The dead jobs' reasons are the file import's for the same lines.
    let directory = SenderDirectory {
        tenants: Default::default(),
        system_mailboxes: [(mailbox.clone(), app.mailboxes[0].1)]
            .into_iter()
            .collect(),
    };
    let expected = sorted(
        bad.iter()
            .map(|l| parse_line_bytes(1, l, &directory).unwrap_err().reason),
    );
    let listed = dead::list(&mut c, &queue, 100).await.unwrap();
    assert_eq!(sorted(listed.into_iter().map(|d| d.reason)), expected);
    let text = metrics.encode();
    assert!(
        text.contains("mail_worker_intake_jobs_total{outcome=\"inserted\"} 60"),
        "{text}"
    );
    assert!(
        text.contains("mail_worker_intake_jobs_total{outcome=\"dead\"} 4"),
        "{text}"
    );

    // Discarded, the dead leave nothing but the (empty) structures apalis keeps.
    assert_eq!(
        dead::discard(&mut c, &queue, dead::Which::All)
            .await
            .unwrap(),
        4
    );
    stop.cancel();
    consumer.await.unwrap().unwrap();
    let left = queue_keys(&queue).await;
    assert_eq!(left, Vec::<String>::new(), "keys left: {left:?}");
}

#[tokio::test]
async fn a_retried_dead_job_is_stored_once_its_sender_exists() {
    let app = spawn_app().await;
    let queue = app.config.intake.queue.clone().unwrap();
    let conn = intake::connect(&redis_url().into()).await.unwrap();
    let id = Uuid::new_v4();
    intake::push_lines(conn.clone(), &queue, [line(id, "late@contoso.example")])
        .await
        .unwrap();
    let metrics = Arc::new(Metrics::new());
    let (stop, consumer) = consume(&app, &conn, &metrics);
    wait_for_stats(&conn, &queue, "1 dead", |s| s.dead == 1).await;
    let mut c = conn.clone();
    sqlx::query("INSERT INTO system_mailboxes (address, graph_client_id, graph_tenant_id, graph_client_secret) VALUES ('late@contoso.example', 'c', 't', 's')")
        .execute(&app.db.pool)
        .await
        .unwrap();
    assert_eq!(
        dead::retry(&mut c, &queue, dead::Which::All).await.unwrap(),
        1
    );
    wait_for_row(&app, id).await;
    stop.cancel();
    consumer.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_jobs_campaign_is_stored_from_its_campaign_id_or_its_x_campaign_id_header() {
    let (app, queue, mailbox) = intake_app().await;
    let conn = intake::connect(&redis_url().into()).await.unwrap();
    let with = |id: Uuid, extra: serde_json::Value| {
        let mut v: serde_json::Value = serde_json::from_slice(&line(id, &mailbox)).unwrap();
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v.to_string().into_bytes()
    };
    let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    let lines = [
        with(a, serde_json::json!({"campaignId": "spring"})),
        with(
            b,
            serde_json::json!({"headers": [{"name": "x-campaign-id", "value": "autumn"}]}),
        ),
        line(c, &mailbox),
    ];
    intake::push_lines(conn.clone(), &queue, lines)
        .await
        .unwrap();
    let metrics = Arc::new(Metrics::new());
    let (stop, consumer) = consume(&app, &conn, &metrics);
    for id in [a, b, c] {
        wait_for_row(&app, id).await;
    }
    stop.cancel();
    consumer.await.unwrap().unwrap();
    for (id, campaign) in [(a, Some("spring")), (b, Some("autumn")), (c, None)] {
        let (stored,): (Option<String>,) = app
            .one_row("SELECT campaign_id FROM messages WHERE id = $1", id)
            .await;
        assert_eq!(stored.as_deref(), campaign);
    }
}

/// Runs `cmd` to its end; panics with its stderr unless it succeeded.
fn succeeded(cmd: &mut std::process::Command) -> std::process::Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `mail-worker <args>` that must exit 1: its stderr.
fn failed(args: &[&str], queue: &str, db: &url::Url) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mail-worker"))
        .args(args)
        .env("INTAKE_QUEUE", queue)
        .env("REDIS_URL", redis_url().as_str())
        .env("DATABASE_URL", db.as_str())
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    stderr
}

fn cli(args: &[&str], queue: &str, db: &url::Url) -> String {
    cli_on(redis_url().as_str(), args, queue, db)
}

/// `mail-worker <args>` with `REDIS_URL=<redis>` (a list of cluster seeds, say).
pub(crate) fn cli_on(redis: &str, args: &[&str], queue: &str, db: &url::Url) -> String {
    let out = succeeded(
        std::process::Command::new(env!("CARGO_BIN_EXE_mail-worker"))
            .args(args)
            .env("INTAKE_QUEUE", queue)
            .env("REDIS_URL", redis)
            .env("DATABASE_URL", db.as_str())
            .env("RUST_LOG", "warn"),
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn enqueue_via_queue_and_the_queue_commands() {
    let (app, queue, mailbox) = intake_app().await;
    let dir = crate::support::temp_dir("mw-intake-");
    let file = dir.path().join("campaign.jsonl");
    let mut text = String::new();
    for _ in 0..3 {
        text += &String::from_utf8(line(Uuid::new_v4(), &mailbox)).unwrap();
        text += "\n";
    }
    text += "{broken\n\n";
    std::fs::write(&file, &text).unwrap();
    let path = file.to_str().unwrap();
    // A dry run checks the lines as the import would and pushes nothing.
    let dry = std::process::Command::new(env!("CARGO_BIN_EXE_mail-worker"))
        .args(["enqueue", path, "--via", "queue", "--dry-run"])
        .env("INTAKE_QUEUE", &queue)
        .env("REDIS_URL", redis_url().as_str())
        .env("DATABASE_URL", app.db.url.as_str())
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert_eq!(dry.status.code(), Some(1), "the bad line is reported");
    let dry = String::from_utf8_lossy(&dry.stdout).into_owned();
    assert!(
        dry.contains("3 messages would be inserted") && dry.contains("(dry run: nothing written)"),
        "{dry}"
    );
    assert_eq!(queue_keys(&queue).await, Vec::<String>::new(), "{dry}");
    // Without --dry-run: the same check, and a bad line pushes nothing (exit 1, named).
    let refused = failed(&["enqueue", path, "--via", "queue"], &queue, &app.db.url);
    assert!(
        refused.contains(&format!("{path}:line 4: not a message"))
            && refused.contains("1 bad line: nothing pushed"),
        "{refused}"
    );
    assert_eq!(queue_keys(&queue).await, Vec::<String>::new(), "{refused}");
    let good: String = text.lines().take(3).map(|l| format!("{l}\n")).collect();
    std::fs::write(&file, good).unwrap();
    let pushed = cli(&["enqueue", path, "--via", "queue"], &queue, &app.db.url);
    assert!(pushed.starts_with("3 of 3 lines pushed onto"), "{pushed}");
    let again = cli(&["enqueue", path, "--via", "queue"], &queue, &app.db.url);
    assert!(
        again.starts_with("0 of 3 lines pushed onto") && again.contains("(3 already there"),
        "{again}"
    );
    // A producer of its own can still push a bad line (it becomes a dead letter): two, each
    // without an id, so each a new job.
    let conn = intake::connect(&redis_url().into()).await.unwrap();
    let bad = vec![b"{broken".to_vec(), b"{broken".to_vec()];
    assert_eq!(intake::push_lines(conn, &queue, bad).await.unwrap(), 2);
    let stats = cli(&["queue", "stats"], &queue, &app.db.url);
    assert!(
        stats.contains("scheduled 5") || stats.contains("waiting 5"),
        "{stats}"
    );

    let metrics = Arc::new(Metrics::new());
    let conn = intake::connect(&redis_url().into()).await.unwrap();
    let (stop, consumer) = consume(&app, &conn, &metrics);
    wait_for_stats(&conn, &queue, "2 dead, 0 done", |s| {
        s.dead == 2 && s.done == 0
    })
    .await;
    stop.cancel();
    consumer.await.unwrap().unwrap();
    assert_eq!(app.count("SCHEDULED").await, 3);
    let listed = cli(&["queue", "dead"], &queue, &app.db.url);
    assert!(listed.contains("(7 bytes): not a message:"), "{listed}");
    let discarded = cli(&["queue", "discard", "--all"], &queue, &app.db.url);
    assert_eq!(discarded, "2 dead jobs discarded\n");
    assert_eq!(queue_keys(&queue).await, Vec::<String>::new());
}

#[tokio::test]
async fn a_job_pushed_with_redis_cli_as_docs_queue_md_says_becomes_a_row() {
    let app = spawn_app().await;
    let queue = app.config.intake.queue.clone().unwrap();
    let id = Uuid::new_v4().to_string();
    let line = String::from_utf8(line(id.parse().unwrap(), app.mailboxes[0].0.as_str())).unwrap();
    let url = redis_url();
    for args in [
        vec![
            "HSETNX".to_owned(),
            format!("{queue}:data"),
            id.clone(),
            line,
        ],
        [
            "HSET",
            &format!("{queue}:meta:{id}"),
            "attempts",
            "0",
            "max_attempts",
            "25",
            "status",
            "Pending",
            "idempotency_key",
            "",
        ]
        .map(str::to_owned)
        .to_vec(),
        vec!["RPUSH".to_owned(), format!("{queue}:active"), id.clone()],
    ] {
        succeeded(
            std::process::Command::new("redis-cli")
                .args(["-u", url.as_str()])
                .args(&args),
        );
    }
    let metrics = Arc::new(Metrics::new());
    let conn = intake::connect(&redis_url().into()).await.unwrap();
    let (stop, consumer) = consume(&app, &conn, &metrics);
    wait_for_row(&app, id.parse().unwrap()).await;
    stop.cancel();
    consumer.await.unwrap().unwrap();
}

/// The tests' Python with the `redis` package (scripts/test-deps.sh installs it at setup).
pub(crate) fn python_with_redis() -> std::path::PathBuf {
    crate::support::python::with("redis")
}

#[tokio::test]
async fn jobs_pushed_by_the_python_producer_example_become_rows() {
    let (app, queue, mailbox) = intake_app().await;
    let ids: Vec<Uuid> = (0..25).map(|_| Uuid::new_v4()).collect();
    let mut text = String::new();
    for id in &ids {
        text += &String::from_utf8(line(*id, &mailbox)).unwrap();
        text += "\r\n";
    }
    text += "\nnot json\n";
    let dir = crate::support::temp_dir("mw-intake-");
    let file = dir.path().join("campaign.jsonl");
    std::fs::write(&file, &text).unwrap();
    let push = || {
        succeeded(
            std::process::Command::new(python_with_redis())
                .arg(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/examples/producers/python/push.py"
                ))
                .arg(&file)
                .env("INTAKE_QUEUE", &queue)
                .env("REDIS_URL", redis_url().as_str()),
        )
    };
    let first = push();
    // Pushed again while queued: only the line without an id is a new job.
    let second = push();
    assert_eq!(
        String::from_utf8_lossy(&first.stdout),
        format!("26 lines pushed onto {queue} (0 already queued)\n")
    );
    assert_eq!(
        String::from_utf8_lossy(&second.stdout),
        format!("1 line pushed onto {queue} (25 already queued)\n")
    );

    let metrics = Arc::new(Metrics::new());
    let conn = intake::connect(&redis_url().into()).await.unwrap();
    let (stop, consumer) = consume(&app, &conn, &metrics);
    wait_for_stats(&conn, &queue, "2 dead, none left", |s| {
        s.dead == 2 && drained(s)
    })
    .await;
    let mut c = conn.clone();
    stop.cancel();
    consumer.await.unwrap().unwrap();
    let stored: Vec<Uuid> =
        sqlx::query_scalar("SELECT id FROM messages WHERE status = 'SCHEDULED'")
            .fetch_all(&app.db.pool)
            .await
            .unwrap();
    assert_eq!(sorted(stored), sorted(ids.clone()));
    let reasons: Vec<String> = dead::list(&mut c, &queue, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.reason)
        .collect();
    assert!(
        reasons.iter().all(|r| r.starts_with("not a message:")),
        "{reasons:?}"
    );
    dead::discard(&mut c, &queue, dead::Which::All)
        .await
        .unwrap();
    assert_eq!(queue_keys(&queue).await, Vec::<String>::new());
}

/// `n` good lines for `mailbox` to be sent in 2099 (so a daemon under test stores them and
/// sends none), and their ids.
fn later_lines(mailbox: &str, n: usize) -> (Vec<Uuid>, Vec<Vec<u8>>) {
    let ids: Vec<Uuid> = (0..n).map(|_| Uuid::new_v4()).collect();
    let lines = ids
        .iter()
        .map(|id| {
            let mut v: serde_json::Value = serde_json::from_slice(&line(*id, mailbox)).unwrap();
            v["scheduledOn"] = "2099-01-01T00:00:00Z".into();
            v.to_string().into_bytes()
        })
        .collect();
    (ids, lines)
}

/// Rows stored for the app.
async fn rows(app: &TestApp) -> i64 {
    app.db.rows_in("messages").await
}

#[tokio::test]
async fn after_20000_jobs_the_queues_redis_is_back_within_100_keys_and_1_mb() {
    const JOBS: usize = 20_000;
    let (app, queue, mailbox) = intake_app().await;
    // A Redis of its own: the shared one's memory moves with every other test.
    let mut redis = test_support::measured_redis::MeasuredRedis::start().await;
    let conn = intake::connect(&redis.url.clone().into()).await.unwrap();
    let metrics = Arc::new(Metrics::new());
    // "Before": a queue in use (its scripts loaded, its connections open), 100 jobs consumed.
    let (_, warm_up) = later_lines(&mailbox, 100);
    intake::push_lines(conn.clone(), &queue, warm_up)
        .await
        .unwrap();
    let (stop, consumer) = consume(&app, &conn, &metrics);
    wait_until(Duration::from_secs(20), "the warm-up stored", async || {
        rows(&app).await == 100
    })
    .await;
    wait_for_stats(&conn, &queue, "the warm-up's jobs removed", drained).await;
    stop.cancel();
    consumer.await.unwrap().unwrap();
    let (keys_before, memory_before) = (redis.dbsize().await, redis.used_memory().await);
    let (_, lines) = later_lines(&mailbox, JOBS);
    assert_eq!(
        intake::push_lines(conn.clone(), &queue, lines)
            .await
            .unwrap(),
        JOBS
    );
    let (keys_full, memory_full) = (redis.dbsize().await, redis.used_memory().await);
    assert!(
        keys_full >= JOBS as u64,
        "{keys_full} keys with {JOBS} jobs queued"
    );

    let metrics = Arc::new(Metrics::new());
    let (stop, consumer) = consume(&app, &conn, &metrics);
    wait_until(Duration::from_secs(60), "every job a row", async || {
        rows(&app).await == 100 + JOBS as i64
    })
    .await;
    wait_for_stats(&conn, &queue, "done jobs removed", drained).await;
    stop.cancel();
    consumer.await.unwrap().unwrap();
    let (keys_after, memory_after) = (redis.dbsize().await, redis.used_memory().await);
    eprintln!(
        "keys {keys_before} → {keys_full} → {keys_after}; used_memory {memory_before} → {memory_full} → {memory_after}"
    );
    assert!(
        keys_after <= keys_before + 100,
        "{keys_after} keys left (before: {keys_before})"
    );
    assert!(
        memory_after <= memory_before + 1_000_000,
        "used_memory {memory_after} after, {memory_before} before"
    );
}

/// Redis's clock, Unix seconds.
async fn redis_now(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let (secs, _): (u64, u64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    secs
}

#[tokio::test]
async fn queue_stats_count_only_workers_with_a_recent_heartbeat_and_the_oldest_jobs_age() {
    let (app, queue, mailbox) = intake_app().await;
    let mut r = crate::support::redis_conn().await;
    let now = redis_now(&mut r).await;
    // A worker that beat 100 s ago (killed: its in-flight set still holds a job) and one that
    // beat now, as apalis-redis registers them.
    let _: () = r
        .zadd(format!("{queue}:workers"), "killed-1", now - 100)
        .await
        .unwrap();
    let _: () = r
        .zadd(format!("{queue}:workers"), "live-1", now)
        .await
        .unwrap();
    let _: () = r
        .sadd(format!("{queue}:inflight:killed-1"), "some-task")
        .await
        .unwrap();
    let conn = intake::connect(&redis_url().into()).await.unwrap();
    let id = Uuid::new_v4();
    intake::push_lines(conn.clone(), &queue, [line(id, &mailbox)])
        .await
        .unwrap();
    let pushed_at: u64 = r
        .hget(format!("{queue}:meta:{id}"), "pushed_at")
        .await
        .unwrap();
    assert!(
        pushed_at.abs_diff(now) <= 5,
        "pushed_at {pushed_at}, now {now}"
    );
    // As if it had waited 50 s.
    let _: () = r
        .hset(format!("{queue}:meta:{id}"), "pushed_at", now - 50)
        .await
        .unwrap();
    let mut c = conn.clone();
    let s = dead::stats(&mut c, &queue, ALIVE).await.unwrap();
    assert_eq!((s.workers, s.workers_silent), (1, 1), "{s:?}");
    assert_eq!((s.waiting, s.in_flight), (1, 1), "{s:?}");
    let oldest = s.oldest_seconds.unwrap();
    assert!((50..60).contains(&oldest), "{s:?}");
    let text = cli(&["queue", "stats"], &queue, &app.db.url);
    assert!(
        text.contains("workers alive 1 (1 silent for over 30 s)"),
        "{text}"
    );
    assert!(text.contains("oldest waiting 5"), "{text}");
    let keys = queue_keys(&queue).await;
    let _: () = r.del(keys).await.unwrap();
}

#[tokio::test]
async fn the_queue_commands_say_when_nothing_is_dead_and_count_one_in_the_singular() {
    let (app, queue, mailbox) = intake_app().await;
    assert_eq!(
        cli(&["queue", "dead"], &queue, &app.db.url),
        format!("no dead-lettered jobs in {queue}\n")
    );
    let dir = crate::support::temp_dir("mw-intake-");
    let file = dir.path().join("campaign.jsonl");
    std::fs::write(&file, line(Uuid::new_v4(), &mailbox)).unwrap();
    let pushed = cli(
        &["enqueue", file.to_str().unwrap(), "--via", "queue"],
        &queue,
        &app.db.url,
    );
    assert!(pushed.starts_with("1 of 1 line pushed onto"), "{pushed}");
    // One dead job (as apalis-redis files one), retried, then one discarded.
    let mut r = crate::support::redis_conn().await;
    let _: () = r.sadd(format!("{queue}:dead"), "t-1").await.unwrap();
    assert_eq!(
        cli(&["queue", "retry", "t-1"], &queue, &app.db.url),
        format!("1 dead job back on {queue}\n")
    );
    // An id that is not dead: exit 1, and where to look.
    let hint = failed(&["queue", "retry", "t-unknown"], &queue, &app.db.url);
    assert!(
        hint.contains(&format!(
            "1 of the given task ids is not in {queue}'s dead letters"
        )) && hint.contains("`mail-worker queue dead` lists them"),
        "{hint}"
    );
    let _: () = r.sadd(format!("{queue}:dead"), "t-2").await.unwrap();
    assert_eq!(
        cli(&["queue", "discard", "--all"], &queue, &app.db.url),
        "1 dead job discarded\n"
    );
    let keys = queue_keys(&queue).await;
    let _: () = r.del(keys).await.unwrap();
}

#[tokio::test]
async fn a_worker_killed_holding_a_job_is_forgotten_after_its_job_is_requeued_and_live_ones_are_kept()
 {
    let (app, queue, mailbox) = intake_app().await;
    let conn = intake::connect(&redis_url().into()).await.unwrap();
    let id = Uuid::new_v4();
    intake::push_lines(conn.clone(), &queue, [line(id, &mailbox)])
        .await
        .unwrap();
    // What a SIGKILLed replica leaves: registered (its last beat 100 s ago), listed as started,
    // its metadata, the job it had fetched in its in-flight set. And a live one of another
    // replica (beating now) that must be left alone.
    let mut r = crate::support::redis_conn().await;
    let now = redis_now(&mut r).await;
    let id_text = id.to_string();
    let _: () = r
        .lrem(format!("{queue}:active"), 1, &id_text)
        .await
        .unwrap();
    // (live-2's clock runs a minute ahead: it stays live however slow this test runs.)
    for (name, beat) in [("killed-1", now - 100), ("live-2", now + 60)] {
        let _: () = r
            .zadd(format!("{queue}:workers"), name, beat)
            .await
            .unwrap();
        let _: () = r
            .zadd(format!("{queue}:workers:started"), name, now - 100)
            .await
            .unwrap();
        let _: () = r
            .hset(
                format!("{queue}:workers:metadata:{name}"),
                "backend_name",
                "RedisStorage",
            )
            .await
            .unwrap();
    }
    let _: () = r
        .sadd(format!("{queue}:inflight:killed-1"), &id_text)
        .await
        .unwrap();

    // A live consumer: apalis-redis's heartbeat (2 s × 3) re-queues the job, our cleanup then
    // forgets the dead worker.
    let mut settings = settings(&app);
    settings.heartbeat = Duration::from_secs(2);
    let me = settings.worker.clone();
    let stop = mail_worker::shutdown::CancellationToken::new();
    let consumer = tokio::spawn(intake::run(
        settings,
        conn.clone(),
        app.db.pool.clone(),
        Arc::new(Metrics::new()),
        stop.clone(),
    ));
    wait_for_row(&app, id).await;
    let keys = async || queue_keys(&queue).await;
    wait_until(Duration::from_secs(30), "killed-1 forgotten", async || {
        !keys()
            .await
            .contains(&format!("{queue}:workers:metadata:killed-1"))
    })
    .await;
    let workers: Vec<String> = r.zrange(format!("{queue}:workers"), 0, -1).await.unwrap();
    let started: Vec<String> = r
        .zrange(format!("{queue}:workers:started"), 0, -1)
        .await
        .unwrap();
    assert!(
        !workers.contains(&"killed-1".to_owned()) && !started.contains(&"killed-1".to_owned()),
        "{workers:?} {started:?}"
    );
    assert!(workers.contains(&"live-2".to_owned()), "{workers:?}");
    assert!(workers.contains(&me), "{workers:?}");
    assert!(started.contains(&"live-2".to_owned()) && started.contains(&me));
    let left = keys().await;
    for name in ["live-2", me.as_str()] {
        assert!(
            left.contains(&format!("{queue}:workers:metadata:{name}")),
            "{left:?}"
        );
    }
    assert!(!left.contains(&format!("{queue}:inflight:killed-1")));
    stop.cancel();
    consumer.await.unwrap().unwrap();
    let left = keys().await;
    assert!(
        !left.iter().any(|k| k.contains(&me)),
        "the stopped worker left: {left:?}"
    );
    let _: () = r.del(left).await.unwrap();
}

/// The one worker of `queue` whose name starts with `start` (`INTAKE_WORKER_NAME`), if registered.
async fn worker_named(
    r: &mut redis::aio::MultiplexedConnection,
    queue: &str,
    start: &str,
) -> Option<String> {
    let workers: Vec<String> = r.zrange(format!("{queue}:workers"), 0, -1).await.unwrap();
    workers
        .into_iter()
        .find(|w| w.starts_with(&format!("{start}-")))
}

#[tokio::test]
async fn a_replica_killed_with_jobs_in_flight_loses_none_another_consumes_them_once() {
    const JOBS: usize = 2_000;
    let (app, queue, mailbox) = intake_app().await;
    let (ids, lines) = later_lines(&mailbox, JOBS);
    // 200 of them are in PostgreSQL already (imported from a file): their jobs are redeliveries
    // for the insert to absorb.
    let imported = lines[..200].join(&b'\n');
    let done = mail_worker::import::enqueue(&app.db.pool, &imported, Default::default())
        .await
        .unwrap();
    assert_eq!(done.inserted, 200);

    // Two replicas, apalis-redis's heartbeat at 2 s (dead after 3 missed: 6 s).
    let replica = |name: &str| {
        Logged::spawn(app.daemon_command(&[
            ("INTAKE_HEARTBEAT", "2s"),
            ("INTAKE_WORKER_NAME", name),
            ("RUST_LOG", "info"),
        ]))
    };
    let mut a = replica("replica-a");
    let mut b = replica("replica-b");
    let mut r = crate::support::redis_conn().await;
    let (mut name_a, mut name_b) = (None, None);
    wait_until(
        Duration::from_secs(90),
        "both replicas registered",
        async || {
            name_a = worker_named(&mut r, &queue, "replica-a").await;
            name_b = worker_named(&mut r, &queue, "replica-b").await;
            name_a.is_some() && name_b.is_some()
        },
    )
    .await;
    let (name_a, name_b) = (name_a.unwrap(), name_b.unwrap());
    let inflight_a = format!("{queue}:inflight:{name_a}");

    // PostgreSQL stalls the inserts (a table lock held by the test), so the replicas' jobs stay
    // in flight, unacked, while replica A is killed.
    let lock = stall_inserts(&app).await;
    let conn = intake::connect(&redis_url().into()).await.unwrap();
    assert_eq!(
        intake::push_lines(conn.clone(), &queue, lines)
            .await
            .unwrap(),
        JOBS
    );
    wait_until(
        Duration::from_secs(60),
        "jobs in flight in replica A",
        async || {
            let n: u64 = r.scard(&inflight_a).await.unwrap();
            n > 0
        },
    )
    .await;
    let held: Vec<String> = r.smembers(&inflight_a).await.unwrap();
    assert!(!held.is_empty());
    a.child.start_kill().unwrap();
    let status = tokio::time::timeout(Duration::from_secs(20), a.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "SIGKILLed"
    );
    lock.rollback().await.unwrap();

    // Replica B stores its own jobs, re-queues A's after A's beats lapse, and stores those.
    let pool = app.db.pool.clone();
    wait_until(Duration::from_secs(180), "every job a row", async || {
        rows(&app).await == JOBS as i64
    })
    .await;
    let mut c = conn.clone();
    wait_until(
        Duration::from_secs(60),
        "the queue drained, A forgotten",
        async || {
            let s = dead::stats(&mut c, &queue, Duration::from_secs(6))
                .await
                .unwrap();
            let a_keys: u64 = r
                .exists(&[
                    inflight_a.clone(),
                    format!("{queue}:workers:metadata:{name_a}"),
                ])
                .await
                .unwrap();
            s.waiting + s.scheduled + s.in_flight + s.dead + s.done == 0
                && s.workers == 1
                && s.workers_silent == 0
                && a_keys == 0
        },
    )
    .await;
    // Exactly one row per job, A's held jobs among them, nothing else.
    let (count, distinct, known): (i64, i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT id), count(*) FILTER (WHERE id = ANY($1)) FROM messages",
    )
    .bind(&ids)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        (count, distinct, known),
        (JOBS as i64, JOBS as i64, JOBS as i64)
    );
    let held: Vec<Uuid> = held.iter().map(|t| Uuid::parse_str(t).unwrap()).collect();
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM messages WHERE id = ANY($1)")
        .bind(&held)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        stored,
        held.len() as i64,
        "A's {} held jobs each a row",
        held.len()
    );
    let workers: Vec<String> = r.zrange(format!("{queue}:workers"), 0, -1).await.unwrap();
    assert_eq!(workers, vec![name_b]);
    eprintln!(
        "replica A held {} jobs when killed; B consumed them; log lines: A {}, B {}",
        held.len(),
        a.lines.lock().unwrap().len(),
        b.lines.lock().unwrap().len()
    );

    // B leaves cleanly: nothing of the queue is left in Redis.
    assert_eq!(sigterm(&mut b.child).await.code(), Some(0));
    let left = queue_keys(&queue).await;
    assert_eq!(left, Vec::<String>::new());
}

#[tokio::test]
async fn the_oldest_job_gauge_reads_the_heads_push_time() {
    let (app, queue, mailbox) = intake_app().await;
    // The inserts stalled (a table lock), so jobs wait behind the consumer's in-flight ones.
    let lock = stall_inserts(&app).await;
    let conn = intake::connect(&redis_url().into()).await.unwrap();
    let (ids, lines) = later_lines(&mailbox, 3 * consumer_in_flight());
    intake::push_lines(conn.clone(), &queue, lines)
        .await
        .unwrap();
    // Each as if pushed 50 s ago.
    let mut r = crate::support::redis_conn().await;
    let now = redis_now(&mut r).await;
    let mut pipe = redis::pipe();
    for id in &ids {
        pipe.hset(format!("{queue}:meta:{id}"), "pushed_at", now - 50)
            .ignore();
    }
    let _: () = pipe.query_async(&mut r).await.unwrap();
    let metrics = Arc::new(Metrics::new());
    let (stop, consumer) = consume(&app, &conn, &metrics);
    wait_until(
        Duration::from_secs(30),
        "the gauge at 50 s or more",
        async || {
            metrics.encode().lines().any(|l| {
                l.strip_prefix("mail_worker_intake_oldest_job_seconds ")
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|v| (50..120).contains(&v))
            })
        },
    )
    .await;
    lock.rollback().await.unwrap();
    wait_until(Duration::from_secs(60), "every job a row", async || {
        rows(&app).await == ids.len() as i64
    })
    .await;
    stop.cancel();
    consumer.await.unwrap().unwrap();
}

/// How many jobs one consumer holds in flight at most.
fn consumer_in_flight() -> usize {
    IntakeSettings::new("q", None).in_flight
}

/// Holds a lock on `messages` that stalls every insert (reads go on) until it is rolled back.
async fn stall_inserts(app: &TestApp) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut lock = app.db.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE messages IN EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .unwrap();
    lock
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgresql_outage_dead_letters_nothing_and_the_jobs_are_stored_after_it() {
    // A private PostgreSQL the test stops and starts again.
    let mut pg = test_support::private_postgres::PrivatePostgres::start(30, &[]);
    let mut url = pg.url.clone();
    url.set_path("/mw_intake_outage");
    mail_worker::store::migrate(&url).await.unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(Duration::from_secs(2))
        .connect(url.as_str())
        .await
        .unwrap();
    let mailbox = "outage@contoso.example";
    sqlx::query("INSERT INTO system_mailboxes (address, graph_client_id, graph_tenant_id, graph_client_secret) VALUES ($1, 'c', 't', 's')")
        .bind(mailbox)
        .execute(&pool)
        .await
        .unwrap();
    let count = async |pool: &sqlx::PgPool| -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM messages")
            .fetch_one(pool)
            .await
            .unwrap()
    };
    let queue = format!("{{{}}}", crate::support::unique("mw-intake-outage"));
    let conn = intake::connect(&redis_url().into()).await.unwrap();
    let metrics = Arc::new(Metrics::new());
    let stop = mail_worker::shutdown::CancellationToken::new();
    let consumer = tokio::spawn(intake::run(
        quick_settings(&queue, "it-outage"),
        conn.clone(),
        pool.clone(),
        Arc::clone(&metrics),
        stop.clone(),
    ));
    let (before, lines) = later_lines(mailbox, 100);
    intake::push_lines(conn.clone(), &queue, lines)
        .await
        .unwrap();
    wait_until(Duration::from_secs(30), "100 rows before", async || {
        count(&pool).await == 100
    })
    .await;

    capture_logs();
    let store_failures = || logs_containing(log_events::INTAKE_STORE_FAILED).len();
    let failed_before = store_failures();
    pg.stop();
    let (during, lines) = later_lines(mailbox, 200);
    assert_eq!(
        intake::push_lines(conn.clone(), &queue, lines)
            .await
            .unwrap(),
        200
    );
    // The consumer fetched them and failed to store them (said once per batch, then retried
    // with backoff while PostgreSQL is down).
    wait_until(
        Duration::from_secs(30),
        "a failed store during the outage",
        async || store_failures() > failed_before,
    )
    .await;
    let mut c = conn.clone();
    let s = dead::stats(&mut c, &queue, ALIVE).await.unwrap();
    assert_eq!(s.dead, 0, "nothing dead-lettered during the outage: {s:?}");
    assert_eq!(
        s.waiting + s.in_flight + s.scheduled,
        200,
        "every job of the outage still queued: {s:?}"
    );

    pg.restart();
    wait_until(Duration::from_secs(60), "300 rows after", async || {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM messages")
            .fetch_one(&pool)
            .await
            .is_ok_and(|n| n == 300)
    })
    .await;
    let stored: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM messages ORDER BY id")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(stored, sorted(before.into_iter().chain(during)));
    wait_for_stats(&conn, &queue, "none dead, the queue drained", |s| {
        s.dead == 0 && drained(s)
    })
    .await;
    let text = metrics.encode();
    assert!(
        text.contains("mail_worker_intake_jobs_total{outcome=\"inserted\"} 300"),
        "{text}"
    );
    assert!(
        text.lines()
            .filter(|l| l.starts_with("mail_worker_intake_jobs_total{outcome=\"dead\"}"))
            .all(|l| l.ends_with(" 0")),
        "{text}"
    );
    stop.cancel();
    consumer.await.unwrap().unwrap();
    let left = queue_keys(&queue).await;
    assert_eq!(left, Vec::<String>::new(), "keys left: {left:?}");
}

#[test]
fn a_queue_redis_that_is_down_is_one_line_naming_its_url_without_the_password() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port(); // closed again: nothing listens there
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mail-worker"))
        .args(["queue", "stats"])
        .env("REDIS_URL", format!("redis://:hunter2@127.0.0.1:{port}"))
        .env("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/unused")
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot reach the intake queue's Redis at redis://:***@127.0.0.1:{port} (REDIS_URL)"
        )),
        "{stderr}"
    );
    assert_eq!(stderr.matches("Connection refused").count(), 1, "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
}
