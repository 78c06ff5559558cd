//! The intake queue (src/intake) against the real Redis and PostgreSQL: jobs pushed as campaign
//! lines become rows, bad ones are dead-lettered with the file import's reason, finished jobs
//! leave Redis, and a stopped consumer leaves nothing behind.

use std::{sync::Arc, time::Duration};

use mail_worker::{
    import::campaign::{SenderDirectory, parse_line_bytes},
    intake::{self, IntakeSettings, dead},
    ops::Metrics,
};
use redis::AsyncCommands;
use uuid::Uuid;

use crate::support::{TestApp, redis_url, spawn_app, wait_until};

fn line(id: Uuid, mailbox: &str) -> Vec<u8> {
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

fn settings(app: &TestApp) -> IntakeSettings {
    let mut s = IntakeSettings::new(app.config.intake.queue.as_deref().unwrap(), Some("it"));
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

/// Starts a consumer of the app's queue; send `true` to stop it.
fn consume(
    app: &TestApp,
    conn: &intake::ConnectionManager,
    metrics: &Arc<Metrics>,
) -> (
    tokio::sync::watch::Sender<bool>,
    tokio::task::JoinHandle<Result<(), intake::IntakeError>>,
) {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let consumer = tokio::spawn(intake::run(
        settings(app),
        conn.clone(),
        app.db.pool.clone(),
        Arc::clone(metrics),
        stopped,
    ));
    (stop, consumer)
}

#[tokio::test]
async fn queued_lines_become_rows_and_bad_ones_are_dead_with_the_file_imports_reason() {
    let app = spawn_app().await;
    let queue = app.config.intake.queue.clone().unwrap();
    let mailbox = app.mailboxes[0].0.as_str().to_owned();
    let conn = intake::connect(&redis_url()).await.unwrap();
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
    let mut c = conn.clone();
    wait_until(
        Duration::from_secs(10),
        "4 dead, none done left",
        async || {
            let s = dead::stats(&mut c, &queue).await.unwrap();
            s.dead == 4 && s.done == 0 && s.waiting == 0 && s.in_flight == 0
        },
    )
    .await;

    // The dead jobs' reasons are the file import's for the same lines.
    let directory = SenderDirectory {
        tenants: Default::default(),
        system_mailboxes: [(mailbox.clone(), app.mailboxes[0].1)]
            .into_iter()
            .collect(),
    };
    let mut expected: Vec<String> = bad
        .iter()
        .map(|l| parse_line_bytes(1, l, &directory).unwrap_err().reason)
        .collect();
    expected.sort();
    let mut listed: Vec<String> = dead::list(&mut c, &queue, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.reason)
        .collect();
    listed.sort();
    assert_eq!(listed, expected);
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
    let _ = stop.send(true);
    consumer.await.unwrap().unwrap();
    let left = queue_keys(&queue).await;
    assert_eq!(left, Vec::<String>::new(), "keys left: {left:?}");
}

#[tokio::test]
async fn a_retried_dead_job_is_stored_once_its_sender_exists() {
    let app = spawn_app().await;
    let queue = app.config.intake.queue.clone().unwrap();
    let conn = intake::connect(&redis_url()).await.unwrap();
    let id = Uuid::new_v4();
    intake::push_lines(conn.clone(), &queue, [line(id, "late@contoso.example")])
        .await
        .unwrap();
    let metrics = Arc::new(Metrics::new());
    let (stop, consumer) = consume(&app, &conn, &metrics);
    let mut c = conn.clone();
    wait_until(Duration::from_secs(10), "1 dead", async || {
        dead::stats(&mut c, &queue).await.unwrap().dead == 1
    })
    .await;
    sqlx::query("INSERT INTO system_mailboxes (address, graph_client_id, graph_tenant_id, graph_client_secret) VALUES ('late@contoso.example', 'c', 't', 's')")
        .execute(&app.db.pool)
        .await
        .unwrap();
    assert_eq!(
        dead::retry(&mut c, &queue, dead::Which::All).await.unwrap(),
        1
    );
    wait_for_row(&app, id).await;
    let _ = stop.send(true);
    consumer.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_jobs_campaign_is_stored_from_its_campaign_id_or_its_x_campaign_id_header() {
    let app = spawn_app().await;
    let queue = app.config.intake.queue.clone().unwrap();
    let mailbox = app.mailboxes[0].0.as_str().to_owned();
    let conn = intake::connect(&redis_url()).await.unwrap();
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
    let _ = stop.send(true);
    consumer.await.unwrap().unwrap();
    for (id, campaign) in [(a, Some("spring")), (b, Some("autumn")), (c, None)] {
        let stored: Option<String> =
            sqlx::query_scalar("SELECT campaign_id FROM messages WHERE id = $1")
                .bind(id)
                .fetch_one(&app.db.pool)
                .await
                .unwrap();
        assert_eq!(stored.as_deref(), campaign);
    }
}

fn cli(args: &[&str], queue: &str, db: &url::Url) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mail-worker"))
        .args(args)
        .env("INTAKE_QUEUE", queue)
        .env("REDIS_URL", redis_url().as_str())
        .env("DATABASE_URL", db.as_str())
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn enqueue_via_queue_and_the_queue_commands() {
    let app = spawn_app().await;
    let queue = app.config.intake.queue.clone().unwrap();
    let mailbox = app.mailboxes[0].0.as_str().to_owned();
    let file = std::env::temp_dir().join(format!("{}.jsonl", Uuid::new_v4()));
    let mut text = String::new();
    for _ in 0..3 {
        text += &String::from_utf8(line(Uuid::new_v4(), &mailbox)).unwrap();
        text += "\n";
    }
    text += "{broken\n\n";
    std::fs::write(&file, text).unwrap();
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
    let pushed = cli(&["enqueue", path, "--via", "queue"], &queue, &app.db.url);
    assert!(pushed.starts_with("4 of 4 lines pushed onto"), "{pushed}");
    let again = cli(&["enqueue", path, "--via", "queue"], &queue, &app.db.url);
    std::fs::remove_file(&file).unwrap();
    assert!(
        // The 3 messages are there already; a line without an id is a new job each time.
        again.starts_with("1 of 4 lines pushed onto") && again.contains("(3 already there"),
        "{again}"
    );
    let stats = cli(&["queue", "stats"], &queue, &app.db.url);
    assert!(
        stats.contains("scheduled 5") || stats.contains("waiting 5"),
        "{stats}"
    );

    let metrics = Arc::new(Metrics::new());
    let conn = intake::connect(&redis_url()).await.unwrap();
    let (stop, consumer) = consume(&app, &conn, &metrics);
    let mut c = conn.clone();
    wait_until(Duration::from_secs(10), "2 dead, 0 done", async || {
        let s = dead::stats(&mut c, &queue).await.unwrap();
        s.dead == 2 && s.done == 0
    })
    .await;
    let _ = stop.send(true);
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
        let out = std::process::Command::new("redis-cli")
            .args(["-u", url.as_str()])
            .args(&args)
            .output()
            .expect("redis-cli");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let metrics = Arc::new(Metrics::new());
    let conn = intake::connect(&redis_url()).await.unwrap();
    let (stop, consumer) = consume(&app, &conn, &metrics);
    wait_for_row(&app, id.parse().unwrap()).await;
    let _ = stop.send(true);
    consumer.await.unwrap().unwrap();
}

/// A Python with the `redis` package: `python3` if it has it, else a venv under target/ that
/// this installs it into once (as .ci/run does for hadolint), so the test never skips.
fn python_with_redis() -> std::path::PathBuf {
    let has_redis = |python: &std::path::Path| {
        std::process::Command::new(python)
            .args(["-c", "import redis"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let system = std::path::PathBuf::from("python3");
    if has_redis(&system) {
        return system;
    }
    let target = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target");
    let venv = target.join("producers-venv");
    let python = venv.join("bin/python");
    if has_redis(&python) {
        return python;
    }
    // Built aside and renamed, so a run cut short never leaves a venv without the package.
    let building = target.join(format!("producers-venv-{}", Uuid::new_v4().simple()));
    let run = |cmd: &mut std::process::Command| {
        let out = cmd
            .output()
            .expect("python3 (scripts/services.sh installs it)");
        assert!(
            out.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(std::process::Command::new("python3")
        .args(["-m", "venv"])
        .arg(&building));
    run(std::process::Command::new(building.join("bin/pip")).args([
        "install",
        "--quiet",
        "-r",
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/producers/python/requirements.txt"
        ),
    ]));
    if std::fs::rename(&building, &venv).is_err() {
        // Another run finished first: use its venv.
        let _ = std::fs::remove_dir_all(&building);
    }
    assert!(
        has_redis(&python),
        "{} has no redis package",
        python.display()
    );
    python
}

#[tokio::test]
async fn jobs_pushed_by_the_python_producer_example_become_rows() {
    let app = spawn_app().await;
    let queue = app.config.intake.queue.clone().unwrap();
    let mailbox = app.mailboxes[0].0.as_str().to_owned();
    let ids: Vec<Uuid> = (0..25).map(|_| Uuid::new_v4()).collect();
    let mut text = String::new();
    for id in &ids {
        text += &String::from_utf8(line(*id, &mailbox)).unwrap();
        text += "\r\n";
    }
    text += "\nnot json\n";
    let file = std::env::temp_dir().join(format!("{}.jsonl", Uuid::new_v4()));
    std::fs::write(&file, &text).unwrap();
    let push = || {
        std::process::Command::new(python_with_redis())
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/examples/producers/python/push.py"
            ))
            .arg(&file)
            .env("INTAKE_QUEUE", &queue)
            .env("REDIS_URL", redis_url().as_str())
            .output()
            .unwrap()
    };
    let first = push();
    // Pushed again while queued: only the line without an id is a new job.
    let second = push();
    std::fs::remove_file(&file).unwrap();
    for out in [&first, &second] {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(
        String::from_utf8_lossy(&first.stdout),
        format!("26 lines pushed onto {queue} (0 already queued)\n")
    );
    assert_eq!(
        String::from_utf8_lossy(&second.stdout),
        format!("1 lines pushed onto {queue} (25 already queued)\n")
    );

    let metrics = Arc::new(Metrics::new());
    let conn = intake::connect(&redis_url()).await.unwrap();
    let (stop, consumer) = consume(&app, &conn, &metrics);
    let mut c = conn.clone();
    wait_until(Duration::from_secs(10), "2 dead, none left", async || {
        let s = dead::stats(&mut c, &queue).await.unwrap();
        s.dead == 2 && s.done == 0 && s.waiting == 0 && s.in_flight == 0
    })
    .await;
    let _ = stop.send(true);
    consumer.await.unwrap().unwrap();
    let mut stored: Vec<Uuid> =
        sqlx::query_scalar("SELECT id FROM messages WHERE status = 'SCHEDULED'")
            .fetch_all(&app.db.pool)
            .await
            .unwrap();
    stored.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(stored, expected);
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
    sqlx::query_scalar("SELECT count(*) FROM messages")
        .fetch_one(&app.db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn after_20000_jobs_the_queues_redis_is_back_within_100_keys_and_1_mb() {
    const JOBS: usize = 20_000;
    let app = spawn_app().await;
    let queue = app.config.intake.queue.clone().unwrap();
    let mailbox = app.mailboxes[0].0.as_str().to_owned();
    // A Redis of its own: the shared one's memory moves with every other test.
    let mut redis = mail_worker_bench::daemon::PrivateRedis::start().await;
    let conn = intake::connect(&redis.url).await.unwrap();
    let metrics = Arc::new(Metrics::new());
    // "Before": a queue in use (its scripts loaded, its connections open), 100 jobs consumed.
    let (_, warm_up) = later_lines(&mailbox, 100);
    intake::push_lines(conn.clone(), &queue, warm_up)
        .await
        .unwrap();
    let (stop, consumer) = consume(&app, &conn, &metrics);
    let mut c = conn.clone();
    wait_until(
        Duration::from_secs(20),
        "the warm-up consumed",
        async || {
            let s = dead::stats(&mut c, &queue).await.unwrap();
            rows(&app).await == 100 && s.done == 0 && s.waiting == 0 && s.in_flight == 0
        },
    )
    .await;
    let _ = stop.send(true);
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
    wait_until(Duration::from_secs(20), "done jobs removed", async || {
        let s = dead::stats(&mut c, &queue).await.unwrap();
        s.done == 0 && s.waiting == 0 && s.in_flight == 0
    })
    .await;
    let _ = stop.send(true);
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
